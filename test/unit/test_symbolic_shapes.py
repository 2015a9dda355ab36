"""Symbolic dims at the graph level (#34): ONNX models imported with
`symbolic=True` against two oracles: the same model imported with its dims fixed
(smelt's static inference, op by op) and onnx's own shape inference. (The algebra
of `symbolic.Dim` is tested in test_symbolic_dims.py.)"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects import func

import smelt
from smelt.dialects import graph as g
from smelt.dialects.symbolic import substitute, sym
from smelt.dialects.symbolic_text import holds
from smelt.errors import SmeltError
from smelt.frontend.onnx import import_model
from smelt.frontend.symbolic_import import (
    check_ranges,
    dims_of,
    symbolic_shapes,
)

B, H, W, S = sym("batch"), sym("H"), sym("W"), sym("seq")

# --- models ---------------------------------------------------------------------------

_rng = np.random.default_rng(0)


def _init(name, *shape):
    return numpy_helper.from_array(_rng.standard_normal(shape).astype(np.float32), name)


def _ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _model(name, nodes, inputs, outputs, inits, opset):
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def conv_net(dims=("batch", 3, "H", "W")) -> onnx.ModelProto:
    """batch x 3 x H x W: strided conv, pools (one ceil_mode), a residual, concat,
    slice, transpose, reshape with 0 / -1, reduce, gemm, softmax."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        n("Relu", ["c1"], ["r1"]),
        n("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2],
          pads=[1, 1, 1, 1]),
        n("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        n("Add", ["c2", "p1"], ["s2"]),
        n("AveragePool", ["s2"], ["a2"], kernel_shape=[2, 2], strides=[2, 2],
          ceil_mode=1),
        n("Concat", ["a2", "a2"], ["cat"], axis=1),
        n("Slice", ["cat", "st", "en", "ax"], ["sl"]),
        n("Transpose", ["sl"], ["tr"], perm=[0, 1, 3, 2]),
        n("Reshape", ["tr", "spec"], ["rs"]),
        n("ReduceMean", ["rs"], ["rm"], axes=[2], keepdims=0),
        n("Gemm", ["rm", "wf", "bf"], ["logits"], transB=1),
        n("Softmax", ["logits"], ["y"], axis=-1),
    ]  # fmt: skip
    inits = [
        _init("w1", 8, 3, 3, 3), _init("b1", 8), _init("w2", 8, 8, 3, 3),
        _init("b2", 8), _ints("st", [1, 0]), _ints("en", [-1, 2**63 - 1]),
        _ints("ax", [2, 3]), _ints("spec", [0, 16, -1]), _init("wf", 10, 16),
        _init("bf", 10),
    ]  # fmt: skip
    outputs = ["c1", "p1", "a2", "cat", "sl", "tr", "rs", "rm", "y"]
    return _model("conv_net", nodes, [("x", list(dims))], outputs, inits, 13)


def transformer(x=("batch", "seq", 64), mask=("batch", "seq")) -> onnx.ModelProto:
    """An attention block over batch x seq (two inputs sharing both symbols):
    LayerNorm, MatMuls, head reshapes and transposes, masked Softmax, a residual
    MLP, Concat along seq, Slice, ReduceSum, Flatten."""
    n, d = helper.make_node, 64
    nodes = [
        n("LayerNormalization", ["x", "g1", "be1"], ["ln1"], axis=-1),
        *[n("MatMul", ["ln1", f"w{c}"], [c]) for c in "qkv"],
        *[n("Reshape", [c, "heads"], [f"{c}4"]) for c in "qkv"],
        n("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
        n("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        n("Transpose", ["v4"], ["vt"], perm=[0, 2, 1, 3]),
        n("MatMul", ["qt", "kt"], ["qk"]),
        n("Div", ["qk", "scale"], ["qks"]),
        n("Unsqueeze", ["mask", "mask_axes"], ["m4"]),
        n("Add", ["qks", "m4"], ["qkm"]),
        n("Softmax", ["qkm"], ["att"], axis=-1),
        n("MatMul", ["att", "vt"], ["ctx"]),
        n("Transpose", ["ctx"], ["ctxt"], perm=[0, 2, 1, 3]),
        n("Reshape", ["ctxt", "merge"], ["ctx3"]),
        n("MatMul", ["ctx3", "wo"], ["o"]),
        n("Add", ["o", "x"], ["h"]),
        n("LayerNormalization", ["h", "g2", "be2"], ["ln2"], axis=-1),
        n("MatMul", ["ln2", "w_up"], ["up"]),
        n("Relu", ["up"], ["act"]),
        n("MatMul", ["act", "w_down"], ["down"]),
        n("Add", ["down", "h"], ["out"]),
        n("Concat", ["out", "x"], ["both"], axis=1),
        n("Slice", ["both", "s0", "s1", "s_ax"], ["first"]),
        n("ReduceSum", ["both", "sum_axes"], ["pooled"], keepdims=1),
        n("Flatten", ["first"], ["flat"], axis=1),
    ]
    inits = [
        _init("g1", d), _init("be1", d), _init("g2", d), _init("be2", d),
        *[_init(f"w{c}", d, d) for c in "qkvo"],
        _init("w_up", d, 2 * d), _init("w_down", 2 * d, d),
        _ints("heads", [0, 0, 4, d // 4]), _ints("merge", [0, 0, -1]),
        numpy_helper.from_array(np.array(4.0, np.float32), "scale"),
        _ints("mask_axes", [1, 2]), _ints("s0", [0]), _ints("s1", [1]),
        _ints("s_ax", [1]), _ints("sum_axes", [1]),
    ]  # fmt: skip
    outputs = ["ln1", "q4", "qt", "kt", "qk", "m4", "att", "ctx3", "out", "both",
               "first", "pooled", "flat"]  # fmt: skip
    inputs = [("x", list(x)), ("mask", list(mask))]
    return _model("block", nodes, inputs, outputs, inits, 17)


def embedding_block(ids=("batch", "seq")) -> onnx.ModelProto:
    """int64 ids: embedding Gather, a LayerNorm written out (ReduceMean, Pow,
    Sqrt), an Erf GELU, an Equal / Where padding mask, Casts, Split, ReduceMax,
    Gemm, Pad of the symbolic axis, Expand."""
    n = helper.make_node

    def c(name, v, dt=np.float32):
        return numpy_helper.from_array(np.array(v, dt), name)

    nodes = [
        n("Gather", ["table", "ids"], ["emb"], axis=0),
        n("Add", ["emb", "pos"], ["e"]),
        n("ReduceMean", ["e"], ["mu"], axes=[-1]),
        n("Sub", ["e", "mu"], ["d"]),
        n("Pow", ["d", "two"], ["d2"]),
        n("ReduceMean", ["d2"], ["var"], axes=[-1]),
        n("Add", ["var", "eps"], ["ve"]),
        n("Sqrt", ["ve"], ["sd"]),
        n("Div", ["d", "sd"], ["nrm"]),
        n("MatMul", ["nrm", "w"], ["h"]),
        n("Div", ["h", "sqrt2"], ["hs"]),
        n("Erf", ["hs"], ["er"]),
        n("Add", ["er", "one"], ["er1"]),
        n("Mul", ["h", "er1"], ["g0"]),
        n("Mul", ["g0", "half"], ["gelu"]),
        n("Equal", ["ids", "zero_i"], ["pad"]),
        n("Unsqueeze", ["pad", "last"], ["pad3"]),
        n("Where", ["pad3", "zero_f", "gelu"], ["masked"]),
        n("Cast", ["masked"], ["m16"], to=TensorProto.FLOAT16),
        n("Cast", ["m16"], ["m32"], to=TensorProto.FLOAT),
        n("Split", ["m32"], ["s1", "s2"], axis=2),
        n("ReduceMax", ["s1"], ["mx"], axes=[1], keepdims=0),
        n("Gemm", ["mx", "wg", "bg"], ["cls"]),
        n("Sigmoid", ["cls"], ["p"]),
        n("Tanh", ["s2"], ["t2"]),
        n("Pad", ["t2", "pads"], ["padded"]),
        n("Expand", ["bias", "eshape"], ["ex"]),
    ]
    inits = [
        _init("table", 100, 16), _init("pos", 16), c("two", 2.0), c("eps", 1e-5),
        _init("w", 16, 32), c("sqrt2", 1.4142), c("one", 1.0), c("half", 0.5),
        c("zero_i", 0, np.int64), c("zero_f", 0.0), _init("wg", 16, 4),
        _init("bg", 4), c("pads", [0, 1, 0, 0, 1, 0], np.int64),
        _init("bias", 1, 1, 16), c("eshape", [1, 1, 16], np.int64),
        c("last", [-1], np.int64),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "embedding_block",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, list(ids))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
         for o in ("emb", "nrm", "gelu", "masked", "m32", "mx", "p", "padded", "ex")],
        inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _expected_embedding():
    return {
        "ids": (B, S), "emb": (B, S, 16), "nrm": (B, S, 16), "gelu": (B, S, 32),
        "masked": (B, S, 32), "m32": (B, S, 32), "mx": (B, 16), "p": (B, 4),
        "padded": (B, S + 2, 16), "ex": (1, 1, 16),
    }  # fmt: skip


def _expected_conv():
    h4, w4 = (H + 3) // 4, (W + 3) // 4
    h8, w8 = (H + 7) // 8, (W + 7) // 8
    return {
        "x": (B, 3, H, W),
        "c1": (B, 8, (H + 1) // 2, (W + 1) // 2),
        "p1": (B, 8, h4, w4),
        "a2": (B, 8, h8, w8),
        "cat": (B, 16, h8, w8),
        "sl": (B, 16, h8 - 2, w8),
        "tr": (B, 16, w8, h8 - 2),
        "rs": (B, 16, w8 * (h8 - 2)),
        "rm": (B, 16),
        "y": (B, 10),
    }


def _expected_transformer():
    return {
        "x": (B, S, 64), "mask": (B, S), "ln1": (B, S, 64), "q4": (B, S, 4, 16),
        "qt": (B, 4, S, 16), "kt": (B, 4, 16, S), "qk": (B, 4, S, S),
        "m4": (B, 1, 1, S), "att": (B, 4, S, S), "ctx3": (B, S, 64),
        "out": (B, S, 64), "both": (B, 2 * S, 64), "first": (B, 1, 64),
        "pooled": (B, 1, 64), "flat": (B, 64),
    }  # fmt: skip


CASES = {
    "conv_net": (conv_net, _expected_conv,
                 [{"batch": 1, "H": 32, "W": 32}, {"batch": 2, "H": 57, "W": 41},
                  {"batch": 3, "H": 224, "W": 100}]),
    "embedding": (embedding_block, _expected_embedding,
                  [{"batch": 1, "seq": 5}, {"batch": 3, "seq": 64}]),
    "transformer": (transformer, _expected_transformer,
                    [{"batch": 1, "seq": 8}, {"batch": 4, "seq": 13},
                     {"batch": 2, "seq": 128}]),
}  # fmt: skip


def _bound_model(build, bindings):
    """The model with its dim_params replaced by the bound numbers."""
    model = build()
    for info in model.graph.input:
        for d in info.type.tensor_type.shape.dim:
            if d.dim_param:
                d.dim_value = bindings[d.dim_param]
    return model


def _ops(module):
    main = next(op for op in module.ops if isinstance(op, func.FuncOp))
    return main, list(main.body.block.ops)


@pytest.mark.parametrize("name", sorted(CASES))
def test_symbolic_import_shapes(name):
    build, expected, _ = CASES[name]
    module = import_model(build(), symbolic=True)
    assert symbolic_shapes(module) == expected()
    main, _ = _ops(module)
    # one symbol per name: the transformer's two inputs share batch and seq
    want = {"conv_net": {"batch": (0, 0), "H": (0, 2), "W": (0, 3)}}.get(
        name, {"batch": (0, 0), "seq": (0, 1)}
    )
    assert dims_of(main) == want
    text = str(module)
    assert '#graph.dims<"batch", "seq">' in text or '"(H + 1) floordiv 2"' in text


@pytest.mark.parametrize("name", sorted(CASES))
def test_binding_the_symbols_gives_the_static_shapes(name):
    """Oracle: each op's result shapes with the symbols bound are exactly those of
    the model imported with its dims fixed to the same numbers, op by op; and
    onnx's shape inference of the fixed model agrees on every named value."""
    build, _, bindings_list = CASES[name]
    module = import_model(build(), symbolic=True)
    main, ops = _ops(module)
    assumed = [a.data for a in main.attributes.get("smelt.dim_assumptions", [])]
    for bindings in bindings_list:
        assert all(holds(a, bindings) for a in assumed), (assumed, bindings)
        fixed = _bound_model(build, bindings)
        static = import_model(fixed)
        _, static_ops = _ops(static)
        assert [op.name for op in ops] == [op.name for op in static_ops]
        for op, static_op in zip(ops, static_ops, strict=True):
            got = [tuple(substitute(d, bindings) for d in g.shape_of(r))
                   for r in op.results]  # fmt: skip
            assert got == [g.shape_of(r) for r in static_op.results], str(op)
        inferred = onnx.shape_inference.infer_shapes(fixed, strict_mode=True)
        onnx_shapes = {
            v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
            for v in [*inferred.graph.value_info, *inferred.graph.output]
            if v.type.tensor_type.HasField("shape")
        }
        for value, shape in symbolic_shapes(module).items():
            if value in onnx_shapes:
                bound = tuple(substitute(d, bindings) for d in shape)
                assert bound == onnx_shapes[value], (value, bindings)


def test_onnx_symbolic_inference_agrees():
    """Where onnx's inference of the symbolic transformer keeps a dim_param or a
    number, smelt's expression is that symbol or number."""
    inferred = onnx.shape_inference.infer_shapes(transformer())
    ours = symbolic_shapes(import_model(transformer(), symbolic=True))
    compared = 0
    for v in [*inferred.graph.value_info, *inferred.graph.output]:
        if v.name not in ours:
            continue
        for mine, d in zip(ours[v.name], v.type.tensor_type.shape.dim, strict=True):
            if d.HasField("dim_value"):
                assert mine == d.dim_value, v.name
            elif d.dim_param and not d.dim_param.startswith("unk__"):
                assert mine == sym(d.dim_param), v.name
            compared += 1
    assert compared > 20


def test_default_import_still_refuses_dynamic_dims():
    with pytest.raises(SmeltError, match=r"dynamic input dims \(3\); smelt needs"):
        import_model(conv_net())
    with pytest.raises(SmeltError, match=r"input 'x' dim 2 is 'H'"):
        smelt.compile(conv_net())  # the loop level cannot run symbolic dims yet


def test_input_shapes_fix_some_dims():
    module = import_model(transformer(), symbolic=True,
                          input_shapes={"x": (2, 16, 64)})  # fmt: skip
    shapes = symbolic_shapes(module)
    assert shapes["x"] == (2, 16, 64) and shapes["mask"] == (B, S)
    assert shapes["qk"] == (2, 4, 16, 16)
    # the mask's symbols meet the fixed dims in the Add: each must be 1 or the number
    main, _ = _ops(module)
    assumed = [a.data for a in main.attributes["smelt.dim_assumptions"]]
    assert "batch in {1, 2}" in assumed and "seq in {1, 16}" in assumed


def test_unnamed_dims_get_names_of_their_own():
    module = import_model(conv_net(dims=("", 3, "H", "")), symbolic=True)
    shapes = symbolic_shapes(module)
    assert shapes["x"] == (sym("x_dim0"), 3, H, sym("x_dim3"))


def test_symbols_that_may_differ_are_refused_by_name():
    model = transformer(mask=("batch", "kv"))  # mask over another length
    with pytest.raises(SmeltError, match=r"Add.*\['kv', 'seq'\] are equal"):
        import_model(model, symbolic=True)


def test_shapes_valid_for_one_value_only_are_refused_by_name():
    """A Reshape to a fixed count (an export at batch 1) holds for one batch only."""
    n = helper.make_node
    nodes = [n("Reshape", ["x", "spec"], ["y"]), n("Concat", ["x", "z"], ["c"], axis=1)]
    model = _model(
        "fixed", nodes, [("x", ["batch", 8]), ("z", [1, 4])], ["y", "c"],
        [_ints("spec", [1, 8])], 13,
    )  # fmt: skip
    with pytest.raises(SmeltError) as info:
        import_model(model, symbolic=True)
    message = str(info.value)
    assert "Reshape#0: cannot reshape [batch, 8] to [1, 8] for every value" in message
    assert "concat shapes [batch, 8], [1, 4] differ off axis 1 (for some" in message
    assert import_model(model, input_shapes={"x": (1, 8)})  # fine at batch 1


def test_ranges_are_checked_against_what_the_import_assumed():
    module = import_model(conv_net(), symbolic=True)
    main, _ = _ops(module)
    # the slice [1:-1] of (H + 7) floordiv 8 rows needs 2 rows or more
    assert "(H + 7) floordiv 8 - 2 >= 0" in [
        a.data for a in main.attributes["smelt.dim_assumptions"]
    ]
    check_ranges(module, {"batch": (1, 64), "H": (32, 2048), "W": (17, 640)})
    assert dims_of(main) and "smelt.dim_ranges" in main.attributes
    with pytest.raises(SmeltError, match=r"floordiv 8 - 2 >= 0 \(fails at H=8\)"):
        check_ranges(module, {"H": (8, 2048)})
    with pytest.raises(SmeltError, match="'height', which is not a symbolic dim"):
        check_ranges(module, {"height": (8, 2048)})
    # a symbol broadcast against a fixed 2 may be 1 or 2, not 4
    fixed = import_model(transformer(), symbolic=True, input_shapes={"x": (2, 16, 64)})
    check_ranges(fixed, {"batch": (1, 2), "seq": (16, 16)})
    with pytest.raises(SmeltError, match=r"batch in \{1, 2\} \(fails at batch=4\)"):
        check_ranges(fixed, {"batch": (1, 4), "seq": (16, 16)})


@pytest.mark.parametrize(
    ("op", "opset"), [("Gelu", 20), ("HardSwish", 14), ("Mish", 18)]
)
def test_ops_from_onnx_function_bodies_keep_symbolic_dims(op, opset):
    """An op expanded from its onnx function body sees the symbols as dim_params."""
    model = _model("f", [helper.make_node(op, ["x"], ["y"])],
                   [("x", ["N", 4, "H", "W"])], ["y"], [], opset)  # fmt: skip
    N = sym("N")
    assert symbolic_shapes(import_model(model, symbolic=True))["y"] == (N, 4, H, W)
