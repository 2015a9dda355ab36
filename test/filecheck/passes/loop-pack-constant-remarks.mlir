// loop-pack-constant --remarks: each reason the pass leaves a constant operand
// as it is (loop_pack_constant.pack_constant and layout), one kernel per guard,
// each with its @main caller. The remarks go to stderr, grouped by pass and
// reason, most frequent first, then in the order of the kernels (two guards
// share "an index leaves the operand": the affine and the evaluated index; that
// group comes first, LEAVES).
// RUN: smelt-opt %s -p 'loop-pack-constant{operand=0}' --remarks 2>&1 >/dev/null | filecheck %s
// RUN: smelt-opt %s -p 'loop-pack-constant{operand=0}' --remarks 2>&1 >/dev/null | filecheck %s --check-prefix=LEAVES
// RUN: smelt-opt %s -p 'loop-pack-constant{operand=4}' --remarks 2>&1 >/dev/null | filecheck %s --check-prefix=NOOPERAND
// RUN: smelt-opt %s -p 'loop-pack-constant{operand=0}' | filecheck %s --check-prefix=IR

// CHECK: remarks: 8 (why a pass left an op alone), by pass and reason:
// CHECK-NOT: @packed

// No operand 4 in any kernel.
// NOOPERAND:      loop-pack-constant: no operand 4: it takes 2 (8)
// NOOPERAND-NEXT:   @packed func.func
// NOOPERAND:      loop-pack-constant: no operand 4: it takes 3 (1)
// NOOPERAND-NEXT:   @argument_index func.func

// Only @packed reads a packed constant; the others keep theirs.
// IR-LABEL: func.func @main_packed
// IR:         loop.constant dense<[3.000000e+00, 2.000000e+00, 1.000000e+00]>
// IR-LABEL: func.func @main_squared
// IR:         loop.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00]> : tensor<3xf32> -> memref<3xf32>
// IR-NEXT:    func.call @squared

// The pattern that packs (no remark): b[2 - i], laid out reversed.
func.func @packed(%b: memref<3xf32>, %c: memref<3xf32>) attributes {loop.kernel} {
  %two = arith.constant 2 : index
  loop.for %i = 0 to 3 step 1 parallel {
    %j = arith.subi %two, %i : index
    %y = memref.load %b[%j] : memref<3xf32>
    memref.store %y, %c[%i] : memref<3xf32>
    loop.yield
  }
  func.return
}
func.func @main_packed(%c: memref<3xf32>) {
  %b = loop.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32> -> memref<3xf32>
  func.call @packed(%b, %c) : (memref<3xf32>, memref<3xf32>) -> ()
  func.return
}

// A kernel that nothing calls.
// CHECK:      loop-pack-constant: no call of the kernel passes it its constant (1)
// CHECK-NEXT:   @uncalled func.func
func.func @uncalled(%b: memref<3xf32>, %c: memref<3xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 3 step 1 parallel {
    %y = memref.load %b[%i] : memref<3xf32>
    memref.store %y, %c[%i] : memref<3xf32>
    loop.yield
  }
  func.return
}

// A run-time input at one of its two calls.
// CHECK:      loop-pack-constant: operand 0 is not a loop.constant at every call of it (1)
// CHECK-NEXT:   @input func.func
func.func @input(%b: memref<3xf32>, %c: memref<3xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 3 step 1 parallel {
    %y = memref.load %b[%i] : memref<3xf32>
    memref.store %y, %c[%i] : memref<3xf32>
    loop.yield
  }
  func.return
}
func.func @main_input(%x: memref<3xf32>, %c: memref<3xf32>) {
  %b = loop.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32> -> memref<3xf32>
  func.call @input(%b, %c) : (memref<3xf32>, memref<3xf32>) -> ()
  func.call @input(%x, %c) : (memref<3xf32>, memref<3xf32>) -> ()
  func.return
}

// The kernel never reads its constant.
// CHECK:      loop-pack-constant: operand 0 is not used (1)
// CHECK-NEXT:   @unused func.func
func.func @unused(%b: memref<3xf32>, %c: memref<3xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 3 step 1 parallel {
    %y = memref.load %c[%i] : memref<3xf32>
    memref.store %y, %c[%i] : memref<3xf32>
    loop.yield
  }
  func.return
}
func.func @main_unused(%c: memref<3xf32>) {
  %b = loop.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32> -> memref<3xf32>
  func.call @unused(%b, %c) : (memref<3xf32>, memref<3xf32>) -> ()
  func.return
}

// The kernel writes its constant.
// CHECK:      loop-pack-constant: operand 0 is used other than by loads (1)
// CHECK-NEXT:   @stored func.func
func.func @stored(%b: memref<3xf32>, %c: memref<3xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 3 step 1 parallel {
    %y = memref.load %c[%i] : memref<3xf32>
    memref.store %y, %b[%i] : memref<3xf32>
    loop.yield
  }
  func.return
}
func.func @main_stored(%c: memref<3xf32>) {
  %b = loop.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32> -> memref<3xf32>
  func.call @stored(%b, %c) : (memref<3xf32>, memref<3xf32>) -> ()
  func.return
}

// An index read from a run-time input.
// CHECK:      loop-pack-constant: index uses an iter_arg or an argument (1)
// CHECK-NEXT:   @argument_index memref.load
func.func @argument_index(%b: memref<3xf32>, %ix: memref<3xindex>, %c: memref<3xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 3 step 1 parallel {
    %j = memref.load %ix[%i] : memref<3xindex>
    %y = memref.load %b[%j] : memref<3xf32>
    memref.store %y, %c[%i] : memref<3xf32>
    loop.yield
  }
  func.return
}
func.func @main_argument_index(%ix: memref<3xindex>, %c: memref<3xf32>) {
  %b = loop.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32> -> memref<3xf32>
  func.call @argument_index(%b, %ix, %c) : (memref<3xf32>, memref<3xindex>, memref<3xf32>) -> ()
  func.return
}

// An index i mod 2: not affine, and no op the grid evaluation knows.
// CHECK:      loop-pack-constant: index computed by arith.remui (1)
// CHECK-NEXT:   @remainder memref.load
func.func @remainder(%b: memref<3xf32>, %c: memref<3xf32>) attributes {loop.kernel} {
  %two = arith.constant 2 : index
  loop.for %i = 0 to 3 step 1 parallel {
    %j = arith.remui %i, %two : index
    %y = memref.load %b[%j] : memref<3xf32>
    memref.store %y, %c[%i] : memref<3xf32>
    loop.yield
  }
  func.return
}
func.func @main_remainder(%c: memref<3xf32>) {
  %b = loop.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32> -> memref<3xf32>
  func.call @remainder(%b, %c) : (memref<3xf32>, memref<3xf32>) -> ()
  func.return
}

// An affine index i + 1 that reaches 3 in a buffer of 3.
// LEAVES:      loop-pack-constant: an index leaves the operand (2)
// LEAVES-NEXT:   @shifted memref.load
func.func @shifted(%b: memref<3xf32>, %c: memref<3xf32>) attributes {loop.kernel} {
  %one = arith.constant 1 : index
  loop.for %i = 0 to 3 step 1 parallel {
    %j = arith.addi %i, %one : index
    %y = memref.load %b[%j] : memref<3xf32>
    memref.store %y, %c[%i] : memref<3xf32>
    loop.yield
  }
  func.return
}
func.func @main_shifted(%c: memref<3xf32>) {
  %b = loop.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32> -> memref<3xf32>
  func.call @shifted(%b, %c) : (memref<3xf32>, memref<3xf32>) -> ()
  func.return
}

// A non-affine index i·i (evaluated on the grid) that reaches 4.
// LEAVES-NEXT:   @squared memref.load
func.func @squared(%b: memref<3xf32>, %c: memref<3xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 3 step 1 parallel {
    %j = arith.muli %i, %i : index
    %y = memref.load %b[%j] : memref<3xf32>
    memref.store %y, %c[%i] : memref<3xf32>
    loop.yield
  }
  func.return
}
func.func @main_squared(%c: memref<3xf32>) {
  %b = loop.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32> -> memref<3xf32>
  func.call @squared(%b, %c) : (memref<3xf32>, memref<3xf32>) -> ()
  func.return
}
