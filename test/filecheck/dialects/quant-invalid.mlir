// RUN: smelt-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func private @f(tensor<4x!quant.uniform<i8:f32, 0.1:200>>)
// CHECK: zero point 200 is outside the storage range [-128, 127]

// -----

func.func private @f(tensor<4x!quant.uniform<u8:f32, -0.5:0>>)
// CHECK: quantized scale must be positive and finite: -0.5

// -----

func.func private @f(tensor<4x!quant.uniform<i8:f64, 0.5:0>>)
// CHECK: quantized expressed type must be f32, f16 or bf16, not f64

// -----

func.func private @f(tensor<4x!quant.uniform<u8:f32:-1, {0.5:0}>>)
// CHECK: quantized dimension must be >= 0: -1

// -----

func.func private @f(tensor<4x!quant.uniform<u8:f32:0, {0.5:0, 0.25:300}>>)
// CHECK: zero point 300 is outside the storage range [0, 255]

// -----

func.func @f(%x: tensor<3xf32>, %s: tensor<2x3xf32>, %z: tensor<i8>) {
  %q = quant.quantize %x, %s, %z : (tensor<3xf32>, tensor<2x3xf32>, tensor<i8>) -> tensor<3xi8>
  func.return
}
// CHECK: scale of shape [2, 3] does not broadcast to [3]

// -----

func.func @f(%x: tensor<4xf32>, %s: tensor<f32>, %z: tensor<i64>) {
  %q = quant.quantize %x, %s, %z : (tensor<4xf32>, tensor<f32>, tensor<i64>) -> tensor<4xi64>
  func.return
}
// CHECK: quantized storage must be one of i8, u8, i16, u16, i32: i64

// -----

func.func @f(%q: tensor<4xi8>, %s: tensor<f32>, %z: tensor<ui8>) {
  %x = quant.dequantize %q, %s, %z : (tensor<4xi8>, tensor<f32>, tensor<ui8>) -> tensor<4xf32>
  func.return
}
// CHECK: the zero point's type ui8 differs from the input's i8

// -----

func.func @f(%a: tensor<4xi8>, %m: tensor<f32>, %z: tensor<i8>) {
  %r = quant.requantize %a, %m, %z : (tensor<4xi8>, tensor<f32>, tensor<i8>) -> tensor<4xi8>
  func.return
}
// CHECK: requantize expects an i32 accumulator


// -----

func.func @f(%x: tensor<3x5xui8>, %w: tensor<1x2x32x4xi8>, %b: tensor<32xi32>, %m: tensor<32xf32>, %z: tensor<ui8>) {
  %y = quant.qgemm %x, %w, %b, %m, %z {variant = "vnni512", k = 5 : i64, n = 7 : i64, epilogue = "dequantize"} : (tensor<3x5xui8>, tensor<1x2x32x4xi8>, tensor<32xi32>, tensor<32xf32>, tensor<ui8>) -> tensor<3x7xf32>
  func.return
}
// CHECK: a qgemm with epilogue dequantize takes 6 operands

// -----

func.func @f(%x: tensor<1x7x7x2xf32>) {
  %r = quant.im2col %x {kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>} : (tensor<1x7x7x2xf32>) -> tensor<1x3x3x18xf32>
  func.return
}
// CHECK: im2col takes an NHWC tensor of 8-bit integers
