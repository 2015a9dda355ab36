// RUN: smelt-opt %s -p graph-fold-batchnorm,graph-simplify,graph-fuse --print-ir-after-all 2>&1 >/dev/null | filecheck %s --check-prefix=ALL
// RUN: smelt-opt %s -p graph-simplify,graph-fuse --print-ir-before=graph-fuse --print-ir-after graph-simplify 2>&1 >/dev/null | filecheck %s --check-prefix=NAMED
// RUN: smelt-opt %s -p graph-fold-batchnorm,graph-simplify,graph-simplify,graph-fuse --print-ir-after-change 2>&1 >/dev/null | filecheck %s --check-prefix=CHANGE
// RUN: rm -rf %t && smelt-opt %s -p graph-simplify,graph-fuse --dump-dir %t >/dev/null && ls %t | filecheck %s --check-prefix=DIR
// RUN: smelt-opt %s -p graph-simplify,graph-fuse --time-passes --pass-statistics 2>&1 >/dev/null | filecheck %s --check-prefix=TIME
// RUN: not smelt-opt %s -p graph-fuse --print-ir-after=graph-fusion 2>&1 | filecheck %s --check-prefix=BAD

// ALL:      // -----// IR Dump After graph-fold-batchnorm //----- //
// ALL:        graph.identity
// ALL:      // -----// IR Dump After graph-simplify //----- //
// ALL-NOT:    graph.identity
// ALL:      // -----// IR Dump After graph-fuse //----- //
// ALL:        graph.fused

// NAMED:      // -----// IR Dump After graph-simplify //----- //
// NAMED-NEXT: builtin.module
// NAMED:      // -----// IR Dump Before graph-fuse //----- //
// NAMED-NOT:  IR Dump

// graph-fold-batchnorm and the second graph-simplify change nothing.
// CHANGE-NOT: IR Dump After graph-fold-batchnorm
// CHANGE:     IR Dump After graph-simplify
// CHANGE-NOT: IR Dump After graph-simplify
// CHANGE:     IR Dump After graph-fuse

// DIR:      000-input.mlir
// DIR-NEXT: 001-graph-simplify.mlir
// DIR-NEXT: 002-graph-fuse.mlir

// TIME:      Pass execution time report
// TIME:      graph-simplify
// TIME-NEXT: graph-fuse
// TIME:      Pass statistics
// TIME:      ops kernels MB written MB read pass
// TIME-NEXT: 3→2 2 0.00 0.00 graph-simplify
// TIME-NEXT: 2 2→1 0.00 0.00 graph-fuse

// BAD: smelt-opt: error: --print-ir-before/--print-ir-after name unknown passes graph-fusion

func.func @main(%arg0: tensor<1x8xf32>, %arg1: tensor<8x4xf32>) -> tensor<1x4xf32> attributes {smelt.input_names = ["x", "w"], smelt.output_names = ["y"]} {
  %0 = graph.matmul %arg0, %arg1 : (tensor<1x8xf32>, tensor<8x4xf32>) -> tensor<1x4xf32>
  %1 = graph.relu %0 : (tensor<1x4xf32>) -> tensor<1x4xf32>
  %2 = graph.identity %1 : (tensor<1x4xf32>) -> tensor<1x4xf32>
  func.return %2 : tensor<1x4xf32>
}
