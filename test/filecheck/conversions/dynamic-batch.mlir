// RUN: sed '/^\/\/ ERROR-CASES$/,$d' %s | smelt-opt | filecheck %s
// RUN: sed '/^\/\/ ERROR-CASES$/,$d' %s | smelt-opt --print-constants | smelt-opt | filecheck %s
// RUN: sed -n '/^\/\/ ERROR-CASES$/,$p' %s | smelt-opt --split-input-file --verify-diagnostics | filecheck %s --check-prefix=ERR

// A run-time batch (#34; lowering/dynamic_batch.py): @main and the kernel take the
// batch as a trailing index argument; the kernel's batch-1 body runs inside
// loop.for_dim (upper bound: that value) on loop.row views of the memref<?x..>
// buffers; the constant, which does not carry the batch, is read as it is.
// CHECK-LABEL: func.func @add_0(%x: memref<?x64xf32>, %c: memref<64xf32>, %y: memref<?x64xf32>, %batch: index) attributes {loop.kernel} {
// CHECK-NEXT:    loop.for_dim %b = 0 to %batch step 1 parallel {
// CHECK-NEXT:      %[[XR:.*]] = loop.row %x[%b] : memref<?x64xf32> -> memref<1x64xf32>
// CHECK-NEXT:      %[[YR:.*]] = loop.row %y[%b] : memref<?x64xf32> -> memref<1x64xf32>
// CHECK-NEXT:      loop.for %j = 0 to 64 step 1 parallel {
// CHECK:             memref.load %[[XR]][%{{.*}}, %j] : memref<1x64xf32>
// CHECK:             memref.store %{{.*}}, %[[YR]][%{{.*}}, %j] : memref<1x64xf32>
// CHECK:           loop.yield
// CHECK-NEXT:    }
// CHECK-LABEL: func.func @main(%x: memref<?x64xf32>, %y: memref<?x64xf32>, %batch: index) attributes {loop.dims = ["batch"]} {
// CHECK:         func.call @add_0(%x, %c, %y, %batch) : (memref<?x64xf32>, memref<64xf32>, memref<?x64xf32>, index) -> ()
func.func @add_0(%x: memref<?x64xf32>, %c: memref<64xf32>, %y: memref<?x64xf32>, %batch: index) attributes {loop.kernel} {
  loop.for_dim %b = 0 to %batch step 1 parallel {
    %xr = loop.row %x[%b] : memref<?x64xf32> -> memref<1x64xf32>
    %yr = loop.row %y[%b] : memref<?x64xf32> -> memref<1x64xf32>
    loop.for %j = 0 to 64 step 1 parallel {
      %0 = arith.constant 0 : index
      %1 = memref.load %xr[%0, %j] : memref<1x64xf32>
      %2 = memref.load %c[%j] : memref<64xf32>
      %3 = arith.addf %1, %2 : f32
      memref.store %3, %yr[%0, %j] : memref<1x64xf32>
      loop.yield
    }
    loop.yield
  }
  func.return
}
func.func @main(%x: memref<?x64xf32>, %y: memref<?x64xf32>, %batch: index) attributes {loop.dims = ["batch"]} {
  %c = loop.constant dense<1.0> : tensor<64xf32> -> memref<64xf32>
  func.call @add_0(%x, %c, %y, %batch) : (memref<?x64xf32>, memref<64xf32>, memref<?x64xf32>, index) -> ()
  func.return
}

// k rows with their leading dims joined (loop-flatten of the batch-k kernel):
// the same bytes, so a loop.row may give them so
// CHECK-LABEL: func.func @joined(
// CHECK:         loop.row %x[%b] : memref<?x4x2xf32> -> memref<24xf32>
// CHECK:         loop.row %x[%b] : memref<?x4x2xf32> -> memref<12x2xf32>
// CHECK:         loop.row %x[%b] : memref<?x4x2xf32> -> memref<3x4x2xf32>
func.func @joined(%x: memref<?x4x2xf32>, %n: index) {
  loop.for_dim %b = 0 to %n step 1 parallel {
    %r1 = loop.row %x[%b] : memref<?x4x2xf32> -> memref<24xf32>
    %r2 = loop.row %x[%b] : memref<?x4x2xf32> -> memref<12x2xf32>
    %r3 = loop.row %x[%b] : memref<?x4x2xf32> -> memref<3x4x2xf32>
    loop.yield
  }
  func.return
}

// ERROR-CASES

%n = arith.constant 4 : index
loop.for_dim %b = 0 to %n step 1 parallel {
  %z = arith.constant 0.0 : f32
  loop.yield %z : f32
}
// ERR: loop.for_dim body must end with an empty loop.yield

// -----

%n = arith.constant 4 : index
%x = loop.alloc : memref<4x64xf32>
loop.for_dim %b = 0 to %n step 1 parallel {
  %r = loop.row %x[%b] : memref<4x64xf32> -> memref<1x64xf32>
  loop.yield
}
// ERR: loop.row cannot take rows of memref<4x64xf32> as memref<1x64xf32>

// -----

func.func @f(%y: memref<?x4x2xf32>, %n: index) {
  loop.for_dim %b = 0 to %n step 1 parallel {
    %r = loop.row %y[%b] : memref<?x4x2xf32> -> memref<20xf32>
    loop.yield
  }
  func.return
}
// ERR: loop.row cannot take rows of memref<?x4x2xf32> as memref<20xf32>

// -----

func.func @f(%y: memref<?x4x2xf32>, %n: index) {
  loop.for_dim %b = 0 to %n step 1 parallel {
    %r = loop.row %y[%b] : memref<?x4x2xf32> -> memref<2x8xf32>
    loop.yield
  }
  func.return
}
// ERR: loop.row cannot take rows of memref<?x4x2xf32> as memref<2x8xf32>
