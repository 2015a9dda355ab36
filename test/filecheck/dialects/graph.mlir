// RUN: smelt-opt %s | smelt-opt | filecheck %s
// RUN: smelt-opt %s --print-op-generic | smelt-opt | filecheck %s

// CHECK-LABEL: func.func @mlp
func.func @mlp(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  // CHECK: %{{.*}} = graph.matmul %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %0 = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  // CHECK-NEXT: graph.add {{.*}} : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %1 = graph.add %0, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  // CHECK-NEXT: graph.relu
  %2 = graph.relu %1 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  func.return %2 : tensor<4x16xf32>
}

// CHECK-LABEL: func.func @conv
func.func @conv(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<4xf32>) -> tensor<1x4x4x4xf32> {
  // CHECK: graph.conv2d {{.*}} {dilations = array<i64: 1, 1>, group = 1 : i64, layout = "nchw", pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>}
  %0 = graph.conv2d %x, %w, %b {dilations = array<i64: 1, 1>, group = 1 : i64, layout = "nchw", pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<1x4x4x4xf32>
  // CHECK: graph.max_pool {{.*}} -> tensor<1x4x2x2xf32>
  %1 = graph.max_pool %0 {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = 0 : i64, layout = "nchw"} : (tensor<1x4x4x4xf32>) -> tensor<1x4x2x2xf32>
  // CHECK: graph.global_average_pool {{.*}} -> tensor<1x4x1x1xf32>
  %2 = graph.global_average_pool %1 {layout = "nchw"} : (tensor<1x4x2x2xf32>) -> tensor<1x4x1x1xf32>
  // CHECK: graph.reshape {{.*}} -> tensor<1x4xf32>
  %3 = graph.reshape %2 : (tensor<1x4x1x1xf32>) -> tensor<1x4xf32>
  // CHECK: graph.bitcast {{.*}}to = i32{{.*}} -> tensor<1x4xi32>
  %4 = graph.bitcast %3 {to = i32} : (tensor<1x4xf32>) -> tensor<1x4xi32>
  func.return %0 : tensor<1x4x4x4xf32>
}

// CHECK-LABEL: func.func @data
func.func @data(%x: tensor<2x6xf32>, %i: tensor<3xi64>) -> tensor<6x2xf32> {
  // CHECK: graph.split {{.*}} -> (tensor<2x2xf32>, tensor<2x4xf32>)
  %a, %b = graph.split %x {axis = 1 : i64, sizes = array<i64: 2, 4>} : (tensor<2x6xf32>) -> (tensor<2x2xf32>, tensor<2x4xf32>)
  // CHECK: graph.concat {{.*}} -> tensor<2x6xf32>
  %c = graph.concat %b, %a {axis = 1 : i64} : (tensor<2x4xf32>, tensor<2x2xf32>) -> tensor<2x6xf32>
  // CHECK: graph.transpose {{.*}} -> tensor<6x2xf32>
  %t = graph.transpose %c {perm = array<i64: 1, 0>} : (tensor<2x6xf32>) -> tensor<6x2xf32>
  // CHECK: graph.gather {{.*}} -> tensor<2x3xf32>
  %g = graph.gather %x, %i {axis = 1 : i64} : (tensor<2x6xf32>, tensor<3xi64>) -> tensor<2x3xf32>
  // CHECK: graph.slice {{.*}} -> tensor<1x3xf32>
  %s = graph.slice %x {starts = array<i64: 1, 5>, ends = array<i64: 2, -1>, steps = array<i64: 1, -2>} : (tensor<2x6xf32>) -> tensor<1x3xf32>
  // CHECK: graph.less {{.*}} -> tensor<2x6xi1>
  %l = graph.less %x, %c : (tensor<2x6xf32>, tensor<2x6xf32>) -> tensor<2x6xi1>
  // CHECK: graph.where {{.*}} -> tensor<2x6xf32>
  %w = graph.where %l, %x, %c : (tensor<2x6xi1>, tensor<2x6xf32>, tensor<2x6xf32>) -> tensor<2x6xf32>
  // CHECK: graph.constant dense<[1, 2]> : tensor<2xi64>
  %k = graph.constant dense<[1, 2]> : tensor<2xi64>
  func.return %t : tensor<6x2xf32>
}

// CHECK-LABEL: func.func @pools_nd
func.func @pools_nd(%x: tensor<1x2x5x6x7xf32>, %y: tensor<1x1x5x5xf32>) -> tensor<1x1x2x2xi64> {
  // CHECK: graph.max_pool {{.*}} -> tensor<1x2x3x3x3xf32>
  %0 = graph.max_pool %x {kernel_shape = array<i64: 2, 2, 3>, strides = array<i64: 2, 2, 2>, pads = array<i64: 0, 0, 0, 1, 0, 0>, dilations = array<i64: 1, 1, 1>, ceil_mode = 1 : i64, layout = "nchw"} : (tensor<1x2x5x6x7xf32>) -> tensor<1x2x3x3x3xf32>
  // CHECK: graph.average_pool {{.*}} -> tensor<1x2x4x5x6xf32>
  %1 = graph.average_pool %x {kernel_shape = array<i64: 2, 2, 2>, strides = array<i64: 1, 1, 1>, pads = array<i64: 0, 0, 0, 0, 0, 0>, dilations = array<i64: 1, 1, 1>, ceil_mode = 0 : i64, count_include_pad = 0 : i64, layout = "nchw"} : (tensor<1x2x5x6x7xf32>) -> tensor<1x2x4x5x6xf32>
  // CHECK: graph.max_pool_with_indices {{.*}}storage_order = 1 : i64{{.*}} -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>)
  %2, %3 = graph.max_pool_with_indices %y {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = 0 : i64, layout = "nchw", storage_order = 1 : i64} : (tensor<1x1x5x5xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>)
  func.return %3 : tensor<1x1x2x2xi64>
}
