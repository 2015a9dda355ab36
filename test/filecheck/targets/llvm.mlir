// RUN: smelt-opt %s -t llvm | filecheck %s

// A kernel becomes an internal function over opaque pointers (noalias: @main hands
// a kernel disjoint buffers unless it is marked loop.elementwise); loops become
// bottom-tested LLVM loops with the induction phi in the header.

// CHECK-LABEL: define internal void @"smelt.kernel.relu_sum"(ptr noalias %"a", ptr noalias %"m", ptr noalias %"o")
func.func @relu_sum(%a: memref<4x8xf32>, %m: memref<4xi1>, %o: memref<4xf32>)
    attributes {loop.kernel} {
  %zero = arith.constant 0.0 : f32
  // CHECK:      i.header:
  // CHECK-NEXT:   %"i" = phi i64 [0, %"entry"], [%"i.next", %"j.exit"]
  loop.for %i = 0 to 4 step 1 parallel {
    // CHECK:      j.header:
    // CHECK-NEXT:   %"j" = phi i64 [0, %"i.header"], [%"j.next", %"j.header"]
    // CHECK-NEXT:   %"acc" = phi float [0x0000000000000000, %"i.header"], [%[[SUM:.*]], %"j.header"]
    %s = loop.for %j = 0 to 8 step 2 reduction iter_args(%acc = %zero) -> (f32) {
      // Indices linearize with the static row-major strides.
      // CHECK-NEXT:   %[[ROW:.*]] = mul nsw i64 %"i", 8
      // CHECK-NEXT:   %[[LIN:.*]] = add nsw i64 %[[ROW]], %"j"
      // CHECK-NEXT:   %[[PTR:.*]] = getelementptr inbounds float, ptr %"a", i64 %[[LIN]]
      // CHECK-NEXT:   %[[V:.*]] = load float, ptr %[[PTR]], align 4
      %v = memref.load %a[%i, %j] : memref<4x8xf32>
      // maximumf propagates NaN: llvm.maximum, not llvm.maxnum.
      // CHECK-NEXT:   %[[R:.*]] = call contract float @"llvm.maximum.f32"(float %[[V]], float 0x0000000000000000)
      %r = arith.maximumf %v, %zero : f32
      // CHECK-NEXT:   %[[SUM]] = fadd contract float %"acc", %[[R]]
      %n = arith.addf %acc, %r : f32
      // CHECK-NEXT:   %"j.next" = add nsw i64 %"j", 2
      // CHECK-NEXT:   %[[DONE:.*]] = icmp eq i64 %"j.next", 8
      // CHECK-NEXT:   br i1 %[[DONE]], label %"j.exit", label %"j.header"
      loop.yield %n : f32
    }
    // i1 is stored as one byte.
    // CHECK:        %[[POS:.*]] = fcmp contract ogt float %[[SUM]], 0x0000000000000000
    // CHECK-NEXT:   %[[BYTE:.*]] = zext i1 %[[POS]] to i8
    // CHECK-NEXT:   %[[MPTR:.*]] = getelementptr inbounds i8, ptr %"m", i64 %"i"
    // CHECK-NEXT:   store i8 %[[BYTE]], ptr %[[MPTR]], align 1
    %pos = arith.cmpf ogt, %s, %zero : f32
    memref.store %pos, %m[%i] : memref<4xi1>
    memref.store %s, %o[%i] : memref<4xf32>
    loop.yield
  }
  // CHECK: ret void
  func.return
}

// One entry point per model: io pointers, the arena, the addresses of the weight
// segments (the blob first; big weights are segments of their own).
// CHECK-LABEL: define void @"smelt_main"(ptr %"io", ptr %"arena", ptr %"weights", ptr %"pool")
// CHECK:         %"a" = load ptr, ptr %{{.*}}, align 8
// CHECK:         %"o" = load ptr, ptr %{{.*}}, align 8
// CHECK-NEXT:    %[[SEG:.*]] = getelementptr inbounds ptr, ptr %"weights", i64 0
// CHECK-NEXT:    %"weights0" = load ptr, ptr %[[SEG]], align 8
// CHECK-NEXT:    %"w" = getelementptr inbounds i8, ptr %"weights0", i64 0
// CHECK-NEXT:    %"m" = getelementptr inbounds i8, ptr %"arena", i64 64
// CHECK-NEXT:    call void @"smelt.kernel.relu_sum"(ptr %"a", ptr %"m", ptr %"o")
// CHECK-NEXT:    ret void
func.func @main(%a: memref<4x8xf32>, %o: memref<4xf32>) {
  %w = loop.constant dense<1.0> : tensor<4xf32> -> memref<4xf32>
  %m = loop.alloc offset(64) : memref<4xi1>
  func.call @relu_sum(%a, %m, %o) : (memref<4x8xf32>, memref<4xi1>, memref<4xf32>) -> ()
  func.return
}
