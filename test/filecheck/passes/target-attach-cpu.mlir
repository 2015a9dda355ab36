// RUN: smelt-opt %s -p 'target-attach-cpu{cpu="x86-64-v3"}' | filecheck %s --check-prefix=V3
// RUN: smelt-opt %s -p 'target-attach-cpu{cpu="znver5" features="-avx512f" l2=2097152 cores=4}' | filecheck %s --check-prefix=EDIT
// RUN: smelt-opt %s --cpu x86-64-v4 -p 'loop-vectorize{tail=auto}' | filecheck %s --check-prefix=V4
// RUN: smelt-opt %s --cpu x86-64-v4 -p 'loop-vectorize{width=4}' | filecheck %s --check-prefix=W4
// RUN: smelt-opt %s --cpu x86-64-v3 -p 'loop-vectorize{tail=auto}' | filecheck %s --check-prefix=V3VEC
// RUN: smelt-opt %s -p 'target-attach-cpu{cpu="x86-64-v3"}' | smelt-opt | filecheck %s --check-prefix=V3
// RUN: smelt-opt %s --verify-diagnostics -p 'target-attach-cpu{cpu="pentium9"}' | filecheck %s --check-prefix=BAD
// RUN: smelt-opt %s --verify-diagnostics -p 'target-attach-cpu{features="+sse9"}' | filecheck %s --check-prefix=BADF
// RUN: not smelt-opt %s --cpu pentium9 2>&1 | filecheck %s --check-prefix=BADCLI

// V3: builtin.module attributes {target.spec = #target.cpu<"x86-64-v3", "+sse4.2,+avx,+avx2,+fma,+f16c,+bmi2,-avx512f,{{.*}}", 32768, 524288, 16777216, 0>}

// Feature edits remove what depends on the feature; sizes replace the CPU's own.
// EDIT: #target.cpu<"znver5", "+sse4.2,+avx,+avx2,+fma,+f16c,+bmi2,-avx512f,-avx512cd,-avx512bw,-avx512dq,-avx512vl,-avx512vnni,-avx512bf16,-avx512fp16,+avxvnni", 49152, 2097152, 33554432, 4>

// loop-vectorize takes its width from the target: 16 f32 lanes with AVX-512,
// unless an option says otherwise; with tail=auto and AVX-512's mask registers
// the remainder is one masked vector iteration, with AVX2 (none) a scalar loop.
// V4-LABEL: func.func @scale
// V4:       %[[M:.*]] = vector.create_mask %{{.*}} : vector<16xi1>
// V4:       loop.for %{{.*}} = 0 to 32 step 16 parallel {
// V4:         vector.load {{.*}} vector<16xf32>
// V4:       loop.for %{{.*}} = 32 to 37 step 16 parallel {
// V4:         vector.maskedload {{.*}}, %[[M]], {{.*}} vector<16xf32>
// V4:         vector.maskedstore {{.*}}, %[[M]], {{.*}} vector<16xf32>
// V3VEC-LABEL: func.func @scale
// V3VEC:       loop.for %{{.*}} = 0 to 32 step 8 parallel {
// V3VEC:       loop.for %{{.*}} = 32 to 37 step 1 parallel {
// V3VEC-NOT:   vector.masked
// W4-LABEL: func.func @scale
// W4:       loop.for %{{.*}} = 0 to 36 step 4 parallel {

// BAD: unknown CPU 'pentium9': choose 'host' or one of x86-64, x86-64-v2, x86-64-v3
// BADCLI: smelt-opt: error: unknown CPU 'pentium9'
// BADF: bad CPU feature edit '+sse9': write +name or -name

func.func @scale(%a: memref<37xf32>, %b: memref<37xf32>) attributes {loop.kernel} {
  %two = arith.constant 2.0 : f32
  loop.for %i = 0 to 37 step 1 parallel {
    %x = memref.load %a[%i] : memref<37xf32>
    %y = arith.mulf %x, %two : f32
    memref.store %y, %b[%i] : memref<37xf32>
    loop.yield
  }
  func.return
}
