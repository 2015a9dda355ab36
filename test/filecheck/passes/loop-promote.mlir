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

// A masked vector cell (a masked tail's C row) is promoted with its mask; the
// mask, made in the loop from invariants, is hoisted first. The load before the
// loop is masked too (its inactive lanes are never stored).
// CHECK-LABEL: func.func @masked_cell(
// CHECK:         %[[M:.*]] = vector.create_mask %{{.*}} : vector<8xi1>
// CHECK:         %[[INIT:.*]] = vector.maskedload %{{.*}}[%{{.*}}], %[[M]], %{{.*}} : memref<13xf32>, vector<8xi1>, vector<8xf32> into vector<8xf32>
// CHECK-NEXT:    %[[R:.*]] = loop.for %{{.*}} = 0 to 4 step 1 reduction iter_args(%[[ACC:.*]] = %[[INIT]]) -> (vector<8xf32>) {
// CHECK-NOT:       %c[
// CHECK:           loop.yield
// CHECK:         vector.maskedstore %{{.*}}[%{{.*}}], %[[M]], %[[R]] : memref<13xf32>, vector<8xi1>, vector<8xf32>
func.func @masked_cell(%b: memref<4x13xf32>, %c: memref<13xf32>) attributes {loop.kernel} {
  %z = arith.constant dense<0.0> : vector<8xf32>
  %c8 = arith.constant 8 : index
  loop.for %k = 0 to 4 step 1 reduction {
    %n = arith.constant 5 : index
    %m = vector.create_mask %n : vector<8xi1>
    %x = vector.maskedload %b[%k, %c8], %m, %z : memref<4x13xf32>, vector<8xi1>, vector<8xf32> into vector<8xf32>
    %y = vector.maskedload %c[%c8], %m, %z : memref<13xf32>, vector<8xi1>, vector<8xf32> into vector<8xf32>
    %s = arith.addf %y, %x : vector<8xf32>
    vector.maskedstore %c[%c8], %m, %s : memref<13xf32>, vector<8xi1>, vector<8xf32>
    loop.yield
  } {loop.role = "k"}
  func.return
}
