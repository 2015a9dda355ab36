"""Run-time batch (#34) on convolutional nets: light_squeezenet, light_resnet50
(seeded random weights, batch made symbolic) and a small conv net with pools,
BatchNorm, Concat, Flatten, Gemm; each compiled ONCE, then run at batch 1 / 3 / 8 / 11
against onnxruntime with no compile between runs. Ops that mix batch rows are
refused naming the op and why (the rule of smelt/compiler/dynamic_rows.py)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from smelt.errors import UnsupportedModel

ort = pytest.importorskip("onnxruntime")

import smelt.compiler.dynamic as dynamic  # noqa: E402
from smelt.frontend.random_weights import random_weights  # noqa: E402

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")
BATCHES = (1, 3, 8, 11)  # 11: blocks of 4 / 8 and rows left


def _symbolic_batch(model: onnx.ModelProto) -> onnx.ModelProto:
    weights = {t.name for t in model.graph.initializer}
    for v in [*model.graph.input, *model.graph.output]:
        if v.name not in weights and v.type.tensor_type.shape.dim:
            v.type.tensor_type.shape.dim[0].dim_param = "batch"
    return model


@pytest.fixture
def compiles(monkeypatch):
    """Counts LLVM compiles (one per compile_dynamic) and graph lowerings."""
    counts = {"llvm": 0, "lower": 0}
    llvm, lower = dynamic._object, dynamic.lower

    def counted_llvm(*args, **kw):
        counts["llvm"] += 1
        return llvm(*args, **kw)

    def counted_lower(*args, **kw):
        counts["lower"] += 1
        return lower(*args, **kw)

    monkeypatch.setattr(dynamic, "_object", counted_llvm)
    monkeypatch.setattr(dynamic, "lower", counted_lower)
    return counts


def _run_all(model, compiled, compiles, make_feed, rtol=1e-4, atol=1e-5):
    after_compile = dict(compiles)
    assert after_compile["llvm"] == 1
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(11)
    for batch in BATCHES:
        feeds = make_feed(rng, batch)
        got = compiled.run(feeds)
        want = session.run(compiled.output_names, feeds)
        for name, w in zip(compiled.output_names, want):
            assert got[name].shape == w.shape, name
            np.testing.assert_allclose(got[name], w, rtol=rtol, atol=atol, err_msg=name)
    assert compiles == after_compile  # no run compiled anything


def _image(name: str):
    def feed(rng, batch):
        return {name: rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)}

    return feed


@pytest.mark.parametrize(
    "name, block",
    [("light_squeezenet", 8), ("light_squeezenet", 1), ("light_resnet50", 4)],
)
def test_light_model_one_compile(name, block, compiles):
    model = random_weights(onnx.load(os.path.join(LIGHT, f"{name}.onnx")), seed=0)
    for t in model.graph.initializer:  # resnet50's exporter baked batch 1 in a Reshape
        if t.name == "OC2_DUMMY_1":
            t.CopyFrom(numpy_helper.from_array(np.array([-1, 2048], np.int64), t.name))
    model = _symbolic_batch(model)
    compiled = dynamic.compile_dynamic(
        model, {"batch": (1, 16)}, opt_dims={"batch": block}
    )
    assert compiles["lower"] == (1 if block == 1 else 2)
    # the batch-T kernels pair with the batch-1 ones (loop-flatten joins the rows)
    assert not any("no blocks" in r for r in compiled.info["remarks"])
    (image,) = compiled.input_names
    # logits up to ~30: atol 1e-4 is 3e-6 of them
    _run_all(model, compiled, compiles, _image(image), atol=1e-4)


def _const(name, shape, rng, positive=False):
    value = rng.standard_normal(shape).astype(np.float32)
    if positive:
        value = np.abs(value) + np.float32(0.5)
    return numpy_helper.from_array(value, name)


def _conv_net(rng) -> onnx.ModelProto:
    """Conv/BN/Relu/MaxPool, two branches (1x1, 3x3) concatenated on channels,
    a channel Slice, a Transpose keeping axis 0, AveragePool, Flatten, Gemm,
    LayerNorm, Softmax; a second output reduces over H, W."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        n("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["bn"]),
        n("Relu", ["bn"], ["r1"]),
        n("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2],
          pads=[1, 1, 1, 1]),
        n("Conv", ["p1", "w2"], ["c2"]),
        n("Conv", ["p1", "w3"], ["c3"], pads=[1, 1, 1, 1]),
        n("Concat", ["c2", "c3"], ["cat"], axis=1),
        n("Slice", ["cat", "st", "en", "ax"], ["sl"]),
        n("Transpose", ["sl"], ["tr"], perm=[0, 1, 3, 2]),
        n("AveragePool", ["tr"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Flatten", ["ap"], ["fl"], axis=1),
        n("Gemm", ["fl", "wg", "bg"], ["g"], transB=1),
        n("LayerNormalization", ["g", "lns", "lnb"], ["ln"], axis=-1),
        n("Softmax", ["ln"], ["y"], axis=1),
        n("ReduceMean", ["cat"], ["z"], axes=[2, 3], keepdims=0),
    ]
    inits = [
        _const("w1", [8, 3, 3, 3], rng), _const("b1", [8], rng),
        _const("s", [8], rng, True), _const("bb", [8], rng), _const("m", [8], rng),
        _const("v", [8], rng, True),
        _const("w2", [6, 8, 1, 1], rng), _const("w3", [10, 8, 3, 3], rng),
        numpy_helper.from_array(np.array([2], np.int64), "st"),
        numpy_helper.from_array(np.array([14], np.int64), "en"),
        numpy_helper.from_array(np.array([1], np.int64), "ax"),
        _const("wg", [10, 12 * 4 * 4], rng), _const("bg", [10], rng),
        _const("lns", [10], rng), _const("lnb", [10], rng),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "convnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 16]),
        ],
        inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("level, block", [("O2", 1), ("O2", 4), ("O1", 4)])
def test_small_conv_net_one_compile(level, block, compiles):
    model = _conv_net(np.random.default_rng(2))
    compiled = dynamic.compile_dynamic(
        model, {"batch": (1, 16)}, level=level, opt_dims={"batch": block}
    )
    assert compiled.input_shapes == {"x": ("batch", 3, 32, 32)}

    def feed(rng, batch):
        return {"x": rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)}

    _run_all(model, compiled, compiles, feed)


def _depthwise_net(rng) -> onnx.ModelProto:
    """A depthwise Conv, Split / Slice on channels, ReduceMax, Squeeze /
    Unsqueeze, GlobalAveragePool, Reshape [0, -1]; a reflect Pad and a
    ReduceSum over channels and width (loop-flatten joins the unit batch of
    several of these buffers into their dims at batch 1)."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "dw"], ["c"], group=8, pads=[1, 1, 1, 1]),
        n("Split", ["c", "sp"], ["h1", "h2"], axis=1),
        n("Add", ["h1", "h2"], ["a"]),
        n("Slice", ["a", "s0", "s3", "s1"], ["g"]),
        n("ReduceMax", ["g"], ["r"], axes=[3], keepdims=1),
        n("Squeeze", ["r", "sq"], ["q"]),
        n("Unsqueeze", ["q", "sq"], ["u"]),
        n("GlobalAveragePool", ["u"], ["gp"]),
        n("Reshape", ["gp", "shp"], ["rs"]),
        n("Sigmoid", ["rs"], ["y"]),
        n("Pad", ["x", "pads"], ["pd"], mode="reflect"),
        n("ReduceSum", ["pd", "rsx"], ["z"], keepdims=0),
    ]
    inits = [
        _const("dw", [8, 1, 3, 3], rng), _ints("sp", [4, 4]), _ints("s0", [0]),
        _ints("s3", [3]), _ints("s1", [1]), _ints("sq", [3]), _ints("shp", [0, -1]),
        _ints("pads", [0, 0, 1, 1, 0, 0, 1, 1]), _ints("rsx", [1, 3]),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "depthwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 18])],
        inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("level, block", [("O2", 4), ("O1", 1)])
def test_depthwise_split_pad_net_one_compile(level, block, compiles):
    model = _depthwise_net(np.random.default_rng(4))
    compiled = dynamic.compile_dynamic(
        model, {"batch": (1, 16)}, level=level, opt_dims={"batch": block}
    )
    assert not any("no blocks" in r for r in compiled.info["remarks"])

    def feed(rng, batch):
        return {"x": rng.standard_normal((batch, 8, 16, 16)).astype(np.float32)}

    _run_all(model, compiled, compiles, feed)


@pytest.mark.parametrize("block", [1, 4])
def test_attention_batched_matmuls(block, compiles):
    """Two inputs carrying the batch; MatMul by a constant, a Transpose that keeps
    axis 0, batched MatMuls of two batch-carrying sides, Softmax, LayerNorm."""
    rng = np.random.default_rng(1)
    n = helper.make_node
    graph = helper.make_graph(
        [
            n("MatMul", ["q", "wq"], ["qq"]),
            n("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
            n("MatMul", ["qq", "kt"], ["s"]),
            n("Softmax", ["s"], ["p"], axis=-1),
            n("MatMul", ["p", "k"], ["y"]),
            n("LayerNormalization", ["y", "g", "b"], ["z"], axis=-1),
        ],
        "attention",
        [helper.make_tensor_value_info("q", TensorProto.FLOAT, ["batch", 12, 16]),
         helper.make_tensor_value_info("k", TensorProto.FLOAT, ["batch", 20, 16])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 12, 16])],
        [_const("wq", [16, 16], rng), _const("g", [16], rng), _const("b", [16], rng)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = dynamic.compile_dynamic(
        model, {"batch": (1, 16)}, opt_dims={"batch": block}
    )
    assert not any("no blocks" in r for r in compiled.info["remarks"])

    def feed(rng, batch):
        return {
            "q": rng.standard_normal((batch, 12, 16)).astype(np.float32),
            "k": rng.standard_normal((batch, 20, 16)).astype(np.float32),
        }

    _run_all(model, compiled, compiles, feed)


@pytest.mark.parametrize("block", [1, 4])
def test_embedding_gather_over_a_constant_table(block, compiles):
    """Gather axis 0 of a constant table by [batch, 4] indices is row-local (the
    rule admits it: its axis is the table's); its index range check (loop.check)
    runs per row and an index out of range is refused by name."""
    from smelt.errors import InvalidInput

    rng = np.random.default_rng(3)
    graph_ = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
            helper.make_node("ReduceSum", ["e", "one"], ["y"], keepdims=0),
        ],
        "emb",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])],
        [_const("table", [50, 16], rng),
         numpy_helper.from_array(np.array([1], np.int64), "one")],
    )  # fmt: skip
    model = helper.make_model(graph_, opset_imports=[helper.make_opsetid("", 17)])
    compiled = dynamic.compile_dynamic(
        model, {"batch": (1, 16)}, opt_dims={"batch": block}
    )

    def feed(rng, batch):
        return {"ids": rng.integers(-50, 50, (batch, 4)).astype(np.int64)}

    _run_all(model, compiled, compiles, feed)
    bad = np.zeros((11, 4), np.int64)
    bad[9, 2] = 50  # a row in the remainder loop (blocks of 4: rows 8..10)
    with pytest.raises(InvalidInput, match=r"Gather#0.*out of range \[-50, 50\)"):
        compiled.run({"ids": bad})
    bad[9, 2], bad[1, 0] = 0, -51  # a row in a block of 4
    with pytest.raises(InvalidInput, match=r"Gather#0.*out of range"):
        compiled.run({"ids": bad})
    bad[1, 0] = 0
    assert compiled.run({"ids": bad})["y"].shape == (11, 16)  # status reset


def _one_op(node, out_shape, inits=()):
    rank2 = list(node.input) == ["x2"]  # Trilu: a [batch, 8] input
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(
            "x2" if rank2 else "x", TensorProto.FLOAT,
            ["batch", 8] if rank2 else ["batch", 6, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        list(inits),
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


@pytest.mark.parametrize(
    "node, out_shape, inits, match",
    [
        (helper.make_node("LogSoftmax", ["x"], ["y"], axis=-3), ["batch", 6, 8], (),
         r"graph.log_softmax .*mixes rows .*axis=0 is the 'batch' axis"),
        (helper.make_node("CumSum", ["x", "a0"], ["y"]), ["batch", 6, 8], (),
         r"graph.cum_sum .*mixes rows .*axis=0"),
        (helper.make_node("Slice", ["x", "st", "en", "a0", "step"], ["y"]),
         ["batch", 6, 8], (), r"graph.slice .*mixes rows .*slices the 'batch' axis"),
        (helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0, 2]),
         [6, "batch", 8], (), r"graph.transpose .*must lead with 'batch'"),
        (helper.make_node("ReduceMax", ["x"], ["y"], axes=[0], keepdims=1),
         [1, 6, 8], (), r"graph.reduce_max .*must lead with 'batch'"),
        (helper.make_node("Trilu", ["x2"], ["y"]), ["batch", 8], (),
         r"graph.trilu .*mixes rows .*the row's index"),
        (helper.make_node("Concat", ["x", "x"], ["y"], axis=0),
         ["2batch", 6, 8], (), r"graph.concat .*must lead with 'batch'"),
    ],
)  # fmt: skip
def test_ops_that_mix_rows_are_refused_by_name(node, out_shape, inits, match):
    extra = [
        _ints("a0", [0]), _ints("st", [-1]), _ints("en", [-(2**62)]),
        _ints("step", [-1]),
    ]  # fmt: skip
    used = set(node.input)
    model = _one_op(node, out_shape, [t for t in extra if t.name in used])
    with pytest.raises(UnsupportedModel, match=match):
        dynamic.compile_dynamic(model, {"batch": (1, 8)})


def test_cli_run_dim(tmp_path, capsys):
    """smelt run --dim batch=1:16:4 --inputs at batch 5 --check: the dynamic path."""
    from smelt.compiler.cli import main

    path = tmp_path / "convnet.onnx"
    onnx.save(_conv_net(np.random.default_rng(2)), path)
    x = np.random.default_rng(0).standard_normal((5, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    rc = main(["run", str(path), "--dim", "batch=1:16:4", "--inputs",
               str(tmp_path / "in.npz"), "--check", "-q"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0 and "check PASSED" in out and "y: float32[5, 10]" in out
    # random inputs: at OPT rows
    assert main(["run", str(path), "--dim", "batch=2:16:3", "--check", "-q"]) == 0
    assert "y: float32[3, 10]" in capsys.readouterr().out
    # --remarks: the run-time dim's remarks among the passes'
    assert main(["run", str(path), "--dim", "batch=1:16:4", "-q", "--remarks"]) == 0
    assert "make-batch-dynamic: the loop over the run-time dim 'batch'" in (
        capsys.readouterr().out
    )
    with pytest.raises(SystemExit):
        main(["run", str(path), "--dim", "batch=4:2"])
    assert "--dim NAME=MIN:MAX[:OPT]" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "compile once for a run-time leading dim" in capsys.readouterr().out
