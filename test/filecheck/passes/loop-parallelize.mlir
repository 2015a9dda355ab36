// RUN: smelt-opt %s -p 'loop-parallelize{threads=2 min_work=1000}' | filecheck %s
// RUN: smelt-opt %s -p 'loop-parallelize{threads=1}' | filecheck %s --check-prefix=SERIAL
// RUN: smelt-opt %s -p 'loop-parallelize{threads=2}' | filecheck %s --check-prefix=MINWORK

// SERIAL-NOT: loop.threads = 2

// A batch-1 nest: the one-trip loop becomes a constant, the next level joins it
// until there are tasks_per_thread·threads = 8 iterations (12 here).
// CHECK-LABEL: func.func @batch_one
// CHECK:      %[[N:.*]] = arith.constant 0 : index
// CHECK-NEXT: loop.for %[[C:.*]] = 0 to 12 step 1 parallel {
// CHECK-NEXT:   loop.for %[[K:.*]] = 0 to 128 step 1 parallel {
// CHECK-NEXT:     memref.load %{{.*}}[%[[N]], %[[C]], %[[K]]]
// CHECK:      } {loop.threads = 2 : i64}
// MINWORK-LABEL: func.func @batch_one
// MINWORK-NOT:   loop.threads
// MINWORK:       func.return
func.func @batch_one(%a: memref<1x12x128xf32>, %o: memref<1x12x128xf32>) attributes {loop.kernel} {
  loop.for %n = 0 to 1 step 1 parallel {
    loop.for %c = 0 to 12 step 1 parallel {
      loop.for %k = 0 to 128 step 1 parallel {
        %x = memref.load %a[%n, %c, %k] : memref<1x12x128xf32>
        memref.store %x, %o[%n, %c, %k] : memref<1x12x128xf32>
        loop.yield
      }
      loop.yield
    }
    loop.yield
  }
  func.return
}

// Two short levels collapse into one loop of 3·4 iterations; the indices come
// back with a division and a remainder (and lb/step applied).
// CHECK-LABEL: func.func @collapse
// CHECK:      loop.for %[[T:.*]] = 0 to 12 step 1 parallel {
// CHECK-NEXT:   %[[FOUR:.*]] = arith.constant 4 : index
// CHECK-NEXT:   %[[R:.*]] = arith.remui %[[T]], %[[FOUR]] : index
// CHECK-NEXT:   %[[Q:.*]] = arith.divui %[[T]], %[[FOUR]] : index
// CHECK-NEXT:   %[[TWO:.*]] = arith.constant 2 : index
// CHECK-NEXT:   %[[S:.*]] = arith.muli %[[R]], %[[TWO]] : index
// CHECK-NEXT:   %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT:   %[[J:.*]] = arith.addi %[[S]], %[[ONE]] : index
// CHECK-NEXT:   loop.for %[[K:.*]] = 0 to 64 step 1 parallel {
// CHECK-NEXT:     memref.load %{{.*}}[%[[Q]], %[[J]], %[[K]]]
// CHECK:      } {loop.threads = 2 : i64}
func.func @collapse(%a: memref<3x9x64xf32>, %o: memref<3x9x64xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 3 step 1 parallel {
    loop.for %j = 1 to 9 step 2 parallel {
      loop.for %k = 0 to 64 step 1 parallel {
        %x = memref.load %a[%i, %j, %k] : memref<3x9x64xf32>
        memref.store %x, %o[%i, %j, %k] : memref<3x9x64xf32>
        loop.yield
      }
      loop.yield
    }
    loop.yield
  }
  func.return
}

// Enough outer iterations: marked as is. The innermost loop is never collapsed
// into it (that would cost a division per element).
// CHECK-LABEL: func.func @rows
// CHECK:      loop.for %{{.*}} = 0 to 64 step 1 parallel {
// CHECK-NEXT:   loop.for %{{.*}} = 0 to 32 step 1 parallel {
// CHECK:      } {loop.threads = 2 : i64}
// CHECK-LABEL: func.func @short_rows
// CHECK:      loop.for %{{.*}} = 0 to 2 step 1 parallel {
// CHECK-NEXT:   loop.for %{{.*}} = 0 to 4096 step 1 parallel {
// CHECK:      } {loop.threads = 2 : i64}
func.func @rows(%a: memref<64x32xf32>, %o: memref<64x32xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 64 step 1 parallel {
    loop.for %j = 0 to 32 step 1 parallel {
      %x = memref.load %a[%i, %j] : memref<64x32xf32>
      memref.store %x, %o[%i, %j] : memref<64x32xf32>
      loop.yield
    }
    loop.yield
  }
  func.return
}
func.func @short_rows(%a: memref<2x4096xf32>, %o: memref<2x4096xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 2 step 1 parallel {
    loop.for %j = 0 to 4096 step 1 parallel {
      %x = memref.load %a[%i, %j] : memref<2x4096xf32>
      memref.store %x, %o[%i, %j] : memref<2x4096xf32>
      loop.yield
    }
    loop.yield
  }
  func.return
}

// Too little work (8·4 loads and stores < min_work): stays serial.
// CHECK-LABEL: func.func @tiny
// CHECK-NOT:  loop.threads
// CHECK:      func.return
func.func @tiny(%a: memref<8x4xf32>, %o: memref<8x4xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 8 step 1 parallel {
    loop.for %j = 0 to 4 step 1 parallel {
      %x = memref.load %a[%i, %j] : memref<8x4xf32>
      memref.store %x, %o[%i, %j] : memref<8x4xf32>
      loop.yield
    }
    loop.yield
  }
  func.return
}

// An outermost loop that is a reduction is not parallel: stays serial.
// CHECK-LABEL: func.func @reduction_outer
// CHECK-NOT:  loop.threads
// CHECK:      func.return
func.func @reduction_outer(%a: memref<64x64xf32>, %o: memref<64xf32>) attributes {loop.kernel} {
  loop.for %k = 0 to 64 step 1 reduction {
    loop.for %j = 0 to 64 step 1 parallel {
      %x = memref.load %a[%k, %j] : memref<64x64xf32>
      %y = memref.load %o[%j] : memref<64xf32>
      %s = arith.addf %x, %y : f32
      memref.store %s, %o[%j] : memref<64xf32>
      loop.yield
    }
    loop.yield
  }
  func.return
}

// A scratch buffer allocated outside the loop would be shared by the threads.
// CHECK-LABEL: func.func @shared_scratch
// CHECK-NOT:  loop.threads
// CHECK:      func.return
func.func @shared_scratch(%a: memref<64x64xf32>, %o: memref<64x64xf32>) attributes {loop.kernel} {
  %t = memref.alloca() : memref<64xf32>
  loop.for %i = 0 to 64 step 1 parallel {
    loop.for %j = 0 to 64 step 1 parallel {
      %x = memref.load %a[%i, %j] : memref<64x64xf32>
      memref.store %x, %t[%j] : memref<64xf32>
      loop.yield
    }
    loop.for %j = 0 to 64 step 1 parallel {
      %x = memref.load %t[%j] : memref<64xf32>
      memref.store %x, %o[%i, %j] : memref<64x64xf32>
      loop.yield
    }
    loop.yield
  }
  func.return
}

// Only outermost loops are marked, and a marked nest is left alone.
// CHECK-LABEL: func.func @marked
// CHECK:      loop.for %{{.*}} = 0 to 64 step 1 parallel {
// CHECK-NEXT:   loop.for %{{.*}} = 0 to 64 step 1 parallel {
// CHECK-NOT:  loop.threads = 2
// CHECK:      } {loop.threads = 4 : i64}
func.func @marked(%a: memref<64x64xf32>, %o: memref<64x64xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 64 step 1 parallel {
    loop.for %j = 0 to 64 step 1 parallel {
      %x = memref.load %a[%i, %j] : memref<64x64xf32>
      memref.store %x, %o[%i, %j] : memref<64x64xf32>
      loop.yield
    }
    loop.yield
  } {loop.threads = 4 : i64}
  func.return
}
