// RUN: smelt-opt %s -p graph-fuse | filecheck %s
// RUN: smelt-opt %s -p 'graph-fuse{epilogue=false elementwise=false reductions=false}' | filecheck %s --check-prefix=OFF

// Conv with bias add, residual add and relu: one kernel.
// CHECK-LABEL: func.func @conv_epilogue
// CHECK: %[[F:.*]] = graph.fused %arg0, %{{.*}}, %{{.*}}, %arg1 {kind = "conv2d"}
// CHECK-NEXT: ^{{.*}}(%[[X:.*]]: tensor<1x2x4x4xf32>, %{{.*}}: tensor<2x2x1x1xf32>, %{{.*}}: tensor<2xf32>, %[[R:.*]]: tensor<1x2x4x4xf32>):
// CHECK-NEXT: %[[C:.*]] = graph.conv2d %[[X]]
// CHECK-NEXT: %[[A:.*]] = graph.add %[[C]], %[[R]]
// CHECK-NEXT: %[[Y:.*]] = graph.relu %[[A]]
// CHECK-NEXT: graph.yield %[[Y]]
// CHECK: func.return %[[F]]
// OFF-LABEL: func.func @conv_epilogue
// OFF: graph.fused {{.*}} {kind = "conv2d"}
// OFF-NEXT: ^
// OFF-NEXT: graph.conv2d
// OFF-NEXT: graph.yield
// OFF-NEXT: }
// OFF-NEXT: graph.add
// OFF-NEXT: graph.relu
func.func @conv_epilogue(%arg0: tensor<1x2x4x4xf32>, %arg1: tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32> {
  %w = graph.constant dense<1.0> : tensor<2x2x1x1xf32>
  %b = graph.constant dense<[0.0, 1.0]> : tensor<2xf32>
  %c = graph.conv2d %arg0, %w, %b {dilations = array<i64: 1, 1>, group = 1 : i64, layout = "nchw", pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %a = graph.add %c, %arg1 : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %y = graph.relu %a : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  func.return %y : tensor<1x2x4x4xf32>
}

// A value used twice inside the group joins it (gelu's x * phi(x) shape).
// CHECK-LABEL: func.func @chain
// CHECK: graph.fused %arg0 {kind = "elementwise"}
// CHECK: graph.neg
// CHECK-NEXT: graph.exp
// CHECK-NEXT: graph.mul
// CHECK-NEXT: graph.tanh
// CHECK-NEXT: graph.yield
func.func @chain(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = graph.neg %arg0 : (tensor<8xf32>) -> tensor<8xf32>
  %1 = graph.exp %0 : (tensor<8xf32>) -> tensor<8xf32>
  %2 = graph.mul %1, %1 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %3 = graph.tanh %2 : (tensor<8xf32>) -> tensor<8xf32>
  func.return %3 : tensor<8xf32>
}

// An epilogue value used twice inside: matmul + bias + gelu is one kernel.
// CHECK-LABEL: func.func @gelu_epilogue
// CHECK: graph.fused %arg0, %arg1, %{{.*}} {kind = "matmul"}
// CHECK: graph.matmul
// CHECK-NEXT: graph.add
// CHECK-NEXT: graph.mul
// CHECK-NEXT: graph.erf
// CHECK-NEXT: graph.add
// CHECK-NEXT: graph.mul
// CHECK-NEXT: graph.yield
func.func @gelu_epilogue(%arg0: tensor<4x8xf32>, %arg1: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %b = graph.constant dense<0.5> : tensor<8xf32>
  %s = graph.constant dense<0.7> : tensor<f32>
  %one = graph.constant dense<1.0> : tensor<f32>
  %0 = graph.matmul %arg0, %arg1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %1 = graph.add %0, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %2 = graph.mul %1, %s : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %3 = graph.erf %2 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = graph.add %3, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %5 = graph.mul %1, %4 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %5 : tensor<4x8xf32>
}

// A value also used outside ends the chain there: the exp is its kernel's output.
// CHECK-LABEL: func.func @used_outside
// CHECK: %[[E:.*]] = graph.fused %arg0 {kind = "elementwise"}
// CHECK: graph.neg
// CHECK-NEXT: graph.exp
// CHECK-NEXT: graph.yield
// CHECK: graph.fused %[[E]] {kind = "matmul"}
// CHECK: graph.matmul
// CHECK-NEXT: graph.add
// CHECK-NEXT: graph.yield
func.func @used_outside(%arg0: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = graph.neg %arg0 : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %1 = graph.exp %0 : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %2 = graph.matmul %1, %1 : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %3 = graph.add %1, %2 : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  func.return %3 : tensor<8x8xf32>
}

// Softmax takes its scale prologue (attention scores * 1/sqrt(d)).
// CHECK-LABEL: func.func @softmax_prologue
// CHECK: graph.fused %arg0, %{{.*}} {kind = "softmax"}
// CHECK: graph.mul
// CHECK-NEXT: graph.softmax
// CHECK-NEXT: graph.yield
// OFF-LABEL: func.func @softmax_prologue
// OFF-NOT: graph.fused
func.func @softmax_prologue(%arg0: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %s = graph.constant dense<0.125> : tensor<f32>
  %0 = graph.mul %arg0, %s : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %1 = graph.softmax %0 {axis = -1 : i64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %1 : tensor<2x8xf32>
}

// A broadcasting add would change the tip's shape: not an epilogue.
// CHECK-LABEL: func.func @no_broadcast_growth
// OFF-LABEL: func.func @no_broadcast_growth
// CHECK: graph.fused {{.*}} {kind = "matmul"}
// CHECK-NEXT: ^
// CHECK-NEXT: graph.matmul
// CHECK-NEXT: graph.yield
// CHECK: graph.add
func.func @no_broadcast_growth(%arg0: tensor<1x4xf32>, %arg1: tensor<4x1xf32>, %arg2: tensor<3x1xf32>) -> tensor<3x1xf32> {
  %0 = graph.matmul %arg0, %arg1 : (tensor<1x4xf32>, tensor<4x1xf32>) -> tensor<1x1xf32>
  %1 = graph.add %0, %arg2 : (tensor<1x1xf32>, tensor<3x1xf32>) -> tensor<3x1xf32>
  func.return %1 : tensor<3x1xf32>
}

// A graph.loop body is fused inside its region; the loop itself is left alone.
// CHECK-LABEL: func.func @loop_body
// CHECK: graph.loop %arg0, %arg1 {trip_count = 100 : i64, carried = 1 : i64}
// CHECK-NEXT: ^{{.*}}(%{{.*}}: tensor<i64>, %[[S:.*]]: tensor<4xf32>, %[[V:.*]]: tensor<4xf32>):
// CHECK-NEXT: %[[F:.*]] = graph.fused %[[S]], %[[V]] {kind = "elementwise"}
// CHECK: graph.add
// CHECK-NEXT: graph.tanh
// CHECK-NEXT: graph.yield
// CHECK: graph.yield %[[F]], %[[F]]
// OFF-LABEL: func.func @loop_body
// OFF: graph.loop
// OFF-NOT: graph.fused
// OFF: func.return
func.func @loop_body(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>, tensor<100x4xf32>) {
  %r, %s = graph.loop %arg0, %arg1 {trip_count = 100 : i64, carried = 1 : i64} : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<100x4xf32>) {
  ^bb0(%i: tensor<i64>, %x: tensor<4xf32>, %v: tensor<4xf32>):
    %a = graph.add %x, %v : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %t = graph.tanh %a : (tensor<4xf32>) -> tensor<4xf32>
    graph.yield %t, %t : tensor<4xf32>, tensor<4xf32>
  }
  func.return %r, %s : tensor<4xf32>, tensor<100x4xf32>
}
