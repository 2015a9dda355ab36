// RUN: smelt-opt %s -p graph-fold-constants | filecheck %s
// RUN: smelt-opt %s -p 'graph-fold-constants{max_bytes=8}' | filecheck %s --check-prefix=SMALL

// CHECK-LABEL: func.func @fold
// CHECK-NEXT: %[[C:.*]] = graph.constant dense<[2.000000e+00, 3.000000e+00]> : tensor<2xf32>
// CHECK-NEXT: %[[A:.*]] = graph.add %arg0, %[[C]]
// CHECK-NEXT: func.return %[[A]]
func.func @fold(%arg0: tensor<2xf32>) -> tensor<2xf32> {
  %0 = graph.constant dense<[4.0, 9.0]> : tensor<2xf32>
  %1 = graph.sqrt %0 : (tensor<2xf32>) -> tensor<2xf32>
  %2 = graph.add %arg0, %1 : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return %2 : tensor<2xf32>
}

// Shape arithmetic on integers folds too.
// CHECK-LABEL: func.func @ints
// CHECK-NEXT: graph.constant dense<[6, 4]> : tensor<2xi64>
// CHECK-NEXT: func.return
func.func @ints() -> tensor<2xi64> {
  %0 = graph.constant dense<[3, 2]> : tensor<2xi64>
  %1 = graph.constant dense<2> : tensor<i64>
  %2 = graph.mul %0, %1 : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  func.return %2 : tensor<2xi64>
}

// A non-constant operand: nothing folds.
// CHECK-LABEL: func.func @runtime
// CHECK: graph.mul %arg0
// SMALL-LABEL: func.func @runtime
func.func @runtime(%arg0: tensor<2xf32>) -> tensor<2xf32> {
  %0 = graph.constant dense<[4.0, 9.0]> : tensor<2xf32>
  %1 = graph.mul %arg0, %0 : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return %1 : tensor<2xf32>
}

// A broadcast past max_bytes stays computed at run time.
// SMALL-LABEL: func.func @big_broadcast
// SMALL: graph.expand
// CHECK-LABEL: func.func @big_broadcast
// CHECK-NOT: graph.expand
func.func @big_broadcast() -> tensor<4x4xf32> {
  %0 = graph.constant dense<1.0> : tensor<f32>
  %1 = graph.expand %0 {shape = array<i64: 4, 4>} : (tensor<f32>) -> tensor<4x4xf32>
  func.return %1 : tensor<4x4xf32>
}
