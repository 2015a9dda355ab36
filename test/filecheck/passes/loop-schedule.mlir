// RUN: smelt-opt -p 'convert-graph-to-loop,loop-schedule' %s | filecheck %s
// RUN: smelt-opt -p 'convert-graph-to-loop,loop-schedule{mr=2 nr=8 kc=2 mc=4 nc=8 l2=64}' %s | filecheck %s --check-prefix=SMALL
// loop-schedule is the plan and its steps, one kind at a time (the presets' form):
// RUN: smelt-opt -p 'convert-graph-to-loop,loop-schedule{mr=2 nr=8 kc=2 mc=4 nc=8 l2=64}' %s > %t.one
// RUN: smelt-opt -p 'convert-graph-to-loop,loop-schedule-plan{mr=2 nr=8 kc=2 mc=4 nc=8 l2=64},loop-schedule-apply{step=tile},loop-schedule-apply{step=interchange},loop-schedule-apply{step=fuse},loop-schedule-apply{step=pack},loop-schedule-apply{step=pack_constant},loop-schedule-apply{step=unroll}' %s > %t.steps
// RUN: diff %t.one %t.steps

// NHWC conv whose input channels fit one kc block: n and m tiled, the window and
// channel loops inside the mr x nr micro-tile, the weights packed at compile time
// in that order (a 1-D constant read at a linear index).
// CHECK-LABEL: func.func @conv2d_0(
// CHECK-SAME:      memref<864xf32>
// CHECK:         loop.for %{{.*}} = 0 to 6 step 6 parallel {
// CHECK:                 memref.load %{{.*}}[%{{.*}}] : memref<864xf32>
// CHECK:               } {loop.role = "n.2"}
// CHECK-NEXT:          loop.yield
// CHECK-NEXT:        } {loop.role = "k"}
// CHECK-NEXT:        loop.yield
// CHECK-NEXT:      } {loop.role = "kw"}
// CHECK-NEXT:      loop.yield
// CHECK-NEXT:    } {loop.role = "kh"}
// CHECK-NEXT:    loop.yield
// CHECK-NEXT:  } {loop.role = "m.2"}
// CHECK-NEXT:  loop.yield
// CHECK-NEXT: } {loop.role = "m.1"}
// CHECK-LABEL: func.func @conv(
// CHECK-NOT:     memref<16x3x3x6xf32>
// CHECK:         loop.constant dense_resource<__elided__> -> memref<864xf32>

// With more channels than kc and a whole-K sliver (3 x 3 x 6 x 8 floats) over
// WHOLE_K_SLIVER x l2 bytes, the window loops and the channel blocks stay
// outside the micro-tile (the reduction keeps its order).
// SMALL-LABEL: func.func @conv2d_0(
// SMALL:         loop.for %{{.*}} = 0 to 3 step 1 reduction {
// SMALL-NEXT:      loop.for %{{.*}} = 0 to 3 step 1 reduction {
// SMALL-NEXT:        loop.for %{{.*}} = 0 to 6 step 2 reduction {
// SMALL-NEXT:          loop.for %{{.*}} = 0 to 8 step 8 parallel {
// SMALL-NEXT:            loop.for %{{.*}} = 0 to 4 step 2 parallel {
// SMALL-NEXT:              loop.for %{{.*}} = 0 to 2 step 1 parallel {
// SMALL-NEXT:                loop.for %{{.*}} = 0 to 2 step 1 reduction {
// SMALL-NEXT:                  loop.for %{{.*}} = 0 to 8 step 1 parallel {
// SMALL:                    } {loop.role = "n.2"}
// SMALL:                  } {loop.role = "k.1"}
// SMALL:                } {loop.role = "m.2"}
// SMALL:              } {loop.role = "m.1"}
// SMALL:            } {loop.role = "n.1"}
// SMALL:          } {loop.role = "k.0"}
// SMALL:        } {loop.role = "kw"}
// SMALL:      } {loop.role = "kh"}
// SMALL:    } {loop.role = "n.0"}
// SMALL:  } {loop.role = "m.0"}
func.func @conv(%x: tensor<1x3x3x6xf32>) -> tensor<1x3x3x16xf32> {
  %w = graph.constant dense<0.5> : tensor<16x3x3x6xf32>
  %b = graph.constant dense<1.0> : tensor<16xf32>
  %y = graph.conv2d %x, %w, %b {dilations = array<i64: 1, 1>, group = 1 : i64, layout = "nhwc", pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<1x3x3x6xf32>, tensor<16x3x3x6xf32>, tensor<16xf32>) -> tensor<1x3x3x16xf32>
  func.return %y : tensor<1x3x3x16xf32>
}

// A pool's small window is unrolled: the channel loop is innermost.
// CHECK-LABEL: func.func @max_pool_0(
// CHECK-NOT:     loop.role = "kw"
// CHECK:         loop.for %{{.*}} = 0 to 8 step 1 parallel {
// CHECK-COUNT-4:   arith.maximumf
// CHECK:         } {loop.role = "c"}
func.func @pool(%x: tensor<1x4x4x8xf32>) -> tensor<1x2x2x8xf32> {
  %p = graph.max_pool %x {ceil_mode = 0 : i64, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, layout = "nhwc", pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x4x4x8xf32>) -> tensor<1x2x2x8xf32>
  func.return %p : tensor<1x2x2x8xf32>
}

// Guard: fewer output channels than vector lanes: the band is left alone.
// CHECK-LABEL: func.func @conv2d_1(
// CHECK:         } {loop.role = "batch"}
// CHECK:         loop.for %{{.*}} = 0 to 9 step 1 parallel {
// CHECK-NEXT:      loop.for %{{.*}} = 0 to 4 step 1 reduction {
// CHECK-NEXT:        loop.for %{{.*}} = 0 to 4 step 1 parallel {
// CHECK:               memref.load %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}] : memref<1x1x4x4xf32>
func.func @narrow(%x: tensor<1x3x3x4xf32>) -> tensor<1x3x3x4xf32> {
  %w = graph.constant dense<0.5> : tensor<4x1x1x4xf32>
  %b = graph.constant dense<1.0> : tensor<4xf32>
  %y = graph.conv2d %x, %w, %b {dilations = array<i64: 1, 1>, group = 1 : i64, layout = "nhwc", pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x3x3x4xf32>, tensor<4x1x1x4xf32>, tensor<4xf32>) -> tensor<1x3x3x4xf32>
  func.return %y : tensor<1x3x3x4xf32>
}

// Three input channels (an RGB input): the channel loop is unrolled inside the
// window loops, after the weights are packed.
// CHECK-LABEL: func.func @conv2d_2(
// CHECK-NOT:     loop.role = "k"
// CHECK:         loop.for %{{.*}} = 0 to 3 step 1 reduction {
// CHECK-NEXT:      loop.for %{{.*}} = 0 to 3 step 1 reduction {
// CHECK-COUNT-3:     memref.load %{{.*}}[%{{.*}}] : memref<432xf32>
// CHECK:           } {loop.role = "kw"}
func.func @rgb(%x: tensor<1x4x4x3xf32>) -> tensor<1x4x4x16xf32> {
  %w = graph.constant dense<0.5> : tensor<16x3x3x3xf32>
  %b = graph.constant dense<1.0> : tensor<16xf32>
  %y = graph.conv2d %x, %w, %b {dilations = array<i64: 1, 1>, group = 1 : i64, layout = "nhwc", pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<1x4x4x3xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<1x4x4x16xf32>
  func.return %y : tensor<1x4x4x16xf32>
}

// A transpose copy: the result's last dim and the dim along the source's last
// dim are tiled, the tile loops outside (both lines of a tile stay in cache).
// CHECK-LABEL: func.func @transpose_0(
// CHECK:         loop.for %{{.*}} = 0 to 32 step 16 parallel {
// CHECK-NEXT:      loop.for %{{.*}} = 0 to 3 step 1 parallel {
// CHECK-NEXT:        loop.for %{{.*}} = 0 to 48 step 16 parallel {
// CHECK-NEXT:          loop.for %{{.*}} = 0 to 16 step 1 parallel {
// CHECK-NEXT:            loop.for %{{.*}} = 0 to 16 step 1 parallel {
// CHECK:                 } {loop.role = "d2.1"}
// CHECK-NEXT:            loop.yield
// CHECK-NEXT:          } {loop.role = "d0.1"}
func.func @transpose(%x: tensor<3x48x32xf32>) -> tensor<32x3x48xf32> {
  %y = graph.transpose %x {perm = array<i64: 2, 0, 1>} : (tensor<3x48x32xf32>) -> tensor<32x3x48xf32>
  func.return %y : tensor<32x3x48xf32>
}
