// RUN: smelt-opt %s -p loop-cse | filecheck %s

// Index arithmetic and constants repeated by unrolled copies are shared: the
// second %c16 and the second `%i + 16` go; an op inside the loop that an op
// before the loop computes goes too (commuted operands are the same sum).
// CHECK-LABEL: func.func @shared
// CHECK:         %[[C16:.*]] = arith.constant 16 : index
// CHECK-NEXT:    %[[A:.*]] = arith.addi %i, %[[C16]] : index
// CHECK-NEXT:    %[[X:.*]] = memref.load %x[%[[A]]]
// CHECK-NEXT:    %[[Y:.*]] = memref.load %x[%[[A]]]
// CHECK-NEXT:    loop.for %j = 0 to 4 step 1 parallel {
// CHECK-NEXT:      %[[Z:.*]] = memref.load %x[%[[A]]]
// CHECK-NEXT:      %[[B:.*]] = arith.addi %j, %[[C16]] : index
// CHECK-NEXT:      memref.store %[[Z]], %x[%[[B]]]
// CHECK-NEXT:      loop.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[B2:.*]] = arith.addi %j2, %[[C16]] : index
func.func @shared(%x: memref<32xf32>, %i: index, %j2: index) attributes {loop.kernel} {
  %c16 = arith.constant 16 : index
  %a = arith.addi %i, %c16 : index
  %v = memref.load %x[%a] : memref<32xf32>
  %c16b = arith.constant 16 : index
  %b = arith.addi %c16b, %i : index
  %w = memref.load %x[%b] : memref<32xf32>
  loop.for %j = 0 to 4 step 1 parallel {
    %c16c = arith.constant 16 : index
    %d = arith.addi %i, %c16c : index
    %u = memref.load %x[%d] : memref<32xf32>
    %e = arith.addi %j, %c16c : index
    memref.store %u, %x[%e] : memref<32xf32>
    loop.yield
  }
  %f = arith.addi %j2, %c16 : index
  memref.store %v, %x[%f] : memref<32xf32>
  memref.store %w, %x[%f] : memref<32xf32>
  func.return
}

// A value made inside a loop does not dominate what follows the loop: the
// `%i + 1` after it stays. Loads are never shared (a store may come between),
// and -0.0 is not 0.0.
// CHECK-LABEL: func.func @scoped
// CHECK:         loop.for
// CHECK:           arith.addi %i, %c1
// CHECK:         }
// CHECK-NEXT:    %{{.*}} = arith.addi %i, %c1 : index
// CHECK-NEXT:    %{{.*}} = memref.load
// CHECK-NEXT:    %{{.*}} = memref.load
// CHECK-NEXT:    %{{.*}} = arith.constant -0.000000e+00 : f32
// CHECK-NEXT:    %{{.*}} = arith.constant 0.000000e+00 : f32
func.func @scoped(%x: memref<32xf32>, %i: index) attributes {loop.kernel} {
  %c1 = arith.constant 1 : index
  loop.for %j = 0 to 4 step 1 parallel {
    %a = arith.addi %i, %c1 : index
    %v = memref.load %x[%a] : memref<32xf32>
    memref.store %v, %x[%j] : memref<32xf32>
    loop.yield
  }
  %b = arith.addi %i, %c1 : index
  %u = memref.load %x[%b] : memref<32xf32>
  %w = memref.load %x[%b] : memref<32xf32>
  %n = arith.constant -0.0 : f32
  %z = arith.constant 0.0 : f32
  %s = arith.addf %u, %n : f32
  %t = arith.addf %w, %z : f32
  memref.store %s, %x[%i] : memref<32xf32>
  memref.store %t, %x[%b] : memref<32xf32>
  func.return
}

// A function that is not a loop kernel is left alone.
// CHECK-LABEL: func.func @not_kernel
// CHECK:         arith.constant 3 : index
// CHECK-NEXT:    arith.constant 3 : index
func.func @not_kernel(%x: memref<4xindex>) {
  %a = arith.constant 3 : index
  %b = arith.constant 3 : index
  %c0 = arith.constant 0 : index
  memref.store %a, %x[%c0] : memref<4xindex>
  memref.store %b, %x[%c0] : memref<4xindex>
  func.return
}
