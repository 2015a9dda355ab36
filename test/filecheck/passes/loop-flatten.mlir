// RUN: smelt-opt %s -p 'loop-flatten' | filecheck %s

// Same shape: the whole nest (one-trip batch level included) is one loop over
// 4·6 elements; @main passes views with the dims joined.
// CHECK-LABEL: func.func @same_shape(%{{.*}}: memref<24xf32>, %{{.*}}: memref<24xf32>, %{{.*}}: memref<24xf32>)
// CHECK-NEXT:   %[[Z:.*]] = arith.constant 0 : index
// CHECK-NEXT:   loop.for %[[T:.*]] = 0 to 24 step 1 parallel {
// CHECK-NEXT:     memref.load %{{.*}}[%[[T]]] : memref<24xf32>
// CHECK-NEXT:     memref.load %{{.*}}[%[[T]]] : memref<24xf32>
// CHECK-NEXT:     arith.addf
// CHECK-NEXT:     memref.store %{{.*}}, %{{.*}}[%[[T]]] : memref<24xf32>
// CHECK-NEXT:     loop.yield
// CHECK-NEXT:   }
func.func @same_shape(%a: memref<1x4x6xf32>, %b: memref<1x4x6xf32>, %o: memref<1x4x6xf32>) attributes {loop.kernel, loop.elementwise = 1 : i64} {
  %z = arith.constant 0 : index
  loop.for %n = 0 to 1 step 1 parallel {
    loop.for %c = 0 to 4 step 1 parallel {
      loop.for %w = 0 to 6 step 1 parallel {
        %x = memref.load %a[%z, %c, %w] : memref<1x4x6xf32>
        %y = memref.load %b[%n, %c, %w] : memref<1x4x6xf32>
        %s = arith.addf %x, %y : f32
        memref.store %s, %o[%n, %c, %w] : memref<1x4x6xf32>
        loop.yield
      }
      loop.yield
    }
    loop.yield
  }
  func.return
}

// A per-channel constant [C, 1, 1]: H and W join, the channel loop stays
// outer, the constant keeps its shape and indices.
// CHECK-LABEL: func.func @per_channel(%{{.*}}: memref<4x15xf32>, %{{.*}}: memref<4x1x1xf32>, %{{.*}}: memref<4x15xf32>)
// CHECK:        loop.for %[[C:.*]] = 0 to 4 step 1 parallel {
// CHECK-NEXT:     loop.for %[[T:.*]] = 0 to 15 step 1 parallel {
// CHECK-NEXT:       memref.load %{{.*}}[%[[C]], %[[T]]] : memref<4x15xf32>
// CHECK-NEXT:       memref.load %{{.*}}[%[[C]], %{{.*}}, %{{.*}}] : memref<4x1x1xf32>
// CHECK:            memref.store %{{.*}}, %{{.*}}[%[[C]], %[[T]]] : memref<4x15xf32>
func.func @per_channel(%a: memref<4x3x5xf32>, %b: memref<4x1x1xf32>, %o: memref<4x3x5xf32>) attributes {loop.kernel} {
  %z = arith.constant 0 : index
  loop.for %c = 0 to 4 step 1 parallel {
    loop.for %h = 0 to 3 step 1 parallel {
      loop.for %w = 0 to 5 step 1 parallel {
        %x = memref.load %a[%c, %h, %w] : memref<4x3x5xf32>
        %y = memref.load %b[%c, %z, %z] : memref<4x1x1xf32>
        %s = arith.mulf %x, %y : f32
        memref.store %s, %o[%c, %h, %w] : memref<4x3x5xf32>
        loop.yield
      }
      loop.yield
    }
    loop.yield
  }
  func.return
}

// A row vector [W] broadcast over rows: its dim is indexed by the innermost iv
// alone, so no two levels join and the kernel is left alone.
// CHECK-LABEL: func.func @row_broadcast(%{{.*}}: memref<3x5xf32>, %{{.*}}: memref<5xf32>, %{{.*}}: memref<3x5xf32>)
// CHECK-NEXT:   loop.for %{{.*}} = 0 to 3 step 1 parallel {
// CHECK-NEXT:     loop.for %{{.*}} = 0 to 5 step 1 parallel {
func.func @row_broadcast(%a: memref<3x5xf32>, %b: memref<5xf32>, %o: memref<3x5xf32>) attributes {loop.kernel} {
  loop.for %h = 0 to 3 step 1 parallel {
    loop.for %w = 0 to 5 step 1 parallel {
      %x = memref.load %a[%h, %w] : memref<3x5xf32>
      %y = memref.load %b[%w] : memref<5xf32>
      %s = arith.addf %x, %y : f32
      memref.store %s, %o[%h, %w] : memref<3x5xf32>
      loop.yield
    }
    loop.yield
  }
  func.return
}

// A transpose (the output's dims in another order) is not contiguous for both.
// CHECK-LABEL: func.func @transpose(%{{.*}}: memref<3x5xf32>, %{{.*}}: memref<5x3xf32>)
// CHECK-NEXT:   loop.for %{{.*}} = 0 to 3 step 1 parallel {
func.func @transpose(%a: memref<3x5xf32>, %o: memref<5x3xf32>) attributes {loop.kernel} {
  loop.for %h = 0 to 3 step 1 parallel {
    loop.for %w = 0 to 5 step 1 parallel {
      %x = memref.load %a[%h, %w] : memref<3x5xf32>
      memref.store %x, %o[%w, %h] : memref<5x3xf32>
      loop.yield
    }
    loop.yield
  }
  func.return
}

// An iv used in arithmetic (not only as an index) keeps its loop.
// CHECK-LABEL: func.func @iv_used(%{{.*}}: memref<3x5xf32>)
// CHECK-NEXT:   loop.for %{{.*}} = 0 to 3 step 1 parallel {
func.func @iv_used(%o: memref<3x5xf32>) attributes {loop.kernel} {
  loop.for %h = 0 to 3 step 1 parallel {
    loop.for %w = 0 to 5 step 1 parallel {
      %i = arith.index_cast %w : index to i64
      %f = arith.sitofp %i : i64 to f32
      memref.store %f, %o[%h, %w] : memref<3x5xf32>
      loop.yield
    }
    loop.yield
  }
  func.return
}

// A scratch buffer of the kernel's own keeps its shape: the kernel is left alone.
// CHECK-LABEL: func.func @scratch(%{{.*}}: memref<3x5xf32>, %{{.*}}: memref<3x5xf32>)
// CHECK-NEXT:   %{{.*}} = memref.alloca() : memref<3x5xf32>
// CHECK-NEXT:   loop.for %{{.*}} = 0 to 3 step 1 parallel {
func.func @scratch(%a: memref<3x5xf32>, %o: memref<3x5xf32>) attributes {loop.kernel} {
  %s = memref.alloca() : memref<3x5xf32>
  loop.for %h = 0 to 3 step 1 parallel {
    loop.for %w = 0 to 5 step 1 parallel {
      %x = memref.load %a[%h, %w] : memref<3x5xf32>
      memref.store %x, %s[%h, %w] : memref<3x5xf32>
      %y = memref.load %s[%h, %w] : memref<3x5xf32>
      memref.store %y, %o[%h, %w] : memref<3x5xf32>
      loop.yield
    }
    loop.yield
  }
  func.return
}

// CHECK-LABEL: func.func @main(%{{.*}}: memref<1x4x6xf32>, %{{.*}}: memref<1x4x6xf32>, %{{.*}}: memref<1x4x6xf32>)
// CHECK-NEXT:   %[[A:.*]] = loop.view %{{.*}} : memref<1x4x6xf32> -> memref<24xf32>
// CHECK-NEXT:   %[[B:.*]] = loop.view %{{.*}} : memref<1x4x6xf32> -> memref<24xf32>
// CHECK-NEXT:   %[[O:.*]] = loop.view %{{.*}} : memref<1x4x6xf32> -> memref<24xf32>
// CHECK-NEXT:   func.call @same_shape(%[[A]], %[[B]], %[[O]])
func.func @main(%a: memref<1x4x6xf32>, %b: memref<1x4x6xf32>, %o: memref<1x4x6xf32>) {
  func.call @same_shape(%a, %b, %o) : (memref<1x4x6xf32>, memref<1x4x6xf32>, memref<1x4x6xf32>) -> ()
  func.return
}
