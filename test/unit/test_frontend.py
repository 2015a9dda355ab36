"""The ONNX frontend: module format, folding at import, and one clear error for
every kind of model it cannot import."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.frontend.onnx import import_model
from smelt.reference.executor import run_graph

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")


def make_model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def value(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def ops_of(module) -> list[str]:
    main = next(iter(module.ops))
    return [op.name for op in main.body.block.ops]


def test_module_format():
    model = make_model(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])],
        [value("x", [1, 3, 8, 8]), value("w", [4, 3, 3, 3])],
        [value("y", [1, 4, 8, 8])],
        [numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")],
    )  # fmt: skip
    module = import_model(model)
    main = next(iter(module.ops))
    assert main.sym_name.data == "main"
    assert [s.data for s in main.attributes["smelt.input_names"].data] == ["x"]
    assert [s.data for s in main.attributes["smelt.output_names"].data] == ["y"]
    assert len(main.body.block.args) == 1  # "w" has an initializer: a constant
    conv = next(op for op in main.body.block.ops if isinstance(op, g.Conv2dOp))
    assert conv.attr("layout") == "nchw" and conv.attr("pads") == (1, 1, 1, 1)
    assert g.shape_of(conv.bias) == (4,)  # the missing bias is a zero constant
    text = str(module)
    assert "func.func @main(%0: tensor<1x3x8x8xf32>) -> tensor<1x4x8x8xf32>" in text
    assert "dense_resource<__elided__>" in text  # weights are not printed


def test_accepts_path_bytes_and_proto():
    path = os.path.join(LIGHT, "light_squeezenet.onnx")
    with open(path, "rb") as f:
        data = f.read()
    for source in (path, data, onnx.load(path)):
        assert "graph.conv2d" in ops_of(import_model(source))


def test_truncated_file(tmp_path):
    with open(os.path.join(LIGHT, "light_resnet50.onnx"), "rb") as f:
        data = f.read()
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(data[: len(data) // 3])
    with pytest.raises(SmeltError, match="not a valid ONNX model"):
        import_model(str(bad))
    with pytest.raises(SmeltError, match="not a valid ONNX model"):
        import_model(b"\x12\x34 certainly not protobuf")
    with pytest.raises(SmeltError, match="not a valid ONNX model"):
        import_model(b"")
    with pytest.raises(SmeltError, match="no such file"):
        import_model(str(tmp_path / "missing.onnx"))


def test_lists_every_unsupported_op_and_dynamic_dim():
    model = make_model(
        [helper.make_node("Multinomial", ["x"], ["v"], name="uniq_1"),
         helper.make_node("Relu", ["v"], ["r"]),
         helper.make_node("Fancy", ["x"], ["f"], domain="com.example"),
         helper.make_node("Conv", ["x5", "w3"], ["c3"], name="conv3d")],
        [value("x", ["batch", 3, "h", 8]),
         value("x5", [1, 3, 4, 4, 4]), value("w3", [2, 3, 1, 1, 1])],
        [value("f", None), value("c3", None)],
    )  # fmt: skip
    with pytest.raises(SmeltError) as info:
        import_model(model)
    msg = str(info.value)
    for part in ("Multinomial 'uniq_1'", "Fancy#2", "com.example",
                 "input 'x' dim 0 is 'batch'", "input 'x' dim 2 is 'h'",
                 "--input-shape", "input_shapes="):  # fmt: skip
        assert part in msg, part
    # With the shapes fixed, the unsupported ops are still all listed, and the
    # 3-D conv (found only once shapes are known) joins them.
    with pytest.raises(SmeltError) as info:
        import_model(model, {"x": (1, 3, 8, 8), "w3": (2, 3, 1, 1, 1)})
    msg = str(info.value)
    assert "Multinomial 'uniq_1'" in msg and "Conv 'conv3d': 3-D Conv" in msg
    assert "dynamic" not in msg


def test_input_shapes_fix_dynamic_dims():
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [value("x", ["n", 4])],
        [value("y", None)],
    )
    module = import_model(model, {"x": [2, 4]})
    out = run_graph(module, {"x": np.full((2, 4), -1, np.float32)})
    assert out["y"].shape == (2, 4) and (out["y"] == 0).all()
    with pytest.raises(SmeltError, match="not a model input"):
        import_model(model, {"x": [2, 4], "z": [1]})
    with pytest.raises(SmeltError, match="rank 3"):
        import_model(model, {"x": [2, 4, 1]})
    with pytest.raises(SmeltError, match="fixes it to 4"):
        import_model(model, {"x": [2, 5]})


def test_shape_gather_concat_reshape_chain_folds():
    model = make_model(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Gather", ["s", "zero"], ["d0"], axis=0),
         helper.make_node("Unsqueeze", ["d0", "axes"], ["u0"]),
         helper.make_node("Concat", ["u0", "minus1"], ["shape"], axis=0),
         helper.make_node("Reshape", ["x", "shape"], ["y"])],
        [value("x", [2, 3, 4])],
        [value("y", None)],
        [numpy_helper.from_array(np.array(0, np.int64), "zero"),
         numpy_helper.from_array(np.array([0], np.int64), "axes"),
         numpy_helper.from_array(np.array([-1], np.int64), "minus1")],
    )  # fmt: skip
    module = import_model(model)
    assert ops_of(module) == ["graph.reshape", "func.return"]
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(run_graph(module, {"x": x})["y"], x.reshape(2, 12))


def test_constant_of_shape_becomes_one_constant():
    module = import_model(os.path.join(LIGHT, "light_bvlc_alexnet.onnx"))
    names = ops_of(module)
    assert names.count("graph.constant") == 16  # one per weight, none duplicated
    assert "graph.gemm" in names and "graph.lrn" in names


def test_non_constant_shape_names_the_node():
    model = make_model(
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="dyn_reshape")],
        [value("x", [2, 3]), value("s", [2], TensorProto.INT64)],
        [value("y", None)],
    )
    with pytest.raises(SmeltError, match="Reshape 'dyn_reshape'.*shape.*constant"):
        import_model(model)


def test_shape_errors_name_the_node():
    model = make_model(
        [helper.make_node("Add", ["x", "z"], ["y"])],
        [value("x", [2, 3]), value("z", [4])],
        [value("y", None)],
    )
    with pytest.raises(SmeltError, match=r"Add#0.*do not broadcast"):
        import_model(model)


def test_softmax_before_opset_13_flattens_from_axis():
    model = make_model(
        [helper.make_node("Softmax", ["x"], ["y"], axis=1)],
        [value("x", [2, 3, 4])], [value("y", None)], opset=11,
    )  # fmt: skip
    module = import_model(model)
    assert ops_of(module) == ["graph.reshape", "graph.softmax", "graph.reshape",
                              "func.return"]  # fmt: skip
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    e = np.exp(x.reshape(2, 12) - x.reshape(2, 12).max(1, keepdims=True))
    want = (e / e.sum(1, keepdims=True)).reshape(2, 3, 4)
    np.testing.assert_allclose(run_graph(module, {"x": x})["y"], want, rtol=1e-6)


def test_training_mode_is_unsupported():
    """Dropout's mask output is all true in inference (supported); a training_mode
    decided at run time is refused: smelt compiles inference."""
    model = make_model(
        [helper.make_node("Dropout", ["x", "", "t"], ["y"])],
        [value("x", [2, 3]), value("t", [], TensorProto.BOOL)],
        [value("y", None)],
        opset=13,
    )
    with pytest.raises(SmeltError, match="training_mode"):
        import_model(model)


def test_maxpool_indices_and_nd_pools():
    model = make_model(
        [helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2, 2],
                          storage_order=1),
         helper.make_node("AveragePool", ["x"], ["a"], kernel_shape=[3, 1, 2])],
        [value("x", [1, 2, 4, 5, 6])],
        [value("y", None), value("i", None, TensorProto.INT64), value("a", None)],
    )  # fmt: skip
    module = import_model(model)
    assert ops_of(module) == ["graph.max_pool_with_indices", "graph.average_pool",
                              "func.return"]  # fmt: skip
    op = next(iter(module.ops)).body.block.first_op
    assert op.attr("storage_order") == 1
    assert [str(r.type) for r in op.results] == [
        "tensor<1x2x3x4x5xf32>", "tensor<1x2x3x4x5xi64>"
    ]
    # Without a user of Indices, MaxPool stays a plain max_pool.
    model = make_model(
        [helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2, 2])],
        [value("x", [1, 2, 4, 5, 6])], [value("y", None)],
    )  # fmt: skip
    assert ops_of(import_model(model)) == ["graph.max_pool", "func.return"]


def test_3d_conv_is_still_unsupported():
    model = make_model(
        [helper.make_node("Conv", ["x", "w"], ["y"])],
        [value("x", [1, 2, 4, 4, 4]), value("w", [3, 2, 1, 1, 1])], [value("y", None)],
    )  # fmt: skip
    with pytest.raises(SmeltError, match="3-D Conv is not supported"):
        import_model(model)


def _batch_norm_model(opset, outputs, **attrs):
    inits = [numpy_helper.from_array(np.ones(3, np.float32), n)
             for n in ("s", "b", "m", "v")]  # fmt: skip
    node = helper.make_node(
        "BatchNormalization", ["x", "s", "b", "m", "v"], list(outputs), **attrs
    )
    return make_model(
        [node], [value("x", [2, 3, 4])], [value(o, None) for o in outputs], inits, opset
    )


def test_batch_norm_training_mode_is_decomposed():
    model = _batch_norm_model(15, ["y", "rm", "rv"], training_mode=1, momentum=0.75)
    ops = ops_of(import_model(model))
    assert "graph.reduce_mean" in ops and "graph.batch_norm" in ops
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    out = run_graph(import_model(model), {"x": x})
    mean, var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    np.testing.assert_allclose(out["rm"], 0.75 + 0.25 * mean, rtol=1e-6)
    np.testing.assert_allclose(out["rv"], 0.75 + 0.25 * var, rtol=1e-6)
    want = (x - mean[:, None]) / np.sqrt(var[:, None] + 1e-5) + 1
    np.testing.assert_allclose(out["y"], want, rtol=1e-5, atol=1e-6)
    # Inference mode (or no training outputs used) is one batch_norm.
    model = _batch_norm_model(15, ["y"], training_mode=0)
    assert ops_of(import_model(model))[-2:] == ["graph.batch_norm", "func.return"]


def test_batch_norm_training_outputs_before_opset_14_are_unsupported():
    model = _batch_norm_model(9, ["y", "mean", "var"])
    with pytest.raises(SmeltError, match="supported only with training_mode = 1"):
        import_model(model)


def test_bfloat16_model_imports_and_runs():
    """BFLOAT16 tensors are ml_dtypes.bfloat16 arrays (as in onnx's numpy_helper);
    a bf16 model compiles for the CPU and rounds like f32 math rounded to bf16."""
    import ml_dtypes

    import smelt

    bf16 = ml_dtypes.bfloat16
    x = helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [3, 5])
    y = helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [3, 5])
    w = numpy_helper.from_array(np.linspace(0.1, 3.3, 5).astype(bf16), "w")
    nodes = [helper.make_node("Mul", ["x", "w"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    module = import_model(model)
    assert "tensor<3x5xbf16>" in str(module)
    a = np.linspace(-3, 3, 15, dtype=np.float32).reshape(3, 5).astype(bf16)
    wf = numpy_helper.to_array(w).astype(np.float32)
    expected = np.maximum(a.astype(np.float32) * wf, 0).astype(bf16)
    got = smelt.compile(model).run({"x": a})["y"]
    assert got.dtype == bf16
    np.testing.assert_array_equal(got.astype(np.float32), expected.astype(np.float32))
    ref = run_graph(module, {"x": a})["y"]
    np.testing.assert_array_equal(ref.astype(np.float32), expected.astype(np.float32))


def test_gather_with_a_scalar_constant_index_drops_the_axis():
    """A ViT pooler: Gather of token 0 by a 0-d Constant index, then Gemm (the
    constant used to be materialized 1-d, which kept the axis)."""
    index = numpy_helper.from_array(np.array(-2, np.int64))
    w = numpy_helper.from_array(np.arange(32, dtype=np.float32).reshape(8, 4), "w")
    nodes = [
        helper.make_node("Constant", [], ["i"], value=index),
        helper.make_node("Gather", ["x", "i"], ["h"], axis=1),
        helper.make_node("Gemm", ["h", "w"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "pooler",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [w],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).random((1, 5, 4), np.float32)
    y = run_graph(import_model(model), {"x": x})["y"]
    np.testing.assert_allclose(y, x[:, -2] @ numpy_helper.to_array(w).T, rtol=1e-6)
