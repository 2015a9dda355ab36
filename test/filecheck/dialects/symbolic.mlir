// RUN: smelt-opt %s | smelt-opt | filecheck %s
// RUN: smelt-opt %s --print-op-generic | smelt-opt | filecheck %s

// Symbolic dims: each `?` dim's expression is in the #graph.dims encoding, in
// order; the verifier checks every result type against shape inference over those
// expressions (so each line below is an inference test). Expressions print in one
// canonical form: `(W+1) floordiv 2` is read as `(W + 1) floordiv 2`.

// CHECK-LABEL: func.func @conv_net
// CHECK-SAME: (%{{.*}}: tensor<?x3x?x?xf32, #graph.dims<"batch", "H", "W">>
func.func @conv_net(%x: tensor<?x3x?x?xf32, #graph.dims<"batch", "H", "W">>, %w: tensor<8x3x3x3xf32>, %b: tensor<8xf32>, %fw: tensor<10x8xf32>, %fb: tensor<10xf32>) -> tensor<?x10xf32, #graph.dims<"batch">> {
  // stride 2: floor-division of the dims
  // CHECK: graph.conv2d {{.*}} -> tensor<?x8x?x?xf32, #graph.dims<"batch", "(H + 1) floordiv 2", "(W + 1) floordiv 2">>
  %0 = graph.conv2d %x, %w, %b {dilations = array<i64: 1, 1>, group = 1 : i64, layout = "nchw", pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<?x3x?x?xf32, #graph.dims<"batch", "H", "W">>, tensor<8x3x3x3xf32>, tensor<8xf32>) -> tensor<?x8x?x?xf32, #graph.dims<"batch", "(H+1) floordiv 2", "(W + 1) floordiv 2">>
  // nested floor-divisions fold: floor((floor((H + 1) / 2) + 1) / 2) = floor((H + 3) / 4)
  // CHECK: graph.max_pool {{.*}} -> tensor<?x8x?x?xf32, #graph.dims<"batch", "(H + 3) floordiv 4", "(W + 3) floordiv 4">>
  %1 = graph.max_pool %0 {kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, ceil_mode = 0 : i64, layout = "nchw"} : (tensor<?x8x?x?xf32, #graph.dims<"batch", "(H + 1) floordiv 2", "(W + 1) floordiv 2">>) -> tensor<?x8x?x?xf32, #graph.dims<"batch", "(H + 3) floordiv 4", "(W + 3) floordiv 4">>
  // a 3x3 stride-1 pad-1 window keeps the dims
  // CHECK: graph.average_pool {{.*}} -> tensor<?x8x?x?xf32, #graph.dims<"batch", "(H + 3) floordiv 4", "(W + 3) floordiv 4">>
  %2 = graph.average_pool %1 {kernel_shape = array<i64: 3, 3>, strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, ceil_mode = 0 : i64, count_include_pad = 0 : i64, layout = "nchw"} : (tensor<?x8x?x?xf32, #graph.dims<"batch", "(H + 3) floordiv 4", "(W + 3) floordiv 4">>) -> tensor<?x8x?x?xf32, #graph.dims<"batch", "(H + 3) floordiv 4", "(W + 3) floordiv 4">>
  // CHECK: graph.global_average_pool {{.*}} -> tensor<?x8x1x1xf32, #graph.dims<"batch">>
  %3 = graph.global_average_pool %2 {layout = "nchw"} : (tensor<?x8x?x?xf32, #graph.dims<"batch", "(H + 3) floordiv 4", "(W + 3) floordiv 4">>) -> tensor<?x8x1x1xf32, #graph.dims<"batch">>
  // CHECK: graph.reshape {{.*}} -> tensor<?x8xf32, #graph.dims<"batch">>
  %4 = graph.reshape %3 : (tensor<?x8x1x1xf32, #graph.dims<"batch">>) -> tensor<?x8xf32, #graph.dims<"batch">>
  // CHECK: graph.gemm {{.*}} -> tensor<?x10xf32, #graph.dims<"batch">>
  %5 = graph.gemm %4, %fw, %fb {alpha = 1.0 : f32, beta = 1.0 : f32, trans_a = 0 : i64, trans_b = 1 : i64} : (tensor<?x8xf32, #graph.dims<"batch">>, tensor<10x8xf32>, tensor<10xf32>) -> tensor<?x10xf32, #graph.dims<"batch">>
  // CHECK: graph.softmax {{.*}} -> tensor<?x10xf32, #graph.dims<"batch">>
  %6 = graph.softmax %5 {axis = 1 : i64} : (tensor<?x10xf32, #graph.dims<"batch">>) -> tensor<?x10xf32, #graph.dims<"batch">>
  func.return %6 : tensor<?x10xf32, #graph.dims<"batch">>
}

// CHECK-LABEL: func.func @attention
func.func @attention(%x: tensor<?x?x64xf32, #graph.dims<"batch", "seq">>, %mask: tensor<?x1x1x?xf32, #graph.dims<"batch", "seq">>, %wq: tensor<64x64xf32>, %g: tensor<64xf32>, %cls: tensor<?x1x64xf32, #graph.dims<"batch">>) {
  // CHECK: graph.layer_norm {{.*}} -> (tensor<?x?x64xf32, #graph.dims<"batch", "seq">>, tensor<?x?x1xf32, #graph.dims<"batch", "seq">>, tensor<?x?x1xf32, #graph.dims<"batch", "seq">>)
  %n, %mean, %rstd = graph.layer_norm %x, %g, %g {axis = 2 : i64, epsilon = 1.0e-05 : f32} : (tensor<?x?x64xf32, #graph.dims<"batch", "seq">>, tensor<64xf32>, tensor<64xf32>) -> (tensor<?x?x64xf32, #graph.dims<"batch", "seq">>, tensor<?x?x1xf32, #graph.dims<"batch", "seq">>, tensor<?x?x1xf32, #graph.dims<"batch", "seq">>)
  // CHECK: graph.matmul {{.*}} -> tensor<?x?x64xf32, #graph.dims<"batch", "seq">>
  %q = graph.matmul %n, %wq : (tensor<?x?x64xf32, #graph.dims<"batch", "seq">>, tensor<64x64xf32>) -> tensor<?x?x64xf32, #graph.dims<"batch", "seq">>
  // CHECK: graph.reshape {{.*}} -> tensor<?x?x4x16xf32, #graph.dims<"batch", "seq">>
  %q4 = graph.reshape %q : (tensor<?x?x64xf32, #graph.dims<"batch", "seq">>) -> tensor<?x?x4x16xf32, #graph.dims<"batch", "seq">>
  // CHECK: graph.transpose {{.*}} -> tensor<?x4x?x16xf32, #graph.dims<"batch", "seq">>
  %qt = graph.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x4x16xf32, #graph.dims<"batch", "seq">>) -> tensor<?x4x?x16xf32, #graph.dims<"batch", "seq">>
  // CHECK: graph.transpose {{.*}} -> tensor<?x4x16x?xf32, #graph.dims<"batch", "seq">>
  %kt = graph.transpose %q4 {perm = array<i64: 0, 2, 3, 1>} : (tensor<?x?x4x16xf32, #graph.dims<"batch", "seq">>) -> tensor<?x4x16x?xf32, #graph.dims<"batch", "seq">>
  // CHECK: graph.matmul {{.*}} -> tensor<?x4x?x?xf32, #graph.dims<"batch", "seq", "seq">>
  %s = graph.matmul %qt, %kt : (tensor<?x4x?x16xf32, #graph.dims<"batch", "seq">>, tensor<?x4x16x?xf32, #graph.dims<"batch", "seq">>) -> tensor<?x4x?x?xf32, #graph.dims<"batch", "seq", "seq">>
  // broadcast: equal symbols are one dim, 1 stretches to a symbol
  // CHECK: graph.add {{.*}} -> tensor<?x4x?x?xf32, #graph.dims<"batch", "seq", "seq">>
  %m = graph.add %s, %mask : (tensor<?x4x?x?xf32, #graph.dims<"batch", "seq", "seq">>, tensor<?x1x1x?xf32, #graph.dims<"batch", "seq">>) -> tensor<?x4x?x?xf32, #graph.dims<"batch", "seq", "seq">>
  // CHECK: graph.softmax {{.*}} -> tensor<?x4x?x?xf32, #graph.dims<"batch", "seq", "seq">>
  %p = graph.softmax %m {axis = 3 : i64} : (tensor<?x4x?x?xf32, #graph.dims<"batch", "seq", "seq">>) -> tensor<?x4x?x?xf32, #graph.dims<"batch", "seq", "seq">>
  // a reduction drops or keeps the symbolic dim
  // CHECK: graph.reduce_mean {{.*}} -> tensor<?x4x?xf32, #graph.dims<"batch", "seq">>
  %r = graph.reduce_mean %p {axes = array<i64: 3>, keepdims = 0 : i64} : (tensor<?x4x?x?xf32, #graph.dims<"batch", "seq", "seq">>) -> tensor<?x4x?xf32, #graph.dims<"batch", "seq">>
  // products: (batch, seq, 64) as (batch * seq, 64)
  // CHECK: graph.reshape {{.*}} -> tensor<?x64xf32, #graph.dims<"batch*seq">>
  %flat = graph.reshape %q : (tensor<?x?x64xf32, #graph.dims<"batch", "seq">>) -> tensor<?x64xf32, #graph.dims<"seq*batch">>
  // sums: concat along seq
  // CHECK: graph.concat {{.*}} -> tensor<?x?x64xf32, #graph.dims<"batch", "2*seq">>
  %c = graph.concat %x, %q {axis = 1 : i64} : (tensor<?x?x64xf32, #graph.dims<"batch", "seq">>, tensor<?x?x64xf32, #graph.dims<"batch", "seq">>) -> tensor<?x?x64xf32, #graph.dims<"batch", "2*seq">>
  // CHECK: graph.concat {{.*}} -> tensor<?x?x64xf32, #graph.dims<"batch", "seq + 1">>
  %c1 = graph.concat %cls, %x {axis = 1 : i64} : (tensor<?x1x64xf32, #graph.dims<"batch">>, tensor<?x?x64xf32, #graph.dims<"batch", "seq">>) -> tensor<?x?x64xf32, #graph.dims<"batch", "seq + 1">>
  func.return
}

// CHECK-LABEL: func.func @slices
func.func @slices(%x: tensor<?x?x64xf32, #graph.dims<"batch", "'sequence length'">>) {
  // On a symbolic axis the bounds are ONNX's: 1 to -1 drops the first and last,
  // 2**63 - 1 runs to the end; a static axis keeps normalized bounds.
  // CHECK: graph.slice {{.*}} -> tensor<?x?x32xf32, #graph.dims<"batch", "'sequence length' - 2">>
  %0 = graph.slice %x {starts = array<i64: 0, 1, 0>, ends = array<i64: 9223372036854775807, -1, 32>, steps = array<i64: 1, 1, 1>} : (tensor<?x?x64xf32, #graph.dims<"batch", "'sequence length'">>) -> tensor<?x?x32xf32, #graph.dims<"batch", "'sequence length' - 2">>
  // every second row: ceil(n / 2) = (n + 1) floordiv 2
  // CHECK: graph.slice {{.*}} -> tensor<?x?x64xf32, #graph.dims<"batch", "('sequence length' + 1) floordiv 2">>
  %1 = graph.slice %x {starts = array<i64: 0, 0, 0>, ends = array<i64: 9223372036854775807, 9223372036854775807, 64>, steps = array<i64: 1, 2, 1>} : (tensor<?x?x64xf32, #graph.dims<"batch", "'sequence length'">>) -> tensor<?x?x64xf32, #graph.dims<"batch", "('sequence length' + 1) floordiv 2">>
  // a constant window of a symbolic axis is static
  // CHECK: graph.slice {{.*}} -> tensor<?x1x64xf32, #graph.dims<"batch">>
  %2 = graph.slice %x {starts = array<i64: 0, 0, 0>, ends = array<i64: 9223372036854775807, 1, 64>, steps = array<i64: 1, 1, 1>} : (tensor<?x?x64xf32, #graph.dims<"batch", "'sequence length'">>) -> tensor<?x1x64xf32, #graph.dims<"batch">>
  // reversed: -1 to INT64_MIN runs from the last row through row 0
  // CHECK: graph.slice {{.*}} -> tensor<?x?x64xf32, #graph.dims<"batch", "'sequence length'">>
  %3 = graph.slice %x {starts = array<i64: 0, -1, 0>, ends = array<i64: 9223372036854775807, -9223372036854775808, 64>, steps = array<i64: 1, -1, 1>} : (tensor<?x?x64xf32, #graph.dims<"batch", "'sequence length'">>) -> tensor<?x?x64xf32, #graph.dims<"batch", "'sequence length'">>
  // static shapes print as ever, with no encoding
  // CHECK: graph.relu {{.*}} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %s = graph.constant dense<0.0> : tensor<2x3xf32>
  %4 = graph.relu %s : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return
}
