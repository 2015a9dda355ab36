"""Loop scheduling passes keep meaning: matmul / gemm kernels on awkward sizes
(1, primes, below the vector width, not divisible by the tiles), JIT-compiled
after each pipeline and compared with the untransformed program."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from smelt.compiler.driver import import_graph, lower
from smelt.compiler.pipelines import CPU_LOOP_OPT, cpu_loop_opt
from smelt.lowering.llvm.jit import compile_to_native

SIZES = [(1, 1, 1), (1, 7, 3), (5, 13, 17), (7, 9, 33), (13, 5, 40), (31, 37, 29)]

TILE = (
    'loop-tile{loop="n" sizes=8,3},loop-tile{loop="m" sizes=4},'
    'loop-tile{loop="k" sizes=5}'
)
PIPELINES = {
    "tile": TILE,
    "interchange": TILE + ',loop-interchange{order="n.0,k.0,m.0,n.1,m.1,k.1,n.2"}',
    "pack": TILE
    + ',loop-interchange{order="n.0,k.0,m.0,n.1,m.1,k.1,n.2"}'
    + ',loop-pack{at="k.0" operand=1},loop-pack{at="m.0" operand=0}',
    "unroll": 'loop-unroll{loop="n" factor=3},loop-unroll{loop="k" factor=2}',
    "jam": TILE + ',loop-unroll{loop="m.1" jam=true},loop-unroll{loop="n.2"}',
    # remainder tiles of 3 rows (m = 7, 31) jammed by 2: a looped pair, then one
    "jam-tail": TILE
    + ',loop-unroll{loop="n.2"},loop-cse,loop-unroll{loop="m.1" jam=true tail=2}'
    + ",loop-cse",
    "promote": TILE
    + ',loop-interchange{order="m.0,n.0,n.1,m.1,k.0,k.1,n.2"}'
    + ',loop-unroll{loop="n.2"},loop-promote{loop="k.1,k.0"}',
    "schedule": CPU_LOOP_OPT,
    "schedule-small-tiles": ",".join(cpu_loop_opt(mr=3, nr=8, kc=7, mc=6, nc=16)),
}


def _model(m: int, k: int, n: int, op: str):
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])
    shape_b = [n, k] if op == "gemm_tb" else [k, n]
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, shape_b)
    c = helper.make_tensor_value_info("c", TensorProto.FLOAT, [m, n])
    inputs = [a, b]
    if op == "matmul":
        node = helper.make_node("MatMul", ["a", "b"], ["c"])
    else:
        bias = helper.make_tensor_value_info("bias", TensorProto.FLOAT, [n])
        inputs.append(bias)
        node = helper.make_node(
            "Gemm", ["a", "b", "bias"], ["c"], transB=int(op == "gemm_tb"), alpha=0.5
        )
    graph = helper.make_graph([node], "g", inputs, [c])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model, pipeline: str, arrays: list[np.ndarray]) -> np.ndarray:
    module = import_graph(model)
    lower(module, "convert-graph-to-loop" + ("," + pipeline if pipeline else ""))
    out = np.zeros_like(arrays[-1])
    compile_to_native(module).run([*arrays[:-1], out])
    return out


@pytest.mark.parametrize("name", list(PIPELINES))
@pytest.mark.parametrize("op", ["matmul", "gemm_tb"])
def test_pass_preserves_meaning(name: str, op: str) -> None:
    rng = np.random.default_rng(0)
    for m, k, n in SIZES:
        model = _model(m, k, n, op)
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((n, k) if op == "gemm_tb" else (k, n), dtype=np.float32)
        arrays = [a, b] + (
            [rng.standard_normal(n, dtype=np.float32)] if op != "matmul" else []
        )
        arrays.append(np.zeros((m, n), np.float32))
        expected = _run(model, "", arrays)
        got = _run(model, PIPELINES[name], arrays)
        np.testing.assert_allclose(
            got, expected, rtol=1e-5, atol=1e-5, err_msg=f"{m}x{k}x{n}"
        )


@pytest.mark.parametrize("trans_b", [0, 1])
def test_schedule_with_constant_weights(trans_b: int) -> None:
    """A constant B is packed at compile time and the blocks are reordered
    (m.0 n.0 k.0 ...), sized for at least `min_blocks` parallel blocks."""
    rng = np.random.default_rng(0)
    for m, k, n in [*SIZES, (8, 300, 256), (1, 40, 600)]:
        b = rng.standard_normal((n, k) if trans_b else (k, n), dtype=np.float32)
        a_info = helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])
        c_info = helper.make_tensor_value_info("c", TensorProto.FLOAT, [m, n])
        node = helper.make_node("Gemm", ["a", "b"], ["c"], transB=trans_b)
        weights = helper.make_tensor("b", TensorProto.FLOAT, b.shape, b.ravel())
        graph = helper.make_graph([node], "g", [a_info], [c_info], [weights])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        a = rng.standard_normal((m, k), dtype=np.float32)
        arrays = [a, np.zeros((m, n), np.float32)]
        expected = _run(model, "", arrays)
        for pipeline in (PIPELINES["schedule"], PIPELINES["schedule-small-tiles"]):
            got = _run(model, pipeline, arrays)
            np.testing.assert_allclose(
                got, expected, rtol=1e-5, atol=1e-5, err_msg=f"{m}x{k}x{n}"
            )


@pytest.mark.parametrize(
    "shape, perm",
    [
        ((1, 1), (1, 0)),
        ((17, 19), (1, 0)),
        ((3, 48, 32), (2, 0, 1)),
        ((1, 7, 13, 5), (0, 3, 1, 2)),
        ((2, 33, 65, 3), (0, 2, 3, 1)),
        ((5, 3, 31, 7), (0, 2, 1, 3)),
    ],
)
def test_transpose_schedule(shape: tuple[int, ...], perm: tuple[int, ...]) -> None:
    """The tiled transpose copy (tiles of 16 and of a prime) equals numpy's."""
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    out_shape = [shape[p] for p in perm]
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)
    node = helper.make_node("Transpose", ["x"], ["y"], perm=list(perm))
    graph = helper.make_graph([node], "g", [x_info], [y_info])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    for pipeline in (
        PIPELINES["schedule"],
        ",".join(cpu_loop_opt(transpose_tile=5)),
    ):
        got = _run(model, pipeline, [x, np.zeros(out_shape, np.float32)])
        np.testing.assert_array_equal(got, x.transpose(perm))


@pytest.mark.parametrize("l2", [64, 0])
@pytest.mark.parametrize("residual", [False, True])
def test_conv_schedules(l2: int, residual: bool) -> None:
    """An NHWC conv (3x3, 40 channels -> 24, bias, optional residual add and
    ReLU) through the CPU presets with kc = 16: channels blocked by kc where the
    whole-K sliver exceeds WHOLE_K_SLIVER x l2 (l2 = 64 bytes), else the whole
    reduction in the micro-kernel (l2 0: the module's), against onnxruntime."""
    import onnxruntime as ort

    from smelt.compiler.pipelines import preset

    rng = np.random.default_rng(0)
    w = rng.standard_normal((24, 40, 3, 3), dtype=np.float32)
    b = rng.standard_normal(24, dtype=np.float32)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 40, 9, 11])]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])]
    out = "y"
    if residual:
        shape = [1, 24, 9, 11]
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, shape))
        nodes += [helper.make_node("Add", ["y", "r"], ["s"]),
                  helper.make_node("Relu", ["s"], ["z"])]  # fmt: skip
        out = "z"
    weights = [
        helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()),
        helper.make_tensor("b", TensorProto.FLOAT, b.shape, b.ravel()),
    ]
    graph = helper.make_graph(
        nodes, "g", inputs,
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], weights,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    data = model.SerializeToString()
    sizes = f"kc=16 l2={l2}" if l2 else "kc=16"
    pipeline = preset("cpu", "O3").replace(
        "loop-schedule-plan", f"loop-schedule-plan{{{sizes}}}"
    )
    import smelt

    compiled = smelt.compile(data, pipeline=pipeline)
    feeds = {
        i.name: rng.standard_normal([d for d in i.shape], dtype=np.float32)
        for i in compiled.inputs
    }
    got = list(compiled.run(feeds).values())[0]
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(
        None, feeds
    )[0]
    # 360-term sums in another order: error relative to the output's scale
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())
    # which path ran: the channel blocks are the loops of role k.0
    module = import_graph(model)
    lower(module, pipeline[: pipeline.index(",loop-vectorize")])
    assert ('"k.0"' in str(module)) == bool(l2)
