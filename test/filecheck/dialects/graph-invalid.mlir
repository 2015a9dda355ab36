// RUN: smelt-opt %s --split-input-file --verify-diagnostics | filecheck %s

%0 = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
%1 = graph.relu %0 : (tensor<2xf32>) -> tensor<3xf32>
// CHECK: graph.relu: result types ['tensor<3xf32>'] do not match the inferred ['tensor<2xf32>']

// -----

%0 = graph.constant dense<0.0> : tensor<2x3xf32>
%1 = graph.constant dense<0.0> : tensor<4xf32>
%2 = graph.add %0, %1 : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
// CHECK: do not broadcast

// -----

%0 = graph.constant dense<0.0> : tensor<2x3xf32>
%1 = graph.constant dense<0.0> : tensor<4x5xf32>
%2 = graph.matmul %0, %1 : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
// CHECK: matmul contraction dims differ

// -----

%0 = graph.constant dense<0.0> : tensor<2x3xf32>
%1 = graph.transpose %0 {perm = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK: is not a permutation

// -----

%0 = graph.constant dense<0.0> : tensor<2x3xf32>
%1 = graph.reshape %0 : (tensor<2x3xf32>) -> tensor<5xf32>
// CHECK: cannot reshape

// -----

%0 = graph.constant dense<0.0> : tensor<2x3xf32>
%1 = graph.bitcast %0 {to = i64} : (tensor<2x3xf32>) -> tensor<2x3xi64>
// CHECK: cannot bitcast f32 to i64: widths differ

// -----

%0 = graph.constant dense<0.0> : tensor<1x3x8x8xf32>
%1 = graph.constant dense<0.0> : tensor<4x2x3x3xf32>
%2 = graph.constant dense<0.0> : tensor<4xf32>
%3 = graph.conv2d %0, %1, %2 {dilations = array<i64: 1, 1>, group = 1 : i64, layout = "nchw", pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>, tensor<4x2x3x3xf32>, tensor<4xf32>) -> tensor<1x4x6x6xf32>
// CHECK: conv2d shapes
