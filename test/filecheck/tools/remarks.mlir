// smelt-opt --remarks: why a pass left an op alone (MLIR's -Rpass-missed), on
// stderr, grouped by pass and reason, each with its kernel, op and the ONNX nodes
// of @main's calls of that kernel (loop ops carry no location of their own).
// Without --remarks nothing is printed; a kernel the pass rewrote has no remark.
// RUN: smelt-opt %s -p loop-vectorize --remarks 2>&1 >/dev/null | filecheck %s
// RUN: smelt-opt %s -p loop-vectorize 2>&1 >/dev/null | filecheck %s --check-prefix=QUIET --allow-empty
// RUN: smelt-opt %s -p loop-vectorize --remarks 2>/dev/null | filecheck %s --check-prefix=IR

// CHECK:      remarks: 2 (why a pass left an op alone), by pass and reason:
// CHECK-NEXT:   loop-vectorize: non-contiguous access (1)
// CHECK-NEXT:     @strided loop.for  [ONNX Slice_3, Copy_4]
// CHECK-NEXT:   loop-vectorize: fewer iterations than lanes (1)
// CHECK-NEXT:     @short loop.for  [ONNX Short_7]
// CHECK-NOT:  @contiguous
// QUIET-NOT:  remarks
// IR-LABEL:   func.func @contiguous
// IR:         vector.load

func.func @strided(%a: memref<16x16xf32>, %o: memref<16xf32>) attributes {loop.kernel} {
  %c0 = arith.constant 0 : index
  loop.for %i = 0 to 16 step 1 parallel {
    %x = memref.load %a[%i, %c0] : memref<16x16xf32>
    memref.store %x, %o[%i] : memref<16xf32>
    loop.yield
  }
  func.return
}
func.func @short(%a: memref<32xf32>, %o: memref<32xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 5 step 1 parallel {
    %x = memref.load %a[%i] : memref<32xf32>
    memref.store %x, %o[%i] : memref<32xf32>
    loop.yield
  }
  func.return
}
func.func @contiguous(%a: memref<16xf32>, %o: memref<16xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 16 step 1 parallel {
    %x = memref.load %a[%i] : memref<16xf32>
    memref.store %x, %o[%i] : memref<16xf32>
    loop.yield
  }
  func.return
}
func.func @main(%a: memref<16x16xf32>, %b: memref<32xf32>, %o: memref<16xf32>, %p: memref<32xf32>, %q: memref<16xf32>) {
  func.call @strided(%a, %o) : (memref<16x16xf32>, memref<16xf32>) -> () loc(fused["Slice_3", "Copy_4"])
  func.call @short(%b, %p) : (memref<32xf32>, memref<32xf32>) -> () loc("Short_7")
  func.call @contiguous(%o, %q) : (memref<16xf32>, memref<16xf32>) -> () loc("Id_9")
  func.return
}
