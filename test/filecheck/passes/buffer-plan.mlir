// RUN: smelt-opt %s -p buffer-plan | filecheck %s
// RUN: smelt-opt %s -p 'buffer-plan{inplace=false}' | filecheck %s --check-prefix=NOINPLACE

func.func @ew(%a: memref<16xf32>, %o: memref<16xf32>) attributes {loop.kernel, loop.elementwise = 1 : i64} {
  func.return
}
func.func @other(%a: memref<16xf32>, %o: memref<16xf32>) attributes {loop.kernel} {
  func.return
}

// A chain x → t0 → t1 → t2 → y: t2 reuses t0's bytes (t0 is dead by then).
// CHECK-LABEL: func.func @main
// CHECK-SAME: smelt.arena_bytes = 128 : i64
// CHECK-SAME: smelt.arena_lower_bound = 128 : i64
// CHECK-SAME: smelt.naive_bytes = 192 : i64
// CHECK-NEXT: loop.alloc offset([[A:[0-9]+]])
// CHECK-NEXT: loop.alloc offset([[B:[0-9]+]])
// CHECK-NEXT: loop.alloc offset([[A]])
func.func @main(%x: memref<16xf32>, %y: memref<16xf32>) {
  %t0 = loop.alloc : memref<16xf32>
  %t1 = loop.alloc : memref<16xf32>
  %t2 = loop.alloc : memref<16xf32>
  func.call @other(%x, %t0) : (memref<16xf32>, memref<16xf32>) -> ()
  func.call @other(%t0, %t1) : (memref<16xf32>, memref<16xf32>) -> ()
  func.call @other(%t1, %t2) : (memref<16xf32>, memref<16xf32>) -> ()
  func.call @other(%t2, %y) : (memref<16xf32>, memref<16xf32>) -> ()
  func.return
}

// An elementwise kernel writes its output over the input that dies there; without
// in-place reuse the two need separate bytes.
// CHECK-LABEL: func.func @inplace
// CHECK-SAME: smelt.arena_bytes = 64 : i64
// CHECK-NEXT: loop.alloc offset(0)
// CHECK-NEXT: loop.alloc offset(0)
// NOINPLACE-LABEL: func.func @inplace
// NOINPLACE-SAME: smelt.arena_bytes = 128 : i64
func.func @inplace(%x: memref<16xf32>, %y: memref<16xf32>) {
  %t0 = loop.alloc : memref<16xf32>
  %t1 = loop.alloc : memref<16xf32>
  func.call @other(%x, %t0) : (memref<16xf32>, memref<16xf32>) -> ()
  func.call @ew(%t0, %t1) : (memref<16xf32>, memref<16xf32>) -> ()
  func.call @other(%t1, %y) : (memref<16xf32>, memref<16xf32>) -> ()
  func.return
}

func.func @ew_bcast(%a: memref<1x8xf32>, %o: memref<2x8xf16>) attributes {loop.kernel, loop.elementwise = 1 : i64} {
  func.return
}
func.func @other2(%a: memref<16xf32>, %o: memref<2x8xf16>) attributes {loop.kernel} {
  func.return
}
func.func @other3(%a: memref<2x8xf16>, %o: memref<16xf32>) attributes {loop.kernel} {
  func.return
}

// Same bytes, other shape: the kernel reads its input (broadcast) at other
// indices than it writes, so the output gets bytes of its own (as without reuse).
// CHECK-LABEL: func.func @no_inplace_across_shapes
// CHECK-SAME: smelt.arena_bytes = 128 : i64
// NOINPLACE-LABEL: func.func @no_inplace_across_shapes
// NOINPLACE-SAME: smelt.arena_bytes = 128 : i64
func.func @no_inplace_across_shapes(%x: memref<16xf32>, %y: memref<16xf32>) {
  %t0 = loop.alloc : memref<1x8xf32>
  %t1 = loop.alloc : memref<2x8xf16>
  func.call @other(%x, %y) : (memref<16xf32>, memref<16xf32>) -> ()
  func.call @ew_bcast(%t0, %t1) : (memref<1x8xf32>, memref<2x8xf16>) -> ()
  func.call @other3(%t1, %y) : (memref<2x8xf16>, memref<16xf32>) -> ()
  func.return
}

// An input passed as a view of its buffer is not taken over either.
// CHECK-LABEL: func.func @no_inplace_through_a_view
// CHECK-SAME: smelt.arena_bytes = 128 : i64
func.func @no_inplace_through_a_view(%x: memref<16xf32>, %y: memref<16xf32>) {
  %t0 = loop.alloc : memref<4x4xf32>
  %t1 = loop.alloc : memref<16xf32>
  %v = loop.view %t0 : memref<4x4xf32> -> memref<16xf32>
  func.call @other(%x, %v) : (memref<16xf32>, memref<16xf32>) -> ()
  func.call @ew(%v, %t1) : (memref<16xf32>, memref<16xf32>) -> ()
  func.call @other(%t1, %y) : (memref<16xf32>, memref<16xf32>) -> ()
  func.return
}
