// RUN: smelt-opt %s --split-input-file --verify-diagnostics | filecheck %s

// A result type whose expression is not the inferred one.
func.func @f(%x: tensor<?x3x?x?xf32, #graph.dims<"batch", "H", "W">>, %w: tensor<8x3x3x3xf32>, %b: tensor<8xf32>) {
  %0 = graph.conv2d %x, %w, %b {dilations = array<i64: 1, 1>, group = 1 : i64, layout = "nchw", pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<?x3x?x?xf32, #graph.dims<"batch", "H", "W">>, tensor<8x3x3x3xf32>, tensor<8xf32>) -> tensor<?x8x?x?xf32, #graph.dims<"batch", "H floordiv 2", "W floordiv 2">>
  func.return
}
// CHECK: graph.conv2d: result types {{.*}} do not match the inferred ['tensor<?x8x?x?xf32, #graph.dims<"batch", "(H + 1) floordiv 2", "(W + 1) floordiv 2">>']

// -----

// A `?` dim needs its expression.
func.func @f(%x: tensor<?x3xf32>) {
  %0 = graph.relu %x : (tensor<?x3xf32>) -> tensor<?x3xf32>
  func.return
}
// CHECK: each ? dim needs its expression in a #graph.dims encoding (1 ? dims, 0 expressions)

// -----

// Two different symbols do not broadcast: they may differ when run.
func.func @f(%a: tensor<?x4xf32, #graph.dims<"batch">>, %b: tensor<?x4xf32, #graph.dims<"seq">>) {
  %0 = graph.add %a, %b : (tensor<?x4xf32, #graph.dims<"batch">>, tensor<?x4xf32, #graph.dims<"seq">>) -> tensor<?x4xf32, #graph.dims<"batch">>
  func.return
}
// CHECK: broadcast only if dims ['batch', 'seq'] are equal

// -----

func.func @f(%a: tensor<?x?xf32, #graph.dims<"m", "k">>, %b: tensor<?x8xf32, #graph.dims<"n">>) {
  %0 = graph.matmul %a, %b : (tensor<?x?xf32, #graph.dims<"m", "k">>, tensor<?x8xf32, #graph.dims<"n">>) -> tensor<?x8xf32, #graph.dims<"m">>
  func.return
}
// CHECK: matmul contraction dims differ

// -----

// A reshape must keep the element count: batch*seq*64 is not batch*64.
func.func @f(%x: tensor<?x?x64xf32, #graph.dims<"batch", "seq">>) {
  %0 = graph.reshape %x : (tensor<?x?x64xf32, #graph.dims<"batch", "seq">>) -> tensor<?x64xf32, #graph.dims<"batch">>
  func.return
}
// CHECK: cannot reshape

// -----

func.func @f(%x: tensor<?xf32, #graph.dims<"3">>) {
  func.return
}
// CHECK: #graph.dims: '3' is the number 3; write it in the shape
