// RUN: smelt-opt -p 'loop-schedule-apply{step=tile}' %s | filecheck %s --check-prefix=TILE
// RUN: smelt-opt -p 'loop-schedule-apply{step=tile},loop-schedule-apply{step=unroll}' %s | filecheck %s --check-prefix=BOTH
// RUN: not smelt-opt -p 'loop-schedule-apply{step=spin}' %s 2>&1 | filecheck %s --check-prefix=BAD

// Each run applies the plan's steps of its kind and drops them from the plan.
// TILE-LABEL: func.func @copy(
// TILE-SAME:    loop.schedule = [{kind = "unroll", role = "i.1", sizes = array<i64: 0>}]
// TILE:         loop.for %{{.*}} = 0 to 16 step 4 parallel {
// TILE-NEXT:      loop.for %{{.*}} = 0 to 4 step 1 parallel {
// TILE:           } {loop.role = "i.1"}
// TILE:         } {loop.role = "i.0"}

// The last step gone, the plan goes: the point loop is unrolled.
// BOTH-LABEL: func.func @copy(
// BOTH-NOT:     loop.schedule
// BOTH:         loop.for %{{.*}} = 0 to 16 step 4 parallel {
// BOTH-COUNT-4:   memref.store
// BOTH:         } {loop.role = "i.0"}
func.func @copy(%x: memref<16xf32>, %y: memref<16xf32>) attributes {loop.kernel, loop.schedule = [{kind = "tile", role = "i", sizes = array<i64: 4>}, {kind = "unroll", role = "i.1", sizes = array<i64: 0>}]} {
  loop.for %i = 0 to 16 step 1 parallel {
    %v = memref.load %x[%i] : memref<16xf32>
    memref.store %v, %y[%i] : memref<16xf32>
    loop.yield
  } {loop.role = "i"}
  func.return
}

// Guard: a kernel without a plan is left alone.
// TILE-LABEL: func.func @plain(
// TILE:         loop.for %{{.*}} = 0 to 16 step 1 parallel {
// TILE:         } {loop.role = "i"}
func.func @plain(%x: memref<16xf32>, %y: memref<16xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 16 step 1 parallel {
    %v = memref.load %x[%i] : memref<16xf32>
    memref.store %v, %y[%i] : memref<16xf32>
    loop.yield
  } {loop.role = "i"}
  func.return
}

// BAD: loop-schedule-apply: unknown step 'spin': choose one of tile, interchange, fuse, pack, pack_constant, unroll
