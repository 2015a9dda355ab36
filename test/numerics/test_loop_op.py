"""ONNX Loop compiled as a loop (`graph.loop`), not unrolled: results against
onnxruntime at 1 and 2 threads and against the reference executor, compile time
that does not grow with the trip count, and the refusals that name the node."""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import smelt
from smelt.dialects import graph as g
from smelt.frontend.onnx import import_model
from smelt.reference.executor import run_graph

ort = pytest.importorskip("onnxruntime")

F32, I64, BOOL = T.FLOAT, T.INT64, T.BOOL


def _info(name: str, elem: int, shape: list[int] | None) -> onnx.ValueInfoProto:
    return h.make_tensor_value_info(name, elem, shape)


def _body(n: int, extra: list[onnx.NodeProto] | None = None) -> onnx.GraphProto:
    """acc' = tanh(acc @ W + i * 0.01) + b; cnt' = cnt + 1; scan: acc' * 2."""
    nodes = [
        h.make_node("Cast", ["i"], ["fi"], to=F32),
        h.make_node("Mul", ["fi", "eps"], ["di"]),
        h.make_node("MatMul", ["acc_in", "W"], ["mm"]),
        h.make_node("Add", ["mm", "di"], ["s1"]),
        h.make_node("Tanh", ["s1"], ["t"]),
        h.make_node("Add", ["t", "b"], ["acc_out"]),
        h.make_node("Add", ["cnt_in", "one"], ["cnt_out"]),
        h.make_node("Mul", ["acc_out", "two"], ["scan"]),
        h.make_node("Identity", ["cond_in"], ["cond_out"]),
    ]
    return h.make_graph(
        nodes + (extra or []),
        "body",
        [
            _info("i", I64, []),
            _info("cond_in", BOOL, []),
            _info("acc_in", F32, [2, n]),
            _info("cnt_in", F32, [1]),
        ],
        [
            _info("cond_out", BOOL, []),
            _info("acc_out", F32, [2, n]),
            _info("cnt_out", F32, [1]),
            _info("scan", F32, [2, n]),
        ],
        [
            h.make_tensor("eps", F32, [], [0.01]),
            h.make_tensor("one", F32, [1], [1.0]),
            h.make_tensor("two", F32, [], [2.0]),
        ],
    )


def loop_model(
    trips: int, n: int = 16, body: onnx.GraphProto | None = None, scale: float = 0.3
):
    """A Loop of `trips` iterations over x [2, n] with an invariant W and b."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((n, n)) * scale).astype(np.float32)
    graph = h.make_graph(
        [
            h.make_node(
                "Loop", ["M", "c", "x", "z"], ["acc", "cnt", "scans"],
                body=body or _body(n),
            )
        ],  # fmt: skip
        "loop",
        [_info("x", F32, [2, n]), _info("b", F32, [n])],
        [
            _info("acc", F32, [2, n]),
            _info("cnt", F32, [1]),
            _info("scans", F32, [trips, 2, n]),
        ],
        [
            h.make_tensor("M", I64, [], [trips]),
            h.make_tensor("c", BOOL, [], [True]),
            h.make_tensor("z", F32, [1], [0.0]),
            h.make_tensor("W", F32, [n, n], w.ravel()),
        ],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def _feeds(n: int = 16) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {
        "x": rng.standard_normal((2, n)).astype(np.float32),
        "b": rng.standard_normal(n).astype(np.float32),
    }


def _expected(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString())
    return session.run(None, feeds)


def _close(got: dict, want: list[np.ndarray]) -> None:
    for (name, value), w in zip(got.items(), want, strict=True):
        np.testing.assert_allclose(value, w, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("trips", [1, 7, 100, 10_000])
def test_loop_matches_onnxruntime(trips: int, threads: int) -> None:
    model, feeds = loop_model(trips), _feeds()
    compiled = smelt.compile(model, threads=threads)
    _close(compiled.run(feeds), _expected(model, feeds))


@pytest.mark.parametrize("trips", [1, 7, 100])
def test_loop_is_one_op_and_the_reference_runs_it(trips: int) -> None:
    model, feeds = loop_model(trips), _feeds()
    module = import_model(model)
    ops = [o for o in module.walk() if isinstance(o, g.LoopOp)]
    assert len(ops) == 1 and ops[0].trips == trips
    _close(run_graph(module, feeds), _expected(model, feeds))


def test_compile_time_does_not_grow_with_the_trip_count() -> None:
    """Interleaved compiles of 10 and 10,000 iterations (best of 2 each): the
    lowered IR has the same size, so the time must be about the same."""
    small, large = loop_model(10), loop_model(10_000)
    best = {10: float("inf"), 10_000: float("inf")}
    for _ in range(2):
        for trips, model in ((10, small), (10_000, large)):
            start = time.perf_counter()
            smelt.compile(model)
            best[trips] = min(best[trips], time.perf_counter() - start)
    assert best[10_000] < 1.5 * best[10] + 0.5, best


def test_nested_loops() -> None:
    """An inner Loop of 3 iterations inside an outer one of 5."""
    n = 8
    inner = h.make_graph(
        [
            h.make_node("Identity", ["c_in"], ["c_out"]),
            h.make_node("Cast", ["j"], ["fj"], to=F32),
            h.make_node("Mul", ["v_in", "half"], ["hv"]),
            h.make_node("Add", ["hv", "fj"], ["v_out"]),
        ],
        "inner",
        [_info("j", I64, []), _info("c_in", BOOL, []), _info("v_in", F32, [2, n])],
        [_info("c_out", BOOL, []), _info("v_out", F32, [2, n])],
        [h.make_tensor("half", F32, [], [0.5])],
    )
    extra = [
        h.make_node("Loop", ["three", "", "acc_out"], ["nested"], body=inner),
        h.make_node("Add", ["nested", "t"], ["scan"]),
    ]
    body = _body(n, extra)
    mul = next(x for x in body.node if x.output[0] == "scan")
    body.node.remove(mul)
    body.initializer.append(h.make_tensor("three", I64, [], [3]))
    model, feeds = loop_model(5, n, body), _feeds(n)
    assert sum(isinstance(o, g.LoopOp) for o in import_model(model).walk()) == 2
    _close(smelt.compile(model, threads=2).run(feeds), _expected(model, feeds))


def test_a_body_with_a_reshape_of_a_computed_value() -> None:
    """A view of a buffer the loop writes is copied, not aliased."""
    n = 16
    extra = [
        h.make_node("Reshape", ["t", "flat"], ["tf"]),
        h.make_node("ReduceSum", ["tf"], ["ts"], keepdims=1),
        h.make_node("Mul", ["acc_out", "ts"], ["scan"]),
    ]
    body = _body(n, extra)
    mul = next(x for x in body.node if x.output[0] == "scan")
    body.node.remove(mul)
    body.initializer.append(h.make_tensor("flat", I64, [1], [-1]))
    model, feeds = loop_model(9, n, body), _feeds(n)
    _close(smelt.compile(model).run(feeds), _expected(model, feeds))


def _growing_body() -> onnx.GraphProto:
    """A body whose carried value grows by one element per iteration."""
    return h.make_graph(
        [
            h.make_node("Identity", ["cond_in"], ["cond_out"]),
            h.make_node("Concat", ["v_in", "v_in"], ["v_out"], axis=0),
        ],
        "grow",
        [_info("i", I64, []), _info("cond_in", BOOL, []), _info("v_in", F32, None)],
        [_info("cond_out", BOOL, []), _info("v_out", F32, None)],
    )


def _single_carry_model(trips: int, body: onnx.GraphProto) -> onnx.ModelProto:
    graph = h.make_graph(
        [h.make_node("Loop", ["M", "", "x"], ["y"], body=body, name="grow")],
        "m",
        [_info("x", F32, [2])],
        [_info("y", F32, None)],
        [h.make_tensor("M", I64, [], [trips])],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_a_short_loop_whose_carried_value_grows_is_unrolled() -> None:
    model = _single_carry_model(3, _growing_body())
    x = np.array([1.0, 2.0], np.float32)
    got = smelt.compile(model).run({"x": x})["y"]
    np.testing.assert_array_equal(got, np.tile(x, 8))


def test_a_long_loop_whose_carried_value_grows_is_refused() -> None:
    model = _single_carry_model(100, _growing_body())
    with pytest.raises(smelt.SmeltError, match="Loop 'grow': .*keep its shape"):
        smelt.compile(model)


def test_a_long_loop_with_a_data_dependent_exit_is_refused() -> None:
    body = h.make_graph(
        [
            h.make_node("ReduceSum", ["v_in"], ["s"], keepdims=0),
            h.make_node("Less", ["s", "limit"], ["cond_out"]),
            h.make_node("Add", ["v_in", "v_in"], ["v_out"]),
        ],
        "exit",
        [_info("i", I64, []), _info("cond_in", BOOL, []), _info("v_in", F32, [2])],
        [_info("cond_out", BOOL, []), _info("v_out", F32, [2])],
        [h.make_tensor("limit", F32, [], [100.0])],
    )
    model = _single_carry_model(1000, body)
    with pytest.raises(smelt.SmeltError, match="Loop 'grow': .*data-dependent exit"):
        smelt.compile(model)


def test_the_triton_target_refuses_the_loop_kernel() -> None:
    pytest.importorskip("triton")
    from xdsl.context import Context

    from smelt.lowering.convert_graph_to_loop import ConvertGraphToLoopPass
    from smelt.lowering.triton.source import module_kernels

    module = import_model(loop_model(4))
    ConvertGraphToLoopPass().apply(Context(), module)
    with pytest.raises(smelt.SmeltError, match="Loop.*triton target cannot"):
        module_kernels(module)


def test_around_and_inside_a_loop_the_graph_passes_keep_it_right() -> None:
    """A Conv feeds the loop (graph-convert-layout may move it to NHWC), the body
    holds a Conv of its own, and elementwise ops around the loop may fuse."""
    conv_body = h.make_graph(
        [
            h.make_node("Identity", ["cond_in"], ["cond_out"]),
            h.make_node("Conv", ["v_in", "K"], ["cv"], pads=[1, 1, 1, 1]),
            h.make_node("Tanh", ["cv"], ["tc"]),
            h.make_node("Add", ["tc", "feat"], ["v_out"]),
        ],
        "conv_body",
        [
            _info("i", I64, []),
            _info("cond_in", BOOL, []),
            _info("v_in", F32, [1, 4, 6, 6]),
        ],
        [_info("cond_out", BOOL, []), _info("v_out", F32, [1, 4, 6, 6])],
        [],
    )
    rng = np.random.default_rng(3)
    kernel = (rng.standard_normal((4, 4, 3, 3)) * 0.2).astype(np.float32)
    graph = h.make_graph(
        [
            h.make_node("Conv", ["x", "K0"], ["feat0"], pads=[1, 1, 1, 1]),
            h.make_node("Relu", ["feat0"], ["feat"]),
            h.make_node("Loop", ["M", "", "feat"], ["v"], body=conv_body),
            h.make_node("Sigmoid", ["v"], ["y"]),
        ],
        "conv_loop",
        [_info("x", F32, [1, 3, 6, 6])],
        [_info("y", F32, [1, 4, 6, 6])],
        [
            h.make_tensor("M", I64, [], [20]),
            h.make_tensor("K", F32, [4, 4, 3, 3], kernel.ravel()),
            h.make_tensor(
                "K0", F32, [4, 3, 3, 3], rng.standard_normal(108).astype(np.float32)
            ),
        ],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    for threads in (1, 2):
        got = smelt.compile(model, threads=threads).run(feeds)
        _close(got, _expected(model, feeds))


def test_an_endless_loop_with_a_scan_output_is_refused_by_size() -> None:
    model = loop_model(2**62)
    with pytest.raises(smelt.SmeltError, match="Loop#0: its scan outputs .* would take"):
        import_model(model)


def test_the_nests_of_a_big_body_run_on_threads() -> None:
    """A 256-wide body: loop-parallelize marks nests inside the iteration loop;
    the results still match at 2 threads (W scaled so that the iteration
    contracts: rounding differences do not grow)."""
    from xdsl.context import Context

    from smelt.dialects import loop
    from smelt.lowering.convert_graph_to_loop import ConvertGraphToLoopPass
    from smelt.passes.loop_parallelize import THREADS_ATTR, LoopParallelizePass

    model, feeds = loop_model(50, 256, scale=0.03), _feeds(256)
    module = import_model(model)
    ConvertGraphToLoopPass().apply(Context(), module)
    LoopParallelizePass(threads=2).apply(Context(), module)
    kernel = next(
        f for f in module.ops if loop.ITERATIONS_ATTR in f.attributes
    )
    assert any(THREADS_ATTR in o.attributes for o in kernel.walk())
    _close(smelt.compile(model, threads=2).run(feeds), _expected(model, feeds))
