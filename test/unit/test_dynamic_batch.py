"""Run-time batch (issue 34, first loop-level step): one compile of a model with a
symbolic batch runs every batch in the declared range, matching onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from smelt.errors import InvalidInput, SmeltError, UnsupportedModel

ort = pytest.importorskip("onnxruntime")

from smelt.compiler.dynamic import compile_dynamic  # noqa: E402

BATCHES = (1, 3, 8, 37)


def _model(nodes, inits, out_width: int, dim: str = "batch"):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, out_width])
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _const(name, shape, rng):
    value = rng.standard_normal(shape).astype(np.float32)
    return helper.make_tensor(name, TensorProto.FLOAT, shape, value)


def _elementwise(rng):
    return _model(
        [
            helper.make_node("Add", ["x", "c"], ["a"]),
            helper.make_node("Mul", ["a", "d"], ["m"]),
            helper.make_node("Relu", ["m"], ["r"]),
            helper.make_node("Sigmoid", ["r"], ["s"]),
            helper.make_node("Add", ["s", "x"], ["y"]),  # two batch-carrying inputs
        ],
        [_const("c", [64], rng), _const("d", [1, 64], rng)],
        64,
    )


def _mlp(rng):
    return _model(
        [
            helper.make_node("Add", ["x", "c"], ["a"]),
            helper.make_node("Relu", ["a"], ["r"]),
            helper.make_node("MatMul", ["r", "w"], ["mm"]),
            helper.make_node("Softmax", ["mm"], ["y"], axis=-1),
        ],
        [_const("c", [64], rng), _const("w", [64, 32], rng)],
        32,
    )


def _check(model, compiled, rng):
    session = ort.InferenceSession(model.SerializeToString())
    for batch in BATCHES:
        x = rng.standard_normal((batch, 64)).astype(np.float32)
        got = compiled.run({"x": x})["y"]
        (want,) = session.run(None, {"x": x})
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("block", [1, 8])
@pytest.mark.parametrize("build", [_elementwise, _mlp])
def test_one_compile_runs_every_batch(build, block):
    """Batches 1 / 3 / 8 / 37 with blocks of 8 rows: no block, one block and no
    row left, four blocks and five rows left."""
    rng = np.random.default_rng(7)
    model = build(rng)
    compiled = compile_dynamic(model, {"batch": (1, 64)}, opt_dims={"batch": block})
    assert compiled.input_shapes == {"x": ("batch", 64)}
    # the batch loop is outermost and left alone: a remark per kernel says so
    # (other passes' remarks, e.g. loop-vectorize's on an AVX2 host, aside)
    found = [r for r in compiled.info["remarks"] if "run-time dim 'batch'" in r]
    assert found
    blocked = "blocks of 8 rows run the body scheduled for 8"
    assert all((blocked in r) == (block == 8) for r in found)
    _check(model, compiled, rng)


def test_loop_ir_has_the_run_time_bound():
    from smelt.compiler.driver import lower
    from smelt.compiler.options import CompileOptions
    from smelt.frontend.onnx import import_model
    from smelt.lowering.dynamic_batch import make_batch_dynamic

    model = _mlp(np.random.default_rng(1))
    options = CompileOptions(level="O2", input_shapes={"x": [1, 64]})
    module = lower(import_model(model, {"x": [1, 64]}), options.resolved_pipeline())
    make_batch_dynamic(module, "batch")
    module.verify()
    text = str(module)
    assert "loop.for_dim %b = 0 to %batch step 1 parallel" in text
    assert "loop.row" in text and "memref<?x64xf32>" in text
    assert "loop.dims = [\"batch\"]" in text


def test_batch_outside_range_is_refused_naming_the_dim():
    rng = np.random.default_rng(3)
    compiled = compile_dynamic(_elementwise(rng), {"batch": (2, 16)})
    with pytest.raises(InvalidInput, match=r"dim 'batch' = 17 .*\[2, 16\]"):
        compiled.run({"x": np.zeros((17, 64), np.float32)})
    with pytest.raises(InvalidInput, match=r"dim 'batch' = 1 .*\[2, 16\]"):
        compiled.run({"x": np.zeros((1, 64), np.float32)})
    with pytest.raises(InvalidInput, match="axis 1 must be 64"):
        compiled.run({"x": np.zeros((4, 63), np.float32)})


def test_unsupported_op_is_refused_by_name():
    rng = np.random.default_rng(4)
    model = _model(
        [helper.make_node("ReduceSum", ["x"], ["y"], keepdims=1)], [], 1
    )
    with pytest.raises(UnsupportedModel, match="graph.reduce_sum .*must lead with 'batch'"):
        compile_dynamic(model, {"batch": (1, 8)})
    del rng


def test_only_one_leading_dim():
    model = _elementwise(np.random.default_rng(5))
    with pytest.raises(SmeltError, match="one run-time dim"):
        compile_dynamic(model, {"batch": (1, 8), "seq": (1, 8)})
    with pytest.raises(UnsupportedModel, match="'n' first"):
        compile_dynamic(model, {"n": (1, 8)})


def test_ops_that_mix_rows_are_refused():
    softmax_over_batch = _model(
        [helper.make_node("Softmax", ["x"], ["y"], axis=0)], [], 64
    )
    with pytest.raises(UnsupportedModel, match="graph.softmax .*mixes rows .*'batch' axis"):
        compile_dynamic(softmax_over_batch, {"batch": (1, 8)})
    rng = np.random.default_rng(6)
    # [batch, 64] + [5, 1, 64] -> [5, batch, 64]: the batch no longer leads
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, "batch", 64])
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["y"])], "g", [x], [y],
        [_const("c", [5, 1, 64], rng)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedModel, match="graph.add .*must lead with 'batch'"):
        compile_dynamic(model, {"batch": (1, 8)})


def test_smelt_compile_opts_in_with_dims():
    import smelt

    rng = np.random.default_rng(8)
    model = _elementwise(rng)
    compiled = smelt.compile(model, dims={"batch": (1, 40)})
    _check(model, compiled, rng)
    with pytest.raises(SmeltError, match=r"opt_dims\['batch'\] = 41 is outside"):
        smelt.compile(model, dims={"batch": (1, 40)}, opt_dims={"batch": 41})
    with pytest.raises(SmeltError, match="threads are not supported with dims="):
        smelt.compile(model, dims={"batch": (1, 40)}, threads=4)
    # the default path stays static: a symbolic batch is refused as before
    with pytest.raises(SmeltError, match="dynamic input dims"):
        smelt.compile(model)


@pytest.mark.parametrize("level", ["O0", "O2"])
def test_two_inputs_two_outputs(level):
    rng = np.random.default_rng(9)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 48])
    x2 = helper.make_tensor_value_info("x2", TensorProto.FLOAT, ["N", 48])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 48])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 16])
    graph = helper.make_graph(
        [
            helper.make_node("Sub", ["x", "x2"], ["a"]),
            helper.make_node("Div", ["a", "x2"], ["y"]),
            helper.make_node("MatMul", ["y", "w"], ["m"]),
            helper.make_node("Softmax", ["m"], ["z"], axis=-1),
        ],
        "g", [x, x2], [y, z], [_const("w", [48, 16], rng)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = compile_dynamic(model, {"N": (1, 50)}, level=level)
    session = ort.InferenceSession(model.SerializeToString())
    for batch in BATCHES:
        feeds = {
            "x": rng.standard_normal((batch, 48)).astype(np.float32),
            "x2": rng.uniform(0.5, 2, (batch, 48)).astype(np.float32),
        }
        got = compiled.run(feeds)
        want = session.run(None, feeds)
        np.testing.assert_allclose(got["y"], want[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got["z"], want[1], rtol=1e-5, atol=1e-6)
    with pytest.raises(InvalidInput, match="dim 'N' = 4, but another input gives it 3"):
        compiled.run({"x": feeds["x"][:3], "x2": np.ones((4, 48), np.float32)})


_SHARED_SCRATCH = """
func.func @a_0(%x: memref<1x64xf32>, %s: memref<64xf32>) attributes {loop.kernel} {
  func.return
}
func.func @b_0(%s: memref<64xf32>, %y: memref<1x64xf32>) attributes {loop.kernel} {
  func.return
}
func.func @main(%x: memref<1x64xf32>, %y: memref<1x64xf32>) {
  %s = loop.alloc : memref<64xf32>
  func.call @a_0(%x, %s) : (memref<1x64xf32>, memref<64xf32>) -> ()
  func.call @b_0(%s, %y) : (memref<64xf32>, memref<1x64xf32>) -> ()
  func.return
}
"""


def test_a_buffer_without_the_batch_between_kernels_is_refused():
    """At batch 1 a layout may put the batch off the leading axis ([64] here):
    one kernel writing it per row and another reading it would see the last row
    only, so make_batch_dynamic refuses it; kept inside one kernel (scratch) it
    is fine."""
    from xdsl.parser import Parser

    from smelt.lowering.dynamic_batch import make_batch_dynamic
    from smelt.universe import make_context

    module = Parser(make_context(), _SHARED_SCRATCH).parse_module()
    with pytest.raises(SmeltError, match=r"memref<64xf32> without the run-time "
                       r"'batch' first passes between 2 kernels"):  # fmt: skip
        make_batch_dynamic(module, "batch")
    one_user = _SHARED_SCRATCH.replace(
        "func.call @b_0(%s, %y)", "func.call @b_0(%s2, %y)"
    ).replace(
        "  %s = loop.alloc", "  %s2 = loop.alloc : memref<64xf32>\n  %s = loop.alloc"
    )  # fmt: skip
    module = Parser(make_context(), one_user).parse_module()
    make_batch_dynamic(module, "batch")
    module.verify()
