// RUN: smelt-opt %s -p 'quant-cast{to=bf16 contractions=true}' | filecheck %s
// RUN: smelt-opt %s -p 'quant-cast{to=f16 contractions=true}' | filecheck %s --check-prefix=F16
// RUN: smelt-opt %s -p 'quant-cast{to=bf16}' | filecheck %s --check-prefix=DEF
// RUN: smelt-opt %s -p 'target-attach-cpu{cpu="znver5" features="-avx512bf16"},quant-cast{to=bf16}' | filecheck %s --check-prefix=DEF
// RUN: smelt-opt %s -p 'target-attach-cpu{cpu="znver5"},quant-cast{to=bf16}' | filecheck %s --check-prefix=BF16CPU
// RUN: smelt-opt %s -p 'target-attach-cpu{cpu="znver5"},quant-cast{to=bf16 contractions=false}' | filecheck %s --check-prefix=DEF

// Weights become bf16 constants, the f32 input is cast down once, every op computes
// on bf16 storage (softmax / layer-norm statistics are f32 registers inside their
// kernels) and the output is cast back to f32: the io types stay f32.
// CHECK-LABEL: func.func @main(%x: tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK-DAG: %[[W:.*]] = graph.constant dense<1.500000e+00> : tensor<4x4xbf16>
// CHECK-DAG: %[[X:.*]] = graph.cast %x {to = bf16} : (tensor<2x4xf32>) -> tensor<2x4xbf16>
// CHECK: %[[Y:.*]] = graph.matmul %[[X]], %[[W]] : (tensor<2x4xbf16>, tensor<4x4xbf16>) -> tensor<2x4xbf16>
// CHECK: %[[S:.*]] = graph.softmax %[[Y]] {axis = -1 : i64} : (tensor<2x4xbf16>) -> tensor<2x4xbf16>
// CHECK: %[[N:.*]], %{{.*}}, %{{.*}} = graph.layer_norm %[[S]], %{{.*}}, %{{.*}} {{.*}} -> (tensor<2x4xbf16>, tensor<2x1xbf16>, tensor<2x1xbf16>)
// CHECK: %[[R:.*]] = graph.cast %[[N]] {to = f32} : (tensor<2x4xbf16>) -> tensor<2x4xf32>
// CHECK: func.return %[[R]] : tensor<2x4xf32>
// By default contractions keep f32 weights and compute where no fast 16-bit GEMM
// exists (no #target.cpu, or one without avx512bf16): the matmul's result is cast
// down for the ops after it. With avx512bf16 a matmul by a constant becomes bf16
// (lower_matmul_bf16.py makes it a vdpbf16ps GEMM call).
// BF16CPU-LABEL: func.func @main(%x: tensor<2x4xf32>) -> tensor<2x4xf32>
// BF16CPU: graph.matmul {{.*}} : (tensor<2x4xbf16>, tensor<4x4xbf16>) -> tensor<2x4xbf16>
// DEF-LABEL: func.func @main(%x: tensor<2x4xf32>) -> tensor<2x4xf32>
// DEF: %[[W:.*]] = graph.constant dense<1.500000e+00> : tensor<4x4xf32>
// DEF: %[[Y:.*]] = graph.matmul %x, %[[W]] : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
// DEF: %[[C:.*]] = graph.cast %[[Y]] {to = bf16}
// DEF: graph.softmax %[[C]] {{.*}} -> tensor<2x4xbf16>
// F16-LABEL: func.func @main(%x: tensor<2x4xf32>) -> tensor<2x4xf32>
// F16: graph.matmul {{.*}} -> tensor<2x4xf16>
// F16: graph.cast %{{.*}} {to = f32} : (tensor<2x4xf16>) -> tensor<2x4xf32>
func.func @main(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %w = graph.constant dense<1.5> : tensor<4x4xf32>
  %g = graph.constant dense<1.0> : tensor<4xf32>
  %b = graph.constant dense<0.0> : tensor<4xf32>
  %y = graph.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %s = graph.softmax %y {axis = -1 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %n, %mean, %inv = graph.layer_norm %s, %g, %b {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
  func.return %n : tensor<2x4xf32>
}

// Integer values are left alone; an f32 value used both by the return and by an
// op is cast back once.
// CHECK-LABEL: func.func @ints
// CHECK: graph.add %{{.*}}, %{{.*}} : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
// CHECK: %[[A:.*]] = graph.relu %{{.*}} : (tensor<3xbf16>) -> tensor<3xbf16>
// CHECK: %[[B:.*]] = graph.neg %[[A]] : (tensor<3xbf16>) -> tensor<3xbf16>
// CHECK-DAG: graph.cast %[[A]] {to = f32}
// CHECK-DAG: graph.cast %[[B]] {to = f32}
// CHECK: func.return
func.func @ints(%i: tensor<3xi64>, %x: tensor<3xf32>) -> (tensor<3xi64>, tensor<3xf32>, tensor<3xf32>) {
  %j = graph.add %i, %i : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  %a = graph.relu %x : (tensor<3xf32>) -> tensor<3xf32>
  %b = graph.neg %a : (tensor<3xf32>) -> tensor<3xf32>
  func.return %j, %a, %b : tensor<3xi64>, tensor<3xf32>, tensor<3xf32>
}
