// RUN: smelt-opt %s -p loop-dedup-kernels | filecheck %s

// @scale_b equals @scale_a but for its name: its call goes to @scale_a and it is
// erased. @scale_c multiplies by another constant and @scale_d has another shape:
// both stay.
// CHECK-LABEL: func.func @scale_a
// CHECK-NOT:   func.func @scale_b
// CHECK-LABEL: func.func @scale_c
// CHECK-LABEL: func.func @scale_d
// CHECK-LABEL: func.func @main
// CHECK:       func.call @scale_a(%a, %t)
// CHECK-NEXT:  func.call @scale_a(%t, %u)
// CHECK-NEXT:  func.call @scale_c(%u, %v)
// CHECK-NEXT:  func.call @scale_d(

func.func @scale_a(%x: memref<16xf32>, %y: memref<16xf32>) attributes {loop.kernel} {
  %two = arith.constant 2.0 : f32
  loop.for %i = 0 to 16 step 1 parallel {
    %v = memref.load %x[%i] : memref<16xf32>
    %w = arith.mulf %v, %two : f32
    memref.store %w, %y[%i] : memref<16xf32>
    loop.yield
  }
  func.return
}
func.func @scale_b(%p: memref<16xf32>, %q: memref<16xf32>) attributes {loop.kernel} {
  %c = arith.constant 2.0 : f32
  loop.for %j = 0 to 16 step 1 parallel {
    %v = memref.load %p[%j] : memref<16xf32>
    %w = arith.mulf %v, %c : f32
    memref.store %w, %q[%j] : memref<16xf32>
    loop.yield
  }
  func.return
}
func.func @scale_c(%x: memref<16xf32>, %y: memref<16xf32>) attributes {loop.kernel} {
  %three = arith.constant 3.0 : f32
  loop.for %i = 0 to 16 step 1 parallel {
    %v = memref.load %x[%i] : memref<16xf32>
    %w = arith.mulf %v, %three : f32
    memref.store %w, %y[%i] : memref<16xf32>
    loop.yield
  }
  func.return
}
func.func @scale_d(%x: memref<8xf32>, %y: memref<8xf32>) attributes {loop.kernel} {
  %two = arith.constant 2.0 : f32
  loop.for %i = 0 to 8 step 1 parallel {
    %v = memref.load %x[%i] : memref<8xf32>
    %w = arith.mulf %v, %two : f32
    memref.store %w, %y[%i] : memref<8xf32>
    loop.yield
  }
  func.return
}
func.func @main(%a: memref<16xf32>, %v: memref<16xf32>, %e: memref<8xf32>, %f: memref<8xf32>)
    attributes {smelt.input_names = ["a", "e"], smelt.output_names = ["v", "f"]} {
  %t = loop.alloc : memref<16xf32>
  %u = loop.alloc : memref<16xf32>
  func.call @scale_a(%a, %t) : (memref<16xf32>, memref<16xf32>) -> ()
  func.call @scale_b(%t, %u) : (memref<16xf32>, memref<16xf32>) -> ()
  func.call @scale_c(%u, %v) : (memref<16xf32>, memref<16xf32>) -> ()
  func.call @scale_d(%e, %f) : (memref<8xf32>, memref<8xf32>) -> ()
  func.return
}
