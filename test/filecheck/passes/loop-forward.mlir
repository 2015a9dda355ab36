// RUN: smelt-opt -p 'loop-forward' %s | filecheck %s

// A micro-tile after loop-promote: the bias stored into C and loaded back as the
// accumulator's start, the accumulator stored and loaded back by the epilogue,
// which stores again. The loads take the stored values; the two stores that a
// later store overwrites before anything reads them go.
// CHECK-LABEL: func.func @tile(
// CHECK:         %[[B:.*]] = vector.load %{{.*}}[%{{.*}}] : memref<32xf32>, vector<16xf32>
// CHECK-NOT:     vector.store
// CHECK-NOT:     vector.load %{{.*}} : memref<4x32xf32>
// CHECK:         %[[R:.*]] = loop.for %{{.*}} = 0 to 8 step 1 reduction iter_args(%{{.*}} = %[[B]])
// CHECK:         } {loop.role = "k"}
// CHECK-NEXT:    %[[Y:.*]] = arith.addf %[[R]], %[[R]] : vector<16xf32>
// CHECK-NEXT:    vector.store %[[Y]], %{{.*}}[%{{.*}}, %{{.*}}] : memref<4x32xf32>, vector<16xf32>
// CHECK-NEXT:    func.return
func.func @tile(%a: memref<4x8xf32>, %bias: memref<32xf32>, %c: memref<4x32xf32>) attributes {loop.kernel} {
  %i = arith.constant 1 : index
  %j = arith.constant 16 : index
  %b = vector.load %bias[%j] : memref<32xf32>, vector<16xf32>
  vector.store %b, %c[%i, %j] : memref<4x32xf32>, vector<16xf32>
  %c0 = vector.load %c[%i, %j] : memref<4x32xf32>, vector<16xf32>
  %r = loop.for %k = 0 to 8 step 1 reduction iter_args(%acc = %c0) -> (vector<16xf32>) {
    %x = memref.load %a[%i, %k] : memref<4x8xf32>
    %v = vector.broadcast %x : f32 to vector<16xf32>
    %s = arith.addf %acc, %v : vector<16xf32>
    loop.yield %s : vector<16xf32>
  } {loop.role = "k"}
  vector.store %r, %c[%i, %j] : memref<4x32xf32>, vector<16xf32>
  %e = vector.load %c[%i, %j] : memref<4x32xf32>, vector<16xf32>
  %y = arith.addf %e, %e : vector<16xf32>
  vector.store %y, %c[%i, %j] : memref<4x32xf32>, vector<16xf32>
  func.return
}

// Stores to other bytes of the same buffer (known apart) neither stop the
// forwarding nor go.
// CHECK-LABEL: func.func @apart(
// CHECK-COUNT-2: vector.store
// CHECK-NOT:     vector.load
// CHECK:         arith.addf %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK-NEXT:    func.return
func.func @apart(%c: memref<32xf32>, %x: vector<16xf32>, %z: vector<16xf32>) attributes {loop.kernel} {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  vector.store %x, %c[%c0] : memref<32xf32>, vector<16xf32>
  vector.store %z, %c[%c16] : memref<32xf32>, vector<16xf32>
  %l = vector.load %c[%c0] : memref<32xf32>, vector<16xf32>
  %s = arith.addf %l, %l : vector<16xf32>
  func.return
}

// Guards: a store that overlaps the bytes in part, an index that is not affine,
// a nested loop that writes the buffer, and a masked store: the load stays, and
// so does every store (each may be read).
// CHECK-LABEL: func.func @guards(
// CHECK-COUNT-2: vector.store
// CHECK:         vector.load
// CHECK-COUNT-2: vector.store
// CHECK:         vector.load
// CHECK:         loop.for
// CHECK:         vector.load
// CHECK:         vector.maskedstore
// CHECK:         vector.load
func.func @guards(%c: memref<64xf32>, %x: vector<16xf32>, %n: index, %m: vector<16xi1>) attributes {loop.kernel} {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c2 = arith.constant 2 : index
  vector.store %x, %c[%c0] : memref<64xf32>, vector<16xf32>
  vector.store %x, %c[%c8] : memref<64xf32>, vector<16xf32>
  %l1 = vector.load %c[%c0] : memref<64xf32>, vector<16xf32>
  %q = arith.divui %n, %c2 : index
  vector.store %x, %c[%c0] : memref<64xf32>, vector<16xf32>
  vector.store %l1, %c[%q] : memref<64xf32>, vector<16xf32>
  %l2 = vector.load %c[%c0] : memref<64xf32>, vector<16xf32>
  loop.for %k = 0 to 4 step 1 parallel {
    vector.store %l2, %c[%k] : memref<64xf32>, vector<16xf32>
    loop.yield
  }
  %l3 = vector.load %c[%c0] : memref<64xf32>, vector<16xf32>
  vector.maskedstore %c[%c0], %m, %l3 : memref<64xf32>, vector<16xi1>, vector<16xf32>
  %l4 = vector.load %c[%c0] : memref<64xf32>, vector<16xf32>
  vector.store %l4, %c[%c16] : memref<64xf32>, vector<16xf32>
  func.return
}
