// RUN: smelt-opt %s | smelt-opt | filecheck %s
// RUN: smelt-opt %s --print-op-generic | smelt-opt | filecheck %s

// CHECK-LABEL: func.func @types
// CHECK-SAME: tensor<4x!quant.uniform<i8:f32, 0.0125:-3>>
// CHECK-SAME: tensor<2x3x!quant.uniform<u8:f32:1, {0.1:0, 2.5e-06:5, 1.0:255}>>
// CHECK-SAME: tensor<2x!quant.uniform<i16:bf16, 0.5:0>>
// CHECK-SAME: tensor<!quant.uniform<u16:f16, 1.0e+20:65535>>
func.func @types(%a: tensor<4x!quant.uniform<i8:f32, 0.0125:-3>>,
                 %b: tensor<2x3x!quant.uniform<u8:f32:1, {0.1:0, 2.5e-06:5, 1:255}>>,
                 %c: tensor<2x!quant.uniform<i16:bf16, 0.5>>,
                 %d: tensor<!quant.uniform<u16:f16, 1.0e20:65535>>) {
  func.return
}

// CHECK-LABEL: func.func @qdq
func.func @qdq(%x: tensor<2x3xf32>, %s: tensor<3xf32>, %z: tensor<3xi8>) -> tensor<2x3xf32> {
  // CHECK: quant.quantize %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<3xf32>, tensor<3xi8>) -> tensor<2x3xi8>
  %q = quant.quantize %x, %s, %z : (tensor<2x3xf32>, tensor<3xf32>, tensor<3xi8>) -> tensor<2x3xi8>
  // CHECK-NEXT: quant.dequantize {{.*}} -> tensor<2x3xf32>
  %d = quant.dequantize %q, %s, %z : (tensor<2x3xi8>, tensor<3xf32>, tensor<3xi8>) -> tensor<2x3xf32>
  func.return %d : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @requantize
func.func @requantize(%acc: tensor<4x5xi32>, %m: tensor<f32>, %z: tensor<ui8>) -> tensor<4x5xui8> {
  // CHECK: quant.requantize {{.*}} : (tensor<4x5xi32>, tensor<f32>, tensor<ui8>) -> tensor<4x5xui8>
  %r = quant.requantize %acc, %m, %z : (tensor<4x5xi32>, tensor<f32>, tensor<ui8>) -> tensor<4x5xui8>
  func.return %r : tensor<4x5xui8>
}

// CHECK-LABEL: func.func @qgemm_epilogues
func.func @qgemm_epilogues(%x: tensor<3x5xui8>, %w: tensor<1x2x32x4xi8>, %b: tensor<32xi32>, %m: tensor<32xf32>, %z: tensor<ui8>, %a: tensor<32xf32>, %s: tensor<2xf32>, %zo: tensor<i8>) -> (tensor<3x7xi8>, tensor<3x7xf32>) {
  // CHECK: quant.qgemm {{.*}} epilogue = "affine_requantize"{{.*}} -> tensor<3x7xi8>
  %y = quant.qgemm %x, %w, %b, %m, %z, %a, %m, %s, %zo {variant = "vnni512", k = 5 : i64, n = 7 : i64, epilogue = "affine_requantize"} : (tensor<3x5xui8>, tensor<1x2x32x4xi8>, tensor<32xi32>, tensor<32xf32>, tensor<ui8>, tensor<32xf32>, tensor<32xf32>, tensor<2xf32>, tensor<i8>) -> tensor<3x7xi8>
  // CHECK: quant.qgemm {{.*}} epilogue = "dequantize"{{.*}} -> tensor<3x7xf32>
  %f = quant.qgemm %x, %w, %b, %m, %z, %a {variant = "vnni512", k = 5 : i64, n = 7 : i64, epilogue = "dequantize"} : (tensor<3x5xui8>, tensor<1x2x32x4xi8>, tensor<32xi32>, tensor<32xf32>, tensor<ui8>, tensor<32xf32>) -> tensor<3x7xf32>
  func.return %y, %f : tensor<3x7xi8>, tensor<3x7xf32>
}

// CHECK-LABEL: func.func @im2col
func.func @im2col(%x: tensor<1x7x7x2xui8>) -> tensor<1x3x3x18xui8> {
  // CHECK: quant.im2col %{{.*}} {kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>} : (tensor<1x7x7x2xui8>) -> tensor<1x3x3x18xui8>
  %r = quant.im2col %x {kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>} : (tensor<1x7x7x2xui8>) -> tensor<1x3x3x18xui8>
  func.return %r : tensor<1x3x3x18xui8>
}
