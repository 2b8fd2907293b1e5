#include "core/log.h"

#include <stdint.h>

#include "hal/uart.h"

namespace core {
namespace {

// Output sink: either a bounded buffer or the UART.
struct Sink {
  char* buf;
  size_t cap;
  size_t len;
  void put(char c) {
    if (!buf) {
      hal::uart::write(&c, 1);
    } else if (len + 1 < cap) {
      buf[len] = c;
    }
    ++len;
  }
};

void put_number(Sink& s, uint64_t v, unsigned base, bool negative, int width, char pad) {
  char digits[24];
  int n = 0;
  do {
    unsigned d = unsigned(v % base);
    digits[n++] = char(d < 10 ? '0' + d : 'a' + d - 10);
    v /= base;
  } while (v);
  if (negative) digits[n++] = '-';
  for (int i = n; i < width; ++i) s.put(pad);
  while (n) s.put(digits[--n]);
}

void run(Sink& s, const char* fmt, va_list ap) {
  for (; *fmt; ++fmt) {
    if (*fmt != '%') {
      s.put(*fmt);
      continue;
    }
    ++fmt;
    char pad = ' ';
    int width = 0;
    int longs = 0;
    if (*fmt == '0') pad = '0', ++fmt;
    while (*fmt >= '0' && *fmt <= '9') width = width * 10 + (*fmt++ - '0');
    while (*fmt == 'l') ++longs, ++fmt;
    switch (*fmt) {
      case 'd':
      case 'i': {
        int64_t v = longs ? va_arg(ap, int64_t) : va_arg(ap, int);
        put_number(s, v < 0 ? uint64_t(0) - uint64_t(v) : uint64_t(v), 10, v < 0, width, pad);
        break;
      }
      case 'u':
        put_number(s, longs ? va_arg(ap, uint64_t) : va_arg(ap, unsigned), 10, false, width, pad);
        break;
      case 'x':
        put_number(s, longs ? va_arg(ap, uint64_t) : va_arg(ap, unsigned), 16, false, width, pad);
        break;
      case 'p':
        s.put('0'), s.put('x');
        put_number(s, uintptr_t(va_arg(ap, void*)), 16, false, 0, '0');
        break;
      case 'c':
        s.put(char(va_arg(ap, int)));
        break;
      case 's': {
        const char* str = va_arg(ap, const char*);
        for (str = str ? str : "(null)"; *str; ++str) s.put(*str);
        break;
      }
      case '%':
        s.put('%');
        break;
      case '\0':
        return;
      default:
        s.put('%'), s.put(*fmt);
    }
  }
}

}  // namespace

void vlog(const char* fmt, va_list ap) {
  Sink s{nullptr, 0, 0};
  run(s, fmt, ap);
}

void log(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(fmt, ap);
  va_end(ap);
}

size_t vformat(char* buf, size_t cap, const char* fmt, va_list ap) {
  Sink s{buf, cap, 0};
  run(s, fmt, ap);
  if (cap) buf[s.len < cap ? s.len : cap - 1] = '\0';
  return s.len < cap ? s.len : (cap ? cap - 1 : 0);
}

size_t format(char* buf, size_t cap, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t n = vformat(buf, cap, fmt, ap);
  va_end(ap);
  return n;
}

}  // namespace core
