// loop-vectorize --remarks on two-loop copies whose output rows are short
// (vectorize_interleave.InterleaveCopy.check): each reason the interleave rule
// declines such a copy, one kernel per guard. A nest that is no copy (not one load
// stored unchanged) gets no interleave remark: for it the rule is no news. Two
// guards cannot be reached with a remark: "not one inner loop" (a candidate holds
// exactly one loop) and "not one load and one store" (a copy has one of each);
// they decline the nests that are no copies, silently.
// RUN: smelt-opt %s -p loop-vectorize --remarks 2>&1 >/dev/null | filecheck %s
// RUN: smelt-opt %s -p loop-vectorize | filecheck %s --check-prefix=IR

// CHECK: remarks: {{[0-9]+}} (why a pass left an op alone), by pass and reason:
// CHECK-NOT: @copy

// IR-LABEL: func.func @copy
// IR-NOT:   loop.for
// IR:       vector.shuffle
// IR-LABEL: func.func @outer_step
// IR-LABEL: func.func @nonaffine
// IR-NEXT:    loop.for %{{.*}} = 0 to 4 step 1 parallel {
// IR-NEXT:      loop.for %{{.*}} = 0 to 3 step 1 parallel {
// IR-NEXT:        arith.muli
// IR-NEXT:        memref.load
// IR-NEXT:        memref.store

// The copy the rule interleaves: out[j, i] = in[i, j], 16 rows of 3.
func.func @copy(%in: memref<3x16xf32>, %out: memref<16x3xf32>) attributes {loop.kernel} {
  loop.for %j = 0 to 16 step 1 parallel {
    loop.for %i = 0 to 3 step 1 parallel {
        %x = memref.load %in[%i, %j] : memref<3x16xf32>
        memref.store %x, %out[%j, %i] : memref<16x3xf32>
        loop.yield
    }
    loop.yield
  }
  func.return
}

// The outer loop steps by 2.
// CHECK:      loop-vectorize: copy not interleaved: outer loop has a step or iter_args (1)
// CHECK-NEXT:   @outer_step loop.for
func.func @outer_step(%in: memref<3x16xf32>, %out: memref<16x3xf32>) attributes {loop.kernel} {
  loop.for %j = 0 to 16 step 2 parallel {
    loop.for %i = 0 to 3 step 1 parallel {
        %x = memref.load %in[%i, %j] : memref<3x16xf32>
        memref.store %x, %out[%j, %i] : memref<16x3xf32>
        loop.yield
    }
    loop.yield
  }
  func.return
}

// 64 output rows: more than 4 vectors of 8 lanes.
// CHECK:      loop-vectorize: copy not interleaved: outer loop is not 2 to MAX_CHUNKS·lanes iterations (1)
// CHECK-NEXT:   @outer_long loop.for
func.func @outer_long(%in: memref<3x64xf32>, %out: memref<64x3xf32>) attributes {loop.kernel} {
  loop.for %j = 0 to 64 step 1 parallel {
    loop.for %i = 0 to 3 step 1 parallel {
        %x = memref.load %in[%i, %j] : memref<3x64xf32>
        memref.store %x, %out[%j, %i] : memref<64x3xf32>
        loop.yield
    }
    loop.yield
  }
  func.return
}

// The inner loop starts at 1.
// CHECK:      loop-vectorize: copy not interleaved: inner loop does not run 0 to g by 1 (1)
// CHECK-NEXT:   @inner_from_1 loop.for
func.func @inner_from_1(%in: memref<3x16xf32>, %out: memref<16x3xf32>) attributes {loop.kernel} {
  loop.for %j = 0 to 16 step 1 parallel {
    loop.for %i = 1 to 3 step 1 parallel {
        %x = memref.load %in[%i, %j] : memref<3x16xf32>
        memref.store %x, %out[%j, %i] : memref<16x3xf32>
        loop.yield
    }
    loop.yield
  }
  func.return
}

// Output rows of 12 (a tile transpose, not a short-row copy).
// CHECK:      loop-vectorize: copy not interleaved: inner loop is not 2 to MAX_GROUP iterations (1)
// CHECK-NEXT:   @long_rows loop.for
func.func @long_rows(%in: memref<12x16xf32>, %out: memref<16x12xf32>) attributes {loop.kernel} {
  loop.for %j = 0 to 16 step 1 parallel {
    loop.for %i = 0 to 12 step 1 parallel {
        %x = memref.load %in[%i, %j] : memref<12x16xf32>
        memref.store %x, %out[%j, %i] : memref<16x12xf32>
        loop.yield
    }
    loop.yield
  }
  func.return
}

// An op beside the load and the store.
// CHECK:      loop-vectorize: copy not interleaved: arith.addf in the copy (1)
// CHECK-NEXT:   @op_in_copy loop.for
func.func @op_in_copy(%in: memref<3x16xf32>, %out: memref<16x3xf32>) attributes {loop.kernel} {
  loop.for %j = 0 to 16 step 1 parallel {
    loop.for %i = 0 to 3 step 1 parallel {
        %x = memref.load %in[%i, %j] : memref<3x16xf32>
        %e = arith.addf %x, %x : f32
        memref.store %x, %out[%j, %i] : memref<16x3xf32>
        loop.yield
    }
    loop.yield
  }
  func.return
}

// A transpose in place.
// CHECK:      loop-vectorize: copy not interleaved: not a copy between two buffers (1)
// CHECK-NEXT:   @same_buffer loop.for
func.func @same_buffer(%in: memref<16x16xf32>) attributes {loop.kernel} {
  loop.for %j = 0 to 16 step 1 parallel {
    loop.for %i = 0 to 3 step 1 parallel {
        %x = memref.load %in[%i, %j] : memref<16x16xf32>
        memref.store %x, %in[%j, %i] : memref<16x16xf32>
        loop.yield
    }
    loop.yield
  }
  func.return
}

// Output rows of 4, inner loop of 3.
// CHECK:      loop-vectorize: copy not interleaved: buffers are not contiguous or rows are not g long (1)
// CHECK-NEXT:   @rows_not_g loop.for
func.func @rows_not_g(%in: memref<3x16xf32>, %out: memref<16x4xf32>) attributes {loop.kernel} {
  loop.for %j = 0 to 16 step 1 parallel {
    loop.for %i = 0 to 3 step 1 parallel {
        %x = memref.load %in[%i, %j] : memref<3x16xf32>
        memref.store %x, %out[%j, %i] : memref<16x4xf32>
        loop.yield
    }
    loop.yield
  }
  func.return
}

// An index j·j. (Before: j·j counted as loop-invariant, and the copy read
// in[0, i, 0..3] for every j: wrong values.)
// CHECK:      loop-vectorize: copy not interleaved: an index is not affine (1)
// CHECK-NEXT:   @nonaffine loop.for
func.func @nonaffine(%in: memref<10x3x4xf32>, %out: memref<4x3xf32>) attributes {loop.kernel} {
  loop.for %j = 0 to 4 step 1 parallel {
    loop.for %i = 0 to 3 step 1 parallel {
        %jj = arith.muli %j, %j : index
        %x = memref.load %in[%jj, %i, %j] : memref<10x3x4xf32>
        memref.store %x, %out[%j, %i] : memref<4x3xf32>
        loop.yield
    }
    loop.yield
  }
  func.return
}

// The store is out[i, i].
// CHECK:      loop-vectorize: copy not interleaved: the store is not out[…, j + c, i] (1)
// CHECK-NEXT:   @store_not_ji loop.for
func.func @store_not_ji(%in: memref<3x16xf32>, %out: memref<16x3xf32>) attributes {loop.kernel} {
  loop.for %j = 0 to 16 step 1 parallel {
    loop.for %i = 0 to 3 step 1 parallel {
        %x = memref.load %in[%i, %j] : memref<3x16xf32>
        memref.store %x, %out[%i, %i] : memref<16x3xf32>
        loop.yield
    }
    loop.yield
  }
  func.return
}

// The load is in[i, i].
// CHECK:      loop-vectorize: copy not interleaved: the input row does not run along j (1)
// CHECK-NEXT:   @row_not_j loop.for
func.func @row_not_j(%in: memref<3x3xf32>, %out: memref<16x3xf32>) attributes {loop.kernel} {
  loop.for %j = 0 to 16 step 1 parallel {
    loop.for %i = 0 to 3 step 1 parallel {
        %x = memref.load %in[%i, %i] : memref<3x3xf32>
        memref.store %x, %out[%j, %i] : memref<16x3xf32>
        loop.yield
    }
    loop.yield
  }
  func.return
}

// The load is in[j, j].
// CHECK:      loop-vectorize: copy not interleaved: the input is not in[…, i + a, …, j + b] (1)
// CHECK-NEXT:   @input_not_i loop.for
func.func @input_not_i(%in: memref<16x16xf32>, %out: memref<16x3xf32>) attributes {loop.kernel} {
  loop.for %j = 0 to 16 step 1 parallel {
    loop.for %i = 0 to 3 step 1 parallel {
        %x = memref.load %in[%j, %j] : memref<16x16xf32>
        memref.store %x, %out[%j, %i] : memref<16x3xf32>
        loop.yield
    }
    loop.yield
  }
  func.return
}

// A load in the outer loop beside the inner one.
// CHECK:      loop-vectorize: copy not interleaved: memref.load beside the inner loop (1)
// CHECK-NEXT:   @beside loop.for
func.func @beside(%in: memref<16x16xf32>, %out: memref<16x3xf32>) attributes {loop.kernel} {
  loop.for %j = 0 to 16 step 1 parallel {
      %u = memref.load %in[%j, %j] : memref<16x16xf32>
      memref.store %u, %out[%j, %j] : memref<16x3xf32>
    loop.for %i = 0 to 3 step 1 parallel {
        %x = memref.load %in[%i, %j] : memref<16x16xf32>
        memref.store %x, %out[%j, %i] : memref<16x3xf32>
        loop.yield
    }
    loop.yield
  }
  func.return
}
