// RUN: smelt-opt %s -p graph-fold-batchnorm | filecheck %s

// CHECK-LABEL: func.func @conv_bn
// CHECK-NOT: graph.batch_norm
// CHECK: %[[W:.*]] = graph.constant dense<[{{\[\[\[}}2.000000e+00]]], {{\[\[\[}}4.000000e+00]]]]> : tensor<2x1x1x1xf32>
// CHECK: %[[B:.*]] = graph.constant dense<[1.000000e+00, 5.000000e+00]> : tensor<2xf32>
// CHECK: graph.conv2d %arg0, %[[W]], %[[B]]
// CHECK-NOT: graph.batch_norm
func.func @conv_bn(%arg0: tensor<1x1x3x3xf32>) -> tensor<1x2x3x3xf32> {
  %w = graph.constant dense<1.0> : tensor<2x1x1x1xf32>
  %b = graph.constant dense<[0.0, 1.0]> : tensor<2xf32>
  %s = graph.constant dense<[2.0, 4.0]> : tensor<2xf32>
  %t = graph.constant dense<[1.0, 1.0]> : tensor<2xf32>
  %m = graph.constant dense<[0.0, 0.0]> : tensor<2xf32>
  %v = graph.constant dense<[1.0, 1.0]> : tensor<2xf32>
  %c = graph.conv2d %arg0, %w, %b {dilations = array<i64: 1, 1>, group = 1 : i64, layout = "nchw", pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x1x3x3xf32>, tensor<2x1x1x1xf32>, tensor<2xf32>) -> tensor<1x2x3x3xf32>
  %y = graph.batch_norm %c, %s, %t, %m, %v {epsilon = 0.0 : f32} : (tensor<1x2x3x3xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x3x3xf32>
  func.return %y : tensor<1x2x3x3xf32>
}

// A conv whose result has a second use cannot absorb the batch norm: it becomes a
// per-channel multiply-add instead.
// CHECK-LABEL: func.func @shared_conv
// CHECK: graph.conv2d
// CHECK-NOT: graph.batch_norm
// CHECK: graph.mul %{{.*}}, %{{.*}} : (tensor<1x2x3x3xf32>, tensor<2x1x1xf32>)
// CHECK-NEXT: graph.add
func.func @shared_conv(%arg0: tensor<1x1x3x3xf32>) -> (tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>) {
  %w = graph.constant dense<1.0> : tensor<2x1x1x1xf32>
  %b = graph.constant dense<[0.0, 1.0]> : tensor<2xf32>
  %s = graph.constant dense<[2.0, 4.0]> : tensor<2xf32>
  %t = graph.constant dense<[1.0, 1.0]> : tensor<2xf32>
  %m = graph.constant dense<[0.0, 0.0]> : tensor<2xf32>
  %v = graph.constant dense<[1.0, 1.0]> : tensor<2xf32>
  %c = graph.conv2d %arg0, %w, %b {dilations = array<i64: 1, 1>, group = 1 : i64, layout = "nchw", pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x1x3x3xf32>, tensor<2x1x1x1xf32>, tensor<2xf32>) -> tensor<1x2x3x3xf32>
  %y = graph.batch_norm %c, %s, %t, %m, %v {epsilon = 0.0 : f32} : (tensor<1x2x3x3xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x3x3xf32>
  func.return %y, %c : tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>
}

// Non-constant statistics: nothing to fold.
// CHECK-LABEL: func.func @runtime_stats
// CHECK: graph.batch_norm
func.func @runtime_stats(%arg0: tensor<1x2x3x3xf32>, %m: tensor<2xf32>) -> tensor<1x2x3x3xf32> {
  %s = graph.constant dense<[2.0, 4.0]> : tensor<2xf32>
  %t = graph.constant dense<[1.0, 1.0]> : tensor<2xf32>
  %v = graph.constant dense<[1.0, 1.0]> : tensor<2xf32>
  %y = graph.batch_norm %arg0, %s, %t, %m, %v {epsilon = 0.0 : f32} : (tensor<1x2x3x3xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x3x3xf32>
  func.return %y : tensor<1x2x3x3xf32>
}
