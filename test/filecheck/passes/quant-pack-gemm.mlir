// RUN: smelt-opt %s -p 'target-attach-cpu{cpu="x86-64-v3"},quant-fold-qdq,quant-pack-gemm' | filecheck %s --check-prefix=AVX2
// RUN: smelt-opt %s -p 'target-attach-cpu{cpu="znver4"},quant-fold-qdq,quant-pack-gemm' | filecheck %s --check-prefix=VNNI
// RUN: smelt-opt %s -p 'target-attach-cpu{cpu="x86-64"},quant-fold-qdq,quant-pack-gemm' | filecheck %s --check-prefix=SSE
// RUN: smelt-opt %s -p 'quant-fold-qdq,quant-pack-gemm' | filecheck %s --check-prefix=SSE

// quant-fold-qdq's i32 matmul + requantize + relu chain becomes one quant.qgemm.
// On AVX2 without dot instructions it takes vpmaddwd (weights widened to i16
// pairs, N padded to 16, the s8 input read as it is); on AVX-512 with vnni it takes
// vpdpbusd (4 s8 weights per lane, N padded to 32, the s8 input shifted to u8 and
// the shift's correction in the bias). Without AVX2 or a target the chain stays.
// AVX2-LABEL: func.func @matmul_relu
// AVX2: %[[W:.*]] = graph.constant {{.*}} : tensor<1x2x16x2xi16>
// AVX2: %[[B:.*]] = graph.constant dense<[4, -18, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]> : tensor<16xi32>
// AVX2: %[[M:.*]] = graph.constant {{.*}} : tensor<16xf32>
// AVX2: %[[Z:.*]] = graph.constant dense<5> : tensor<i8>
// AVX2: quant.qgemm %arg0, %[[W]], %[[B]], %[[M]], %[[Z]] {variant = "pmaddwd256", k = 3 : i64, n = 2 : i64, relu = 1 : i64, shift_input = 0 : i64}
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
