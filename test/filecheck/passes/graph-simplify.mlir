// RUN: smelt-opt %s -p graph-simplify | filecheck %s

// CHECK-LABEL: func.func @identities
// CHECK-NEXT: %{{.*}} = graph.relu %arg0
// CHECK-NEXT: func.return
func.func @identities(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.identity %arg0 : (tensor<4xf32>) -> tensor<4xf32>
  %1 = graph.dropout %0 : (tensor<4xf32>) -> tensor<4xf32>
  %2 = graph.relu %1 : (tensor<4xf32>) -> tensor<4xf32>
  func.return %2 : tensor<4xf32>
}

// CHECK-LABEL: func.func @cse_dce
// CHECK-NEXT: %[[E:.*]] = graph.exp %arg0
// CHECK-NEXT: %[[S:.*]] = graph.add %[[E]], %[[E]]
// CHECK-NEXT: func.return %[[S]]
func.func @cse_dce(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.exp %arg0 : (tensor<4xf32>) -> tensor<4xf32>
  %1 = graph.exp %arg0 : (tensor<4xf32>) -> tensor<4xf32>
  %dead = graph.tanh %arg0 : (tensor<4xf32>) -> tensor<4xf32>
  %2 = graph.add %0, %1 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %2 : tensor<4xf32>
}

// CHECK-LABEL: func.func @reshapes
// CHECK-NEXT: %[[R:.*]] = graph.reshape %arg0 : (tensor<2x6xf32>) -> tensor<3x4xf32>
// CHECK-NEXT: func.return %[[R]]
func.func @reshapes(%arg0: tensor<2x6xf32>) -> tensor<3x4xf32> {
  %0 = graph.reshape %arg0 : (tensor<2x6xf32>) -> tensor<12xf32>
  %1 = graph.reshape %0 : (tensor<12xf32>) -> tensor<3x4xf32>
  %2 = graph.reshape %1 : (tensor<3x4xf32>) -> tensor<3x4xf32>
  func.return %2 : tensor<3x4xf32>
}

// CHECK-LABEL: func.func @transposes
// CHECK-NEXT: %[[T:.*]] = graph.transpose %arg0 {perm = array<i64: 2, 0, 1>}
// CHECK-NEXT: func.return %arg0, %[[T]]
func.func @transposes(%arg0: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<4x2x3xf32>) {
  %0 = graph.transpose %arg0 {perm = array<i64: 1, 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  %1 = graph.transpose %0 {perm = array<i64: 1, 0, 2>} : (tensor<3x2x4xf32>) -> tensor<2x3x4xf32>
  %2 = graph.transpose %0 {perm = array<i64: 2, 1, 0>} : (tensor<3x2x4xf32>) -> tensor<4x2x3xf32>
  func.return %1, %2 : tensor<2x3x4xf32>, tensor<4x2x3xf32>
}

// Negative: a real reshape and a real transpose stay.
// CHECK-LABEL: func.func @keep
// CHECK-NEXT: graph.reshape
// CHECK-NEXT: graph.transpose
func.func @keep(%arg0: tensor<2x6xf32>) -> tensor<4x3xf32> {
  %0 = graph.reshape %arg0 : (tensor<2x6xf32>) -> tensor<3x4xf32>
  %1 = graph.transpose %0 {perm = array<i64: 1, 0>} : (tensor<3x4xf32>) -> tensor<4x3xf32>
  func.return %1 : tensor<4x3xf32>
}

// A channel shuffle in NHWC (to NCHW, split C, swap, merge, back to NHWC): three
// transposes become one, between two reshapes.
// CHECK-LABEL: func.func @channel_shuffle
// CHECK-NEXT:    %[[A:.*]] = graph.reshape %x : (tensor<1x5x5x12xf32>) -> tensor<5x5x4x3xf32>
// CHECK-NEXT:    %[[B:.*]] = graph.transpose %[[A]] {perm = array<i64: 0, 1, 3, 2>} : (tensor<5x5x4x3xf32>) -> tensor<5x5x3x4xf32>
// CHECK-NEXT:    %[[C:.*]] = graph.reshape %[[B]] : (tensor<5x5x3x4xf32>) -> tensor<1x5x5x12xf32>
// CHECK-NEXT:    func.return %[[C]]
func.func @channel_shuffle(%x: tensor<1x5x5x12xf32>) -> tensor<1x5x5x12xf32> {
  %a = graph.transpose %x {perm = array<i64: 0, 3, 1, 2>} : (tensor<1x5x5x12xf32>) -> tensor<1x12x5x5xf32>
  %b = graph.reshape %a : (tensor<1x12x5x5xf32>) -> tensor<1x4x3x5x5xf32>
  %c = graph.transpose %b {perm = array<i64: 0, 2, 1, 3, 4>} : (tensor<1x4x3x5x5xf32>) -> tensor<1x3x4x5x5xf32>
  %d = graph.reshape %c : (tensor<1x3x4x5x5xf32>) -> tensor<1x12x5x5xf32>
  %e = graph.transpose %d {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x12x5x5xf32>) -> tensor<1x5x5x12xf32>
  func.return %e : tensor<1x5x5x12xf32>
}

// A reshape that cuts a swapped dim (3 split as 2 x 1.5) is not a regrouping of
// factors: the chain stays.
// CHECK-LABEL: func.func @not_a_regrouping
// CHECK-COUNT-2: graph.transpose
func.func @not_a_regrouping(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %a = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %b = graph.reshape %a : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %c = graph.transpose %b {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return %c : tensor<3x2xf32>
}

// Small integer powers of floats become products; other exponents, integer
// bases and broadcasting powers stay.
// CHECK-LABEL: func.func @powers
// CHECK:      %[[SQ:.*]] = graph.mul %arg0, %arg0
// CHECK-NEXT: %[[CU:.*]] = graph.mul %[[SQ]], %arg0
// CHECK-NEXT: %[[H:.*]] = graph.pow %arg0
// CHECK-NEXT: %[[I:.*]] = graph.pow %arg1
// CHECK-NEXT: %[[B:.*]] = graph.pow %arg0
// CHECK-NEXT: func.return %[[SQ]], %[[CU]], %arg0, %[[H]], %[[I]], %[[B]]
func.func @powers(%arg0: tensor<4xf32>, %arg1: tensor<4xi32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xi32>, tensor<2x4xf32>) {
  %two = graph.constant dense<2.0> : tensor<f32>
  %three = graph.constant dense<3.0> : tensor<1xf32>
  %one = graph.constant dense<1.0> : tensor<f32>
  %half = graph.constant dense<0.5> : tensor<f32>
  %itwo = graph.constant dense<2> : tensor<i32>
  %wide = graph.constant dense<2.0> : tensor<2x4xf32>
  %0 = graph.pow %arg0, %two : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %1 = graph.pow %arg0, %three : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
  %2 = graph.pow %arg0, %one : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %3 = graph.pow %arg0, %half : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %4 = graph.pow %arg1, %itwo : (tensor<4xi32>, tensor<i32>) -> tensor<4xi32>
  %5 = graph.pow %arg0, %wide : (tensor<4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  func.return %0, %1, %2, %3, %4, %5 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xi32>, tensor<2x4xf32>
}
