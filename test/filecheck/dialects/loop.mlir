// RUN: smelt-opt %s | smelt-opt | filecheck %s
// RUN: smelt-opt %s --print-op-generic | smelt-opt | filecheck %s

// CHECK-LABEL: func.func @row_sum
// CHECK-SAME: attributes {loop.kernel}
func.func @row_sum(%a: memref<4x8xf32>, %o: memref<4xf32>) attributes {loop.kernel} {
  // CHECK: loop.for %{{.*}} = 0 to 4 step 1 parallel {
  loop.for %i = 0 to 4 step 1 parallel {
    %z = arith.constant 0.0 : f32
    // CHECK: %{{.*}} = loop.for %{{.*}} = 0 to 8 step 2 reduction iter_args(%{{.*}} = %{{.*}}) -> (f32) {
    %s = loop.for %j = 0 to 8 step 2 reduction iter_args(%acc = %z) -> (f32) {
      %v = memref.load %a[%i, %j] : memref<4x8xf32>
      %n = arith.addf %acc, %v : f32
      // CHECK: loop.yield %{{.*}} : f32
      loop.yield %n : f32
    }
    memref.store %s, %o[%i] : memref<4xf32>
    // CHECK: loop.yield
    loop.yield
  }
  func.return
}

// CHECK-LABEL: func.func @main
func.func @main(%x: memref<2x16xf32>, %y: memref<4xf32>) {
  // CHECK: loop.view %{{.*}} : memref<2x16xf32> -> memref<4x8xf32>
  %v = loop.view %x : memref<2x16xf32> -> memref<4x8xf32>
  // CHECK: loop.view %{{.*}} : memref<2x16xf32> -> memref<32xi32>
  %b = loop.view %x : memref<2x16xf32> -> memref<32xi32>
  // CHECK: loop.alloc : memref<4xf32>
  %t = loop.alloc : memref<4xf32>
  // CHECK: loop.alloc offset(64) : memref<4xf32>
  %t2 = loop.alloc offset(64) : memref<4xf32>
  // CHECK: loop.constant dense<1.000000e+00> : tensor<4xf32> -> memref<4xf32>
  %c = loop.constant dense<1.0> : tensor<4xf32> -> memref<4xf32>
  func.call @row_sum(%v, %y) : (memref<4x8xf32>, memref<4xf32>) -> ()
  func.return
}

// A run-time check: its condition and the message a failed run raises.
// CHECK-LABEL: func.func @check
// CHECK:       loop.check %{{.*}}, "index out of range"
func.func @check(%ok: i1) attributes {loop.kernel} {
  loop.check %ok, "index out of range"
  func.return
}

// A select per lane (masked vector tails keep a reduction's inactive lanes).
// CHECK-LABEL: func.func @lane_select
// CHECK:       loop.select %{{.*}}, %{{.*}}, %{{.*}} : vector<8xi1>, vector<8xf32>
func.func @lane_select(%m: vector<8xi1>, %a: vector<8xf32>, %b: vector<8xf32>) attributes {loop.kernel} {
  %s = loop.select %m, %a, %b : vector<8xi1>, vector<8xf32>
  func.return
}
