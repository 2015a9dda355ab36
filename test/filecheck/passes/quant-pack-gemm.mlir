// RUN: smelt-opt %s -p 'target-attach-cpu{cpu="x86-64-v3"},quant-fold-qdq,quant-pack-gemm' | filecheck %s --check-prefix=AVX2
// RUN: smelt-opt %s -p 'target-attach-cpu{cpu="znver4"},quant-fold-qdq,quant-pack-gemm' | filecheck %s --check-prefix=VNNI
// RUN: smelt-opt %s -p 'target-attach-cpu{cpu="x86-64"},quant-fold-qdq,quant-pack-gemm' | filecheck %s --check-prefix=SSE
// RUN: smelt-opt %s -p 'quant-fold-qdq,quant-pack-gemm' | filecheck %s --check-prefix=SSE
// RUN: smelt-opt %s -p 'target-attach-cpu{cpu="znver4"},quant-fold-qdq,graph-convert-layout{layout=nhwc},graph-simplify,quant-pack-gemm' | filecheck %s --check-prefix=CONV

// quant-fold-qdq's i32 matmul + requantize + relu chain becomes one quant.qgemm.
// On AVX-512 with vnni it takes vpdpbusd (4 s8 weights per lane, N padded to 32,
// the s8 input shifted to u8 and the shift's correction, -128 * sum_k w, in the
// bias). On AVX2 without dot instructions, weights whose k pairs cannot saturate
// vpmaddubsw's i16 sums (|w0| + |w1| <= 128, as here) take it (the same packing
// and shift, N padded to 16); others take vpmaddwd (weights widened to i16 pairs,
// the s8 input read as it is: @matmul_full_range). Without AVX2 or a target the
// chain stays.
// AVX2-LABEL: func.func @matmul_relu
// AVX2: %[[W:.*]] = graph.constant {{.*}} : tensor<1x1x16x4xi8>
// AVX2: %[[B:.*]] = graph.constant dense<[132, -1042, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]> : tensor<16xi32>
// AVX2: %[[M:.*]] = graph.constant {{.*}} : tensor<16xf32>
// AVX2: %[[Z:.*]] = graph.constant dense<5> : tensor<i8>
// AVX2: quant.qgemm %arg0, %[[W]], %[[B]], %[[M]], %[[Z]] {variant = "maddubs256", k = 3 : i64, n = 2 : i64, relu = 1 : i64, shift_input = 1 : i64}
// AVX2-SAME: -> tensor<2x2xi8>
// AVX2-NOT: graph.matmul
// VNNI-LABEL: func.func @matmul_relu
// VNNI: quant.qgemm {{.*}} {variant = "vnni512", k = 3 : i64, n = 2 : i64, relu = 1 : i64, shift_input = 1 : i64}
// VNNI-SAME: (tensor<2x3xi8>, tensor<1x1x32x4xi8>, tensor<32xi32>, tensor<32xf32>, tensor<i8>) -> tensor<2x2xi8>
// SSE-LABEL: func.func @matmul_relu
// SSE-NOT: quant.qgemm
// SSE: graph.matmul {{.*}} : (tensor<2x3xi32>, tensor<3x2xi32>) -> tensor<2x2xi32>
func.func @matmul_relu(%arg0: tensor<2x3xi8>) -> tensor<2x2xi8> {
  %xs = graph.constant dense<0.5> : tensor<f32>
  %xz = graph.constant dense<2> : tensor<i8>
  %x = quant.dequantize %arg0, %xs, %xz : (tensor<2x3xi8>, tensor<f32>, tensor<i8>) -> tensor<2x3xf32>
  %wq = graph.constant dense<[[1, -2], [3, 4], [-5, 6]]> : tensor<3x2xi8>
  %ws = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %wz = graph.constant dense<0> : tensor<2xi8>
  %w = quant.dequantize %wq, %ws, %wz : (tensor<3x2xi8>, tensor<2xf32>, tensor<2xi8>) -> tensor<3x2xf32>
  %m = graph.matmul %x, %w : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
  %b = graph.constant dense<[1.0, -2.0]> : tensor<2xf32>
  %a = graph.add %m, %b : (tensor<2x2xf32>, tensor<2xf32>) -> tensor<2x2xf32>
  %r = graph.relu %a : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %ys = graph.constant dense<2.0> : tensor<f32>
  %yz = graph.constant dense<5> : tensor<i8>
  %y = quant.quantize %r, %ys, %yz : (tensor<2x2xf32>, tensor<f32>, tensor<i8>) -> tensor<2x2xi8>
  func.return %y : tensor<2x2xi8>
}

// AVX2-LABEL: func.func @matmul_full_range
// AVX2: %[[W:.*]] = graph.constant {{.*}} : tensor<1x2x16x2xi16>
// AVX2: %[[B:.*]] = graph.constant dense<0> : tensor<16xi32>
// AVX2: quant.qgemm %arg0, %[[W]], %[[B]], {{.*}} {variant = "pmaddwd256", k = 3 : i64, n = 2 : i64, relu = 0 : i64, shift_input = 0 : i64}
// VNNI-LABEL: func.func @matmul_full_range
// VNNI: quant.qgemm {{.*}} {variant = "vnni512"
func.func @matmul_full_range(%arg0: tensor<2x3xi8>) -> tensor<2x2xi8> {
  %xs = graph.constant dense<0.5> : tensor<f32>
  %xz = graph.constant dense<0> : tensor<i8>
  %x = quant.dequantize %arg0, %xs, %xz : (tensor<2x3xi8>, tensor<f32>, tensor<i8>) -> tensor<2x3xf32>
  %wq = graph.constant dense<[[127, -128], [100, 3], [-5, 6]]> : tensor<3x2xi8>
  %ws = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %wz = graph.constant dense<0> : tensor<2xi8>
  %w = quant.dequantize %wq, %ws, %wz : (tensor<3x2xi8>, tensor<2xf32>, tensor<2xi8>) -> tensor<3x2xf32>
  %m = graph.matmul %x, %w : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
  %ys = graph.constant dense<2.0> : tensor<f32>
  %yz = graph.constant dense<0> : tensor<i8>
  %y = quant.quantize %m, %ys, %yz : (tensor<2x2xf32>, tensor<f32>, tensor<i8>) -> tensor<2x2xi8>
  func.return %y : tensor<2x2xi8>
}

// onnxruntime's bias pattern: the matmul is quantized, then dequantized, a
// dequantized bias added, and quantized again. The bias add and the second
// requantization join the qgemm (affine_requantize): addend = the bias in f32
// padded to N_p, the scale (ones), [s_mid, s_out], the output zero point; the
// relu before the last quantize becomes post_relu.
// VNNI-LABEL: func.func @bias_add
// VNNI-NOT: quant.dequantize
// VNNI: graph.constant dense<100> : tensor<ui8>
// VNNI-NEXT: %[[A:[0-9]+]] = graph.constant {{.*}} : tensor<32xf32>
// VNNI-NEXT: %[[O:[0-9]+]] = graph.constant {{.*}} : tensor<32xf32>
// VNNI-NEXT: %[[S:[0-9]+]] = graph.constant dense<[2.000000e+00, 5.000000e-01]> : tensor<2xf32>
// VNNI-NEXT: %[[Z:[0-9]+]] = graph.constant dense<7> : tensor<ui8>
// VNNI: quant.qgemm %arg0, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[A]], %[[O]], %[[S]], %[[Z]] {variant = "vnni512", k = 3 : i64, n = 2 : i64, relu = 0 : i64, shift_input = 0 : i64, epilogue = "affine_requantize", post_relu = 1 : i64}
// VNNI-SAME: -> tensor<2x2xui8>
// VNNI-NOT: quant.
// SSE-LABEL: func.func @bias_add
// SSE: graph.add {{.*}} : (tensor<2x2xf32>, tensor<2xf32>) -> tensor<2x2xf32>
func.func @bias_add(%arg0: tensor<2x3xui8>) -> tensor<2x2xui8> {
  %xs = graph.constant dense<0.5> : tensor<f32>
  %xz = graph.constant dense<2> : tensor<ui8>
  %x = quant.dequantize %arg0, %xs, %xz : (tensor<2x3xui8>, tensor<f32>, tensor<ui8>) -> tensor<2x3xf32>
  %wq = graph.constant dense<[[1, -2], [3, 4], [-5, 6]]> : tensor<3x2xi8>
  %ws = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %wz = graph.constant dense<0> : tensor<2xi8>
  %w = quant.dequantize %wq, %ws, %wz : (tensor<3x2xi8>, tensor<2xf32>, tensor<2xi8>) -> tensor<3x2xf32>
  %m = graph.matmul %x, %w : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
  %hs = graph.constant dense<2.0> : tensor<f32>
  %hz = graph.constant dense<100> : tensor<ui8>
  %h = quant.quantize %m, %hs, %hz : (tensor<2x2xf32>, tensor<f32>, tensor<ui8>) -> tensor<2x2xui8>
  %hd = quant.dequantize %h, %hs, %hz : (tensor<2x2xui8>, tensor<f32>, tensor<ui8>) -> tensor<2x2xf32>
  %bq = graph.constant dense<[130, 126]> : tensor<2xui8>
  %bs = graph.constant dense<0.5> : tensor<f32>
  %bz = graph.constant dense<128> : tensor<ui8>
  %b = quant.dequantize %bq, %bs, %bz : (tensor<2xui8>, tensor<f32>, tensor<ui8>) -> tensor<2xf32>
  %a = graph.add %hd, %b : (tensor<2x2xf32>, tensor<2xf32>) -> tensor<2x2xf32>
  %r = graph.relu %a : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %ys = graph.constant dense<0.5> : tensor<f32>
  %yz = graph.constant dense<7> : tensor<ui8>
  %y = quant.quantize %r, %ys, %yz : (tensor<2x2xf32>, tensor<f32>, tensor<ui8>) -> tensor<2x2xui8>
  func.return %y : tensor<2x2xui8>
}

// A float result (no quantize after the matmul): the dequantize epilogue, the
// bias as the f32 addend; the zero point operand is a placeholder.
// VNNI-LABEL: func.func @float_result
// VNNI: quant.qgemm {{.*}} {variant = "vnni512", k = 3 : i64, n = 2 : i64, relu = 0 : i64, shift_input = 0 : i64, epilogue = "dequantize"}
// VNNI-SAME: -> tensor<2x2xf32>
// VNNI-NEXT: graph.tanh
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

// Negative: a bias that is not a constant (an argument) keeps the add in float.
// VNNI-LABEL: func.func @bias_not_constant
// VNNI: quant.qgemm {{.*}} -> tensor<2x2xui8>
// VNNI-NOT: epilogue
// VNNI: quant.dequantize
// VNNI: graph.add
func.func @bias_not_constant(%arg0: tensor<2x3xui8>, %b: tensor<2xf32>) -> tensor<2x2xui8> {
  %xs = graph.constant dense<0.5> : tensor<f32>
  %xz = graph.constant dense<2> : tensor<ui8>
  %x = quant.dequantize %arg0, %xs, %xz : (tensor<2x3xui8>, tensor<f32>, tensor<ui8>) -> tensor<2x3xf32>
  %wq = graph.constant dense<[[1, -2], [3, 4], [-5, 6]]> : tensor<3x2xi8>
  %ws = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %wz = graph.constant dense<0> : tensor<2xi8>
  %w = quant.dequantize %wq, %ws, %wz : (tensor<3x2xi8>, tensor<2xf32>, tensor<2xi8>) -> tensor<3x2xf32>
  %m = graph.matmul %x, %w : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
  %hs = graph.constant dense<2.0> : tensor<f32>
  %hz = graph.constant dense<100> : tensor<ui8>
  %h = quant.quantize %m, %hs, %hz : (tensor<2x2xf32>, tensor<f32>, tensor<ui8>) -> tensor<2x2xui8>
  %hd = quant.dequantize %h, %hs, %hz : (tensor<2x2xui8>, tensor<f32>, tensor<ui8>) -> tensor<2x2xf32>
  %a = graph.add %hd, %b : (tensor<2x2xf32>, tensor<2xf32>) -> tensor<2x2xf32>
  %ys = graph.constant dense<0.5> : tensor<f32>
  %yz = graph.constant dense<7> : tensor<ui8>
  %y = quant.quantize %a, %ys, %yz : (tensor<2x2xf32>, tensor<f32>, tensor<ui8>) -> tensor<2x2xui8>
  func.return %y : tensor<2x2xui8>
}

// An NHWC conv (quant-fold-qdq's i32 conv after graph-convert-layout): the u8
// input transposed to NHWC, padded with its zero point 3 (the real zero),
// gathered by im2col (3×3, stride 2: K = 3·3·2 = 18 columns), one qgemm by the
// weights [18, 4]; the batch norm after the quantize joins the epilogue.
// CONV-LABEL: func.func @conv_bn
// CONV: %[[T:.*]] = graph.transpose %arg0 {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x2x5x5xui8>) -> tensor<1x5x5x2xui8>
// CONV: %[[Z:.*]] = graph.constant dense<3> : tensor<ui8>
// CONV: %[[P:.*]] = graph.pad %[[T]], %[[Z]] {pads = array<i64: 0, 1, 1, 0, 0, 1, 1, 0>, mode = "constant"} : (tensor<1x5x5x2xui8>, tensor<ui8>) -> tensor<1x7x7x2xui8>
// CONV: %[[R:.*]] = quant.im2col %[[P]] {kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>} : (tensor<1x7x7x2xui8>) -> tensor<1x3x3x18xui8>
// CONV: quant.qgemm %[[R]], {{.*}} {variant = "vnni512", k = 18 : i64, n = 4 : i64, {{.*}}epilogue = "affine_requantize"{{.*}} -> tensor<1x3x3x4xui8>
// CONV-NOT: graph.conv2d
// CONV-NOT: graph.batch_norm
// CONV: graph.transpose {{.*}} -> tensor<1x4x3x3xui8>
func.func @conv_bn(%arg0: tensor<1x2x5x5xui8>) -> tensor<1x4x3x3xui8> {
  %xs = graph.constant dense<0.5> : tensor<f32>
  %xz = graph.constant dense<3> : tensor<ui8>
  %x = quant.dequantize %arg0, %xs, %xz : (tensor<1x2x5x5xui8>, tensor<f32>, tensor<ui8>) -> tensor<1x2x5x5xf32>
  %wq = graph.constant dense<1> : tensor<4x2x3x3xi8>
  %ws = graph.constant dense<[[[[0.5]]], [[[0.25]]], [[[1.0]]], [[[2.0]]]]> : tensor<4x1x1x1xf32>
  %wz = graph.constant dense<0> : tensor<4x1x1x1xi8>
  %w = quant.dequantize %wq, %ws, %wz : (tensor<4x2x3x3xi8>, tensor<4x1x1x1xf32>, tensor<4x1x1x1xi8>) -> tensor<4x2x3x3xf32>
  %b = graph.constant dense<0.0> : tensor<4xf32>
  %c = graph.conv2d %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64, layout = "nchw"} : (tensor<1x2x5x5xf32>, tensor<4x2x3x3xf32>, tensor<4xf32>) -> tensor<1x4x3x3xf32>
  %hs = graph.constant dense<2.0> : tensor<f32>
  %hz = graph.constant dense<100> : tensor<ui8>
  %h = quant.quantize %c, %hs, %hz : (tensor<1x4x3x3xf32>, tensor<f32>, tensor<ui8>) -> tensor<1x4x3x3xui8>
  %hd = quant.dequantize %h, %hs, %hz : (tensor<1x4x3x3xui8>, tensor<f32>, tensor<ui8>) -> tensor<1x4x3x3xf32>
  %s = graph.constant dense<[1.0, 2.0, 0.5, 1.0]> : tensor<4xf32>
  %bb = graph.constant dense<[0.0, 1.0, -1.0, 0.5]> : tensor<4xf32>
  %m = graph.constant dense<0.0> : tensor<4xf32>
  %v = graph.constant dense<1.0> : tensor<4xf32>
  %n = graph.batch_norm %hd, %s, %bb, %m, %v {epsilon = 0.0 : f32} : (tensor<1x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x3x3xf32>
  %ys = graph.constant dense<0.5> : tensor<f32>
  %yz = graph.constant dense<7> : tensor<ui8>
  %y = quant.quantize %n, %ys, %yz : (tensor<1x4x3x3xf32>, tensor<f32>, tensor<ui8>) -> tensor<1x4x3x3xui8>
  func.return %y : tensor<1x4x3x3xui8>
}

// A depthwise conv (group = C in = C out) has no qgemm form: a quant.dwconv, the
// weight [KH, KW, C], z_x = 3 folded into the bias (0 - 3 * 1), no pad (pads 0).
// CONV-LABEL: func.func @depthwise_conv
// CONV-DAG: graph.constant dense<1> : tensor<1x1x2xi32>
// CONV-DAG: graph.constant dense<-3> : tensor<2xi32>
// CONV: quant.dwconv {{.*}}kernel_shape = array<i64: 1, 1>{{.*}}relu = 0 : i64{{.*}} -> tensor<1x2x2x2xui8>
// CONV-NOT: graph.conv2d
// CONV-NOT: quant.qgemm
func.func @depthwise_conv(%arg0: tensor<1x2x2x2xui8>) -> tensor<1x2x2x2xui8> {
  %xs = graph.constant dense<0.5> : tensor<f32>
  %xz = graph.constant dense<3> : tensor<ui8>
  %x = quant.dequantize %arg0, %xs, %xz : (tensor<1x2x2x2xui8>, tensor<f32>, tensor<ui8>) -> tensor<1x2x2x2xf32>
  %wq = graph.constant dense<1> : tensor<2x1x1x1xi8>
  %ws = graph.constant dense<0.5> : tensor<f32>
  %wz = graph.constant dense<0> : tensor<i8>
  %w = quant.dequantize %wq, %ws, %wz : (tensor<2x1x1x1xi8>, tensor<f32>, tensor<i8>) -> tensor<2x1x1x1xf32>
  %b = graph.constant dense<0.0> : tensor<2xf32>
  %c = graph.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 2 : i64, layout = "nchw"} : (tensor<1x2x2x2xf32>, tensor<2x1x1x1xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32>
  %ys = graph.constant dense<0.5> : tensor<f32>
  %yz = graph.constant dense<7> : tensor<ui8>
  %y = quant.quantize %c, %ys, %yz : (tensor<1x2x2x2xf32>, tensor<f32>, tensor<ui8>) -> tensor<1x2x2x2xui8>
  func.return %y : tensor<1x2x2x2xui8>
}

// A grouped conv that is not depthwise (2 groups of 2 channels): quant-fold-qdq
// splits its 8-bit input per group (quant_grouped), each group a qgemm, the
// 8-bit results concatenated; no conv stays.
// CONV-LABEL: func.func @grouped_conv
// CONV: graph.split %arg0 {axis = 1 : i64, sizes = array<i64: 2, 2>}
// CONV: quant.qgemm {{.*}} k = 2 : i64, n = 2 : i64
// CONV: quant.qgemm {{.*}} k = 2 : i64, n = 2 : i64
// CONV: graph.concat {{.*}} -> tensor<1x2x2x4xui8>
// CONV-NOT: graph.conv2d
// CONV: func.return
func.func @grouped_conv(%arg0: tensor<1x4x2x2xui8>) -> tensor<1x4x2x2xui8> {
  %xs = graph.constant dense<0.5> : tensor<f32>
  %xz = graph.constant dense<3> : tensor<ui8>
  %x = quant.dequantize %arg0, %xs, %xz : (tensor<1x4x2x2xui8>, tensor<f32>, tensor<ui8>) -> tensor<1x4x2x2xf32>
  %wq = graph.constant dense<1> : tensor<4x2x1x1xi8>
  %ws = graph.constant dense<0.5> : tensor<f32>
  %wz = graph.constant dense<0> : tensor<i8>
  %w = quant.dequantize %wq, %ws, %wz : (tensor<4x2x1x1xi8>, tensor<f32>, tensor<i8>) -> tensor<4x2x1x1xf32>
  %b = graph.constant dense<0.0> : tensor<4xf32>
  %c = graph.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 2 : i64, layout = "nchw"} : (tensor<1x4x2x2xf32>, tensor<4x2x1x1xf32>, tensor<4xf32>) -> tensor<1x4x2x2xf32>
  %ys = graph.constant dense<0.5> : tensor<f32>
  %yz = graph.constant dense<7> : tensor<ui8>
  %y = quant.quantize %c, %ys, %yz : (tensor<1x4x2x2xf32>, tensor<f32>, tensor<ui8>) -> tensor<1x4x2x2xui8>
  func.return %y : tensor<1x4x2x2xui8>
}
