// RUN: smelt-opt %s -p 'target-attach-cpu{cpu="znver4"},quant-fold-qdq,quant-pack-gemm' | filecheck %s
// RUN: smelt-opt %s -p 'quant-fold-qdq,quant-pack-gemm' | filecheck %s --check-prefix=NOGEMM

// The float chain after a requantizing qgemm (its dequantize, a per-column
// affine, HardSwish as mul / add / min / max / mul, the add of a dequantized
// 8-bit residual, the quantize) becomes the qgemm's epilogue program: the
// per-column operands padded to the panel width (32 on vnni512), the residual
// read in 8 bits and dequantized by the program, the steps in graph order.
// CHECK-LABEL: func.func @hardswish_residual
// CHECK-NOT: graph.mul
// CHECK: quant.qgemm %arg0, {{.*}}, %arg1 {variant = "vnni512", k = 3 : i64, n = 2 : i64, relu = 0 : i64, shift_input = 1 : i64, epilogue = "deq y #0x1.0000000000000p-1 3; mul v0 p0; add v1 p1; mul v2 #0x1.5555560000000p-3; add v3 #0x1.0000000000000p-1; min v4 #0x1.0000000000000p+0; max v5 #0x0.0p+0; mul v2 v6; deq p2 #0x1.0000000000000p-2 -1; add v7 v8; quant v9 #0x1.0000000000000p-3 4 i8"}
// CHECK-SAME: tensor<i8>, tensor<32xf32>, tensor<32xf32>, tensor<2x2xi8>) -> tensor<2x2xi8>
// CHECK-NOT: graph.
// CHECK: func.return
// NOGEMM-LABEL: func.func @hardswish_residual
// NOGEMM-NOT: quant.qgemm
func.func @hardswish_residual(%arg0: tensor<2x3xi8>, %arg1: tensor<2x2xi8>) -> tensor<2x2xi8> {
  %xs = graph.constant dense<0.5> : tensor<f32>
  %xz = graph.constant dense<2> : tensor<i8>
  %x = quant.dequantize %arg0, %xs, %xz : (tensor<2x3xi8>, tensor<f32>, tensor<i8>) -> tensor<2x3xf32>
  %wq = graph.constant dense<[[1, -2], [3, 4], [-5, 6]]> : tensor<3x2xi8>
  %ws = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %wz = graph.constant dense<0> : tensor<2xi8>
  %w = quant.dequantize %wq, %ws, %wz : (tensor<3x2xi8>, tensor<2xf32>, tensor<2xi8>) -> tensor<3x2xf32>
  %m = graph.matmul %x, %w : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
  %ms = graph.constant dense<0.5> : tensor<f32>
  %mz = graph.constant dense<3> : tensor<i8>
  %mq = quant.quantize %m, %ms, %mz : (tensor<2x2xf32>, tensor<f32>, tensor<i8>) -> tensor<2x2xi8>
  %md = quant.dequantize %mq, %ms, %mz : (tensor<2x2xi8>, tensor<f32>, tensor<i8>) -> tensor<2x2xf32>
  %g = graph.constant dense<[2.0, 0.5]> : tensor<2xf32>
  %be = graph.constant dense<[1.0, -1.0]> : tensor<2xf32>
  %n0 = graph.mul %md, %g : (tensor<2x2xf32>, tensor<2xf32>) -> tensor<2x2xf32>
  %n = graph.add %n0, %be : (tensor<2x2xf32>, tensor<2xf32>) -> tensor<2x2xf32>
  %sixth = graph.constant dense<0.16666667> : tensor<f32>
  %half = graph.constant dense<0.5> : tensor<f32>
  %one = graph.constant dense<1.0> : tensor<f32>
  %zero = graph.constant dense<0.0> : tensor<f32>
  %h0 = graph.mul %n, %sixth : (tensor<2x2xf32>, tensor<f32>) -> tensor<2x2xf32>
  %h1 = graph.add %h0, %half : (tensor<2x2xf32>, tensor<f32>) -> tensor<2x2xf32>
  %h2 = graph.min %h1, %one : (tensor<2x2xf32>, tensor<f32>) -> tensor<2x2xf32>
  %h3 = graph.max %h2, %zero : (tensor<2x2xf32>, tensor<f32>) -> tensor<2x2xf32>
  %h = graph.mul %n, %h3 : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %rs = graph.constant dense<0.25> : tensor<f32>
  %rz = graph.constant dense<-1> : tensor<i8>
  %r = quant.dequantize %arg1, %rs, %rz : (tensor<2x2xi8>, tensor<f32>, tensor<i8>) -> tensor<2x2xf32>
  %sum = graph.add %h, %r : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %ys = graph.constant dense<0.125> : tensor<f32>
  %yz = graph.constant dense<4> : tensor<i8>
  %y = quant.quantize %sum, %ys, %yz : (tensor<2x2xf32>, tensor<f32>, tensor<i8>) -> tensor<2x2xi8>
  func.return %y : tensor<2x2xi8>
}

// A chain that ends in float (read by a float op, here the function's
// return) becomes a program without a quant step: the qgemm writes f32.
// CHECK-LABEL: func.func @float_end
// CHECK: quant.qgemm {{.*}} epilogue = "deq y #0x1.0000000000000p-1 3; mul v0 #0x1.0000000000000p+1; deq p0 #0x1.0000000000000p-2 -1; add v1 v2"}
// CHECK-SAME: -> tensor<2x2xf32>
// CHECK-NOT: graph.
// CHECK: func.return
func.func @float_end(%arg0: tensor<2x3xi8>, %arg1: tensor<2x2xi8>) -> tensor<2x2xf32> {
  %xs = graph.constant dense<0.5> : tensor<f32>
  %xz = graph.constant dense<2> : tensor<i8>
  %x = quant.dequantize %arg0, %xs, %xz : (tensor<2x3xi8>, tensor<f32>, tensor<i8>) -> tensor<2x3xf32>
  %wq = graph.constant dense<[[1, -2], [3, 4], [-5, 6]]> : tensor<3x2xi8>
  %ws = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %wz = graph.constant dense<0> : tensor<2xi8>
  %w = quant.dequantize %wq, %ws, %wz : (tensor<3x2xi8>, tensor<2xf32>, tensor<2xi8>) -> tensor<3x2xf32>
  %m = graph.matmul %x, %w : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
  %ms = graph.constant dense<0.5> : tensor<f32>
  %mz = graph.constant dense<3> : tensor<i8>
  %mq = quant.quantize %m, %ms, %mz : (tensor<2x2xf32>, tensor<f32>, tensor<i8>) -> tensor<2x2xi8>
  %md = quant.dequantize %mq, %ms, %mz : (tensor<2x2xi8>, tensor<f32>, tensor<i8>) -> tensor<2x2xf32>
  %two = graph.constant dense<2.0> : tensor<f32>
  %s = graph.mul %md, %two : (tensor<2x2xf32>, tensor<f32>) -> tensor<2x2xf32>
  %rs = graph.constant dense<0.25> : tensor<f32>
  %rz = graph.constant dense<-1> : tensor<i8>
  %r = quant.dequantize %arg1, %rs, %rz : (tensor<2x2xi8>, tensor<f32>, tensor<i8>) -> tensor<2x2xf32>
  %sum = graph.add %s, %r : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  func.return %sum : tensor<2x2xf32>
}
