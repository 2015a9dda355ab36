// RUN: smelt-opt %s --split-input-file --verify-diagnostics | filecheck %s

loop.for %i = 0 to 4 step 0 parallel {
  loop.yield
}
// CHECK: loop.for step must be positive

// -----

loop.for %i = 0 to 4 step 1 sideways {
  loop.yield
}
// CHECK: loop.for kind must be parallel or reduction

// -----

%z = arith.constant 0.0 : f32
%s = loop.for %j = 0 to 8 step 1 reduction iter_args(%acc = %z) -> (f32) {
  loop.yield
}
// CHECK: loop.yield types must match the loop results

// -----

%x = loop.alloc : memref<2x3xf32>
%v = loop.view %x : memref<2x3xf32> -> memref<7xf32>
// CHECK: loop.view cannot see

// -----

%x = loop.alloc : memref<2x3xf32>
%v = loop.view %x : memref<2x3xf32> -> memref<6xf16>
// CHECK: loop.view cannot see

// -----

func.func @lane_select(%m: vector<4xi1>, %a: vector<8xf32>) {
  %s = loop.select %m, %a, %a : vector<4xi1>, vector<8xf32>
  func.return
}
// CHECK: loop.select needs an i1 mask of the values' shape
