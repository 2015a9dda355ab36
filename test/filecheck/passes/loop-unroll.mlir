// RUN: smelt-opt -p 'loop-unroll{loop="u" factor=0}' %s | filecheck %s --check-prefix=FULL
// RUN: smelt-opt -p 'loop-unroll{loop="u" factor=2}' %s | filecheck %s --check-prefix=TWO
// RUN: smelt-opt -p 'loop-unroll{loop="j" jam=true}' %s | filecheck %s --check-prefix=JAM
// RUN: smelt-opt -p 'loop-unroll{loop="t" jam=true tail=2}' %s | filecheck %s --check-prefix=TAIL
// RUN: smelt-opt -p 'loop-unroll{loop="u" factor=2 hint=true}' %s | filecheck %s --check-prefix=HINT
// RUN: smelt-opt -p 'loop-unroll{loop="u" factor=2 hint=true}' %s -t llvm | filecheck %s --check-prefix=HINT-LLVM

// hint=true leaves the loop to the target, marked with the factor; the llvm
// target asks LLVM to unroll it (a loop ID that names itself, then the count).
// HINT-LABEL: func.func @factor(
// HINT:       loop.for %{{.*}} = 0 to 5 step 1 parallel {
// HINT:       } {loop.role = "u", loop.unroll = 2 : i64}
// HINT-LLVM:  br i1 {{.*}}, !llvm.loop ![[ID:[0-9]+]]
// HINT-LLVM:  ![[COUNT:[0-9]+]] = !{ !"llvm.loop.unroll.count", i32 2 }
// HINT-LLVM:  ![[ID]] = !{ ![[ID]], ![[COUNT]] }

// Full unrolling: constant induction variables, the accumulator chained in order.
// FULL-LABEL: func.func @full(
// FULL:         %[[I0:.*]] = arith.constant 0 : index
// FULL-NEXT:    %[[X0:.*]] = memref.load %{{.*}}[%[[I0]]]
// FULL-NEXT:    %[[S0:.*]] = arith.addf %{{.*}}, %[[X0]] : f32
// FULL:         %[[S1:.*]] = arith.addf %[[S0]], %{{.*}} : f32
// FULL:         %[[S2:.*]] = arith.addf %[[S1]], %{{.*}} : f32
// FULL-NEXT:    memref.store %[[S2]], %{{.*}}[] : memref<f32>
// FULL-NEXT:    func.return
func.func @full(%a: memref<3xf32>, %o: memref<f32>) attributes {loop.kernel} {
  %z = arith.constant 0.0 : f32
  %r = loop.for %i = 0 to 3 step 1 reduction iter_args(%acc = %z) -> (f32) {
    %x = memref.load %a[%i] : memref<3xf32>
    %s = arith.addf %acc, %x : f32
    loop.yield %s : f32
  } {loop.role = "u"}
  memref.store %r, %o[] : memref<f32>
  func.return
}

// By a factor: a loop of step 2 with two copies, then the leftover iteration.
// TWO-LABEL: func.func @factor(
// TWO:         loop.for %[[I:.*]] = 0 to 4 step 2 parallel {
// TWO-NEXT:      memref.load %{{.*}}[%[[I]]]
// TWO:           %[[ONE:.*]] = arith.constant 1 : index
// TWO-NEXT:      %[[I1:.*]] = arith.addi %[[I]], %[[ONE]] : index
// TWO-NEXT:      memref.load %{{.*}}[%[[I1]]]
// TWO:         loop.for %{{.*}} = 4 to 5 step 1 parallel {
func.func @factor(%a: memref<5xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 5 step 1 parallel {
    %x = memref.load %a[%i] : memref<5xf32>
    memref.store %x, %a[%i] : memref<5xf32>
    loop.yield
  } {loop.role = "u"}
  func.return
}

// Unroll-and-jam: the copies of the inner reduction become one loop carrying
// both accumulators (register blocking); inside it each copy's ops stay together
// (one copy's values die before the next copy's are made).
// JAM-LABEL: func.func @jam(
// JAM:         %[[R0:.*]], %[[R1:.*]] = loop.for %{{.*}} = 0 to 4 step 1 reduction iter_args(%[[A0:.*]] = %{{.*}}, %[[A1:.*]] = %{{.*}}) -> (f32, f32) {
// JAM-NEXT:      %[[X0:.*]] = memref.load
// JAM-NEXT:      %[[S0:.*]] = arith.addf %[[A0]], %[[X0]] : f32
// JAM-NEXT:      %[[X1:.*]] = memref.load
// JAM-NEXT:      %[[S1:.*]] = arith.addf %[[A1]], %[[X1]] : f32
// JAM-NEXT:      loop.yield %[[S0]], %[[S1]] : f32, f32
// JAM:         memref.store %[[R0]]
// JAM-NEXT:    memref.store %[[R1]]
func.func @jam(%a: memref<2x4xf32>, %o: memref<2xf32>) attributes {loop.kernel} {
  %z = arith.constant 0.0 : f32
  loop.for %i = 0 to 2 step 1 parallel {
    %r = loop.for %k = 0 to 4 step 1 reduction iter_args(%acc = %z) -> (f32) {
      %x = memref.load %a[%i, %k] : memref<2x4xf32>
      %s = arith.addf %acc, %x : f32
      loop.yield %s : f32
    } {loop.role = "k"}
    memref.store %r, %o[%i] : memref<2xf32>
    loop.yield
  } {loop.role = "j"}
  func.return
}

// Guard: unroll-and-jam needs a parallel loop without iter_args.
// JAM-LABEL: func.func @no_jam_reduction(
// JAM:         loop.for %{{.*}} = 0 to 2 step 1 reduction iter_args
// JAM:         } {loop.role = "j"}
func.func @no_jam_reduction(%a: memref<2xf32>, %o: memref<f32>) attributes {loop.kernel} {
  %z = arith.constant 0.0 : f32
  %r = loop.for %i = 0 to 2 step 1 reduction iter_args(%acc = %z) -> (f32) {
    %x = memref.load %a[%i] : memref<2xf32>
    %s = arith.addf %acc, %x : f32
    loop.yield %s : f32
  } {loop.role = "j"}
  memref.store %r, %o[] : memref<f32>
  func.return
}

// tail=2: the 6-row tile is jammed whole; the 4-row remainder tile (fewer trips
// than the kernel's largest `t` loop) is jammed by 2 and loops twice, each copy
// at its own row (iv + 0, iv + 1).
// TAIL-LABEL: func.func @tail(
// TAIL:         loop.for %{{.*}} = 0 to 8 step 1 reduction iter_args({{.*}}) -> (f32, f32, f32, f32, f32, f32) {
// TAIL:         loop.for %[[T:.*]] = 6 to 10 step 2 parallel {
// TAIL-NEXT:      %[[Z:.*]] = arith.constant 0 : index
// TAIL-NEXT:      %[[I0:.*]] = arith.addi %[[T]], %[[Z]] : index
// TAIL-NEXT:      %[[O:.*]] = arith.constant 1 : index
// TAIL-NEXT:      %[[I1:.*]] = arith.addi %[[T]], %[[O]] : index
// TAIL-NEXT:      loop.for %{{.*}} = 0 to 8 step 1 reduction iter_args({{.*}}) -> (f32, f32) {
// TAIL-NEXT:        memref.load %a[%[[I0]],
// TAIL:             memref.load %a[%[[I1]],
// TAIL:         } {loop.role = "t"}
func.func @tail(%a: memref<10x8xf32>, %o: memref<10xf32>) attributes {loop.kernel} {
  %z = arith.constant 0.0 : f32
  loop.for %i = 0 to 6 step 1 parallel {
    %r = loop.for %k = 0 to 8 step 1 reduction iter_args(%acc = %z) -> (f32) {
      %x = memref.load %a[%i, %k] : memref<10x8xf32>
      %s = arith.addf %acc, %x : f32
      loop.yield %s : f32
    } {loop.role = "k"}
    memref.store %r, %o[%i] : memref<10xf32>
    loop.yield
  } {loop.role = "t"}
  loop.for %i = 6 to 10 step 1 parallel {
    %r = loop.for %k = 0 to 8 step 1 reduction iter_args(%acc = %z) -> (f32) {
      %x = memref.load %a[%i, %k] : memref<10x8xf32>
      %s = arith.addf %acc, %x : f32
      loop.yield %s : f32
    } {loop.role = "k"}
    memref.store %r, %o[%i] : memref<10xf32>
    loop.yield
  } {loop.role = "t"}
  func.return
}
