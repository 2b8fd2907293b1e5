# Reset entry. QEMU's virt reset ROM jumps here (0x8000_0000) with a0 = hart
# id and a1 = device-tree address. Single hart; interrupts stay globally off
# for the whole life of the firmware (it polls after WFI, see hal/cpu.h).
    .section .text.start, "ax"
    .globl _start
_start:
    csrw    mie, zero
    csrci   mstatus, 0x8
    la      t0, ulnic_trap_entry
    csrw    mtvec, t0
    .option push
    .option norelax
    la      gp, __global_pointer$
    .option pop
    la      sp, __stack_top
    la      t0, __trap_stack_top
    csrw    mscratch, t0
    # Zero .bss (8-byte aligned by the linker script).
    la      t0, __bss_start
    la      t1, __bss_end
1:  bgeu    t0, t1, 2f
    sd      zero, 0(t0)
    addi    t0, t0, 8
    j       1b
2:  call    ulnic_run_init_array
    call    ulnic_main
3:  wfi
    j       3b
