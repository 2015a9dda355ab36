// RUN: smelt-opt -p 'loop-promote{loop="k"}' %s | filecheck %s

// A cell the reduction loop reads and writes at a fixed index lives in an
// iter_arg: one load before the loop, one store after it.
// CHECK-LABEL: func.func @promote(
// CHECK:         %[[INIT:.*]] = memref.load %{{.*}}[%[[I:.*]]] : memref<4xf32>
// CHECK-NEXT:    %[[R:.*]] = loop.for %{{.*}} = 0 to 8 step 1 reduction iter_args(%[[ACC:.*]] = %[[INIT]]) -> (f32) {
// CHECK-NEXT:      %[[X:.*]] = memref.load
// CHECK-NEXT:      %[[S:.*]] = arith.addf %[[ACC]], %[[X]] : f32
// CHECK-NEXT:      loop.yield %[[S]] : f32
// CHECK-NEXT:    } {loop.role = "k"}
// CHECK-NEXT:    memref.store %[[R]], %{{.*}}[%[[I]]] : memref<4xf32>
func.func @promote(%a: memref<4x8xf32>, %c: memref<4xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 4 step 1 parallel {
    loop.for %k = 0 to 8 step 1 reduction {
      %x = memref.load %a[%i, %k] : memref<4x8xf32>
      %z = memref.load %c[%i] : memref<4xf32>
      %s = arith.addf %z, %x : f32
      memref.store %s, %c[%i] : memref<4xf32>
      loop.yield
    } {loop.role = "k"}
    loop.yield
  } {loop.role = "m"}
  func.return
}

// Guard: another access in the loop may touch the cell.
// CHECK-LABEL: func.func @overlap(
// CHECK:         loop.for %{{.*}} = 0 to 8 step 1 reduction {
// CHECK-NEXT:      memref.load
// CHECK-NEXT:      memref.load
// CHECK-NEXT:      arith.addf
// CHECK-NEXT:      memref.store
func.func @overlap(%c: memref<8xf32>) attributes {loop.kernel} {
  %c0 = arith.constant 0 : index
  loop.for %k = 0 to 8 step 1 reduction {
    %z = memref.load %c[%c0] : memref<8xf32>
    %y = memref.load %c[%k] : memref<8xf32>
    %s = arith.addf %z, %y : f32
    memref.store %s, %c[%c0] : memref<8xf32>
    loop.yield
  } {loop.role = "k"}
  func.return
}

// Guard: the index changes from one iteration to the next.
// CHECK-LABEL: func.func @varying(
// CHECK:         loop.for %{{.*}} = 0 to 8 step 1 reduction {
// CHECK-NEXT:      memref.load
func.func @varying(%a: memref<8xf32>, %c: memref<8xf32>) attributes {loop.kernel} {
  loop.for %k = 0 to 8 step 1 reduction {
    %z = memref.load %c[%k] : memref<8xf32>
    %x = memref.load %a[%k] : memref<8xf32>
    %s = arith.addf %z, %x : f32
    memref.store %s, %c[%k] : memref<8xf32>
    loop.yield
  } {loop.role = "k"}
  func.return
}
