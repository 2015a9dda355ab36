// RUN: smelt-opt %s -t llvm | filecheck %s

// A loop marked loop.threads is outlined into a task over a range of its
// iterations; the kernel stores what the body uses in a context and hands the
// task to the pool, which it takes as one more argument.

// CHECK-LABEL: define internal void @"smelt.kernel.scale"(ptr noalias %"a", ptr noalias %"o", ptr %"pool")
// CHECK:         %"ctx" = alloca {ptr, float, ptr}
// CHECK:         store ptr %"a", ptr
// CHECK:         store float %{{.*}}, ptr
// CHECK:         store ptr %"o", ptr
// CHECK:         call void @"smelt.parallel_for"(ptr %"pool", {{.*}}@"smelt.kernel.scale.task0", ptr %"ctx", i64 6)
// The one-trip loop is not worth a task: it runs inline.
// CHECK-NOT:     smelt.parallel_for
// CHECK:         ret void
func.func @scale(%a: memref<6x16xf32>, %o: memref<6x16xf32>) attributes {loop.kernel} {
  %c0 = arith.constant 0 : index
  %f = memref.load %a[%c0, %c0] : memref<6x16xf32>
  loop.for %i = 0 to 6 step 1 parallel {
    loop.for %j = 0 to 16 step 8 parallel {
      %x = vector.load %a[%i, %j] : memref<6x16xf32>, vector<8xf32>
      %b = vector.broadcast %f : f32 to vector<8xf32>
      %y = arith.mulf %x, %b : vector<8xf32>
      vector.store %y, %o[%i, %j] : memref<6x16xf32>, vector<8xf32>
      loop.yield
    }
    loop.yield
  } {loop.threads = 2 : i64}
  loop.for %i = 0 to 1 step 1 parallel {
    memref.store %f, %o[%i, %c0] : memref<6x16xf32>
    loop.yield
  } {loop.threads = 2 : i64}
  func.return
}

// The task reloads the context and calls the loop's body function on iterations
// iv = lb + t·step for t in begin..end; the body takes the buffers as noalias
// arguments, as the kernel does (loaded from the context, their pointers would
// tell LLVM nothing), and emits the constants again.
// CHECK-LABEL: define internal void @"smelt.kernel.scale.task0"(ptr %"ctx", i64 %"begin", i64 %"end")
// CHECK:         %"a" = load ptr, ptr
// CHECK:         %"f" = load float, ptr
// CHECK:         %"o" = load ptr, ptr
// CHECK:         icmp slt i64 %"begin", %"end"
// CHECK:         call void @"smelt.kernel.scale.task0.body"(ptr %"a", float %"f", ptr %"o",

// The pool's runtime is part of the module, started and stopped by the program.
// CHECK-LABEL: define internal void @"smelt.pool.work"(ptr %"pool", i64 %"generation")
// CHECK:         cmpxchg ptr
// CHECK-LABEL: define internal ptr @"smelt.pool.worker"(ptr %"record")
// CHECK:         call i32 @"pthread_cond_wait"
// CHECK-LABEL: define i32 @"smelt_pool_start"(ptr %"pool", i32 %"threads")
// CHECK:         call i32 @"pthread_create"
// CHECK-LABEL: define void @"smelt_pool_stop"(ptr %"pool")
// CHECK:         call i32 @"pthread_join"
// CHECK-LABEL: define internal void @"smelt.parallel_for"(ptr %"pool", ptr %"task", ptr %"ctx", i64 %"trips")

// The task's body (defined after the pool's runtime).
// CHECK-LABEL: define internal void @"smelt.kernel.scale.task0.body"(ptr noalias %"a", float %"f", ptr noalias %"o", i64 %"first", i64 %"stop")
// CHECK:       i.header:
// CHECK:         fmul contract <8 x float>

// A kernel is declared once its passes ran, so this one follows the pool's
// runtime. exp, tanh and erf on f32 vectors are polynomials in IR, not libm calls.
// CHECK-LABEL: define internal void @"smelt.kernel.gelu"
// CHECK-NOT:     call float @"erff"
// CHECK-NOT:     call float @"tanhf"
// CHECK:         call <8 x float> @"llvm.fma.v8f32"
// CHECK:         call <8 x float> @"llvm.copysign.v8f32"
// CHECK:         ret void
func.func @gelu(%a: memref<6x16xf32>, %o: memref<6x16xf32>) attributes {loop.kernel} {
  loop.for %i = 0 to 6 step 1 parallel {
    loop.for %j = 0 to 16 step 8 parallel {
      %x = vector.load %a[%i, %j] : memref<6x16xf32>, vector<8xf32>
      %e = math.erf %x : vector<8xf32>
      %t = math.tanh %e : vector<8xf32>
      vector.store %t, %o[%i, %j] : memref<6x16xf32>, vector<8xf32>
      loop.yield
    }
    loop.yield
  }
  func.return
}

// @main passes its pool to the kernels that take one.
// CHECK-LABEL: define void @"smelt_main"(ptr %"io", ptr %"arena", ptr %"weights", ptr %"pool")
// CHECK:         call void @"smelt.kernel.scale"(ptr %"a", ptr %"o", ptr %"pool")
// CHECK:         call void @"smelt.kernel.gelu"(ptr %"a", ptr %"o")
func.func @main(%a: memref<6x16xf32>, %o: memref<6x16xf32>) {
  func.call @scale(%a, %o) : (memref<6x16xf32>, memref<6x16xf32>) -> ()
  func.call @gelu(%a, %o) : (memref<6x16xf32>, memref<6x16xf32>) -> ()
  func.return
}
