// RUN: smelt-opt %s --cpu x86-64-v4 -p loop-vectorize -t asm | filecheck %s --check-prefix=V4
// RUN: smelt-opt %s --cpu x86-64-v3 -p loop-vectorize -t asm | filecheck %s --check-prefix=V3

// The asm target prints what LLVM makes for the module's #target.cpu, whether
// this host runs it or not: 16-lane zmm code for x86-64-v4, 8-lane ymm for v3.
// V4-LABEL: smelt.kernel.scale:
// V4:       vmovups {{.*}}%zmm
// V4-NOT:   %ymm
// V4:       ret
// V3-LABEL: smelt.kernel.scale:
// V3:       vmovups {{.*}}%ymm
// V3-NOT:   %zmm
// V3:       ret

func.func @scale(%a: memref<64xf32>, %b: memref<64xf32>) attributes {loop.kernel} {
  %two = arith.constant 2.0 : f32
  loop.for %i = 0 to 64 step 1 parallel {
    %x = memref.load %a[%i] : memref<64xf32>
    %y = arith.mulf %x, %two : f32
    memref.store %y, %b[%i] : memref<64xf32>
    loop.yield
  }
  func.return
}
