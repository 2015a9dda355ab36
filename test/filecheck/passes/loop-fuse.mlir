// RUN: smelt-opt -p 'loop-fuse' %s | filecheck %s

// Fill, band and epilogue over the same row tiles: the band and the epilogue
// run on each row right after its fill.
// CHECK-LABEL: func.func @rows(
// CHECK:         loop.for %[[I:.*]] = 0 to 4 step 1 parallel {
// CHECK-NEXT:      loop.for %[[J:.*]] = 0 to 8 step 1 parallel {
// CHECK-NEXT:        memref.store %{{.*}}, %{{.*}}[%[[I]], %[[J]]]
// CHECK-NEXT:        loop.yield
// CHECK-NEXT:      }
// CHECK-NEXT:      loop.for %{{.*}} = 0 to 3 step 1 reduction {
// CHECK:           } {loop.role = "k"}
// CHECK-NEXT:      loop.for %{{.*}} = 0 to 8 step 1 parallel {
// CHECK:             arith.maximumf
// CHECK:           }
// CHECK-NEXT:      loop.yield
// CHECK-NEXT:    } {loop.role = "m"}
// CHECK-NEXT:    func.return
func.func @rows(%a: memref<4x3xf32>, %b: memref<3x8xf32>, %c: memref<4x8xf32>) attributes {loop.kernel} {
  %zero = arith.constant 0.0 : f32
  loop.for %i = 0 to 4 step 1 parallel {
    loop.for %j = 0 to 8 step 1 parallel {
      memref.store %zero, %c[%i, %j] : memref<4x8xf32>
      loop.yield
    }
    loop.yield
  } {loop.role = "m"}
  loop.for %i = 0 to 4 step 1 parallel {
    loop.for %k = 0 to 3 step 1 reduction {
      loop.for %j = 0 to 8 step 1 parallel {
        %x = memref.load %a[%i, %k] : memref<4x3xf32>
        %y = memref.load %b[%k, %j] : memref<3x8xf32>
        %z = memref.load %c[%i, %j] : memref<4x8xf32>
        %p = arith.mulf %x, %y : f32
        %s = arith.addf %z, %p : f32
        memref.store %s, %c[%i, %j] : memref<4x8xf32>
        loop.yield
      }
      loop.yield
    } {loop.role = "k"}
    loop.yield
  } {loop.role = "m"}
  loop.for %i = 0 to 4 step 1 parallel {
    loop.for %j = 0 to 8 step 1 parallel {
      %z = memref.load %c[%i, %j] : memref<4x8xf32>
      %r = arith.maximumf %z, %zero : f32
      memref.store %r, %c[%i, %j] : memref<4x8xf32>
      loop.yield
    }
    loop.yield
  } {loop.role = "m"}
  func.return
}

// Tiles of a flattened index: the row tiles t (step 4) and their rows r pin
// down disjoint bytes, so the nests fuse down to r.
// CHECK-LABEL: func.func @tiles(
// CHECK:         loop.for %{{.*}} = 0 to 8 step 4 parallel {
// CHECK-NEXT:      loop.for %{{.*}} = 0 to 4 step 1 parallel {
// CHECK:             memref.store
// CHECK:             memref.load
// CHECK:             memref.store
// CHECK-NEXT:        loop.yield
// CHECK-NEXT:      } {loop.role = "m.1"}
// CHECK-NEXT:      loop.yield
// CHECK-NEXT:    } {loop.role = "m.0"}
// CHECK-NEXT:    func.return
func.func @tiles(%c: memref<8xf32>) attributes {loop.kernel} {
  %one = arith.constant 1.0 : f32
  loop.for %t = 0 to 8 step 4 parallel {
    loop.for %r = 0 to 4 step 1 parallel {
      %m = arith.addi %t, %r : index
      memref.store %one, %c[%m] : memref<8xf32>
      loop.yield
    } {loop.role = "m.1"}
    loop.yield
  } {loop.role = "m.0"}
  loop.for %t = 0 to 8 step 4 parallel {
    loop.for %r = 0 to 4 step 1 parallel {
      %m = arith.addi %t, %r : index
      %z = memref.load %c[%m] : memref<8xf32>
      %s = arith.addf %z, %z : f32
      memref.store %s, %c[%m] : memref<8xf32>
      loop.yield
    } {loop.role = "m.1"}
    loop.yield
  } {loop.role = "m.0"}
  func.return
}

// Guard: the second nest reads a row the first writes in a later iteration
// (c[i + 1]): the nests stay apart.
// CHECK-LABEL: func.func @shifted(
// CHECK:         } {loop.role = "m"}
// CHECK-NEXT:    loop.for
func.func @shifted(%c: memref<5xf32>, %d: memref<4xf32>) attributes {loop.kernel} {
  %one = arith.constant 1.0 : f32
  loop.for %i = 0 to 4 step 1 parallel {
    memref.store %one, %c[%i] : memref<5xf32>
    loop.yield
  } {loop.role = "m"}
  loop.for %i = 0 to 4 step 1 parallel {
    %n = arith.constant 1 : index
    %j = arith.addi %i, %n : index
    %z = memref.load %c[%j] : memref<5xf32>
    memref.store %z, %d[%i] : memref<4xf32>
    loop.yield
  } {loop.role = "m"}
  func.return
}

// Guard: different headers (roles): nothing to fuse.
// CHECK-LABEL: func.func @other_roles(
// CHECK:         } {loop.role = "m"}
// CHECK-NEXT:    loop.for
func.func @other_roles(%c: memref<4xf32>) attributes {loop.kernel} {
  %one = arith.constant 1.0 : f32
  loop.for %i = 0 to 4 step 1 parallel {
    memref.store %one, %c[%i] : memref<4xf32>
    loop.yield
  } {loop.role = "m"}
  loop.for %i = 0 to 4 step 1 parallel {
    %z = memref.load %c[%i] : memref<4xf32>
    %s = arith.addf %z, %z : f32
    memref.store %s, %c[%i] : memref<4xf32>
    loop.yield
  } {loop.role = "n"}
  func.return
}
