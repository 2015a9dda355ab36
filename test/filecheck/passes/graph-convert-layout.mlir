// RUN: smelt-opt %s -p graph-convert-layout | filecheck %s
// RUN: smelt-opt %s -p 'graph-convert-layout{layout=nchw}' | filecheck %s --check-prefix=KEEP

// Two convs with a relu and a per-channel bias between them: the transposes meet
// and cancel, leaving one at the entry and one at the exit; the weights are
// transposed at compile time (OIHW → OHWI).
// CHECK-LABEL: func.func @conv_chain
// CHECK:      %[[T:.*]] = graph.transpose %arg0 {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x2x4x4xf32>) -> tensor<1x4x4x2xf32>
// CHECK:      graph.constant {{.*}} : tensor<3x1x1x2xf32>
// CHECK:      %[[C1:.*]] = graph.conv2d %[[T]], {{.*}}layout = "nhwc"{{.*}} -> tensor<1x4x4x3xf32>
// CHECK:      %[[R:.*]] = graph.relu %[[C1]] : (tensor<1x4x4x3xf32>)
// CHECK:      graph.constant {{.*}} : tensor<1x1x1x3xf32>
// CHECK:      %[[A:.*]] = graph.add %[[R]], %{{.*}} : (tensor<1x4x4x3xf32>, tensor<1x1x1x3xf32>)
// CHECK:      %[[C2:.*]] = graph.conv2d %[[A]], {{.*}}layout = "nhwc"
// CHECK:      %[[P:.*]] = graph.max_pool %[[C2]] {{.*}}layout = "nhwc"{{.*}} -> tensor<1x2x2x3xf32>
// CHECK-NEXT: %[[B:.*]] = graph.transpose %[[P]] {perm = array<i64: 0, 3, 1, 2>} : (tensor<1x2x2x3xf32>) -> tensor<1x3x2x2xf32>
// CHECK-NEXT: func.return %[[B]]
// KEEP-LABEL: func.func @conv_chain
// KEEP-NOT: graph.transpose
func.func @conv_chain(%arg0: tensor<1x2x4x4xf32>) -> tensor<1x3x2x2xf32> {
  %w1 = graph.constant dense<1.0> : tensor<3x2x1x1xf32>
  %b1 = graph.constant dense<0.5> : tensor<3xf32>
  %w2 = graph.constant dense<2.0> : tensor<3x3x1x1xf32>
  %s = graph.constant dense<[[[1.0]], [[2.0]], [[3.0]]]> : tensor<3x1x1xf32>
  %0 = graph.conv2d %arg0, %w1, %b1 {dilations = array<i64: 1, 1>, group = 1 : i64, layout = "nchw", pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x2x4x4xf32>, tensor<3x2x1x1xf32>, tensor<3xf32>) -> tensor<1x3x4x4xf32>
  %1 = graph.relu %0 : (tensor<1x3x4x4xf32>) -> tensor<1x3x4x4xf32>
  %2 = graph.add %1, %s : (tensor<1x3x4x4xf32>, tensor<3x1x1xf32>) -> tensor<1x3x4x4xf32>
  %3 = graph.conv2d %2, %w2, %b1 {dilations = array<i64: 1, 1>, group = 1 : i64, layout = "nchw", pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x3x4x4xf32>, tensor<3x3x1x1xf32>, tensor<3xf32>) -> tensor<1x3x4x4xf32>
  %4 = graph.max_pool %3 {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = 0 : i64, layout = "nchw"} : (tensor<1x3x4x4xf32>) -> tensor<1x3x2x2xf32>
  func.return %4 : tensor<1x3x2x2xf32>
}

// A channel concat of two NHWC branches concatenates along the last axis.
// CHECK-LABEL: func.func @concat
// CHECK: graph.concat {{.*}} {axis = 3 : i64} : (tensor<1x4x4x1xf32>, tensor<1x4x4x1xf32>) -> tensor<1x4x4x2xf32>
func.func @concat(%arg0: tensor<1x1x4x4xf32>) -> tensor<1x2x2x2xf32> {
  %0 = graph.max_pool %arg0 {kernel_shape = array<i64: 1, 1>, strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = 0 : i64, layout = "nchw"} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %1 = graph.concat %0, %0 {axis = 1 : i64} : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %2 = graph.max_pool %1 {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = 0 : i64, layout = "nchw"} : (tensor<1x2x4x4xf32>) -> tensor<1x2x2x2xf32>
  func.return %2 : tensor<1x2x2x2xf32>
}

// Negative: a 1-D pool (rank 3) has no NHWC form and stays.
// CHECK-LABEL: func.func @pool1d
// CHECK-NOT: graph.transpose
// CHECK: layout = "nchw"
func.func @pool1d(%arg0: tensor<1x2x8xf32>) -> tensor<1x2x4xf32> {
  %0 = graph.max_pool %arg0 {kernel_shape = array<i64: 2>, strides = array<i64: 2>, pads = array<i64: 0, 0>, dilations = array<i64: 1>, ceil_mode = 0 : i64, layout = "nchw"} : (tensor<1x2x8xf32>) -> tensor<1x2x4xf32>
  func.return %0 : tensor<1x2x4xf32>
}
