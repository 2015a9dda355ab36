// RUN: smelt-opt -p 'loop-pack{at="n.0" operand=0}' %s | filecheck %s

// A transposed operand is packed in loop order: the innermost loop (j1) walks
// the scratch with unit stride.
// CHECK-LABEL: func.func @transposed(
// CHECK:         loop.for %[[J0:.*]] = 0 to 6 step 3 parallel {
// CHECK-NEXT:      %[[P:.*]] = memref.alloca() : memref<9xf32>
// CHECK-NEXT:      loop.for %[[K:.*]] = 0 to 3 step 1 parallel {
// CHECK-NEXT:        loop.for %[[J1:.*]] = 0 to 3 step 1 parallel {
// CHECK-NEXT:          %[[J:.*]] = arith.addi %[[J0]], %[[J1]] : index
// CHECK-NEXT:          %[[V:.*]] = memref.load %{{.*}}[%[[J]], %[[K]]] : memref<6x3xf32>
// CHECK:               memref.store %[[V]], %[[P]][%{{.*}}] : memref<9xf32>
// CHECK:             } {loop.role = "pack"}
// CHECK:           } {loop.role = "pack"}
// CHECK-NEXT:      loop.for %{{.*}} = 0 to 3 step 1 reduction {
// CHECK:             %[[Y:.*]] = memref.load %[[P]][%{{.*}}] : memref<9xf32>
// CHECK-NOT:         memref<6x3xf32>
// CHECK:           } {loop.role = "k"}
func.func @transposed(%b: memref<6x3xf32>, %c: memref<3x6xf32>) attributes {loop.kernel} {
  loop.for %j0 = 0 to 6 step 3 parallel {
    loop.for %k = 0 to 3 step 1 reduction {
      loop.for %j1 = 0 to 3 step 1 parallel {
        %j = arith.addi %j0, %j1 : index
        %y = memref.load %b[%j, %k] : memref<6x3xf32>
        %z = memref.load %c[%k, %j] : memref<3x6xf32>
        %s = arith.addf %z, %y : f32
        memref.store %s, %c[%k, %j] : memref<3x6xf32>
        loop.yield
      } {loop.role = "n.1"}
      loop.yield
    } {loop.role = "k"}
    loop.yield
  } {loop.role = "n.0"}
  func.return
}

// Guard: the operand is written inside the pack loop.
// CHECK-LABEL: func.func @stored(
// CHECK-NOT:     memref.alloca
// CHECK:         memref.load %{{.*}} : memref<6xf32>
func.func @stored(%b: memref<6xf32>) attributes {loop.kernel} {
  loop.for %j0 = 0 to 6 step 3 parallel {
    loop.for %j1 = 0 to 3 step 1 parallel {
      %j = arith.addi %j0, %j1 : index
      %y = memref.load %b[%j] : memref<6xf32>
      %s = arith.addf %y, %y : f32
      memref.store %s, %b[%j] : memref<6xf32>
      loop.yield
    } {loop.role = "n.1"}
    loop.yield
  } {loop.role = "n.0"}
  func.return
}

// Guard: an index computed from a loaded value.
// CHECK-LABEL: func.func @loaded_index(
// CHECK-NOT:     memref.alloca
// CHECK:         func.return
func.func @loaded_index(%b: memref<6xf32>, %ix: memref<3xindex>, %o: memref<6xf32>) attributes {loop.kernel} {
  loop.for %j0 = 0 to 6 step 3 parallel {
    loop.for %j1 = 0 to 3 step 1 parallel {
      %j = memref.load %ix[%j1] : memref<3xindex>
      %y = memref.load %b[%j] : memref<6xf32>
      memref.store %y, %o[%j1] : memref<6xf32>
      loop.yield
    } {loop.role = "n.1"}
    loop.yield
  } {loop.role = "n.0"}
  func.return
}
