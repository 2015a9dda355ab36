// RUN: smelt-opt %s -p quant-fold-qdq | filecheck %s

// dequantize → matmul + bias → relu → quantize: an i32 matmul of the uint8 input
// (its zero point folded into the bias with the weight's column sums), the
// requantization in f32 and the relu as max(q, z_y).
// CHECK-LABEL: func.func @matmul_bias_relu
// CHECK-NOT: quant.dequantize
// CHECK: %[[X:.*]] = graph.cast %arg0 {to = i32} : (tensor<2x3xui8>) -> tensor<2x3xi32>
// CHECK: %[[W:.*]] = graph.constant dense<{{\[\[}}1, -2], [3, 4], [-5, 6]]> : tensor<3x2xi32>
// CHECK: %[[M:.*]] = graph.matmul %[[X]], %[[W]]
// CHECK: %[[B:.*]] = graph.constant dense<[4, -18]> : tensor<2xi32>
// CHECK: %[[ACC:.*]] = graph.add %[[M]], %[[B]]
// CHECK: %[[S:.*]] = graph.constant dense<[2.500000e-01, 5.000000e-01]> : tensor<2xf32>
// CHECK: %[[Z:.*]] = graph.constant dense<5> : tensor<ui8>
// CHECK: %[[F:.*]] = graph.cast %[[ACC]] {to = f32}
// CHECK: %[[P:.*]] = graph.mul %[[F]], %[[S]]
// CHECK: %[[ONE:.*]] = graph.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[Q:.*]] = quant.quantize %[[P]], %[[ONE]], %[[Z]]
// CHECK: %[[R:.*]] = graph.max %[[Q]], %[[Z]] : (tensor<2x2xui8>, tensor<ui8>) -> tensor<2x2xui8>
// CHECK: func.return %[[R]]
func.func @matmul_bias_relu(%arg0: tensor<2x3xui8>) -> tensor<2x2xui8> {
  %xs = graph.constant dense<0.5> : tensor<f32>
  %xz = graph.constant dense<2> : tensor<ui8>
  %x = quant.dequantize %arg0, %xs, %xz : (tensor<2x3xui8>, tensor<f32>, tensor<ui8>) -> tensor<2x3xf32>
  %wq = graph.constant dense<[[1, -2], [3, 4], [-5, 6]]> : tensor<3x2xi8>
  %ws = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %wz = graph.constant dense<0> : tensor<2xi8>
  %w = quant.dequantize %wq, %ws, %wz : (tensor<3x2xi8>, tensor<2xf32>, tensor<2xi8>) -> tensor<3x2xf32>
  %m = graph.matmul %x, %w : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
  %b = graph.constant dense<[1.0, -2.0]> : tensor<2xf32>
  %a = graph.add %m, %b : (tensor<2x2xf32>, tensor<2xf32>) -> tensor<2x2xf32>
  %r = graph.relu %a : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %ys = graph.constant dense<2.0> : tensor<f32>
  %yz = graph.constant dense<5> : tensor<ui8>
  %y = quant.quantize %r, %ys, %yz : (tensor<2x2xf32>, tensor<f32>, tensor<ui8>) -> tensor<2x2xui8>
  func.return %y : tensor<2x2xui8>
}

// gemm with trans_b: the weight is transposed to [K, N] at compile time; the
// dequantized int32 bias (scale s_x · s_w) is taken as it is.
// CHECK-LABEL: func.func @gemm_trans_b
// CHECK-NOT: graph.gemm
// CHECK: graph.constant dense<{{\[\[}}1, 3], [2, 4]]> : tensor<2x2xi32>
// CHECK: graph.matmul
// CHECK: graph.constant dense<[7, -9]> : tensor<2xi32>
// CHECK: quant.quantize {{.*}} -> tensor<1x2xi8>
// CHECK-NOT: graph.max
func.func @gemm_trans_b(%arg0: tensor<1x2xi8>) -> tensor<1x2xi8> {
  %xs = graph.constant dense<0.5> : tensor<f32>
  %xz = graph.constant dense<0> : tensor<i8>
  %x = quant.dequantize %arg0, %xs, %xz : (tensor<1x2xi8>, tensor<f32>, tensor<i8>) -> tensor<1x2xf32>
  %wq = graph.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi8>
  %ws = graph.constant dense<0.25> : tensor<f32>
  %wz = graph.constant dense<0> : tensor<i8>
  %w = quant.dequantize %wq, %ws, %wz : (tensor<2x2xi8>, tensor<f32>, tensor<i8>) -> tensor<2x2xf32>
  %bq = graph.constant dense<[7, -9]> : tensor<2xi32>
  %bs = graph.constant dense<0.125> : tensor<f32>
  %bz = graph.constant dense<0> : tensor<i32>
  %b = quant.dequantize %bq, %bs, %bz : (tensor<2xi32>, tensor<f32>, tensor<i32>) -> tensor<2xf32>
  %g = graph.gemm %x, %w, %b {alpha = 1.0 : f32, beta = 1.0 : f32, trans_a = 0 : i64, trans_b = 1 : i64} : (tensor<1x2xf32>, tensor<2x2xf32>, tensor<2xf32>) -> tensor<1x2xf32>
  %ys = graph.constant dense<0.1> : tensor<f32>
  %yz = graph.constant dense<0> : tensor<i8>
  %y = quant.quantize %g, %ys, %yz : (tensor<1x2xf32>, tensor<f32>, tensor<i8>) -> tensor<1x2xi8>
  func.return %y : tensor<1x2xi8>
}

// conv: the input's zero point is subtracted before the i32 conv (padding reads
// the real zero); per-output-channel multipliers shaped [O, 1, 1].
// CHECK-LABEL: func.func @conv
// CHECK: %[[C:.*]] = graph.cast %arg0 {to = i32}
// CHECK: %[[ZX:.*]] = graph.constant dense<3> : tensor<i32>
// CHECK: %[[XS:.*]] = graph.sub %[[C]], %[[ZX]]
// CHECK: graph.conv2d %[[XS]], %{{.*}}, %{{.*}} {{.*}} : (tensor<1x1x3x3xi32>, tensor<2x1x1x1xi32>, tensor<2xi32>) -> tensor<1x2x3x3xi32>
// CHECK: graph.constant dense<{{.*}}> : tensor<2x1x1xf32>
// CHECK: quant.quantize
// CHECK-NOT: graph.conv2d
func.func @conv(%arg0: tensor<1x1x3x3xui8>) -> tensor<1x2x3x3xui8> {
  %xs = graph.constant dense<0.5> : tensor<f32>
  %xz = graph.constant dense<3> : tensor<ui8>
  %x = quant.dequantize %arg0, %xs, %xz : (tensor<1x1x3x3xui8>, tensor<f32>, tensor<ui8>) -> tensor<1x1x3x3xf32>
  %wq = graph.constant dense<[[[[2]]], [[[-3]]]]> : tensor<2x1x1x1xi8>
  %ws = graph.constant dense<[[[[0.5]]], [[[0.25]]]]> : tensor<2x1x1x1xf32>
  %wz = graph.constant dense<0> : tensor<2x1x1x1xi8>
  %w = quant.dequantize %wq, %ws, %wz : (tensor<2x1x1x1xi8>, tensor<2x1x1x1xf32>, tensor<2x1x1x1xi8>) -> tensor<2x1x1x1xf32>
  %b = graph.constant dense<[0.25, 0.5]> : tensor<2xf32>
  %c = graph.conv2d %x, %w, %b {dilations = array<i64: 1, 1>, group = 1 : i64, layout = "nchw", pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x1x3x3xf32>, tensor<2x1x1x1xf32>, tensor<2xf32>) -> tensor<1x2x3x3xf32>
  %ys = graph.constant dense<0.5> : tensor<f32>
  %yz = graph.constant dense<0> : tensor<ui8>
  %y = quant.quantize %c, %ys, %yz : (tensor<1x2x3x3xf32>, tensor<f32>, tensor<ui8>) -> tensor<1x2x3x3xui8>
  func.return %y : tensor<1x2x3x3xui8>
}

// relu, max_pool, reshape and transpose of a dequantized value run on the
// integers; the quantize with the same scale and zero point disappears.
// CHECK-LABEL: func.func @carried
// CHECK-NOT: quant.
// CHECK: %[[R:.*]] = graph.max %arg0, %{{.*}} : (tensor<1x1x4x4xi8>, tensor<i8>) -> tensor<1x1x4x4xi8>
// CHECK: %[[P:.*]] = graph.max_pool %[[R]] {{.*}} -> tensor<1x1x2x2xi8>
// CHECK: %[[S:.*]] = graph.reshape %[[P]] : (tensor<1x1x2x2xi8>) -> tensor<2x2xi8>
// CHECK: %[[T:.*]] = graph.transpose %[[S]] {{.*}} -> tensor<2x2xi8>
// CHECK-NOT: quant.
// CHECK: func.return %[[T]]
func.func @carried(%arg0: tensor<1x1x4x4xi8>) -> tensor<2x2xi8> {
  %s = graph.constant dense<0.5> : tensor<f32>
  %z = graph.constant dense<-4> : tensor<i8>
  %x = quant.dequantize %arg0, %s, %z : (tensor<1x1x4x4xi8>, tensor<f32>, tensor<i8>) -> tensor<1x1x4x4xf32>
  %r = graph.relu %x : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %p = graph.max_pool %r {ceil_mode = 0 : i64, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, layout = "nchw", pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x1x4x4xf32>) -> tensor<1x1x2x2xf32>
  %f = graph.reshape %p : (tensor<1x1x2x2xf32>) -> tensor<2x2xf32>
  %t = graph.transpose %f {perm = array<i64: 1, 0>} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %y = quant.quantize %t, %s, %z : (tensor<2x2xf32>, tensor<f32>, tensor<i8>) -> tensor<2x2xi8>
  func.return %y : tensor<2x2xi8>
}

// concat of dequantizes with the same scale and zero point concatenates integers.
// CHECK-LABEL: func.func @concat
// CHECK: %[[C:.*]] = graph.concat %arg0, %arg1 {axis = 0 : i64} : (tensor<2xui8>, tensor<3xui8>) -> tensor<5xui8>
// CHECK-NOT: quant.
// CHECK: func.return %[[C]]
func.func @concat(%arg0: tensor<2xui8>, %arg1: tensor<3xui8>) -> tensor<5xui8> {
  %s = graph.constant dense<0.5> : tensor<f32>
  %z = graph.constant dense<7> : tensor<ui8>
  %a = quant.dequantize %arg0, %s, %z : (tensor<2xui8>, tensor<f32>, tensor<ui8>) -> tensor<2xf32>
  %b = quant.dequantize %arg1, %s, %z : (tensor<3xui8>, tensor<f32>, tensor<ui8>) -> tensor<3xf32>
  %c = graph.concat %a, %b {axis = 0 : i64} : (tensor<2xf32>, tensor<3xf32>) -> tensor<5xf32>
  %y = quant.quantize %c, %s, %z : (tensor<5xf32>, tensor<f32>, tensor<ui8>) -> tensor<5xui8>
  func.return %y : tensor<5xui8>
}

// Negative cases stay as they are: a weight that is not a constant, an input
// quantized per channel, a concat of different scales, a requantization to
// other parameters (quantize of dequantize with another scale).
// CHECK-LABEL: func.func @unchanged
// CHECK: graph.matmul {{.*}} : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
// CHECK: graph.matmul {{.*}} : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
// CHECK: graph.concat {{.*}} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<4x2xf32>
// CHECK: quant.quantize {{.*}} : (tensor<4x2xf32>, tensor<f32>, tensor<ui8>)
func.func @unchanged(%arg0: tensor<2x3xui8>, %arg1: tensor<3x2xi8>) -> tensor<4x2xui8> {
  %xs = graph.constant dense<0.5> : tensor<f32>
  %xz = graph.constant dense<2> : tensor<ui8>
  %x = quant.dequantize %arg0, %xs, %xz : (tensor<2x3xui8>, tensor<f32>, tensor<ui8>) -> tensor<2x3xf32>
  %wz = graph.constant dense<0> : tensor<i8>
  %w = quant.dequantize %arg1, %xs, %wz : (tensor<3x2xi8>, tensor<f32>, tensor<i8>) -> tensor<3x2xf32>
  %m = graph.matmul %x, %w : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
  %rs = graph.constant dense<[[0.5], [0.25]]> : tensor<2x1xf32>
  %rz = graph.constant dense<0> : tensor<2x1xui8>
  %x2 = quant.dequantize %arg0, %rs, %rz : (tensor<2x3xui8>, tensor<2x1xf32>, tensor<2x1xui8>) -> tensor<2x3xf32>
  %wq = graph.constant dense<1> : tensor<3x2xi8>
  %w2 = quant.dequantize %wq, %xs, %wz : (tensor<3x2xi8>, tensor<f32>, tensor<i8>) -> tensor<3x2xf32>
  %m2 = graph.matmul %x2, %w2 : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
  %ys = graph.constant dense<2.0> : tensor<f32>
  %q1 = quant.quantize %m, %ys, %xz : (tensor<2x2xf32>, tensor<f32>, tensor<ui8>) -> tensor<2x2xui8>
  %q2 = quant.quantize %m2, %ys, %xz : (tensor<2x2xf32>, tensor<f32>, tensor<ui8>) -> tensor<2x2xui8>
  %d1 = quant.dequantize %q1, %ys, %xz : (tensor<2x2xui8>, tensor<f32>, tensor<ui8>) -> tensor<2x2xf32>
  %d2 = quant.dequantize %q2, %xs, %xz : (tensor<2x2xui8>, tensor<f32>, tensor<ui8>) -> tensor<2x2xf32>
  %c = graph.concat %d1, %d2 {axis = 0 : i64} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<4x2xf32>
  %y = quant.quantize %c, %xs, %xz : (tensor<4x2xf32>, tensor<f32>, tensor<ui8>) -> tensor<4x2xui8>
  func.return %y : tensor<4x2xui8>
}

// A matmul of dequantized operands whose result stays float (no quantize after
// it, then a bias add and a float op): the i32 matmul (the input's zero point
// folded into the i32 bias, −z_x·Σ_k w), f32(acc) · s_x·s_w and the bias in
// f32; the int8 weight is not dequantized.
// CHECK-LABEL: func.func @float_result
// CHECK-NOT: quant.dequantize
// CHECK: %[[X:.*]] = graph.cast %arg0 {to = i32}
// CHECK: %[[M:.*]] = graph.matmul %[[X]], %{{.*}} : (tensor<2x3xi32>, tensor<3x2xi32>) -> tensor<2x2xi32>
// CHECK: %[[B:.*]] = graph.constant dense<[2, -16]> : tensor<2xi32>
// CHECK: %[[ACC:.*]] = graph.add %[[M]], %[[B]]
// CHECK: %[[F:.*]] = graph.cast %[[ACC]] {to = f32}
// CHECK: %[[S:.*]] = graph.constant dense<[5.000000e-01, 1.000000e+00]> : tensor<2xf32>
// CHECK: %[[P:.*]] = graph.mul %[[F]], %[[S]]
// CHECK: %[[A:.*]] = graph.constant dense<[1.000000e+00, -2.000000e+00]> : tensor<2xf32>
// CHECK: %[[Y:.*]] = graph.add %[[P]], %[[A]]
// CHECK: graph.tanh %[[Y]]
func.func @float_result(%arg0: tensor<2x3xui8>) -> tensor<2x2xf32> {
  %xs = graph.constant dense<0.5> : tensor<f32>
  %xz = graph.constant dense<2> : tensor<ui8>
  %x = quant.dequantize %arg0, %xs, %xz : (tensor<2x3xui8>, tensor<f32>, tensor<ui8>) -> tensor<2x3xf32>
  %wq = graph.constant dense<[[1, -2], [3, 4], [-5, 6]]> : tensor<3x2xi8>
  %ws = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %wz = graph.constant dense<0> : tensor<2xi8>
  %w = quant.dequantize %wq, %ws, %wz : (tensor<3x2xi8>, tensor<2xf32>, tensor<2xi8>) -> tensor<3x2xf32>
  %m = graph.matmul %x, %w : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
  %b = graph.constant dense<[1.0, -2.0]> : tensor<2xf32>
  %a = graph.add %m, %b : (tensor<2x2xf32>, tensor<2xf32>) -> tensor<2x2xf32>
  %t = graph.tanh %a : (tensor<2x2xf32>) -> tensor<2x2xf32>
  func.return %t : tensor<2x2xf32>
}

// A batch norm on a dequantized value (a QDQ model keeps it after the conv's
// quantize) becomes x · a + c per channel, a and c in f32 shaped [C, 1, 1];
// one on a float value stays (graph-fold-batchnorm's business).
// CHECK-LABEL: func.func @batch_norm
// CHECK: %[[X:.*]] = quant.dequantize %arg0
// CHECK: %[[A:.*]] = graph.constant dense<{{\[\[\[}}2.000000e+00]], {{\[\[}}5.000000e-01]]]> : tensor<2x1x1xf32>
// CHECK: %[[C:.*]] = graph.constant dense<{{\[\[\[}}-1.000000e+00]], {{\[\[}}1.000000e+00]]]> : tensor<2x1x1xf32>
// CHECK: %[[M:.*]] = graph.mul %[[X]], %[[A]]
// CHECK: graph.add %[[M]], %[[C]]
// CHECK: graph.batch_norm %arg1
func.func @batch_norm(%arg0: tensor<1x2x2x2xui8>, %arg1: tensor<1x2x2x2xf32>) -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>) {
  %xs = graph.constant dense<0.5> : tensor<f32>
  %xz = graph.constant dense<2> : tensor<ui8>
  %x = quant.dequantize %arg0, %xs, %xz : (tensor<1x2x2x2xui8>, tensor<f32>, tensor<ui8>) -> tensor<1x2x2x2xf32>
  %sq = graph.constant dense<[4, 1]> : tensor<2xi8>
  %ss = graph.constant dense<0.5> : tensor<f32>
  %sz = graph.constant dense<0> : tensor<i8>
  %s = quant.dequantize %sq, %ss, %sz : (tensor<2xi8>, tensor<f32>, tensor<i8>) -> tensor<2xf32>
  %b = graph.constant dense<[1.0, 0.0]> : tensor<2xf32>
  %m = graph.constant dense<[1.0, -2.0]> : tensor<2xf32>
  %v = graph.constant dense<[1.0, 1.0]> : tensor<2xf32>
  %y = graph.batch_norm %x, %s, %b, %m, %v {epsilon = 0.0 : f32} : (tensor<1x2x2x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32>
  %z = graph.batch_norm %arg1, %s, %b, %m, %v {epsilon = 0.0 : f32} : (tensor<1x2x2x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32>
  func.return %y, %z : tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>
}
