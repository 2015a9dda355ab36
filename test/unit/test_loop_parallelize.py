"""loop-parallelize and the llvm target's thread pool: same results as serial on
awkward trip counts, and a pool that neither leaks nor deadlocks."""

from __future__ import annotations

import gc
import multiprocessing
import os
import threading
import time

import numpy as np
import pytest
from test_llvm_target import parse

from smelt.compiler.driver import lower
from smelt.dialects.loop import ForOp
from smelt.lowering.llvm.jit import compile_to_native
from smelt.passes.loop_parallelize import THREADS_ATTR


def compiled(src: str, pipeline: str = ""):
    module = parse(src)
    if pipeline:
        lower(module, pipeline)
        module.verify()
    return compile_to_native(module), module


def marked(module) -> list[ForOp]:
    return [
        op
        for op in module.walk()
        if isinstance(op, ForOp) and THREADS_ATTR in op.attributes
    ]


def nest_kernel(shape: tuple[int, int, int], lbs=(0, 0, 0), steps=(1, 1, 1)) -> str:
    """o[i, j, k] = a[i, j, k] · 2 + i + j over a 3-deep nest with bounds/steps."""
    t = "memref<{}x{}x{}xf32>".format(*shape)
    loops = [
        f"loop.for %{v} = {lb} to {n} step {s} parallel {{"
        for v, lb, n, s in zip("ijk", lbs, shape, steps)
    ]
    return f"""
    func.func @k(%a: {t}, %o: {t}) attributes {{loop.kernel}} {{
      %two = arith.constant 2.0 : f32
      {loops[0]}
        %fi = arith.index_cast %i : index to i64
        {loops[1]}
          {loops[2]}
            %x = memref.load %a[%i, %j, %k] : {t}
            %d = arith.mulf %x, %two : f32
            %s = arith.addi %i, %j : index
            %si = arith.index_cast %s : index to i64
            %sf = arith.sitofp %si : i64 to f32
            %y = arith.addf %d, %sf : f32
            memref.store %y, %o[%i, %j, %k] : {t}
            loop.yield
          }}
          loop.yield
        }}
        loop.yield
      }}
      func.return
    }}
    func.func @main(%a: {t}, %o: {t}) {{
      func.call @k(%a, %o) : ({t}, {t}) -> ()
      func.return
    }}"""


def perfect_nest(shape: tuple[int, int, int], lbs=(0, 0, 0), steps=(1, 1, 1)) -> str:
    """The same without the op between the outer loops, so that they collapse."""
    return nest_kernel(shape, lbs, steps).replace(
        "%fi = arith.index_cast %i : index to i64", ""
    )


SHAPES = [
    (1, 1, 5),
    (1, 3, 37),
    (2, 5, 9),
    (3, 1, 64),
    (7, 13, 3),
    (13, 2, 17),
    (64, 4, 8),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("builder", [nest_kernel, perfect_nest])
def test_same_results_as_serial(shape, threads, builder):
    src = builder(shape)
    rng = np.random.default_rng(sum(shape))
    a = rng.standard_normal(shape).astype(np.float32)
    i, j = np.meshgrid(np.arange(shape[0]), np.arange(shape[1]), indexing="ij")
    expected = a * 2 + (i + j)[..., None].astype(np.float32)
    pipe = f"loop-vectorize,loop-parallelize{{threads={threads} min_work=0}}"
    program, module = compiled(src, pipe)
    out = np.zeros_like(a)
    for _ in range(3):  # the pool is reused across runs
        program.run([a, out])
        np.testing.assert_array_equal(out, expected)
    # one-trip nests have nothing to split; every other kernel gets a marked loop
    total = shape[0] * (shape[1] if builder is perfect_nest else 1)
    assert len(marked(module)) == (1 if total >= 2 else 0)
    assert program.threads == (threads if marked(module) else 1)


def test_collapse_with_bounds_and_steps():
    shape, lbs, steps = (7, 11, 16), (1, 2, 0), (2, 3, 1)
    program, module = compiled(
        perfect_nest(shape, lbs, steps), "loop-parallelize{threads=2 min_work=0}"
    )
    (loop,) = marked(module)
    assert loop.trip_count == 3 * 3  # i in 1,3,5 · j in 2,5,8
    a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    out = np.zeros_like(a)
    program.run([a, out])
    expected = np.zeros_like(a)
    for i in range(1, 7, 2):
        for j in range(2, 11, 3):
            expected[i, j] = a[i, j] * 2 + np.float32(i + j)
    np.testing.assert_array_equal(out, expected)


def test_threads_one_and_small_kernels_stay_serial():
    src = nest_kernel((4, 4, 4))
    _, module = compiled(src, "loop-parallelize{threads=1 min_work=0}")
    assert not marked(module)
    _, module = compiled(src, "loop-parallelize{threads=2}")  # 64 elements of work
    assert not marked(module)
    program, _ = compiled(src, "loop-parallelize{threads=2}")
    assert program.threads == 1


def reduce_kernel(rows: int, n: int) -> str:
    t2, t1 = f"memref<{rows}x{n}xf32>", f"memref<{rows}xf32>"
    return f"""
    func.func @k(%a: {t2}, %o: {t1}) attributes {{loop.kernel}} {{
      %z = arith.constant 0.0 : f32
      loop.for %r = 0 to {rows} step 1 parallel {{
        %s = loop.for %i = 0 to {n} step 1 reduction iter_args(%acc = %z) -> (f32) {{
          %x = memref.load %a[%r, %i] : {t2}
          %e = math.exp %x : f32
          %y = arith.addf %acc, %e : f32
          loop.yield %y : f32
        }}
        memref.store %s, %o[%r] : {t1}
        loop.yield
      }}
      func.return
    }}
    func.func @main(%a: {t2}, %o: {t1}) {{
      func.call @k(%a, %o) : ({t2}, {t1}) -> ()
      func.return
    }}"""


@pytest.mark.parametrize("rows", [2, 3, 17, 100])
def test_rows_of_reductions(rows):
    a = np.random.default_rng(rows).standard_normal((rows, 37)).astype(np.float32)
    serial, _ = compiled(reduce_kernel(rows, 37), "loop-vectorize")
    par, module = compiled(
        reduce_kernel(rows, 37), "loop-vectorize,loop-parallelize{threads=4 min_work=0}"
    )
    assert marked(module)
    expected, out = np.zeros(rows, np.float32), np.zeros(rows, np.float32)
    serial.run([a, expected])
    par.run([a, out])
    np.testing.assert_array_equal(out, expected)  # the same code per row
    np.testing.assert_allclose(out, np.exp(a.astype(np.float64)).sum(1), rtol=1e-5)


BIG = (64, 8, 64)


def big_program(threads: int = 2):
    return compiled(
        perfect_nest(BIG), f"loop-parallelize{{threads={threads} min_work=0}}"
    )[0]


def check(program, seed: int = 0) -> None:
    a = np.random.default_rng(seed).standard_normal(BIG).astype(np.float32)
    out = np.zeros_like(a)
    program.run([a, out])
    i, j = np.meshgrid(np.arange(BIG[0]), np.arange(BIG[1]), indexing="ij")
    np.testing.assert_array_equal(out, a * 2 + (i + j)[..., None].astype(np.float32))


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")
def test_pools_stop_when_programs_are_collected():
    big_program(1)  # starts the compiler's own lasting threads (no run-time pool)
    gc.collect()
    before = os_threads()
    programs = [big_program(3) for _ in range(4)]
    # the compile's LLVM threads are joined, but may not have left /proc yet
    deadline = time.monotonic() + 5
    while os_threads() > before + 4 * 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert os_threads() == before + 4 * 2
    for p in programs:
        check(p)
    del programs, p
    gc.collect()
    deadline = time.monotonic() + 5
    while os_threads() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert os_threads() == before


def test_two_programs_interleave():
    a, b = big_program(2), big_program(3)
    for seed in range(20):
        check(a, seed)
        check(b, seed)


def test_concurrent_runs_of_one_program_wait_for_each_other():
    program = big_program(2)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            for k in range(20):
                a = (
                    np.random.default_rng(seed + k)
                    .standard_normal(BIG)
                    .astype(np.float32)
                )
                out = np.zeros_like(a)
                program.run([a, out])
                i, j = np.meshgrid(np.arange(BIG[0]), np.arange(BIG[1]), indexing="ij")
                expected = a * 2 + (i + j)[..., None].astype(np.float32)
                np.testing.assert_array_equal(out, expected)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s * 100,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[0]


def _run_in_child(queue) -> None:
    try:
        check(_FORKED[0], 1)
        queue.put("ok")
    except BaseException as e:  # noqa: BLE001 - sent back to the parent
        queue.put(repr(e))


_FORKED: list = []


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs fork"
)
def test_a_forked_child_starts_its_own_pool():
    program = big_program(2)
    check(program)
    _FORKED[:] = [program]
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_run_in_child, args=(queue,))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert queue.get(timeout=5) == "ok"
    check(program)  # the parent's pool still works
    _FORKED.clear()


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")
def test_idle_workers_sleep():
    program = big_program(2)
    check(program)
    time.sleep(0.2)  # past the workers' spin phase
    start = time.process_time()
    time.sleep(0.3)
    assert time.process_time() - start < 0.05


def test_entry_without_a_pool_runs_serially():
    from smelt.lowering.llvm.emit import emit_llvm_ir

    module = parse(perfect_nest(BIG))
    lower(module, "loop-parallelize{threads=2 min_work=0}")
    text = emit_llvm_ir(module)
    assert '@"smelt.parallel_for"' in text
    assert '"smelt.kernel.k.task0"(ptr %"ctx", i64 %"begin", i64 %"end")' in text


def test_preset_threads_parameter():
    from smelt.compiler import pipelines
    from smelt.errors import SmeltError

    assert pipelines.preset("cpu") == pipelines.preset("cpu", "O2", threads=1)
    spec = pipelines.preset("cpu", "O3", threads=4)
    assert spec.endswith("loop-parallelize{threads=4},buffer-plan")
    assert "loop-parallelize" not in pipelines.preset("cpu", "O1", threads=4)
    with pytest.raises(SmeltError):
        pipelines.preset("cpu", "O2", threads=0)


def test_mlp_with_two_threads_matches_one():
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "numerics"))
    import models

    import smelt
    from smelt.compiler import pipelines
    from smelt.compiler.cli import random_inputs

    model = models.mlp_model()
    outs = []
    for threads in (1, 2):
        compiled = smelt.compile(
            model, "cpu", pipeline=pipelines.preset("cpu", "O2", threads)
        )
        outs.append(compiled.run(random_inputs(compiled)))
    for name in outs[0]:
        np.testing.assert_array_equal(outs[0][name], outs[1][name])


def test_interpreter_exits_while_a_daemon_thread_runs():
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import sys, threading, time
        sys.path.insert(0, {here!r})
        from test_loop_parallelize import big_program, check
        program = big_program(2)
        def spin():
            while True:
                check(program)
        threading.Thread(target=spin, daemon=True).start()
        time.sleep(0.3)
        print("exiting", flush=True)
        """
    ).format(here=os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "exiting" in done.stdout


def test_alternating_tasks_of_different_chunk_counts_many_times():
    """Guard for the pool's task hand-over: tasks of 2 chunks and of 16 chunks
    alternate (a reduction's rows, then an elementwise kernel) for 3 s; every run
    must give the same result and none may stall. (A worker that read the claim
    word of the finished task and the chunk count of the next one could once run
    a chunk of a half-published task and count it twice: the caller then waited
    forever. That needed a preemption inside a window of a few instructions, so
    this test exercises the hand-over; it does not reliably provoke the race.)"""
    from onnx import TensorProto, helper

    import smelt
    from smelt.compiler import pipelines

    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2048])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2048])
    nodes, value = [], "x"
    for i in range(16):
        nodes += [
            helper.make_node("ReduceMean", [value], [f"m{i}"], axes=[1], keepdims=1),
            helper.make_node("Sub", [value, f"m{i}"], [f"d{i}"]),
            helper.make_node("Mul", [f"d{i}", f"d{i}"], [f"q{i}"]),
        ]
        value = f"q{i}"
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(nodes, "g", [x_info], [y_info])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    spec = pipelines.preset("cpu", "O2", 2).replace(
        "loop-parallelize{threads=2}", "loop-parallelize{threads=2 min_work=0}"
    )
    compiled = smelt.compile(model, pipeline=spec)
    x = np.random.default_rng(0).uniform(0.9, 1.1, (2, 2048)).astype(np.float32)
    expected = compiled.run({"x": x})["y"].copy()
    progress, wrong = [0], []

    def loop() -> None:
        end = time.monotonic() + 3
        while time.monotonic() < end:
            if not np.array_equal(compiled.run({"x": x})["y"], expected):
                wrong.append(progress[0])
            progress[0] += 1

    runner = threading.Thread(target=loop, daemon=True)
    runner.start()
    seen = -1
    while runner.is_alive():
        runner.join(timeout=2)
        assert not runner.is_alive() or progress[0] != seen, f"stalled at {seen}"
        seen = progress[0]
    assert not wrong, f"{len(wrong)} wrong runs of {progress[0]}"
    assert progress[0] > 100
