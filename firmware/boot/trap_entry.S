# Machine-mode trap entry (mtvec direct mode). Runs on a dedicated trap stack
# (mscratch holds its top) so a fault caused by a bad sp is still recorded.
# Frame layout = core::trap::Frame: x0..x31, mepc, mcause, mtval, mstatus.
    .section .text.trap, "ax"
    .align  4
    .globl  ulnic_trap_entry
ulnic_trap_entry:
    csrrw   sp, mscratch, sp
    addi    sp, sp, -36*8
    sd      x1, 1*8(sp)
    sd      x3, 3*8(sp)
    sd      x4, 4*8(sp)
    sd      x5, 5*8(sp)
    sd      x6, 6*8(sp)
    sd      x7, 7*8(sp)
    sd      x8, 8*8(sp)
    sd      x9, 9*8(sp)
    sd      x10, 10*8(sp)
    sd      x11, 11*8(sp)
    sd      x12, 12*8(sp)
    sd      x13, 13*8(sp)
    sd      x14, 14*8(sp)
    sd      x15, 15*8(sp)
    sd      x16, 16*8(sp)
    sd      x17, 17*8(sp)
    sd      x18, 18*8(sp)
    sd      x19, 19*8(sp)
    sd      x20, 20*8(sp)
    sd      x21, 21*8(sp)
    sd      x22, 22*8(sp)
    sd      x23, 23*8(sp)
    sd      x24, 24*8(sp)
    sd      x25, 25*8(sp)
    sd      x26, 26*8(sp)
    sd      x27, 27*8(sp)
    sd      x28, 28*8(sp)
    sd      x29, 29*8(sp)
    sd      x30, 30*8(sp)
    sd      x31, 31*8(sp)
    csrr    t0, mscratch
    sd      t0, 2*8(sp)
    sd      zero, 0(sp)
    csrr    t0, mepc
    sd      t0, 32*8(sp)
    csrr    t0, mcause
    sd      t0, 33*8(sp)
    csrr    t0, mtval
    sd      t0, 34*8(sp)
    csrr    t0, mstatus
    sd      t0, 35*8(sp)
    mv      a0, sp
    call    ulnic_trap_handler
    # Resumed (tests only): restore, honouring a changed mepc / sp.
    ld      t0, 32*8(sp)
    csrw    mepc, t0
    ld      t0, 2*8(sp)
    csrw    mscratch, t0
    ld      x1, 1*8(sp)
    ld      x3, 3*8(sp)
    ld      x4, 4*8(sp)
    ld      x5, 5*8(sp)
    ld      x6, 6*8(sp)
    ld      x7, 7*8(sp)
    ld      x8, 8*8(sp)
    ld      x9, 9*8(sp)
    ld      x10, 10*8(sp)
    ld      x11, 11*8(sp)
    ld      x12, 12*8(sp)
    ld      x13, 13*8(sp)
    ld      x14, 14*8(sp)
    ld      x15, 15*8(sp)
    ld      x16, 16*8(sp)
    ld      x17, 17*8(sp)
    ld      x18, 18*8(sp)
    ld      x19, 19*8(sp)
    ld      x20, 20*8(sp)
    ld      x21, 21*8(sp)
    ld      x22, 22*8(sp)
    ld      x23, 23*8(sp)
    ld      x24, 24*8(sp)
    ld      x25, 25*8(sp)
    ld      x26, 26*8(sp)
    ld      x27, 27*8(sp)
    ld      x28, 28*8(sp)
    ld      x29, 29*8(sp)
    ld      x30, 30*8(sp)
    ld      x31, 31*8(sp)
    addi    sp, sp, 36*8
    # sp = interrupted sp, mscratch = trap stack top again.
    csrrw   sp, mscratch, sp
    mret
