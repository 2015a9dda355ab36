// RUN: smelt-opt -p 'convert-graph-to-loop,loop-schedule-plan{mr=2 nr=8 kc=8 mc=4 nc=16}' %s | filecheck %s

// A matmul gets its plan (tile n, k, m; the BLIS order; fuse; pack B then A) as
// `loop.schedule`, and no loop is rewritten yet.
// CHECK-LABEL: func.func @matmul_0(
// CHECK-SAME:    loop.pattern = "matmul", loop.schedule = [
// CHECK-SAME:    {kind = "tile", role = "n", sizes = array<i64: 8, 8>},
// CHECK-SAME:    {kind = "tile", role = "k", sizes = array<i64: 8>},
// CHECK-SAME:    {kind = "tile", role = "m", sizes = array<i64: 4, 2>},
// CHECK-SAME:    {kind = "interchange", order = ["n.0", "k.0", "m.0", "n.1", "m.1", "m.2", "k.1", "n.2"]},
// CHECK-SAME:    {kind = "fuse"},
// CHECK-SAME:    {kind = "pack", role = "k.0", operand = 1 : i64},
// CHECK-SAME:    {kind = "pack", role = "m.0", operand = 0 : i64}]
// CHECK:         loop.for %{{.*}} = 0 to 20 step 1 reduction {
// CHECK:         } {loop.role = "k"}
func.func @mm(%a: tensor<12x20xf32>, %b: tensor<20x24xf32>) -> tensor<12x24xf32> {
  %y = graph.matmul %a, %b : (tensor<12x20xf32>, tensor<20x24xf32>) -> tensor<12x24xf32>
  func.return %y : tensor<12x24xf32>
}

// With a constant B: its packing at compile time (the kernel argument of B).
// CHECK-LABEL: func.func @matmul_1(
// CHECK-SAME:    {kind = "interchange", order = ["m.0", "n.0", "k.0", "n.1", "m.1", "m.2", "k.1", "n.2"]}
// CHECK-SAME:    {kind = "pack_constant", operand = 1 : i64}]
func.func @weights(%a: tensor<12x20xf32>) -> tensor<12x24xf32> {
  %b = graph.constant dense<0.5> : tensor<20x24xf32>
  %y = graph.matmul %a, %b : (tensor<12x20xf32>, tensor<20x24xf32>) -> tensor<12x24xf32>
  func.return %y : tensor<12x24xf32>
}

// Guard: fewer columns than vector lanes: no plan.
// CHECK-LABEL: func.func @matmul_2(
// CHECK-NOT:     loop.schedule
// CHECK:         func.return
func.func @narrow(%a: tensor<12x20xf32>, %b: tensor<20x3xf32>) -> tensor<12x3xf32> {
  %y = graph.matmul %a, %b : (tensor<12x20xf32>, tensor<20x3xf32>) -> tensor<12x3xf32>
  func.return %y : tensor<12x3xf32>
}

// Guard: a kernel without a pattern: no plan.
// CHECK-LABEL: func.func @relu_0(
// CHECK-NOT:     loop.schedule
// CHECK:         func.return
func.func @relu(%x: tensor<12x24xf32>) -> tensor<12x24xf32> {
  %y = graph.relu %x : (tensor<12x24xf32>) -> tensor<12x24xf32>
  func.return %y : tensor<12x24xf32>
}
