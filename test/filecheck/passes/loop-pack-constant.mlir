// RUN: smelt-opt -p 'loop-pack-constant{operand=0}' %s | filecheck %s

// A constant read by tiles: laid out at compile time in the order j0, k, j1 of the
// loops, so the innermost loop walks it with unit stride; the old constant goes.
// CHECK-LABEL: func.func @tile(%{{.*}}: memref<8xf32>, %{{.*}}: memref<4xf32>)
// CHECK:         loop.for %[[J0:.*]] = 0 to 4 step 2 parallel {
// CHECK-NEXT:      loop.for %[[K:.*]] = 0 to 2 step 1 reduction {
// CHECK-NEXT:        loop.for %[[J1:.*]] = 0 to 2 step 1 parallel {
// CHECK:               %[[A:.*]] = arith.muli %[[J0]], %{{.*}} : index
// CHECK:               %[[B:.*]] = arith.muli %[[K]], %{{.*}} : index
// CHECK-NEXT:          %[[C:.*]] = arith.addi %[[A]], %[[B]] : index
// CHECK-NEXT:          %[[I:.*]] = arith.addi %[[C]], %[[J1]] : index
// CHECK-NEXT:          memref.load %{{.*}}[%[[I]]] : memref<8xf32>
// CHECK-LABEL: func.func @main_tile(
// CHECK-NOT:     memref<2x4xf32>
// CHECK:         %[[P:.*]] = loop.constant dense<[0.000000e+00, 1.000000e+00, 4.000000e+00, 5.000000e+00, 2.000000e+00, 3.000000e+00, 6.000000e+00, 7.000000e+00]> : tensor<8xf32> -> memref<8xf32>
// CHECK-NEXT:    func.call @tile(%[[P]], %{{.*}})
func.func @tile(%b: memref<2x4xf32>, %c: memref<4xf32>) attributes {loop.kernel} {
  loop.for %j0 = 0 to 4 step 2 parallel {
    loop.for %k = 0 to 2 step 1 reduction {
      loop.for %j1 = 0 to 2 step 1 parallel {
        %j = arith.addi %j0, %j1 : index
        %y = memref.load %b[%k, %j] : memref<2x4xf32>
        %z = memref.load %c[%j] : memref<4xf32>
        %s = arith.addf %z, %y : f32
        memref.store %s, %c[%j] : memref<4xf32>
        loop.yield
      }
      loop.yield
    }
    loop.yield
  }
  func.return
}
func.func @main_tile(%c: memref<4xf32>) {
  %b = loop.constant dense<[[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]> : tensor<2x4xf32> -> memref<2x4xf32>
  func.call @tile(%b, %c) : (memref<2x4xf32>, memref<4xf32>) -> ()
  func.return
}

// Two loops reading the same elements in the same order share one part; a load
// outside any loop reads its element at a constant position after it.
// CHECK-LABEL: func.func @shared(%{{.*}}: memref<4xf32>, %{{.*}}: memref<3xf32>)
// CHECK-COUNT-2: memref.load %{{.*}}[%{{.*}}] : memref<4xf32>
// CHECK:         %[[C3:.*]] = arith.constant 3 : index
// CHECK-NEXT:    memref.load %{{.*}}[%[[C3]]] : memref<4xf32>
// CHECK-LABEL: func.func @main_shared(
// CHECK:         loop.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 1.000000e+00]> : tensor<4xf32> -> memref<4xf32>
func.func @shared(%b: memref<3xf32>, %c: memref<3xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 3 step 1 parallel {
    %y = memref.load %b[%i] : memref<3xf32>
    memref.store %y, %c[%i] : memref<3xf32>
    loop.yield
  }
  loop.for %i = 0 to 3 step 1 parallel {
    %y = memref.load %b[%i] : memref<3xf32>
    %z = memref.load %c[%i] : memref<3xf32>
    %s = arith.addf %y, %z : f32
    memref.store %s, %c[%i] : memref<3xf32>
    loop.yield
  }
  %zero = arith.constant 0 : index
  %f = memref.load %b[%zero] : memref<3xf32>
  memref.store %f, %c[%zero] : memref<3xf32>
  func.return
}
func.func @main_shared(%c: memref<3xf32>) {
  %b = loop.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32> -> memref<3xf32>
  func.call @shared(%b, %c) : (memref<3xf32>, memref<3xf32>) -> ()
  func.return
}

// Guard: the operand is a run-time input, not a constant.
// CHECK-LABEL: func.func @input(
// CHECK:         memref.load %{{.*}}[%{{.*}}] : memref<3xf32>
func.func @input(%b: memref<3xf32>, %c: memref<3xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 3 step 1 parallel {
    %y = memref.load %b[%i] : memref<3xf32>
    memref.store %y, %c[%i] : memref<3xf32>
    loop.yield
  }
  func.return
}
func.func @main_input(%b: memref<3xf32>, %c: memref<3xf32>) {
  func.call @input(%b, %c) : (memref<3xf32>, memref<3xf32>) -> ()
  func.return
}

// Guard: an index computed from a loaded value.
// CHECK-LABEL: func.func @gathered(
// CHECK:         memref.load %{{.*}}[%{{.*}}] : memref<3xf32>
// CHECK-LABEL: func.func @main_gathered(
// CHECK:         loop.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00]> : tensor<3xf32> -> memref<3xf32>
func.func @gathered(%b: memref<3xf32>, %ix: memref<3xindex>, %c: memref<3xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 3 step 1 parallel {
    %j = memref.load %ix[%i] : memref<3xindex>
    %y = memref.load %b[%j] : memref<3xf32>
    memref.store %y, %c[%i] : memref<3xf32>
    loop.yield
  }
  func.return
}
func.func @main_gathered(%ix: memref<3xindex>, %c: memref<3xf32>) {
  %b = loop.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32> -> memref<3xf32>
  func.call @gathered(%b, %ix, %c) : (memref<3xf32>, memref<3xindex>, memref<3xf32>) -> ()
  func.return
}
