#include "hal/uart.h"

#include "hal/mmio.h"

namespace hal::uart {
namespace {

// Register offsets (16550 datasheet names).
enum Reg : uintptr_t {
  kTHR = 0,  // transmit holding (write)
  kIER = 1,  // interrupt enable
  kFCR = 2,  // FIFO control (write)
  kLCR = 3,  // line control
  kLSR = 5,  // line status
};
constexpr uint8_t kLcr8N1 = 0x03;
constexpr uint8_t kFcrEnableClear = 0x07;
constexpr uint8_t kLsrTHRE = 0x20;  // THR empty

uint8_t read(Reg r) { return mmio_read8(kBase + r); }
void write_reg(Reg r, uint8_t v) { mmio_write8(kBase + r, v); }

}  // namespace

void init() {
  write_reg(kIER, 0);  // polled; the log never waits on an interrupt
  write_reg(kLCR, kLcr8N1);
  write_reg(kFCR, kFcrEnableClear);
}

void putc(char c) {
  // QEMU's UART is always ready; real silicon is not. Bounded so a wedged
  // UART cannot hang the NIC.
  for (int spins = 0; spins < 100000 && !(read(kLSR) & kLsrTHRE); ++spins) {
  }
  write_reg(kTHR, uint8_t(c));
}

void write(const char* s, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (s[i] == '\n') putc('\r');
    putc(s[i]);
  }
}

}  // namespace hal::uart
