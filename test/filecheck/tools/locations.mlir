// Source locations: each op carries the ONNX nodes it came from as an MLIR
// location, printed with --print-debuginfo, parsed back, kept by graph-fuse (the
// fused op names every member) and by convert-graph-to-loop (kernels, calls and
// run-time check messages), and named in pass errors.
// RUN: sed '/^\/\/ ERROR-CASES$/,$d' %s | smelt-opt --print-debuginfo | smelt-opt --print-debuginfo | filecheck %s --check-prefix=ROUND
// RUN: sed '/^\/\/ ERROR-CASES$/,$d' %s | smelt-opt --print-debuginfo -p graph-fuse | smelt-opt --print-debuginfo | filecheck %s --check-prefix=FUSE
// RUN: sed '/^\/\/ ERROR-CASES$/,$d' %s | smelt-opt --print-debuginfo -p graph-fuse,convert-graph-to-loop,loop-dedup-kernels | smelt-opt --print-debuginfo | filecheck %s --check-prefix=LOOP
// RUN: sed '/^\/\/ ERROR-CASES$/,$d' %s | smelt-opt -p graph-fuse | filecheck %s --check-prefix=PLAIN
// RUN: sed -n '/^\/\/ ERROR-INT-SIGMOID$/,/^\/\/ END$/p' %s | not smelt-opt -p convert-graph-to-loop 2>&1 | filecheck %s --check-prefix=ERROR

// ROUND-LABEL: func.func @main
// ROUND:       graph.matmul {{.*}} loc("mm")
// ROUND-NEXT:  graph.add {{.*}} loc("bias")
// ROUND-NEXT:  graph.relu {{.*}} loc("LayerNorm/Relu")
// ROUND-NEXT:  graph.gather {{.*}} loc("embed")

// The fused op names its members' nodes in order; the members keep their own.
// FUSE-LABEL: func.func @main
// FUSE:       graph.fused {{.*}} {kind = "matmul"}
// FUSE:         graph.matmul {{.*}} loc("mm")
// FUSE-NEXT:    graph.add {{.*}} loc("bias")
// FUSE-NEXT:    graph.relu {{.*}} loc("LayerNorm/Relu")
// FUSE-NEXT:    graph.yield
// FUSE-NEXT:  } loc(fused["mm", "bias", "LayerNorm/Relu"])
// FUSE-NEXT:  graph.gather {{.*}} loc("embed")

// A kernel and its call carry the location of the graph op they compute; a
// run-time check's message names the node.
// LOOP-LABEL: func.func @fused_matmul_0
// LOOP:       } loc(fused["mm", "bias", "LayerNorm/Relu"])
// LOOP-LABEL: func.func @gather_0
// LOOP:         loop.check %{{.*}}, "ONNX node 'embed': Gather along axis 0 of a 4x16 tensor: an index is out of range [-4, 4); check the indices input" loc("embed")
// LOOP:       } loc("embed")
// LOOP-LABEL: func.func @main
// LOOP:       func.call @fused_matmul_0({{.*}}) loc(fused["mm", "bias", "LayerNorm/Relu"])
// LOOP-NEXT:  func.call @gather_0({{.*}}) loc("embed")

// Without --print-debuginfo nothing changes in the text.
// PLAIN-NOT: loc(

func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>, %i: tensor<3xi64>) -> (tensor<4x16xf32>, tensor<3x16xf32>) {
  %0 = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32> loc("mm")
  %1 = graph.add %0, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32> loc("bias")
  %2 = graph.relu %1 : (tensor<4x16xf32>) -> tensor<4x16xf32> loc("LayerNorm/Relu")
  %3 = graph.gather %2, %i {axis = 0 : i64} : (tensor<4x16xf32>, tensor<3xi64>) -> tensor<3x16xf32> loc("embed")
  func.return %2, %3 : tensor<4x16xf32>, tensor<3x16xf32>
}

// ERROR-CASES

// A pass error on an op names the op's ONNX node.
// ERROR-INT-SIGMOID
// ERROR: smelt-opt: error: ONNX node 'sig': graph.sigmoid on i32 is not supported: it needs a float tensor
func.func @int_sigmoid(%x: tensor<4xi32>) -> tensor<4xi32> {
  %y = graph.sigmoid %x : (tensor<4xi32>) -> tensor<4xi32> loc("sig")
  func.return %y : tensor<4xi32>
}
// END
