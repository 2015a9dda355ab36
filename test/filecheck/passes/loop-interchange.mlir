// RUN: smelt-opt -p 'loop-interchange{order="n,k,m"},loop-interchange{order="n,m.0,m.1"},loop-interchange{order="kw,kh"},loop-interchange{order="k,m"}' %s | filecheck %s

// Two parallel loops swap headers; the body sees the same induction variables.
// CHECK-LABEL: func.func @swap(
// CHECK-NEXT:    loop.for %[[J:.*]] = 0 to 8 step 1 parallel {
// CHECK-NEXT:      loop.for %[[I:.*]] = 0 to 4 step 1 parallel {
// CHECK-NEXT:        memref.load %{{.*}}[%[[I]], %[[J]]]
// CHECK:           } {loop.role = "m"}
// CHECK-NEXT:      loop.yield
// CHECK-NEXT:    } {loop.role = "n"}
func.func @swap(%a: memref<4x8xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 4 step 1 parallel {
    loop.for %j = 0 to 8 step 1 parallel {
      %x = memref.load %a[%i, %j] : memref<4x8xf32>
      memref.store %x, %a[%i, %j] : memref<4x8xf32>
      loop.yield
    } {loop.role = "n"}
    loop.yield
  } {loop.role = "m"}
  func.return
}

// Index arithmetic between the loops of a band moves into the innermost body.
// CHECK-LABEL: func.func @index_ops_sink(
// CHECK-NEXT:    loop.for %{{.*}} = 0 to 8 step 1 parallel {
// CHECK-NEXT:      loop.for %[[T:.*]] = 0 to 8 step 4 parallel {
// CHECK-NEXT:        loop.for %[[P:.*]] = 0 to 4 step 1 parallel {
// CHECK-NEXT:          arith.addi %[[T]], %[[P]] : index
// CHECK:             } {loop.role = "m.1"}
// CHECK:           } {loop.role = "m.0"}
// CHECK:         } {loop.role = "n"}
func.func @index_ops_sink(%a: memref<8x8xf32>) attributes {loop.kernel} {
  loop.for %t = 0 to 8 step 4 parallel {
    loop.for %p = 0 to 4 step 1 parallel {
      %i = arith.addi %t, %p : index
      loop.for %j = 0 to 8 step 1 parallel {
        %x = memref.load %a[%i, %j] : memref<8x8xf32>
        memref.store %x, %a[%i, %j] : memref<8x8xf32>
        loop.yield
      } {loop.role = "n"}
      loop.yield
    } {loop.role = "m.1"}
    loop.yield
  } {loop.role = "m.0"}
  func.return
}

// One reduction loop among parallel loops moves freely (each element still
// accumulates over k in order).
// CHECK-LABEL: func.func @one_reduction(
// CHECK-NEXT:    loop.for %{{.*}} = 0 to 8 step 1 parallel {
// CHECK-NEXT:      loop.for %{{.*}} = 0 to 3 step 1 reduction {
// CHECK-NEXT:        loop.for %{{.*}} = 0 to 4 step 1 parallel {
// CHECK:             } {loop.role = "m"}
// CHECK:           } {loop.role = "k"}
// CHECK:         } {loop.role = "n"}
func.func @one_reduction(%a: memref<4x3xf32>, %b: memref<3x8xf32>, %c: memref<4x8xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 4 step 1 parallel {
    loop.for %k = 0 to 3 step 1 reduction {
      loop.for %j = 0 to 8 step 1 parallel {
        %x = memref.load %a[%i, %k] : memref<4x3xf32>
        %y = memref.load %b[%k, %j] : memref<3x8xf32>
        %z = memref.load %c[%i, %j] : memref<4x8xf32>
        %p = arith.mulf %x, %y : f32
        %s = arith.addf %z, %p : f32
        memref.store %s, %c[%i, %j] : memref<4x8xf32>
        loop.yield
      } {loop.role = "n"}
      loop.yield
    } {loop.role = "k"}
    loop.yield
  } {loop.role = "m"}
  func.return
}

// Guard: two reduction loops keep their relative order (no reassociation).
// CHECK-LABEL: func.func @two_reductions(
// CHECK:         loop.for %{{.*}} = 0 to 3 step 1 reduction {
// CHECK-NEXT:      loop.for %{{.*}} = 0 to 3 step 1 reduction {
// CHECK:           } {loop.role = "kw"}
// CHECK:         } {loop.role = "kh"}
func.func @two_reductions(%a: memref<3x3xf32>, %o: memref<1xf32>) attributes {loop.kernel} {
  %c0 = arith.constant 0 : index
  loop.for %u = 0 to 3 step 1 reduction {
    loop.for %v = 0 to 3 step 1 reduction {
      %x = memref.load %a[%u, %v] : memref<3x3xf32>
      %z = memref.load %o[%c0] : memref<1xf32>
      %s = arith.addf %z, %x : f32
      memref.store %s, %o[%c0] : memref<1xf32>
      loop.yield
    } {loop.role = "kw"}
    loop.yield
  } {loop.role = "kh"}
  func.return
}

// Guard: a loop of the band carrying iter_args is not moved.
// CHECK-LABEL: func.func @iter_args(
// CHECK:         loop.for %{{.*}} = 0 to 4 step 1 parallel {
// CHECK-NEXT:      loop.for %{{.*}} = 0 to 8 step 1 reduction iter_args
// CHECK:           } {loop.role = "k"}
// CHECK:         } {loop.role = "m"}
func.func @iter_args(%a: memref<4x8xf32>, %o: memref<4xf32>) attributes {loop.kernel} {
  %z = arith.constant 0.0 : f32
  loop.for %i = 0 to 4 step 1 parallel {
    %r = loop.for %j = 0 to 8 step 1 reduction iter_args(%acc = %z) -> (f32) {
      %x = memref.load %a[%i, %j] : memref<4x8xf32>
      %s = arith.addf %acc, %x : f32
      loop.yield %s : f32
    } {loop.role = "k"}
    memref.store %r, %o[%i] : memref<4xf32>
    loop.yield
  } {loop.role = "m"}
  func.return
}
