// RUN: smelt-opt -p 'loop-tile{loop="n" sizes=4}' %s | filecheck %s
// RUN: smelt-opt -p 'loop-tile{loop="n" sizes=8,4}' %s | filecheck %s --check-prefix=TWO
// RUN: smelt-opt -p 'loop-tile{loop="n" sizes=0}' %s | filecheck %s --check-prefix=NONE

// A size that divides the trip count: a tile loop and a point loop, no remainder.
// CHECK-LABEL: func.func @exact(
// CHECK:         loop.for %[[T:.*]] = 0 to 8 step 4 parallel {
// CHECK-NEXT:      loop.for %[[P:.*]] = 0 to 4 step 1 parallel {
// CHECK-NEXT:        %[[I:.*]] = arith.addi %[[T]], %[[P]] : index
// CHECK-NEXT:        memref.load %{{.*}}[%[[I]]]
// CHECK:           } {loop.role = "n.1"}
// CHECK:         } {loop.role = "n.0"}
// NONE-LABEL: func.func @exact(
// NONE:         loop.for %{{.*}} = 0 to 8 step 1 parallel {
// NONE:         } {loop.role = "n"}
func.func @exact(%a: memref<8xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 8 step 1 parallel {
    %x = memref.load %a[%i] : memref<8xf32>
    memref.store %x, %a[%i] : memref<8xf32>
    loop.yield
  } {loop.role = "n"}
  func.return
}

// The remainder of a parallel loop leaves the perfect nest: a copy of the
// enclosing loop runs it, so both parts stay perfect bands.
// CHECK-LABEL: func.func @remainder_hoisted(
// CHECK:         loop.for %{{.*}} = 0 to 3 step 1 parallel {
// CHECK-NEXT:      loop.for %{{.*}} = 0 to 8 step 4 parallel {
// CHECK-NEXT:        loop.for %{{.*}} = 0 to 4 step 1 parallel {
// CHECK:         } {loop.role = "m"}
// CHECK-NEXT:    loop.for %{{.*}} = 0 to 3 step 1 parallel {
// CHECK-NEXT:      loop.for %{{.*}} = 8 to 10 step 1 parallel {
// CHECK:           } {loop.role = "n.1"}
// CHECK:         } {loop.role = "m"}
func.func @remainder_hoisted(%a: memref<3x10xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 3 step 1 parallel {
    loop.for %j = 0 to 10 step 1 parallel {
      %x = memref.load %a[%i, %j] : memref<3x10xf32>
      memref.store %x, %a[%i, %j] : memref<3x10xf32>
      loop.yield
    } {loop.role = "n"}
    loop.yield
  } {loop.role = "m"}
  func.return
}

// Two levels: the level-0 remainder (16..20) is tiled by the next size.
// TWO-LABEL: func.func @two_levels(
// TWO:         loop.for %[[T0:.*]] = 0 to 16 step 8 parallel {
// TWO-NEXT:      loop.for %[[T1:.*]] = 0 to 8 step 4 parallel {
// TWO-NEXT:        loop.for %[[P:.*]] = 0 to 4 step 1 parallel {
// TWO-NEXT:          %[[Q:.*]] = arith.addi %[[T1]], %[[P]] : index
// TWO-NEXT:          %{{.*}} = arith.addi %[[T0]], %[[Q]] : index
// TWO:           } {loop.role = "n.2"}
// TWO:         } {loop.role = "n.0"}
// TWO-NEXT:    loop.for %{{.*}} = 16 to 20 step 4 parallel {
// TWO-NEXT:      loop.for %{{.*}} = 0 to 4 step 1 parallel {
// TWO:         } {loop.role = "n.1"}
func.func @two_levels(%a: memref<20xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 20 step 1 parallel {
    %x = memref.load %a[%i] : memref<20xf32>
    memref.store %x, %a[%i] : memref<20xf32>
    loop.yield
  } {loop.role = "n"}
  func.return
}

// A reduction keeps its order: the accumulator flows tile → point → remainder,
// and the remainder stays in place (no enclosing loop to distribute over).
// CHECK-LABEL: func.func @reduction(
// CHECK:         %[[R:.*]] = loop.for %{{.*}} = 0 to 8 step 4 reduction iter_args(%[[A:.*]] = %{{.*}}) -> (f32) {
// CHECK-NEXT:      %[[IN:.*]] = loop.for %{{.*}} = 0 to 4 step 1 reduction iter_args(%{{.*}} = %[[A]]) -> (f32) {
// CHECK:           loop.yield %[[IN]] : f32
// CHECK-NEXT:    } {loop.role = "n.0"}
// CHECK-NEXT:    %[[S:.*]] = loop.for %{{.*}} = 8 to 10 step 1 reduction iter_args(%{{.*}} = %[[R]]) -> (f32) {
// CHECK:         memref.store %[[S]], %{{.*}}[] : memref<f32>
func.func @reduction(%a: memref<10xf32>, %o: memref<f32>) attributes {loop.kernel} {
  %z = arith.constant 0.0 : f32
  %s = loop.for %k = 0 to 10 step 1 reduction iter_args(%acc = %z) -> (f32) {
    %x = memref.load %a[%k] : memref<10xf32>
    %y = arith.addf %acc, %x : f32
    loop.yield %y : f32
  } {loop.role = "n"}
  memref.store %s, %o[] : memref<f32>
  func.return
}

// Guard: fewer iterations than the size: no tile loop (the loop is the point loop).
// CHECK-LABEL: func.func @too_short(
// CHECK-NEXT:    loop.for %{{.*}} = 0 to 3 step 1 parallel {
// CHECK:         } {loop.role = "n.1"}
func.func @too_short(%a: memref<3xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 3 step 1 parallel {
    %x = memref.load %a[%i] : memref<3xf32>
    memref.store %x, %a[%i] : memref<3xf32>
    loop.yield
  } {loop.role = "n"}
  func.return
}

// Guard: another role is not a target.
// CHECK-LABEL: func.func @other_role(
// CHECK-NEXT:    loop.for %{{.*}} = 0 to 8 step 1 parallel {
// CHECK:         } {loop.role = "m"}
func.func @other_role(%a: memref<8xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 8 step 1 parallel {
    %x = memref.load %a[%i] : memref<8xf32>
    memref.store %x, %a[%i] : memref<8xf32>
    loop.yield
  } {loop.role = "m"}
  func.return
}
