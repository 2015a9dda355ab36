// loop-pack --remarks: each reason the pass leaves an operand or a load unpacked
// (loop_pack.pack_kernel, pack and pack_load), one kernel per guard, each left
// as it was. The remarks go to stderr, grouped by pass and reason (one each, so
// in the order of the kernels).
// RUN: smelt-opt %s -p 'loop-pack{at="n.0" operand=0}' --remarks 2>&1 >/dev/null | filecheck %s
// RUN: smelt-opt %s -p 'loop-pack{at="n.0" operand=3}' --remarks 2>&1 >/dev/null | filecheck %s --check-prefix=NOOPERAND
// RUN: smelt-opt %s -p 'loop-pack{at="n.0" operand=0}' | filecheck %s --check-prefix=IR

// CHECK: remarks: 9 (why a pass left an op alone), by pass and reason:

// No operand 3: a remark for each kernel of 2 operands (8 of the 10).
// NOOPERAND:      loop-pack: no operand 3: it takes 2 (8)
// NOOPERAND-NEXT:   @packed func.func

// Only @packed gets a scratch.
// IR-LABEL: func.func @packed
// IR:         memref.alloca
// IR-LABEL: func.func @no_role
// IR-NOT:     memref.alloca
// IR:         func.return

// The pattern that packs (no remark).
// CHECK-NOT: @packed
func.func @packed(%b: memref<6xf32>, %o: memref<6xf32>) attributes {loop.kernel} {
  loop.for %j0 = 0 to 6 step 3 parallel {
    loop.for %j1 = 0 to 3 step 1 parallel {
      %j = arith.addi %j0, %j1 : index
      %y = memref.load %b[%j] : memref<6xf32>
      memref.store %y, %o[%j] : memref<6xf32>
      loop.yield
    } {loop.role = "n.1"}
    loop.yield
  } {loop.role = "n.0"}
  func.return
}

// No loop of the role asked for.
// CHECK:      loop-pack: no loop of role n.0 to pack at (1)
// CHECK-NEXT:   @no_role func.func
func.func @no_role(%b: memref<6xf32>, %o: memref<6xf32>) attributes {loop.kernel} {
  loop.for %j = 0 to 6 step 1 parallel {
    %y = memref.load %b[%j] : memref<6xf32>
    memref.store %y, %o[%j] : memref<6xf32>
    loop.yield
  } {loop.role = "n.1"}
  func.return
}

// The operand is written inside the pack loop: a scratch would go stale.
// CHECK:      loop-pack: the operand is stored to inside the pack loop (1)
// CHECK-NEXT:   @stored loop.for "n.0"
func.func @stored(%b: memref<6xf32>, %unused: memref<6xf32>) attributes {loop.kernel} {
  loop.for %j0 = 0 to 6 step 3 parallel {
    loop.for %j1 = 0 to 3 step 1 parallel {
      %j = arith.addi %j0, %j1 : index
      %y = memref.load %b[%j] : memref<6xf32>
      %s = arith.addf %y, %y : f32
      memref.store %s, %b[%j] : memref<6xf32>
      loop.yield
    } {loop.role = "n.1"}
    loop.yield
  } {loop.role = "n.0"}
  func.return
}

// The pack loop never reads the operand.
// CHECK:      loop-pack: the pack loop does not read the operand (1)
// CHECK-NEXT:   @unread loop.for "n.0"
func.func @unread(%b: memref<6xf32>, %a: memref<6xf32>, %o: memref<6xf32>) attributes {loop.kernel} {
  loop.for %j0 = 0 to 6 step 3 parallel {
    loop.for %j1 = 0 to 3 step 1 parallel {
      %j = arith.addi %j0, %j1 : index
      %y = memref.load %a[%j] : memref<6xf32>
      memref.store %y, %o[%j] : memref<6xf32>
      loop.yield
    } {loop.role = "n.1"}
    loop.yield
  } {loop.role = "n.0"}
  func.return
}

// The operand is read through a view of it.
// CHECK:      loop-pack: the load reads the operand through a loop.view (1)
// CHECK-NEXT:   @viewed memref.load
func.func @viewed(%b: memref<2x3xf32>, %o: memref<6xf32>) attributes {loop.kernel} {
  %v = loop.view %b : memref<2x3xf32> -> memref<6xf32>
  loop.for %j0 = 0 to 6 step 3 parallel {
    loop.for %j1 = 0 to 3 step 1 parallel {
      %j = arith.addi %j0, %j1 : index
      %y = memref.load %v[%j] : memref<6xf32>
      memref.store %y, %o[%j] : memref<6xf32>
      loop.yield
    } {loop.role = "n.1"}
    loop.yield
  } {loop.role = "n.0"}
  func.return
}

// An index carried by an inner loop (an iter_arg), not computed from its ivs.
// CHECK:      loop-pack: index uses an iter_arg (1)
// CHECK-NEXT:   @carried memref.load
func.func @carried(%b: memref<6xf32>, %o: memref<6xf32>) attributes {loop.kernel} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  loop.for %j0 = 0 to 6 step 3 parallel {
    %n = loop.for %j1 = 0 to 3 step 1 reduction iter_args(%k = %c0) -> (index) {
      %y = memref.load %b[%k] : memref<6xf32>
      memref.store %y, %o[%j1] : memref<6xf32>
      %k1 = arith.addi %k, %c1 : index
      loop.yield %k1 : index
    } {loop.role = "n.1"}
    loop.yield
  } {loop.role = "n.0"}
  func.return
}

// An index computed from a loaded value (a gather).
// CHECK:      loop-pack: index computed by memref.load (1)
// CHECK-NEXT:   @loaded_index memref.load
func.func @loaded_index(%b: memref<6xf32>, %ix: memref<3xindex>, %o: memref<6xf32>) attributes {loop.kernel} {
  loop.for %j0 = 0 to 6 step 3 parallel {
    loop.for %j1 = 0 to 3 step 1 parallel {
      %j = memref.load %ix[%j1] : memref<3xindex>
      %y = memref.load %b[%j] : memref<6xf32>
      memref.store %y, %o[%j1] : memref<6xf32>
      loop.yield
    } {loop.role = "n.1"}
    loop.yield
  } {loop.role = "n.0"}
  func.return
}

// The load reads one element per iteration of the pack loop: nothing to pack.
// CHECK:      loop-pack: the load does not vary inside the pack loop (1)
// CHECK-NEXT:   @invariant memref.load
func.func @invariant(%b: memref<6xf32>, %o: memref<6xf32>) attributes {loop.kernel} {
  loop.for %j0 = 0 to 6 step 3 parallel {
    loop.for %j1 = 0 to 3 step 1 parallel {
      %y = memref.load %b[%j0] : memref<6xf32>
      %j = arith.addi %j0, %j1 : index
      memref.store %y, %o[%j] : memref<6xf32>
      loop.yield
    } {loop.role = "n.1"}
    loop.yield
  } {loop.role = "n.0"}
  func.return
}

// A loop of step 2 whose stride in the scratch (the 3 iterations of the loop
// inside it) is odd.
// CHECK:      loop-pack: a loop step does not divide its stride in the scratch (1)
// CHECK-NEXT:   @odd_stride memref.load
func.func @odd_stride(%b: memref<9xf32>, %o: memref<9xf32>) attributes {loop.kernel} {
  loop.for %t = 0 to 2 step 1 parallel {
    loop.for %k = 0 to 6 step 2 parallel {
      loop.for %j = 0 to 3 step 1 parallel {
        %i = arith.addi %k, %j : index
        %y = memref.load %b[%i] : memref<9xf32>
        memref.store %y, %o[%i] : memref<9xf32>
        loop.yield
      } {loop.role = "n.1"}
      loop.yield
    } {loop.role = "k"}
    loop.yield
  } {loop.role = "n.0"}
  func.return
}

// A scratch of 512 × 1024 f32 (2 MiB) is over max_bytes (1 MiB).
// CHECK:      loop-pack: the scratch would exceed max-bytes (1)
// CHECK-NEXT:   @big memref.load
func.func @big(%b: memref<512x1024xf32>, %o: memref<1024xf32>) attributes {loop.kernel} {
  loop.for %t = 0 to 2 step 1 parallel {
    loop.for %k = 0 to 512 step 1 reduction {
      loop.for %j = 0 to 1024 step 1 parallel {
        %y = memref.load %b[%k, %j] : memref<512x1024xf32>
        %z = memref.load %o[%j] : memref<1024xf32>
        %s = arith.addf %y, %z : f32
        memref.store %s, %o[%j] : memref<1024xf32>
        loop.yield
      } {loop.role = "n.1"}
      loop.yield
    } {loop.role = "k"}
    loop.yield
  } {loop.role = "n.0"}
  func.return
}
