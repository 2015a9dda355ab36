// RUN: sed '/^\/\/ ERROR-CASES$/,$d' %s | smelt-opt -p convert-graph-to-loop | filecheck %s
// RUN: sed -n '/^\/\/ ERROR-INT-SIGMOID$/,/^\/\/ END$/p' %s | not smelt-opt -p convert-graph-to-loop 2>&1 | filecheck %s --check-prefix=SIGMOID
// RUN: sed -n '/^\/\/ ERROR-TWO-ANCHORS$/,/^\/\/ END$/p' %s | not smelt-opt -p convert-graph-to-loop 2>&1 | filecheck %s --check-prefix=ANCHORS

// One kernel per op, inputs then outputs; broadcasting reads index 0 of size-1 dims
// (here: the missing leading dim); the last kernel writes the output argument. An
// elementwise kernel of one output is marked loop.elementwise (buffer-plan may
// place its output over an input of its shape that dies there).
// CHECK-LABEL: func.func @add_0(%{{.*}}: memref<2x3xf32>, %{{.*}}: memref<3xf32>, %{{.*}}: memref<2x3xf32>) attributes {loop.kernel, loop.elementwise = 1 : i64} {
// CHECK-NEXT:    loop.for %[[I:.*]] = 0 to 2 step 1 parallel {
// CHECK-NEXT:      loop.for %[[J:.*]] = 0 to 3 step 1 parallel {
// CHECK-NEXT:        %[[A:.*]] = memref.load %{{.*}}[%[[I]], %[[J]]] : memref<2x3xf32>
// CHECK-NEXT:        %[[B:.*]] = memref.load %{{.*}}[%[[J]]] : memref<3xf32>
// CHECK-NEXT:        %[[S:.*]] = arith.addf %[[A]], %[[B]] : f32
// CHECK-NEXT:        memref.store %[[S]]
// CHECK:       func.func @relu_0
// CHECK:         arith.maximumf
// CHECK-LABEL: func.func @broadcast_add_relu(
// CHECK-SAME:    %{{.*}}: memref<2x3xf32>, %{{.*}}: memref<3xf32>, %[[OUT:[^:]*]]: memref<2x3xf32>)
// CHECK-SAME:    attributes {smelt.input_names = ["a", "b"], smelt.output_names = ["y"]} {
// CHECK-NEXT:    %[[T:.*]] = loop.alloc : memref<2x3xf32>
// CHECK-NEXT:    func.call @add_0(%{{.*}}, %{{.*}}, %[[T]])
// CHECK-NEXT:    func.call @relu_0(%[[T]], %[[OUT]])
// CHECK-NEXT:    func.return
func.func @broadcast_add_relu(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> attributes {smelt.input_names = ["a", "b"], smelt.output_names = ["y"]} {
  %s = graph.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %y = graph.relu %s : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %y : tensor<2x3xf32>
}

// Reshape is a view, constants keep their dense value; outputs that are a view, an
// input or a constant are copied into their output arguments.
// CHECK-LABEL: func.func @views_constants_copies(
// CHECK-SAME:    %[[X:[^:]*]]: memref<2x3xf32>, %[[O0:[^:]*]]: memref<6xf32>,
// CHECK-SAME:    %[[O1:[^:]*]]: memref<2x3xf32>, %[[O2:[^:]*]]: memref<2xi32>) {
// CHECK-NEXT:    %[[C:.*]] = loop.constant dense<[7, -1]> : tensor<2xi32> -> memref<2xi32>
// CHECK-NEXT:    %[[V:.*]] = loop.view %[[X]] : memref<2x3xf32> -> memref<6xf32>
// CHECK-NEXT:    func.call @copy_0(%[[V]], %[[O0]])
// CHECK-NEXT:    func.call @copy_1(%[[X]], %[[O1]])
// CHECK-NEXT:    func.call @copy_2(%[[C]], %[[O2]])
func.func @views_constants_copies(%x: tensor<2x3xf32>) -> (tensor<6xf32>, tensor<2x3xf32>, tensor<2xi32>) {
  %c = graph.constant dense<[7, -1]> : tensor<2xi32>
  %r = graph.reshape %x : (tensor<2x3xf32>) -> tensor<6xf32>
  func.return %r, %x, %c : tensor<6xf32>, tensor<2x3xf32>, tensor<2xi32>
}

// A padded conv: a zero-padding copy (clamped index, select), then bias, then
// (ic, kh, kw) reduction loops over contiguous output rows.
// CHECK-LABEL: func.func @conv2d_pad_0(%{{.*}}: memref<1x2x4x4xf32>, %{{.*}}: memref<1x2x6x6xf32>) attributes {loop.kernel} {
// CHECK:         arith.cmpi slt
// CHECK:         arith.select
// CHECK:         memref.load
// CHECK:         arith.select %{{.*}}, %{{.*}}, %{{.*}} : f32
// CHECK-LABEL: func.func @conv2d_0(
// CHECK:         memref.store %{{.*}}, %{{.*}}[{{.*}}] : memref<1x3x4x4xf32>
// CHECK:         loop.for %{{.*}} = 0 to 2 step 1 reduction {
// CHECK-NEXT:      loop.for %{{.*}} = 0 to 3 step 1 reduction {
// CHECK-NEXT:        loop.for %{{.*}} = 0 to 3 step 1 reduction {
// CHECK:               loop.for %{{.*}} = 0 to 4 step 1 parallel {
// CHECK:                 loop.for %{{.*}} = 0 to 4 step 1 parallel {
// CHECK:                   arith.mulf
// CHECK-NEXT:              arith.addf
// CHECK-LABEL: func.func @conv_padded(
// CHECK:         %[[P:.*]] = loop.alloc : memref<1x2x6x6xf32>
// CHECK-NEXT:    func.call @conv2d_pad_0(%{{.*}}, %[[P]])
// CHECK-NEXT:    func.call @conv2d_0(
func.func @conv_padded(%x: tensor<1x2x4x4xf32>) -> tensor<1x3x4x4xf32> {
  %w = graph.constant dense<0.5> : tensor<3x2x3x3xf32>
  %b = graph.constant dense<[0.0, 1.0, 2.0]> : tensor<3xf32>
  %y = graph.conv2d %x, %w, %b {dilations = array<i64: 1, 1>, group = 1 : i64, layout = "nchw", pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<1x2x4x4xf32>, tensor<3x2x3x3xf32>, tensor<3xf32>) -> tensor<1x3x4x4xf32>
  func.return %y : tensor<1x3x4x4xf32>
}

// NHWC conv: an implicit GEMM with the weights packed [kh, kw, ic, o] at compile
// time (a new constant; the OHWI one is gone); fill with the bias, then the band
// batch, m (flattened output pixels, oh = m / OW), k, n accumulating in the output.
// CHECK-LABEL: func.func @conv2d_1(%{{.*}}: memref<1x4x4x2xf32>, %{{.*}}: memref<3xf32>, %{{.*}}: memref<1x1x2x3xf32>, %{{.*}}: memref<1x4x4x3xf32>) attributes {loop.kernel, loop.pattern = "conv2d"} {
// CHECK:         } {loop.role = "n"}
// CHECK:         loop.for %{{.*}} = 0 to 1 step 1 parallel {
// CHECK-NEXT:      loop.for %[[M:.*]] = 0 to 16 step 1 parallel {
// CHECK-NEXT:        loop.for %[[K:.*]] = 0 to 2 step 1 reduction {
// CHECK-NEXT:          loop.for %[[N:.*]] = 0 to 3 step 1 parallel {
// CHECK-NEXT:            %[[OH:.*]] = arith.divui %[[M]], %{{.*}} : index
// CHECK:                 %[[X:.*]] = memref.load %{{.*}}[%{{.*}}, %[[OH]], %{{.*}}, %[[K]]] : memref<1x4x4x2xf32>
// CHECK-NEXT:            %[[W:.*]] = memref.load %{{.*}}[%{{.*}}, %{{.*}}, %[[K]], %[[N]]] : memref<1x1x2x3xf32>
// CHECK-NEXT:            arith.mulf %[[X]], %[[W]] : f32
// CHECK:               } {loop.role = "n"}
// CHECK-NEXT:          loop.yield
// CHECK-NEXT:        } {loop.role = "k"}
// CHECK-NEXT:        loop.yield
// CHECK-NEXT:      } {loop.role = "m"}
// CHECK-LABEL: func.func @conv_nhwc(
// CHECK-NOT:     tensor<3x1x1x2xf32>
// CHECK:         loop.constant dense<{{\[\[\[\[}}1.000000e+00, 3.000000e+00, 5.000000e+00], [2.000000e+00, 4.000000e+00, 6.000000e+00]]]]> : tensor<1x1x2x3xf32>
// CHECK-NEXT:    func.call @conv2d_1(
func.func @conv_nhwc(%x: tensor<1x4x4x2xf32>) -> tensor<1x4x4x3xf32> {
  %w = graph.constant dense<[[[[1.0, 2.0]]], [[[3.0, 4.0]]], [[[5.0, 6.0]]]]> : tensor<3x1x1x2xf32>
  %b = graph.constant dense<[0.0, 1.0, 2.0]> : tensor<3xf32>
  %y = graph.conv2d %x, %w, %b {dilations = array<i64: 1, 1>, group = 1 : i64, layout = "nhwc", pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x4x4x2xf32>, tensor<3x1x1x2xf32>, tensor<3xf32>) -> tensor<1x4x4x3xf32>
  func.return %y : tensor<1x4x4x3xf32>
}

// NHWC f32 depthwise conv (lower_conv_dw: no padding copy; a pixel whose taps
// leave the input clamps them and selects 0; the 3x3 taps unrolled, weights
// [kh, kw, c] read at constant kh, kw; channels innermost) and max pool (window
// loops kh, kw innermost, for loop-schedule to unroll).
// CHECK-LABEL: func.func @conv2d_2(%{{.*}}: memref<1x4x4x2xf32>, %{{.*}}: memref<2xf32>, %{{.*}}: memref<3x3x2xf32>, %{{.*}}: memref<1x4x4x2xf32>) attributes {loop.kernel} {
// CHECK-NOT:       reduction
// CHECK:           loop.for %[[C:.*]] = 0 to 2 step 1 parallel {
// CHECK:             %[[X:.*]] = memref.load %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}, %[[C]]] : memref<1x4x4x2xf32>
// CHECK:             arith.select %{{.*}}, %[[X]], %{{.*}} : f32
// CHECK:             memref.load %{{.*}}[%{{.*}}, %{{.*}}, %[[C]]] : memref<3x3x2xf32>
// CHECK-LABEL: func.func @max_pool_0(
// CHECK-SAME:      attributes {loop.kernel, loop.pattern = "window"}
// CHECK:               loop.for %{{.*}} = 0 to 2 step 1 reduction iter_args
// CHECK-NEXT:            loop.for %{{.*}} = 0 to 2 step 1 reduction iter_args
// CHECK:                   arith.maximumf
// CHECK:                 } {loop.role = "kw"}
// CHECK:               } {loop.role = "kh"}
// CHECK:             } {loop.role = "c"}
// CHECK-LABEL: func.func @depthwise_pool_nhwc(
// CHECK-SAME:      %[[IN:[0-9]+]]: memref<1x4x4x2xf32>
// CHECK-NOT:     conv2d_pad
// CHECK:         %[[W:.*]] = loop.constant dense_resource<__elided__> -> memref<3x3x2xf32>
// CHECK-NEXT:    func.call @conv2d_2(%[[IN]], %{{.*}}, %[[W]], %{{.*}})
func.func @depthwise_pool_nhwc(%x: tensor<1x4x4x2xf32>) -> tensor<1x2x2x2xf32> {
  %w = graph.constant dense<1.0> : tensor<2x3x3x1xf32>
  %b = graph.constant dense<0.0> : tensor<2xf32>
  %y = graph.conv2d %x, %w, %b {dilations = array<i64: 1, 1>, group = 2 : i64, layout = "nhwc", pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<1x4x4x2xf32>, tensor<2x3x3x1xf32>, tensor<2xf32>) -> tensor<1x4x4x2xf32>
  %p = graph.max_pool %y {ceil_mode = 0 : i64, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, layout = "nhwc", pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x4x4x2xf32>) -> tensor<1x2x2x2xf32>
  func.return %p : tensor<1x2x2x2xf32>
}

// matmul: a zero fill nest, then the (i, k, j) band accumulating in the output,
// loops tagged with their roles and the kernel with its pattern.
// CHECK-LABEL: func.func @matmul_0(
// CHECK-SAME:    loop.pattern = "matmul"
// CHECK:         loop.for %{{.*}} = 0 to 3 step 1 parallel {
// CHECK-NEXT:      loop.for %{{.*}} = 0 to 5 step 1 parallel {
// CHECK-NEXT:        memref.store
// CHECK:         } {loop.role = "m"}
// CHECK:         loop.for %[[I:.*]] = 0 to 3 step 1 parallel {
// CHECK-NEXT:      loop.for %[[K:.*]] = 0 to 4 step 1 reduction {
// CHECK-NEXT:        loop.for %[[J:.*]] = 0 to 5 step 1 parallel {
// CHECK-NEXT:          memref.load %{{.*}}[%[[I]], %[[K]]] : memref<3x4xf32>
// CHECK-NEXT:          memref.load %{{.*}}[%[[K]], %[[J]]] : memref<4x5xf32>
// CHECK:             } {loop.role = "n"}
// CHECK-NEXT:        loop.yield
// CHECK-NEXT:      } {loop.role = "k"}
func.func @matmul(%a: tensor<3x4xf32>, %b: tensor<4x5xf32>) -> tensor<3x5xf32> {
  %y = graph.matmul %a, %b : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
  func.return %y : tensor<3x5xf32>
}

// Reductions carry the accumulator in iter_args.
// CHECK-LABEL: func.func @reduce_mean_0(
// CHECK:         %[[SUM:.*]] = loop.for %{{.*}} = 0 to 8 step 1 reduction iter_args(%[[ACC:.*]] = %{{.*}}) -> (f32) {
// CHECK:           %[[NEXT:.*]] = arith.addf %[[ACC]], %{{.*}} : f32
// CHECK-NEXT:      loop.yield %[[NEXT]] : f32
// CHECK:         arith.divf %[[SUM]], %{{.*}} : f32
func.func @reduce_mean(%x: tensor<2x8xf32>) -> tensor<2xf32> {
  %y = graph.reduce_mean %x {axes = array<i64: 1>, keepdims = 0 : i64} : (tensor<2x8xf32>) -> tensor<2xf32>
  func.return %y : tensor<2xf32>
}

// Unsigned element types become signless buffers with unsigned arithmetic; integer
// division never divides by zero.
// CHECK-LABEL: func.func @div_0(%{{.*}}: memref<4xi8>, %{{.*}}: memref<4xi8>, %{{.*}}: memref<4xi8>)
// CHECK:         %[[Z:.*]] = arith.cmpi eq
// CHECK-NEXT:    %[[D:.*]] = arith.select %[[Z]]
// CHECK-NEXT:    arith.divui %{{.*}}, %[[D]] : i8
// CHECK-LABEL: func.func @cast_0(
// CHECK:         arith.uitofp %{{.*}} : i8 to f32
func.func @unsigned(%a: tensor<4xui8>, %b: tensor<4xui8>) -> tensor<4xf32> {
  %q = graph.div %a, %b : (tensor<4xui8>, tensor<4xui8>) -> tensor<4xui8>
  %f = graph.cast %q {to = f32} : (tensor<4xui8>) -> tensor<4xf32>
  func.return %f : tensor<4xf32>
}

// Runtime indices wrap when negative and are clamped into the axis.
// CHECK-LABEL: func.func @gather_0(
// CHECK:         %[[RAW:.*]] = arith.index_cast %{{.*}} : i64 to index
// CHECK:         arith.cmpi slt, %[[RAW]]
// CHECK:         arith.cmpi sgt
// CHECK:         memref.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<5x3xf32>
func.func @gather(%x: tensor<5x3xf32>, %i: tensor<2xi64>) -> tensor<2x3xf32> {
  %y = graph.gather %x, %i {axis = 0 : i64} : (tensor<5x3xf32>, tensor<2xi64>) -> tensor<2x3xf32>
  func.return %y : tensor<2x3xf32>
}

// A fused region is one kernel: the softmax sweeps read through the prologue (mul)
// and write through the epilogue (neg); exp(x - max) waits in the output buffer,
// scaled by 1 / sum in the last sweep.
// CHECK-LABEL: func.func @fused_softmax_0(
// CHECK:         loop.for {{.*}} reduction iter_args
// CHECK:           arith.mulf
// CHECK:           arith.maximumf
// CHECK:         loop.for {{.*}} reduction iter_args
// CHECK:           %[[E:.*]] = math.exp
// CHECK-NEXT:      memref.store %[[E]], %[[OUT:.*]][
// CHECK:         %[[INV:.*]] = arith.divf
// CHECK:         loop.for {{.*}} parallel {
// CHECK:           %[[L:.*]] = memref.load %[[OUT]]
// CHECK-NEXT:      %[[S:.*]] = arith.mulf %[[L]], %[[INV]]
// CHECK-NEXT:      arith.negf %[[S]]
// CHECK-NEXT:      memref.store
// CHECK-LABEL: func.func @fused(
// CHECK-NOT:     loop.alloc
// CHECK:         func.call @fused_softmax_0(
func.func @fused(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %s = graph.constant dense<0.125> : tensor<f32>
  %y = graph.fused %x, %s {kind = "softmax"} : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32> {
  ^bb0(%a: tensor<2x8xf32>, %b: tensor<f32>):
    %0 = graph.mul %a, %b : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
    %1 = graph.softmax %0 {axis = -1 : i64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
    %2 = graph.neg %1 : (tensor<2x8xf32>) -> tensor<2x8xf32>
    graph.yield %2 : tensor<2x8xf32>
  }
  func.return %y : tensor<2x8xf32>
}

// ERROR-CASES

// ERROR-INT-SIGMOID
// SIGMOID: smelt-opt: error: graph.sigmoid on i32 is not supported: it needs a float tensor
func.func @int_sigmoid(%x: tensor<4xi32>) -> tensor<4xi32> {
  %y = graph.sigmoid %x : (tensor<4xi32>) -> tensor<4xi32>
  func.return %y : tensor<4xi32>
}
// END

// ERROR-TWO-ANCHORS
// ANCHORS: smelt-opt: error: graph.fused holds several anchors (graph.matmul, graph.softmax); it needs one
func.func @two_anchors(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>) -> tensor<2x2xf32> {
  %y = graph.fused %a, %b {kind = "matmul"} : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32> {
  ^bb0(%x: tensor<2x3xf32>, %w: tensor<3x2xf32>):
    %0 = graph.matmul %x, %w : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
    %1 = graph.softmax %0 {axis = -1 : i64} : (tensor<2x2xf32>) -> tensor<2x2xf32>
    graph.yield %1 : tensor<2x2xf32>
  }
  func.return %y : tensor<2x2xf32>
}
// END
