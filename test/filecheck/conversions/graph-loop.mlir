// RUN: smelt-opt -p convert-graph-to-loop %s | filecheck %s

// graph.loop: one kernel (marked with its trip count) that copies the carried
// value into its result buffer, then runs a sequential loop over the iterations:
// the iteration number stored, the body's nests inlined, the next carried value
// copied back and the scan element written into its slice [t].
// CHECK: func.func @loop_0(%[[X:.*]]: memref<4xf32>, %[[V:.*]]: memref<4xf32>, %[[I:.*]]: memref<i64>, %[[R:.*]]: memref<4xf32>, %[[S:.*]]: memref<100x4xf32>, %[[N:.*]]: memref<4xf32>, %[[E:.*]]: memref<4xf32>, {{.*}}) attributes {loop.kernel, loop.iterations = #builtin.int<100>}
// CHECK: memref.store %{{.*}}, %[[R]]
// CHECK: loop.for %[[T:.*]] = 0 to 100 step 1 reduction {
// CHECK-NEXT: %[[TI:.*]] = arith.index_cast %[[T]] : index to i64
// CHECK-NEXT: memref.store %[[TI]], %[[I]][]
// CHECK: memref.load %[[I]][]
// CHECK: memref.load %[[R]]
// CHECK: math.tanh
// CHECK: memref.store %{{.*}}, %[[R]]
// CHECK: memref.store %{{.*}}, %[[S]][%[[T]], %{{.*}}]
// CHECK: func.func @main
// CHECK: func.call @loop_0
// CHECK-NOT: func.call
func.func @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>, tensor<100x4xf32>) {
  %r, %s = graph.loop %arg0, %arg1 {trip_count = 100 : i64, carried = 1 : i64} : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<100x4xf32>) {
  ^bb0(%i: tensor<i64>, %x: tensor<4xf32>, %v: tensor<4xf32>):
    %f = graph.cast %i {to = f32} : (tensor<i64>) -> tensor<f32>
    %a = graph.add %x, %v : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %b = graph.add %a, %f : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
    %t = graph.tanh %b : (tensor<4xf32>) -> tensor<4xf32>
    graph.yield %t, %t : tensor<4xf32>, tensor<4xf32>
  }
  func.return %r, %s : tensor<4xf32>, tensor<100x4xf32>
}
