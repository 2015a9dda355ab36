// Large constants print elided unless the printer is told otherwise
// (--print-constants: a FullConstantsPrinter, no global flag), at every level.
// RUN: smelt-opt %s | filecheck %s --check-prefix=ELIDED
// RUN: smelt-opt %s --print-constants | smelt-opt --print-constants | filecheck %s --check-prefix=FULL
// RUN: smelt-opt %s -p convert-graph-to-loop | filecheck %s --check-prefix=LOOP-ELIDED
// RUN: smelt-opt %s -p convert-graph-to-loop --print-constants | filecheck %s --check-prefix=LOOP-FULL
// RUN: smelt-opt %s -p graph-simplify --print-ir-after-all --print-constants 2>&1 >/dev/null | filecheck %s --check-prefix=FULL

// ELIDED: graph.constant dense_resource<__elided__> : tensor<20xf32>
// ELIDED: graph.constant dense<2.000000e+00> : tensor<2xf32>
// FULL: graph.constant dense<1.500000e+00> : tensor<20xf32>
// LOOP-ELIDED: loop.constant dense_resource<__elided__> -> memref<20xf32>
// LOOP-FULL: loop.constant dense<1.500000e+00> : tensor<20xf32> -> memref<20xf32>
func.func @f(%x: tensor<20xf32>) -> (tensor<20xf32>, tensor<2xf32>) {
  %c = graph.constant dense<1.5> : tensor<20xf32>
  %s = graph.constant dense<2.0> : tensor<2xf32>
  %y = graph.add %x, %c : (tensor<20xf32>, tensor<20xf32>) -> tensor<20xf32>
  func.return %y, %s : tensor<20xf32>, tensor<2xf32>
}
