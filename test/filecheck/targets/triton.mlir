// RUN: smelt-opt %s -t triton | filecheck %s

// Each loop kernel becomes @triton.jit functions over its buffers; block sizes are
// constexpr parameters chosen by smelt/lowering/triton/schedule.py.

// Elementwise: grid points flattened into BLOCK lanes with a tail mask; operands of
// the grid's shape use the flat offset, broadcast ones the delinearized index.
// CHECK-LABEL: def gelu(x, b, y, BLOCK: tl.constexpr):
// CHECK:         offs = pid * BLOCK + tl.arange(0, BLOCK)
// CHECK-NEXT:    mask_l = offs < 256
// CHECK:         i2 = offs % 64
// CHECK-NEXT:    v3 = tl.load(x + offs, mask=mask_l)
// CHECK-NEXT:    v4 = tl.load(b + i2, mask=mask_l)
// CHECK:         tl.erf(
// CHECK:         .to(tl.float16)
// CHECK-NEXT:    tl.store(y + offs, {{.*}}, mask=mask_l)
func.func @gelu(%x: memref<4x64xf16>, %b: memref<64xf16>, %y: memref<4x64xf16>) attributes {loop.kernel} {
  %half = arith.constant 0.5 : f32
  %one = arith.constant 1.0 : f32
  %rs2 = arith.constant 0.70710678 : f32
  loop.for %i = 0 to 4 step 1 parallel {
    loop.for %j = 0 to 64 step 1 parallel {
      %v = memref.load %x[%i, %j] : memref<4x64xf16>
      %w = memref.load %b[%j] : memref<64xf16>
      %a = arith.extf %v : f16 to f32
      %c = arith.extf %w : f16 to f32
      %s = arith.addf %a, %c : f32
      %t = arith.mulf %s, %rs2 : f32
      %e = math.erf %t : f32
      %p = arith.addf %e, %one : f32
      %q = arith.mulf %s, %p : f32
      %r = arith.mulf %q, %half : f32
      %o = arith.truncf %r : f32 to f16
      memref.store %o, %y[%i, %j] : memref<4x64xf16>
      loop.yield
    }
    loop.yield
  }
  func.return
}

// A reduction chain runs as [BLOCK_M, BLOCK_R] blocks: block accumulators start at
// the combiner's identity, masked lanes keep it, one tree reduction at the end.
// CHECK-LABEL: def row_max(x, y, BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr):
// CHECK:         offs = pid * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
// CHECK:         acc1 = tl.broadcast_to(tl.full([], -8388608, tl.int32).to(tl.float32, bitcast=True), [BLOCK_M, BLOCK_R])
// CHECK-NEXT:    for {{r[0-9]+}} in range(0, 100, BLOCK_R):
// CHECK-NEXT:        {{r[0-9]+}} = {{r[0-9]+}} + tl.arange(0, BLOCK_R)[None, :]
// CHECK-NEXT:        mask_r = {{r[0-9]+}} < 100
// CHECK-NEXT:        {{v[0-9]+}} = tl.load(x + offs * 100 + {{r[0-9]+}}, mask=mask_l & mask_r)
// CHECK-NEXT:        {{v[0-9]+}} = tl.maximum({{acc[0-9]+}}, {{v[0-9]+}}, propagate_nan=tl.PropagateNan.ALL)
// CHECK-NEXT:        acc1 = tl.where(mask_l & mask_r,
// CHECK-NEXT:    v7 = tl.maximum(c6, tl.reduce(acc1, 1, _max_nan)[:, None]
// CHECK-NEXT:    tl.store(y + offs, v7, mask=mask_l)

func.func @row_max(%x: memref<8x100xf32>, %y: memref<8xf32>) attributes {loop.kernel} {
  %ninf = arith.constant 0xff800000 : f32
  loop.for %i = 0 to 8 step 1 parallel {
    %m = loop.for %j = 0 to 100 step 1 reduction iter_args(%acc = %ninf) -> (f32) {
      %v = memref.load %x[%i, %j] : memref<8x100xf32>
      %n = arith.maximumf %acc, %v : f32
      loop.yield %n : f32
    }
    memref.store %m, %y[%i] : memref<8xf32>
    loop.yield
  }
  func.return
}

// Dot form (an f32 accumulator over k): a tl.dot tile fed with the f16 loads, then
// the epilogue (here the rounding store) on the finished tile.
// CHECK-LABEL: def matmul_f16(a, b, c, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
// CHECK:         acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
// CHECK-NEXT:    for k0 in range(0, 64, BLOCK_K):
// CHECK:             v3 = tl.load(a + offs_m * 64 + k1, mask=mask_ka & mask_m, other=0)
// CHECK-NEXT:        v4 = tl.load(b + k2 * 48 + offs_n, mask=mask_kb & mask_n, other=0)
// CHECK-NEXT:        acc = tl.dot(tl.broadcast_to(v3, (BLOCK_M, BLOCK_K)), tl.broadcast_to(v4, (BLOCK_K, BLOCK_N)), acc)
// CHECK-NEXT:    v5 = acc.to(tl.float16)
// CHECK-NEXT:    tl.store(tl.broadcast_to(c + offs_m * 48 + offs_n, (BLOCK_M, BLOCK_N)), v5, mask=mask_m & mask_n)

func.func @matmul_f16(%a: memref<32x64xf16>, %b: memref<64x48xf16>, %c: memref<32x48xf16>) attributes {loop.kernel} {
  %zero = arith.constant 0.0 : f32
  loop.for %i = 0 to 32 step 1 parallel {
    loop.for %j = 0 to 48 step 1 parallel {
      %s = loop.for %k = 0 to 64 step 1 reduction iter_args(%acc = %zero) -> (f32) {
        %x = memref.load %a[%i, %k] : memref<32x64xf16>
        %w = memref.load %b[%k, %j] : memref<64x48xf16>
        %xf = arith.extf %x : f16 to f32
        %wf = arith.extf %w : f16 to f32
        %p = arith.mulf %xf, %wf : f32
        %n = arith.addf %acc, %p : f32
        loop.yield %n : f32
      }
      %o = arith.truncf %s : f32 to f16
      memref.store %o, %c[%i, %j] : memref<32x48xf16>
      loop.yield
    }
    loop.yield
  }
  func.return
}

// In-memory form (fill, k-n band accumulating in the output): the same tile, with
// tf32 inputs for f32 operands.
// CHECK-LABEL: def matmul_f32(
// CHECK:         acc = tl.dot({{.*}}, acc, input_precision="tf32")
// CHECK-NEXT:    tl.store(tl.broadcast_to(c + offs_m * 8 + offs_n, (BLOCK_M, BLOCK_N)), acc, mask=mask_m & mask_n)

func.func @matmul_f32(%a: memref<4x16xf32>, %b: memref<16x8xf32>, %c: memref<4x8xf32>) attributes {loop.kernel} {
  %zero = arith.constant 0.0 : f32
  loop.for %i = 0 to 4 step 1 parallel {
    loop.for %j = 0 to 8 step 1 parallel {
      memref.store %zero, %c[%i, %j] : memref<4x8xf32>
      loop.yield
    }
    loop.for %k = 0 to 16 step 1 reduction {
      %x = memref.load %a[%i, %k] : memref<4x16xf32>
      loop.for %j2 = 0 to 8 step 1 parallel {
        %acc = memref.load %c[%i, %j2] : memref<4x8xf32>
        %w = memref.load %b[%k, %j2] : memref<16x8xf32>
        %p = arith.mulf %x, %w : f32
        %n = arith.addf %acc, %p : f32
        memref.store %n, %c[%i, %j2] : memref<4x8xf32>
        loop.yield
      }
      loop.yield
    }
    loop.yield
  }
  func.return
}

// Fill, band and epilogue as three top-level nests (how convert-graph-to-loop
// writes a matmul for the loop schedulers) still make one dot kernel.
// CHECK-LABEL: def matmul_nests(
// CHECK:         acc = tl.dot(
// CHECK:         v5 = tl.load(bias + offs_n, mask=mask_n, other=0)
// CHECK-NEXT:    v6 = (acc + v5)
// CHECK-NEXT:    tl.store(tl.broadcast_to(c + offs_m * 8 + offs_n, (BLOCK_M, BLOCK_N)), v6, mask=mask_m & mask_n)
// CHECK-NOT:     def matmul_nests_p
func.func @matmul_nests(%a: memref<4x16xf32>, %b: memref<16x8xf32>, %bias: memref<8xf32>, %c: memref<4x8xf32>) attributes {loop.kernel} {
  %zero = arith.constant 0.0 : f32
  loop.for %i = 0 to 4 step 1 parallel {
    loop.for %j = 0 to 8 step 1 parallel {
      memref.store %zero, %c[%i, %j] : memref<4x8xf32>
      loop.yield
    }
    loop.yield
  }
  loop.for %i2 = 0 to 4 step 1 parallel {
    loop.for %k = 0 to 16 step 1 reduction {
      loop.for %j2 = 0 to 8 step 1 parallel {
        %x = memref.load %a[%i2, %k] : memref<4x16xf32>
        %w = memref.load %b[%k, %j2] : memref<16x8xf32>
        %acc = memref.load %c[%i2, %j2] : memref<4x8xf32>
        %p = arith.mulf %x, %w : f32
        %n = arith.addf %acc, %p : f32
        memref.store %n, %c[%i2, %j2] : memref<4x8xf32>
        loop.yield
      }
      loop.yield
    }
    loop.yield
  }
  loop.for %i3 = 0 to 4 step 1 parallel {
    loop.for %j3 = 0 to 8 step 1 parallel {
      %v = memref.load %c[%i3, %j3] : memref<4x8xf32>
      %o = memref.load %bias[%j3] : memref<8xf32>
      %s = arith.addf %v, %o : f32
      memref.store %s, %c[%i3, %j3] : memref<4x8xf32>
      loop.yield
    }
    loop.yield
  }
  func.return
}

// Without grid loops: one program, scalar values, a sequential loop.
// CHECK-LABEL: def scalar(x, y):
// CHECK:         for i3 in range(0, 3, 1):
// CHECK-NEXT:        v4 = tl.load(x + i3)
// CHECK:         tl.store(y + 0, {{.*}})
func.func @scalar(%x: memref<3xi32>, %y: memref<i32>) attributes {loop.kernel} {
  %zero = arith.constant 0 : i32
  %s = loop.for %i = 0 to 3 step 1 reduction iter_args(%acc = %zero) -> (i32) {
    %v = memref.load %x[%i] : memref<3xi32>
    %n = arith.addi %acc, %v : i32
    loop.yield %n : i32
  }
  memref.store %s, %y[] : memref<i32>
  func.return
}
