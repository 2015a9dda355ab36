// RUN: smelt-opt %s -p 'graph-simplify,graph-convert-layout{layout=nhwc},graph-fuse' | filecheck %s
// RUN: not smelt-opt %s -p convert-graph-to-loop 2>&1 | filecheck %s --check-prefix=LOOP

// The graph passes keep symbolic dims (#34): the layout pass transposes them with
// the data, fusion keeps each region's types; the loop level refuses them for now.

// CHECK-LABEL: func.func @net
func.func @net(%x: tensor<?x3x?x?xf32, #graph.dims<"batch", "H", "W">>, %w: tensor<8x3x3x3xf32>, %b: tensor<8xf32>) -> tensor<?x8x?x?xf32, #graph.dims<"batch", "(H + 1) floordiv 2", "(W + 1) floordiv 2">> {
  // CHECK: graph.transpose %{{.*}} {perm = array<i64: 0, 2, 3, 1>} : (tensor<?x3x?x?xf32, #graph.dims<"batch", "H", "W">>) -> tensor<?x?x?x3xf32, #graph.dims<"batch", "H", "W">>
  // CHECK: graph.fused {{.*}}kind = "conv2d"{{.*}} -> tensor<?x?x?x8xf32, #graph.dims<"batch", "(H + 1) floordiv 2", "(W + 1) floordiv 2">>
  // CHECK: graph.conv2d {{.*}}layout = "nhwc"
  // CHECK: graph.relu
  // CHECK: graph.transpose %{{.*}} {perm = array<i64: 0, 3, 1, 2>} : (tensor<?x?x?x8xf32, #graph.dims<"batch", "(H + 1) floordiv 2", "(W + 1) floordiv 2">>) -> tensor<?x8x?x?xf32, #graph.dims<"batch", "(H + 1) floordiv 2", "(W + 1) floordiv 2">>
  %0 = graph.conv2d %x, %w, %b {dilations = array<i64: 1, 1>, group = 1 : i64, layout = "nchw", pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<?x3x?x?xf32, #graph.dims<"batch", "H", "W">>, tensor<8x3x3x3xf32>, tensor<8xf32>) -> tensor<?x8x?x?xf32, #graph.dims<"batch", "(H + 1) floordiv 2", "(W + 1) floordiv 2">>
  %2 = graph.relu %0 : (tensor<?x8x?x?xf32, #graph.dims<"batch", "(H + 1) floordiv 2", "(W + 1) floordiv 2">>) -> tensor<?x8x?x?xf32, #graph.dims<"batch", "(H + 1) floordiv 2", "(W + 1) floordiv 2">>
  func.return %2 : tensor<?x8x?x?xf32, #graph.dims<"batch", "(H + 1) floordiv 2", "(W + 1) floordiv 2">>
}

// LOOP: tensor type tensor<?x3x?x?xf32, #graph.dims<"batch", "H", "W">> has a dynamic dimension; shapes must be static
