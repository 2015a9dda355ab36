// loop-vectorize --remarks: each reason the pass declines a loop, one kernel per
// guard (vectorize_legality.VectorLegality.check and LoopVectorizer.rewrite),
// each loop left as it was. The remarks go to stderr, grouped by pass and reason
// (one loop each, so in the order of the kernels).
// RUN: smelt-opt %s -p loop-vectorize --remarks 2>&1 >/dev/null | filecheck %s
// RUN: smelt-opt %s -p 'loop-vectorize{reassoc=false}' --remarks 2>&1 >/dev/null | filecheck %s --check-prefix=NOREASSOC
// RUN: smelt-opt %s -p 'loop-vectorize{width=1}' --remarks 2>&1 >/dev/null | filecheck %s --check-prefix=ONELANE
// RUN: smelt-opt %s -p loop-vectorize | filecheck %s --check-prefix=IR

// CHECK: remarks: 16 (why a pass left an op alone), by pass and reason:

// A float sum is reassociated into lane sums: only with reassoc=true.
// NOREASSOC:      loop-vectorize: float reduction needs reassoc=true (1)
// NOREASSOC-NEXT:   @sum loop.for

// One lane of 32 bits: the pass does nothing, and says so once, for the module.
// ONELANE:      remarks: 1 (why a pass left an op alone), by pass and reason:
// ONELANE-NEXT:   loop-vectorize: 1 lane(s) of 32 bits: nothing to do (1)
// ONELANE-NEXT:     builtin.module

// No declined loop is rewritten; the sum is.
// IR-LABEL: func.func @step2
// IR-NOT:   vector.
// IR-LABEL: func.func @sum
// IR:       vector.load
// IR-LABEL: func.func @index_sum
// IR-NOT:   vector.
// IR:       func.return

// A loop of step 2 (vector lanes are consecutive iterations).
// CHECK:      loop-vectorize: step is not 1 (1)
// CHECK-NEXT:   @step2 loop.for
func.func @step2(%a: memref<32xf32>, %o: memref<32xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 32 step 2 parallel {
    %x = memref.load %a[%i] : memref<32xf32>
    memref.store %x, %o[%i] : memref<32xf32>
    loop.yield
  }
  func.return
}

// 5 iterations, 8 lanes, scalar tails (no masked vector iteration).
// CHECK:      loop-vectorize: fewer iterations than lanes (1)
// CHECK-NEXT:   @short loop.for
func.func @short(%a: memref<32xf32>, %o: memref<32xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 5 step 1 parallel {
    %x = memref.load %a[%i] : memref<32xf32>
    memref.store %x, %o[%i] : memref<32xf32>
    loop.yield
  }
  func.return
}

// An op with a region (scf.if) in the body.
// CHECK:      loop-vectorize: not an innermost loop: scf.if holds a region (1)
// CHECK-NEXT:   @not_innermost loop.for
func.func @not_innermost(%a: memref<32xf32>, %o: memref<32xf32>, %c: i1) attributes {loop.kernel} {
  loop.for %i = 0 to 32 step 1 parallel {
    %x = memref.load %a[%i] : memref<32xf32>
    scf.if %c {
      memref.store %x, %o[%i] : memref<32xf32>
    }
    loop.yield
  }
  func.return
}

// A loop.check on a loaded value (only invariant checks are hoisted).
// CHECK:      loop-vectorize: a run-time check that varies along the loop (1)
// CHECK-NEXT:   @varying_check loop.for
func.func @varying_check(%a: memref<32xf32>, %o: memref<32xf32>) attributes {loop.kernel} {
  %zero = arith.constant 0.0 : f32
  loop.for %i = 0 to 32 step 1 parallel {
    %x = memref.load %a[%i] : memref<32xf32>
    %ok = arith.cmpf oge, %x, %zero : f32
    loop.check %ok, "negative input"
    memref.store %x, %o[%i] : memref<32xf32>
    loop.yield
  }
  func.return
}

// An op with no vector form here (math.fpowi: its exponent stays scalar).
// CHECK:      loop-vectorize: cannot vectorize math.fpowi (1)
// CHECK-NEXT:   @fpowi loop.for
func.func @fpowi(%a: memref<32xf32>, %o: memref<32xf32>) attributes {loop.kernel} {
  %n = arith.constant 3 : i32
  loop.for %i = 0 to 32 step 1 parallel {
    %x = memref.load %a[%i] : memref<32xf32>
    %y = math.fpowi %x, %n : f32, i32
    memref.store %y, %o[%i] : memref<32xf32>
    loop.yield
  }
  func.return
}

// A loop that already carries a vector.
// CHECK:      loop-vectorize: already vector code (1)
// CHECK-NEXT:   @vector_acc loop.for
func.func @vector_acc(%v: vector<8xf32>, %o: memref<8xf32>) attributes {loop.kernel} {
  %s = loop.for %i = 0 to 32 step 1 reduction iter_args(%acc = %v) -> (vector<8xf32>) {
    %t = arith.addf %acc, %v : vector<8xf32>
    loop.yield %t : vector<8xf32>
  }
  func.return
}

// A buffer chosen inside the loop (arith.select of two memrefs).
// CHECK:      loop-vectorize: buffer defined in the loop (1)
// CHECK-NEXT:   @buffer_in_loop loop.for
func.func @buffer_in_loop(%a: memref<32xf32>, %b: memref<32xf32>, %o: memref<32xf32>, %c: i1) attributes {loop.kernel} {
  loop.for %i = 0 to 32 step 1 parallel {
    %m = arith.select %c, %a, %b : memref<32xf32>
    %x = memref.load %m[%i] : memref<32xf32>
    memref.store %x, %o[%i] : memref<32xf32>
    loop.yield
  }
  func.return
}

// An index i·i.
// CHECK:      loop-vectorize: index is not iv + invariant (1)
// CHECK-NEXT:   @squared_index loop.for
func.func @squared_index(%a: memref<1024xf32>, %o: memref<32xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 32 step 1 parallel {
    %j = arith.muli %i, %i : index
    %x = memref.load %a[%j] : memref<1024xf32>
    memref.store %x, %o[%i] : memref<32xf32>
    loop.yield
  }
  func.return
}

// An access with stride 16 along the loop.
// CHECK:      loop-vectorize: non-contiguous access (1)
// CHECK-NEXT:   @strided loop.for
func.func @strided(%a: memref<16x16xf32>, %o: memref<16xf32>) attributes {loop.kernel} {
  %c0 = arith.constant 0 : index
  loop.for %i = 0 to 16 step 1 parallel {
    %x = memref.load %a[%i, %c0] : memref<16x16xf32>
    memref.store %x, %o[%i] : memref<16xf32>
    loop.yield
  }
  func.return
}

// Every iteration stores to o[0] (and it is no reduction).
// CHECK:      loop-vectorize: store to a loop-invariant address (1)
// CHECK-NEXT:   @invariant_store loop.for
func.func @invariant_store(%a: memref<32xf32>, %o: memref<1xf32>) attributes {loop.kernel} {
  %c0 = arith.constant 0 : index
  loop.for %i = 0 to 32 step 1 parallel {
    %x = memref.load %a[%i] : memref<32xf32>
    memref.store %x, %o[%c0] : memref<1xf32>
    loop.yield
  }
  func.return
}

// a[i] = a[i + 1]: a vector store would overwrite what the next vector load
// reads.
// CHECK:      loop-vectorize: a store may overlap another access (1)
// CHECK-NEXT:   @overlap loop.for
func.func @overlap(%a: memref<33xf32>) attributes {loop.kernel} {
  %c1 = arith.constant 1 : index
  loop.for %i = 0 to 32 step 1 parallel {
    %j = arith.addi %i, %c1 : index
    %x = memref.load %a[%j] : memref<33xf32>
    memref.store %x, %a[%i] : memref<33xf32>
    loop.yield
  }
  func.return
}

// The accumulator is also stored.
// CHECK:      loop-vectorize: iter_arg used beyond one combining op (1)
// CHECK-NEXT:   @acc_twice loop.for
func.func @acc_twice(%a: memref<32xf32>, %o: memref<32xf32>, %z: f32) attributes {loop.kernel} {
  %s = loop.for %i = 0 to 32 step 1 reduction iter_args(%acc = %z) -> (f32) {
    %x = memref.load %a[%i] : memref<32xf32>
    %t = arith.addf %acc, %x : f32
    memref.store %acc, %o[%i] : memref<32xf32>
    loop.yield %t : f32
  }
  func.return
}

// acc - x: subtraction is no reduction it knows.
// CHECK:      loop-vectorize: iter_arg is not a known reduction (1)
// CHECK-NEXT:   @not_reduction loop.for
func.func @not_reduction(%a: memref<32xf32>, %z: f32) attributes {loop.kernel} {
  %s = loop.for %i = 0 to 32 step 1 reduction iter_args(%acc = %z) -> (f32) {
    %x = memref.load %a[%i] : memref<32xf32>
    %t = arith.subf %acc, %x : f32
    loop.yield %t : f32
  }
  func.return
}

// The yielded value does not combine the accumulator.
// CHECK:      loop-vectorize: iter_arg is not combined with a loop value (1)
// CHECK-NEXT:   @not_combined loop.for
func.func @not_combined(%a: memref<32xf32>, %z: f32) attributes {loop.kernel} {
  %s = loop.for %i = 0 to 32 step 1 reduction iter_args(%acc = %z) -> (f32) {
    %x = memref.load %a[%i] : memref<32xf32>
    %u = arith.addf %acc, %x : f32
    %t = arith.addf %x, %x : f32
    loop.yield %t : f32
  }
  func.return
}

func.func @sum(%a: memref<32xf32>, %z: f32) attributes {loop.kernel} {
  %s = loop.for %i = 0 to 32 step 1 reduction iter_args(%acc = %z) -> (f32) {
    %x = memref.load %a[%i] : memref<32xf32>
    %t = arith.addf %acc, %x : f32
    loop.yield %t : f32
  }
  func.return
}

// A sum of index values.
// CHECK:      loop-vectorize: reduction over an unsupported type (1)
// CHECK-NEXT:   @index_sum loop.for
func.func @index_sum(%a: memref<32xindex>, %z: index) attributes {loop.kernel} {
  %s = loop.for %i = 0 to 32 step 1 reduction iter_args(%acc = %z) -> (index) {
    %x = memref.load %a[%i] : memref<32xindex>
    %t = arith.addi %acc, %x : index
    loop.yield %t : index
  }
  func.return
}

// The vector form fails the verifier: arith.index_cast of i32 vectors (xDSL
// verifies its scalar form only). The verifier's message, on one line.
// CHECK:      loop-vectorize: vector form does not verify: operand 'input' {{.*}} vector<8xi32> (1)
// CHECK-NEXT:   @index_cast loop.for
func.func @index_cast(%a: memref<32xi32>, %o: memref<32xi32>) attributes {loop.kernel} {
  loop.for %i = 0 to 32 step 1 parallel {
    %x = memref.load %a[%i] : memref<32xi32>
    %w = arith.index_cast %x : i32 to index
    %y = arith.index_cast %w : index to i32
    memref.store %y, %o[%i] : memref<32xi32>
    loop.yield
  }
  func.return
}
