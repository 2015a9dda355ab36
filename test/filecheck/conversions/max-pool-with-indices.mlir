// RUN: smelt-opt -p convert-graph-to-loop %s | filecheck %s

// MaxPool with its Indices output: one kernel whose window reduction carries the
// max and its flat input index (-1 until a position inside the input is taken).
// Here storage_order = 1: the index is (n * C + c) * H * W + h + w * H, and h,
// cut by the top padding, is guarded and clamped.
// CHECK-LABEL: func.func @max_pool_with_indices_0(
// CHECK-SAME:    %[[X:[^:]*]]: memref<1x1x5x5xf32>, %[[Y:[^:]*]]: memref<1x1x3x2xf32>, %[[I:[^:]*]]: memref<1x1x3x2xi64>) attributes {loop.kernel} {
// CHECK-DAG:     %[[UNSET:.*]] = arith.constant -1 : i64
// CHECK-DAG:     %[[LOWEST:.*]] = arith.constant 0xff800000 : f32
// CHECK-DAG:     %[[FIVE:.*]] = arith.constant 5 : index
// CHECK:         loop.for %[[N:.*]] = 0 to 1 step 1 parallel {
// CHECK:         loop.for %[[C:.*]] = 0 to 1 step 1 parallel {
// CHECK:         loop.for %[[OH:.*]] = 0 to 3 step 1 parallel {
// CHECK:         loop.for %[[OW:.*]] = 0 to 2 step 1 parallel {
// CHECK:         %[[BEST:.*]], %[[WHERE:.*]] = loop.for %{{.*}} = 0 to 2 step 1 reduction iter_args(%{{.*}} = %[[LOWEST]], %{{.*}} = %[[UNSET]]) -> (f32, i64) {
// CHECK:         loop.for %{{.*}} = 0 to 2 step 1 reduction iter_args(%[[ACC:.*]] = %{{.*}}, %[[AT:.*]] = %{{.*}}) -> (f32, i64) {
// CHECK:           %[[INSIDE:.*]] = arith.andi
// CHECK:           %[[V:.*]] = memref.load %[[X]][%{{.*}}, %{{.*}}, %[[H:.*]], %[[W:.*]]] : memref<1x1x5x5xf32>
// CHECK:           %[[GT:.*]] = arith.cmpf ogt, %[[V]], %[[ACC]] : f32
// CHECK:           %[[VNAN:.*]] = arith.cmpf une, %[[V]], %[[V]] : f32
// CHECK:           %[[NUM:.*]] = arith.cmpf oeq, %[[ACC]], %[[ACC]] : f32
// CHECK:           %[[NANFIRST:.*]] = arith.andi %[[VNAN]], %[[NUM]] : i1
// CHECK:           %[[BETTER:.*]] = arith.ori %[[GT]], %[[NANFIRST]] : i1
// CHECK:           %[[FIRST:.*]] = arith.cmpi eq, %[[AT]], %[[UNSET]] : i64
// CHECK:           %[[ANY:.*]] = arith.ori %[[BETTER]], %[[FIRST]] : i1
// CHECK:           %[[TAKE:.*]] = arith.andi %[[ANY]], %[[INSIDE]] : i1
// CHECK:           %[[BLOCK:.*]] = arith.addi %{{.*}}, %{{.*}} : index
// CHECK:           %[[PLUS_H:.*]] = arith.addi %[[BLOCK]], %[[H]] : index
// CHECK:           %[[W_PLACE:.*]] = arith.muli %[[W]], %[[FIVE]] : index
// CHECK:           %[[FLAT:.*]] = arith.addi %[[PLUS_H]], %[[W_PLACE]] : index
// CHECK:           %[[FLAT64:.*]] = arith.index_cast %[[FLAT]] : index to i64
// CHECK:           %[[NEWBEST:.*]] = arith.select %[[TAKE]], %[[V]], %[[ACC]] : f32
// CHECK:           %[[NEWAT:.*]] = arith.select %[[TAKE]], %[[FLAT64]], %[[AT]] : i64
// CHECK:           loop.yield %[[NEWBEST]], %[[NEWAT]] : f32, i64
// CHECK:         memref.store %[[BEST]], %[[Y]][%[[N]], %[[C]], %[[OH]], %[[OW]]] : memref<1x1x3x2xf32>
// CHECK:         memref.store %[[WHERE]], %[[I]][%[[N]], %[[C]], %[[OH]], %[[OW]]] : memref<1x1x3x2xi64>
// CHECK-LABEL: func.func @main(
// CHECK:         func.call @max_pool_with_indices_0
func.func @main(%x: tensor<1x1x5x5xf32>) -> (tensor<1x1x3x2xf32>, tensor<1x1x3x2xi64>) {
  %y, %i = graph.max_pool_with_indices %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 1, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = 0 : i64, layout = "nchw", storage_order = 1 : i64} : (tensor<1x1x5x5xf32>) -> (tensor<1x1x3x2xf32>, tensor<1x1x3x2xi64>)
  func.return %y, %i : tensor<1x1x3x2xf32>, tensor<1x1x3x2xi64>
}
