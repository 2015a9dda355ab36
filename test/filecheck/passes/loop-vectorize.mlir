// RUN: smelt-opt %s -p loop-vectorize | filecheck %s
// RUN: smelt-opt %s -p 'loop-vectorize{width=4}' | filecheck %s --check-prefix=W4
// RUN: smelt-opt %s -p 'loop-vectorize{reassoc=false}' | filecheck %s --check-prefix=NOREASSOC
// RUN: smelt-opt %s -p 'loop-vectorize{stream_bytes=64}' | filecheck %s --check-prefix=STREAM
// RUN: smelt-opt %s -p 'loop-vectorize{tail=masked}' | filecheck %s --check-prefix=MASKED
// RUN: smelt-opt %s -p 'loop-vectorize{tail=masked mask_min=6}' | filecheck %s --check-prefix=MIN6
// RUN: smelt-opt %s -p 'loop-vectorize{tail=masked}' | smelt-opt | filecheck %s --check-prefix=MASKED
// RUN: not smelt-opt %s -p 'loop-vectorize{tail=sometimes}' 2>&1 | filecheck %s --check-prefix=BADTAIL

// With masks (tail=masked, or a target with mask registers), the remainder is
// one vector iteration under a lane mask of the iterations left: masked loads
// (zeros in inactive lanes), masked stores (never nontemporal); mask_min=6
// leaves a remainder of 5 scalar. No second copy of the body in scalar code.
// MASKED-LABEL: func.func @elementwise
// MASKED:      %[[N:.*]] = arith.constant 5 : index
// MASKED-NEXT: %[[M:.*]] = vector.create_mask %[[N]] : vector<8xi1>
// MASKED-NEXT: %[[Z:.*]] = arith.constant dense<0.000000e+00> : vector<8xf32>
// MASKED:      loop.for %{{.*}} = 0 to 32 step 8 parallel {
// MASKED:      loop.for %[[I:.*]] = 32 to 37 step 8 parallel {
// MASKED-NEXT:   %[[X:.*]] = vector.maskedload %{{.*}}[%[[I]]], %[[M]], %[[Z]] : memref<37xf32>, vector<8xi1>, vector<8xf32> into vector<8xf32>
// MASKED-NEXT:   %[[Y:.*]] = arith.mulf %[[X]], %{{.*}} : vector<8xf32>
// MASKED-NEXT:   %[[T:.*]] = math.tanh %[[Y]] : vector<8xf32>
// MASKED-NEXT:   vector.maskedstore %{{.*}}[%[[I]]], %[[M]], %[[T]] : memref<37xf32>, vector<8xi1>, vector<8xf32>
// MASKED-NOT:  memref.load
// MASKED:      func.return
// MIN6-LABEL:  func.func @elementwise
// MIN6-NOT:    vector.masked
// MIN6:        loop.for %{{.*}} = 32 to 37 step 1 parallel {
// BADTAIL: tail='sometimes'; choose one of auto, masked, scalar

// A masked reduction tail continues the vector accumulators; its inactive lanes
// keep theirs (loop.select), then one vector.reduction after both loops.
// MASKED-LABEL: func.func @reductions
// MASKED:       %[[V0:.*]], %[[V1:.*]] = loop.for %{{.*}} = 0 to 16 step 8 reduction
// MASKED:       %[[W0:.*]], %[[W1:.*]] = loop.for %{{.*}} = 16 to 20 step 8 reduction iter_args(%[[S:.*]] = %[[V0]], %{{.*}} = %[[V1]])
// MASKED:         %[[L:.*]] = vector.maskedload
// MASKED:         %[[A:.*]] = arith.addf %[[S]], %[[L]] : vector<8xf32>
// MASKED-NEXT:    %{{.*}} = loop.select %{{.*}}, %[[A]], %[[S]] : vector<8xi1>, vector<8xf32>
// MASKED:       vector.reduction <add>, %[[W0]]
// MASKED:       vector.reduction <maximumf>, %[[W1]]

// Stores to buffers of stream_bytes or more that the kernel never reads stream
// (nontemporal); not those of a kernel that reads the buffer it writes.
// STREAM-LABEL: func.func @elementwise
// STREAM:       vector.store {{.*}} {nontemporal = true} : memref<37xf32>, vector<8xf32>
// STREAM-LABEL: func.func @read_back
// STREAM:       vector.load
// STREAM-NOT:   nontemporal
// STREAM:       vector.store
// STREAM-NOT:   nontemporal
// STREAM:       func.return

// A contiguous elementwise loop: vector loop over 0..32, scalar remainder 32..37.
// Invariant values are broadcast once, before the vector loop.
// CHECK-LABEL: func.func @elementwise
// CHECK:      %[[TWO:.*]] = arith.constant 2.0
// CHECK-NEXT: %[[B:.*]] = vector.broadcast %[[TWO]] : f32 to vector<8xf32>
// CHECK-NEXT: loop.for %[[I:.*]] = 0 to 32 step 8 parallel {
// CHECK-NEXT:   %[[X:.*]] = vector.load %{{.*}}[%[[I]]] : memref<37xf32>, vector<8xf32>
// CHECK-NEXT:   %[[Y:.*]] = arith.mulf %[[X]], %[[B]] : vector<8xf32>
// CHECK-NEXT:   %[[T:.*]] = math.tanh %[[Y]] : vector<8xf32>
// CHECK-NEXT:   vector.store %[[T]], %{{.*}}[%[[I]]] : memref<37xf32>, vector<8xf32>
// CHECK:      loop.for %{{.*}} = 32 to 37 step 1 parallel {
// CHECK-NEXT:   memref.load
// CHECK-NEXT:   arith.mulf {{.*}} : f32
// CHECK-NEXT:   math.tanh {{.*}} : f32
// W4-LABEL: func.func @elementwise
// W4:       loop.for %{{.*}} = 0 to 36 step 4 parallel {
// W4:       vector.load {{.*}} vector<4xf32>
// W4:       loop.for %{{.*}} = 36 to 37 step 1 parallel {
func.func @elementwise(%a: memref<37xf32>, %o: memref<37xf32>) attributes {loop.kernel} {
  %two = arith.constant 2.0 : f32
  loop.for %i = 0 to 37 step 1 parallel {
    %x = memref.load %a[%i] : memref<37xf32>
    %y = arith.mulf %x, %two : f32
    %t = math.tanh %y : f32
    memref.store %t, %o[%i] : memref<37xf32>
    loop.yield
  }
  func.return
}

// A trip count that the width divides leaves no remainder loop.
// CHECK-LABEL: func.func @exact
// CHECK:      loop.for %[[J:.*]] = 0 to 16 step 8 parallel {
// CHECK-NEXT:   %[[X:.*]] = vector.load %{{.*}}[%{{.*}}, %[[J]]] : memref<4x16xf32>, vector<8xf32>
// CHECK-NEXT:   %[[Y:.*]] = vector.load %{{.*}}[%[[J]]] : memref<16xf32>, vector<8xf32>
// CHECK-NEXT:   %[[S:.*]] = arith.addf %[[X]], %[[Y]] : vector<8xf32>
// CHECK-NEXT:   vector.store %[[S]]
// CHECK-NEXT:   loop.yield
// CHECK-NEXT: }
// CHECK-NEXT: loop.yield
func.func @exact(%a: memref<4x16xf32>, %b: memref<16xf32>, %o: memref<4x16xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 4 step 1 parallel {
    loop.for %j = 0 to 16 step 1 parallel {
      %x = memref.load %a[%i, %j] : memref<4x16xf32>
      %y = memref.load %b[%j] : memref<16xf32>
      %s = arith.addf %x, %y : f32
      memref.store %s, %o[%i, %j] : memref<4x16xf32>
      loop.yield
    }
    loop.yield
  }
  func.return
}

// Reductions: per-lane accumulators from the neutral element (a scalar constant
// broadcast: xDSL does not parse back dense inf/NaN vectors), one
// vector.reduction with the initial value, the remainder continues from it.
// Float sums reassociate (fastmath<reassoc>); max does not need to.
// CHECK-LABEL: func.func @reductions
// CHECK:      %[[Z:.*]] = arith.constant 0.0
// CHECK-NEXT: %[[M:.*]] = arith.constant 0xff800000 : f32
// CHECK:      %[[Z0:.*]] = arith.constant -0.0{{0*}}e+00 : f32
// CHECK-NEXT: %[[ZV:.*]] = vector.broadcast %[[Z0]] : f32 to vector<8xf32>
// CHECK-NEXT: %[[M0:.*]] = arith.constant 0xff800000 : f32
// CHECK-NEXT: %[[MV:.*]] = vector.broadcast %[[M0]] : f32 to vector<8xf32>
// CHECK-NEXT: %[[VS:.*]], %[[VM:.*]] = loop.for %{{.*}} = 0 to 16 step 8 reduction iter_args(%[[A:.*]] = %[[ZV]], %[[B:.*]] = %[[MV]]) -> (vector<8xf32>, vector<8xf32>) {
// CHECK-NEXT:   %[[X:.*]] = vector.load
// CHECK-NEXT:   %[[N:.*]] = arith.addf %[[A]], %[[X]] : vector<8xf32>
// CHECK-NEXT:   %[[Q:.*]] = arith.maximumf %[[B]], %[[X]] : vector<8xf32>
// CHECK-NEXT:   loop.yield %[[N]], %[[Q]]
// CHECK:      %[[RS:.*]] = vector.reduction <add>, %[[VS]], %[[Z]] fastmath<reassoc> : vector<8xf32> into f32
// CHECK-NEXT: %[[RM:.*]] = vector.reduction <maximumf>, %[[VM]], %[[M]] : vector<8xf32> into f32
// CHECK-NEXT: loop.for %{{.*}} = 16 to 20 step 1 reduction iter_args(%{{.*}} = %[[RS]], %{{.*}} = %[[RM]]) -> (f32, f32)
// NOREASSOC-LABEL: func.func @reductions
// NOREASSOC-NOT:   vector
// NOREASSOC:       loop.for %{{.*}} = 0 to 20 step 1 reduction
func.func @reductions(%a: memref<20xf32>, %o: memref<2xf32>) attributes {loop.kernel} {
  %z = arith.constant 0.0 : f32
  %m = arith.constant 0xFF800000 : f32
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s, %mx = loop.for %i = 0 to 20 step 1 reduction iter_args(%acc = %z, %am = %m) -> (f32, f32) {
    %x = memref.load %a[%i] : memref<20xf32>
    %n = arith.addf %acc, %x : f32
    %q = arith.maximumf %am, %x : f32
    loop.yield %n, %q : f32, f32
  }
  memref.store %s, %o[%c0] : memref<2xf32>
  memref.store %mx, %o[%c1] : memref<2xf32>
  func.return
}

// An integer reduction needs no reassociation flag.
// CHECK-LABEL: func.func @int_sum
// CHECK:      %[[Z:.*]] = arith.constant 0 : i32
// CHECK:      %[[V:.*]] = loop.for {{.*}} = 0 to 16 step 8 reduction iter_args({{.*}}) -> (vector<8xi32>)
// CHECK:      %[[S:.*]] = vector.reduction <add>, %[[V]], %[[Z]] : vector<8xi32> into i32
// CHECK-NEXT: memref.store %[[S]]
// NOREASSOC-LABEL: func.func @int_sum
// NOREASSOC:       vector.reduction <add>
func.func @int_sum(%a: memref<16xi32>, %o: memref<1xi32>) attributes {loop.kernel} {
  %z = arith.constant 0 : i32
  %c0 = arith.constant 0 : index
  %s = loop.for %i = 0 to 16 step 1 reduction iter_args(%acc = %z) -> (i32) {
    %x = memref.load %a[%i] : memref<16xi32>
    %n = arith.addi %x, %acc : i32
    loop.yield %n : i32
  }
  memref.store %s, %o[%c0] : memref<1xi32>
  func.return
}

// The induction variable as data: lane l holds iv + l.
// CHECK-LABEL: func.func @iota
// CHECK:      %[[LANES:.*]] = arith.constant dense<[0, 1, 2, 3, 4, 5, 6, 7]> : vector<8xindex>
// CHECK:      loop.for %[[I:.*]] = 0 to 16 step 8 parallel {
// CHECK-NEXT:   %[[B:.*]] = vector.broadcast %[[I]] : index to vector<8xindex>
// CHECK-NEXT:   %{{.*}} = arith.addi %[[B]], %[[LANES]] : vector<8xindex>
func.func @iota(%o: memref<16xindex>) attributes {loop.kernel} {
  %c3 = arith.constant 3 : index
  loop.for %i = 0 to 16 step 1 parallel {
    %v = arith.addi %i, %c3 : index
    memref.store %v, %o[%i] : memref<16xindex>
    loop.yield
  }
  func.return
}

// An invariant load (no iv in its indices) stays scalar and moves before the loop.
// CHECK-LABEL: func.func @invariant_load
// CHECK:      loop.for %[[I:.*]] = 0 to 4 step 1 parallel {
// CHECK-NEXT:   %[[K:.*]] = memref.load %{{.*}}[%[[I]]] : memref<4xf32>
// CHECK-NEXT:   %[[KV:.*]] = vector.broadcast %[[K]] : f32 to vector<8xf32>
// CHECK-NEXT:   loop.for %{{.*}} = 0 to 16 step 8 parallel {
// CHECK-NEXT:     %[[X:.*]] = vector.load
// CHECK-NEXT:     arith.mulf %[[X]], %[[KV]] : vector<8xf32>
func.func @invariant_load(%a: memref<4x16xf32>, %s: memref<4xf32>, %o: memref<4x16xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 4 step 1 parallel {
    loop.for %j = 0 to 16 step 1 parallel {
      %x = memref.load %a[%i, %j] : memref<4x16xf32>
      %k = memref.load %s[%i] : memref<4xf32>
      %p = arith.mulf %x, %k : f32
      memref.store %p, %o[%i, %j] : memref<4x16xf32>
      loop.yield
    }
    loop.yield
  }
  func.return
}

// The iv in a leading dimension: a strided access, not contiguous.
// CHECK-LABEL: func.func @non_contiguous
// CHECK-NOT:  vector
// CHECK:      loop.for %{{.*}} = 0 to 16 step 1 parallel
func.func @non_contiguous(%a: memref<16x16xf32>, %o: memref<16xf32>) attributes {loop.kernel} {
  %c0 = arith.constant 0 : index
  loop.for %i = 0 to 16 step 1 parallel {
    %x = memref.load %a[%i, %c0] : memref<16x16xf32>
    memref.store %x, %o[%i] : memref<16xf32>
    loop.yield
  }
  func.return
}

// An index that is not iv + invariant.
// CHECK-LABEL: func.func @unanalyzable_index
// CHECK-NOT:  vector
// CHECK:      loop.for %{{.*}} = 0 to 16 step 1 parallel
func.func @unanalyzable_index(%a: memref<16xf32>, %o: memref<16xf32>) attributes {loop.kernel} {
  %c2 = arith.constant 2 : index
  loop.for %i = 0 to 16 step 1 parallel {
    %h = arith.divui %i, %c2 : index
    %x = memref.load %a[%h] : memref<16xf32>
    memref.store %x, %o[%i] : memref<16xf32>
    loop.yield
  }
  func.return
}

// Only innermost loops are vectorized: the outer loop keeps step 1.
// CHECK-LABEL: func.func @not_innermost
// CHECK:      loop.for %{{.*}} = 0 to 16 step 1 parallel {
// CHECK-NEXT:   loop.for %{{.*}} = 0 to 16 step 8 parallel {
func.func @not_innermost(%a: memref<16x16xf32>, %o: memref<16x16xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 16 step 1 parallel {
    loop.for %j = 0 to 16 step 1 parallel {
      %x = memref.load %a[%i, %j] : memref<16x16xf32>
      memref.store %x, %o[%i, %j] : memref<16x16xf32>
      loop.yield
    }
    loop.yield
  }
  func.return
}

// A store that the next iteration's load reads (a[i+1] = a[i]): vector order
// would change what the loads see.
// CHECK-LABEL: func.func @overlapping_store
// CHECK-NOT:  vector
// CHECK:      loop.for %{{.*}} = 0 to 16 step 1 parallel
func.func @overlapping_store(%a: memref<17xf32>) attributes {loop.kernel} {
  %c1 = arith.constant 1 : index
  loop.for %i = 0 to 16 step 1 parallel {
    %x = memref.load %a[%i] : memref<17xf32>
    %n = arith.addi %i, %c1 : index
    memref.store %x, %a[%n] : memref<17xf32>
    loop.yield
  }
  func.return
}

// A kernel marked loop.elementwise may get its output over its input
// (buffer-plan's in-place reuse): o[i] = a[i+1] then overlaps; a kernel without
// the mark gets distinct buffers and is vectorized.
// CHECK-LABEL: func.func @inplace_shift
// CHECK-NOT:  vector
// CHECK:      loop.for %{{.*}} = 0 to 16 step 1 parallel
// CHECK-LABEL: func.func @distinct_shift
// CHECK:      loop.for %[[I:.*]] = 0 to 16 step 8 parallel {
// CHECK-NEXT:   %[[N:.*]] = arith.addi %[[I]], %{{.*}} : index
// CHECK-NEXT:   vector.load %{{.*}}[%[[N]]]
func.func @inplace_shift(%a: memref<17xf32>, %o: memref<17xf32>) attributes {loop.kernel, loop.elementwise = 1 : i64} {
  %c1 = arith.constant 1 : index
  loop.for %i = 0 to 16 step 1 parallel {
    %n = arith.addi %i, %c1 : index
    %x = memref.load %a[%n] : memref<17xf32>
    memref.store %x, %o[%i] : memref<17xf32>
    loop.yield
  }
  func.return
}
func.func @distinct_shift(%a: memref<17xf32>, %o: memref<17xf32>) attributes {loop.kernel} {
  %c1 = arith.constant 1 : index
  loop.for %i = 0 to 16 step 1 parallel {
    %n = arith.addi %i, %c1 : index
    %x = memref.load %a[%n] : memref<17xf32>
    memref.store %x, %o[%i] : memref<17xf32>
    loop.yield
  }
  func.return
}

// A store to the same address every iteration.
// CHECK-LABEL: func.func @invariant_store
// CHECK-NOT:  vector
// CHECK:      loop.for %{{.*}} = 0 to 16 step 1 parallel
func.func @invariant_store(%a: memref<16xf32>, %o: memref<1xf32>) attributes {loop.kernel} {
  %c0 = arith.constant 0 : index
  loop.for %i = 0 to 16 step 1 parallel {
    %x = memref.load %a[%i] : memref<16xf32>
    memref.store %x, %o[%c0] : memref<1xf32>
    loop.yield
  }
  func.return
}

// Fewer iterations than lanes, and a step that is not 1.
// CHECK-LABEL: func.func @short_and_strided
// CHECK-NOT:  vector
// CHECK:      loop.for %{{.*}} = 0 to 5 step 1 parallel
// CHECK-NOT:  vector
// CHECK:      loop.for %{{.*}} = 0 to 32 step 2 parallel
func.func @short_and_strided(%a: memref<32xf32>, %o: memref<32xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 5 step 1 parallel {
    %x = memref.load %a[%i] : memref<32xf32>
    memref.store %x, %o[%i] : memref<32xf32>
    loop.yield
  }
  loop.for %i = 0 to 32 step 2 parallel {
    %x = memref.load %a[%i] : memref<32xf32>
    memref.store %x, %o[%i] : memref<32xf32>
    loop.yield
  }
  func.return
}

// An iter_arg that is not a reduction (a running difference).
// CHECK-LABEL: func.func @not_a_reduction
// CHECK-NOT:  vector
// CHECK:      loop.for %{{.*}} = 0 to 16 step 1 reduction
func.func @not_a_reduction(%a: memref<16xf32>, %o: memref<1xf32>) attributes {loop.kernel} {
  %z = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %s = loop.for %i = 0 to 16 step 1 reduction iter_args(%acc = %z) -> (f32) {
    %x = memref.load %a[%i] : memref<16xf32>
    %n = arith.subf %acc, %x : f32
    loop.yield %n : f32
  }
  memref.store %s, %o[%c0] : memref<1xf32>
  func.return
}

// A varying comparison and select: smelt's vector forms of them (xDSL 0.75's
// verify scalars only).
// CHECK-LABEL: func.func @varying_compare
// CHECK:      loop.for %{{.*}} = 0 to 16 step 8 parallel
// CHECK:        %[[P:.*]] = arith.cmpf ogt, %{{.*}}, %{{.*}} : vector<8xf32>
// CHECK:        arith.select %[[P]], %{{.*}}, %{{.*}} : vector<8xi1>, vector<8xf32>
// CHECK-NOT:  loop.for
// CHECK:      func.return
func.func @varying_compare(%a: memref<16xf32>, %o: memref<16xf32>) attributes {loop.kernel} {
  %z = arith.constant 0.0 : f32
  loop.for %i = 0 to 16 step 1 parallel {
    %x = memref.load %a[%i] : memref<16xf32>
    %p = arith.cmpf ogt, %x, %z : f32
    %r = arith.select %p, %x, %z : f32
    memref.store %r, %o[%i] : memref<16xf32>
    loop.yield
  }
  func.return
}

// A quantize chain (dequantize u8, requantize to u8): int / float casts on vectors.
// CHECK-LABEL: func.func @quantize_chain
// CHECK:      loop.for %{{.*}} = 0 to 16 step 8 parallel
// CHECK:        arith.uitofp %{{.*}} : vector<8xi8> to vector<8xf32>
// CHECK:        arith.fptosi %{{.*}} : vector<8xf32> to vector<8xi32>
// CHECK:        arith.trunci %{{.*}} : vector<8xi32> to vector<8xi8>
// CHECK-NOT:  loop.for
// CHECK:      func.return
func.func @quantize_chain(%a: memref<16xi8>, %o: memref<16xi8>) attributes {loop.kernel} {
  %half = arith.constant 0.5 : f32
  %lo = arith.constant 0.0 : f32
  %hi = arith.constant 255.0 : f32
  loop.for %i = 0 to 16 step 1 parallel {
    %q = memref.load %a[%i] : memref<16xi8>
    %x = arith.uitofp %q : i8 to f32
    %y = arith.mulf %x, %half : f32
    %r = math.roundeven %y : f32
    %c = arith.minimumf %r, %hi : f32
    %d = arith.maximumf %c, %lo : f32
    %w = arith.fptosi %d : f32 to i32
    %n = arith.trunci %w : i32 to i8
    memref.store %n, %o[%i] : memref<16xi8>
    loop.yield
  }
  func.return
}

func.func @read_back(%o: memref<32xf32>) attributes {loop.kernel} {
  %two = arith.constant 2.0 : f32
  loop.for %i = 0 to 32 step 1 parallel {
    %x = memref.load %o[%i] : memref<32xf32>
    %y = arith.mulf %x, %two : f32
    memref.store %y, %o[%i] : memref<32xf32>
    loop.yield
  }
  func.return
}

// A copy whose output rows are short (g = 3 elements, the output's last dim)
// and whose input rows run along the outer loop: each 8 iterations of the outer
// loop become 3 row loads, one interleaving shuffle and one store of 24
// contiguous elements; the last 4 iterations a group of their own.
// W4 splits the 12 iterations into three groups of 4.
// CHECK-LABEL: func.func @short_rows
// CHECK:       %[[R0:.*]] = vector.load %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] : memref<2x3x12xf32>, vector<8xf32>
// CHECK:       %[[R1:.*]] = vector.load {{.*}} : memref<2x3x12xf32>, vector<8xf32>
// CHECK:       %[[R2:.*]] = vector.load {{.*}} : memref<2x3x12xf32>, vector<8xf32>
// CHECK:       %[[C:.*]] = vector.shuffle %[[R0]], %[[R1]] [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] : vector<8xf32>, vector<8xf32>
// CHECK-NEXT:  %[[D:.*]] = vector.shuffle %[[C]], %[[R2]] [{{.*}}] : vector<16xf32>, vector<8xf32>
// CHECK-NEXT:  %[[S:.*]] = vector.shuffle %[[D]], %[[D]] [0, 8, 16, 1, 9, 17, 2, 10, 18, 3, 11, 19, 4, 12, 20, 5, 13, 21, 6, 14, 22, 7, 15, 23] : vector<24xf32>, vector<24xf32>
// CHECK:       vector.store %[[S]], %{{.*}} : memref<2x12x3xf32>, vector<24xf32>
// CHECK:       vector.shuffle {{.*}} : vector<12xf32>, vector<12xf32>
// CHECK:       vector.store {{.*}} : memref<2x12x3xf32>, vector<12xf32>
// CHECK-NOT:   memref.store
// CHECK:       func.return
// W4-LABEL:    func.func @short_rows
// W4-COUNT-3:  vector.store {{.*}} : memref<2x12x3xf32>, vector<12xf32>
// W4-NOT:      memref.store
func.func @short_rows(%a: memref<2x3x12xf32>, %o: memref<2x12x3xf32>) attributes {loop.kernel} {
  loop.for %n = 0 to 2 step 1 parallel {
    loop.for %j = 0 to 12 step 1 parallel {
      loop.for %i = 0 to 3 step 1 parallel {
        %x = memref.load %a[%n, %i, %j] : memref<2x3x12xf32>
        memref.store %x, %o[%n, %j, %i] : memref<2x12x3xf32>
        loop.yield
      }
      loop.yield
    }
    loop.yield
  }
  func.return
}
