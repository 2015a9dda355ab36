"""Real exports with dynamic axes imported with symbolic dims (#34): a plain
torch encoder exported by torch.onnx (the TorchScript exporter, dynamic_axes on
batch and seq) computes its head reshapes at run time from `Shape` (Shape ->
Gather -> Unsqueeze -> Concat -> Reshape, and int64 Mul / Div on the sizes);
the import folds that arithmetic over the symbolic dims (`onnx_dims`). Oracle:
with the symbols bound, each op's shapes are those of the static import of the
same file at those dims, op by op."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects import func

import smelt
from smelt.dialects import graph as g
from smelt.dialects.symbolic import SymbolicDimError, substitute, sym
from smelt.errors import SmeltError
from smelt.frontend import onnx_dims
from smelt.frontend.onnx import Const, import_model
from smelt.frontend.symbolic_import import symbolic_shapes

torch = pytest.importorskip("torch")

B, S = sym("batch"), sym("seq")
DIM, HEADS = 32, 4


def _encoder_model(path) -> onnx.ModelProto:
    nn = torch.nn

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(50, DIM)
            self.qkv = nn.ModuleList(nn.Linear(DIM, DIM) for _ in range(3))
            self.out = nn.Linear(DIM, DIM)
            self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
            self.ff = nn.Sequential(nn.Linear(DIM, 2 * DIM), nn.GELU(),
                                    nn.Linear(2 * DIM, DIM))  # fmt: skip

        def forward(self, ids, mask):
            b, n = ids.shape  # traced as Shape -> Gather
            x = self.emb(ids)
            q, k, v = (
                p(x).view(b, n, HEADS, DIM // HEADS).transpose(1, 2) for p in self.qkv
            )
            bias = (1.0 - mask[:, None, None, :].float()) * -1e4
            att = torch.softmax(q @ k.transpose(-1, -2) / 8**0.5 + bias, dim=-1)
            ctx = (att @ v).transpose(1, 2).reshape(b, n, -1)
            x = self.ln1(x + self.out(ctx))
            rows = x.reshape(b * n, DIM)  # Mul of the two sizes
            x = self.ln2(x + self.ff(rows).view(rows.shape[0] // n, n, DIM))
            return x, x.mean(1)

    torch.manual_seed(0)
    ids = torch.randint(0, 50, (2, 16))
    mask = torch.ones((2, 16), dtype=torch.int64)
    names = ["ids", "mask"]
    torch.onnx.export(
        Encoder().eval(), (ids, mask), str(path), dynamo=False, opset_version=17,
        input_names=names, output_names=["hidden", "pooled"],
        dynamic_axes={n: {0: "batch", 1: "seq"} for n in names},
    )  # fmt: skip
    return onnx.load(str(path))


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return _encoder_model(tmp_path_factory.mktemp("encoder") / "encoder.onnx")


def _ops(module):
    main = next(op for op in module.ops if isinstance(op, func.FuncOp))
    return list(main.body.block.ops)


def test_the_export_computes_its_reshapes_from_shape(encoder):
    types = {n.op_type for n in encoder.graph.node}
    assert {"Shape", "Gather", "Unsqueeze", "Concat", "Reshape"} <= types
    shapes = symbolic_shapes(import_model(encoder, symbolic=True))
    assert shapes == {"ids": (B, S), "mask": (B, S), "hidden": (B, S, DIM),
                      "pooled": (B, DIM)}  # fmt: skip


@pytest.mark.parametrize("batch, seq", [(1, 8), (4, 13), (2, 128)])
def test_binding_gives_the_static_import_op_by_op(encoder, batch, seq):
    module = import_model(encoder, symbolic=True)
    ops = _ops(module)
    fixed = {n: (batch, seq) for n in ("ids", "mask")}
    static_ops = _ops(import_model(encoder, input_shapes=fixed))
    assert [op.name for op in ops] == [op.name for op in static_ops]
    bindings = {"batch": batch, "seq": seq}
    symbolic_dims = 0
    for op, static_op in zip(ops, static_ops, strict=True):
        shapes = [g.shape_of(r) for r in op.results]
        symbolic_dims += sum(isinstance(d, g.Dim) for s in shapes for d in s)
        got = [tuple(substitute(d, bindings) for d in s) for s in shapes]
        assert got == [g.shape_of(r) for r in static_op.results], str(op)
    assert symbolic_dims > 50


def test_compile_still_refuses_symbolic_dims(encoder):
    with pytest.raises(SmeltError, match=r"input 'ids' dim 0 is 'batch'"):
        smelt.compile(encoder)


# --- the shape arithmetic, op by op ---------------------------------------------------


def _shape_model(nodes, inits, outputs, x=("batch", "seq", 8)):
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]), *nodes], "dims",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "cls, rhs",
    [(g.AddOp, [2, -3, 4, 3, -2]), (g.SubOp, [2, -3, 4, 3, -2]),
     (g.MulOp, [2, -3, 4, 3, -2]), (g.DivOp, [2, -3, 4, 3, -2]),
     (g.DivOp, [1, 2, 3, 4, 5])],
)  # fmt: skip
def test_int64_arithmetic_on_dims_is_onnxruntimes(cls, rhs):
    """Oracle: onnxruntime's int64 Add / Sub / Mul / Div (truncating toward zero)
    on the numbers the symbols are bound to; the symbolic entries have every
    sign."""
    ort = pytest.importorskip("onnxruntime")
    lhs = [S, -S, 2 * S + 1, -(B * S) - 1, (S + 1) // 2]
    got = onnx_dims.fold(cls, [_dims(lhs), Const(np.array(rhs, np.int64))], None, {})
    op = cls.name.split(".")[1].capitalize()
    node = helper.make_node(op, ["a", "b"], ["y"])
    graph = helper.make_graph(
        [node], "op",
        [helper.make_tensor_value_info(n, TensorProto.INT64, [5]) for n in "ab"],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [5])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString())
    for batch, seq in [(1, 1), (3, 5), (2, 8), (7, 1000)]:
        bindings = {"batch": batch, "seq": seq}
        a = np.array([substitute(d, bindings) for d in lhs], np.int64)
        (want,) = session.run(None, {"a": a, "b": np.array(rhs, np.int64)})
        bound = [substitute(d, bindings) for d in np.reshape(_array(got[0]), -1)]
        assert bound == want.tolist(), (lhs, bindings)


def _dims(entries):
    return onnx_dims.make(onnx_dims.objects(entries, (len(entries),)))


def _array(v):
    return v.array


def test_comparisons_decide_only_over_the_whole_range():
    # seq >= 1 always: seq == 0 is false, seq >= 1 true, for every value
    (eq,) = onnx_dims.fold(g.EqualOp, [_dims([S, B * S]), Const(np.array([0, -1]))],
                           None, {})  # fmt: skip
    assert eq.array.tolist() == [False, False]
    (ge,) = onnx_dims.fold(g.GreaterEqualOp, [_dims([S]), Const(np.array([1]))],
                           None, {})  # fmt: skip
    assert ge.array.tolist() == [True]
    # seq == 1 and seq < 4 depend on seq; seq - 3 has either sign: refused
    for cls, rhs in [(g.EqualOp, 1), (g.LessOp, 4)]:
        with pytest.raises(SymbolicDimError, match="exactly for every value"):
            onnx_dims.fold(cls, [_dims([S]), Const(np.array([rhs]))], None, {})
    with pytest.raises(SymbolicDimError, match="'seq - 3' depends on"):
        onnx_dims.fold(g.DivOp, [_dims([S - 3]), Const(np.array([2]))], None, {})


def test_export_patterns_fold_to_the_target_shapes():
    """The masks of exported attention (Equal(shape, -1) -> Where), a Size, a
    Div of a size, a Shape of a shape value, and a float Cast refused by name."""
    n = helper.make_node
    ints = {"i0": np.array([0]), "i1": np.array([1]), "i2": np.array([2]),
            "m1": np.array([-1, -1, -1]), "two": np.array(2), "ax": np.array([0])}
    nodes = [
        n("Equal", ["s", "m1"], ["eq"]),
        n("Where", ["eq", "i1", "s"], ["w"]),  # the shape with -1 made 1
        n("Reshape", ["x", "w"], ["y1"]),
        n("Size", ["x"], ["size"]),
        n("Div", ["size", "two"], ["half"]),  # batch*seq*8 / 2
        n("Unsqueeze", ["half", "ax"], ["half1"]),
        n("Concat", ["half1", "i2"], ["t2"], axis=0),
        n("Reshape", ["x", "t2"], ["y2"]),
        n("Gather", ["s", "i2"], ["c"]),
        n("Div", ["c", "two"], ["c2"]),
        n("Slice", ["s", "i0", "i2"], ["bs"]),
        n("Concat", ["bs", "i2", "c2"], ["t"], axis=0),
        n("Reshape", ["x", "t"], ["y3"]),
        n("Shape", ["t"], ["tt"]),
        n("ConstantOfShape", ["tt"], ["z"]),
    ]
    inits = {k: v.astype(np.int64) for k, v in ints.items()}
    model = _shape_model(nodes, inits, ["y1", "y2", "y3", "z"])
    shapes = symbolic_shapes(import_model(model, symbolic=True))
    assert shapes["y1"] == (B, S, 8) and shapes["y2"] == (4 * B * S, 2)
    assert shapes["y3"] == (B, S, 2, 4) and shapes["z"] == (4,)
    cast = [n("Cast", ["s"], ["f"], to=TensorProto.FLOAT)]
    with pytest.raises(SmeltError, match=r"\[batch, seq, 8\] holds symbolic dims, "
                                         "and a cast to float32 needs numbers"):
        import_model(_shape_model(cast, {}, ["f"]), symbolic=True)


def test_slices_up_to_a_dim():
    """x[:, :x.shape[1]] keeps the axis; an end of seq on a fixed axis of 16
    (an exported position table) is refused by name."""
    n = helper.make_node
    ints = {k: np.array(v, np.int64) for k, v in
            {"i0": [0], "i1": [1], "i2": [2], "ax": [1]}.items()}  # fmt: skip
    nodes = [
        n("Slice", ["s", "i1", "i2"], ["end"]),  # [seq]
        n("Slice", ["x", "i0", "end", "ax"], ["y"]),
        n("Slice", ["table", "i0", "end", "ax"], ["t"]),
    ]
    ints["table"] = np.zeros((1, 16), np.float32)
    model = _shape_model(nodes[:2], ints, ["y"])
    assert symbolic_shapes(import_model(model, symbolic=True))["y"] == (B, S, 8)
    with pytest.raises(SmeltError, match=r"Slice#3: its end on axis 1 \(extent 16\) "
                                         "is the symbolic 'seq'"):
        import_model(_shape_model(nodes, ints, ["t"]), symbolic=True)


def test_a_range_of_symbolic_length_is_refused_by_name():
    n = helper.make_node
    ints = {k: np.array(v, np.int64) for k, v in {"i0": 0, "i1": 1}.items()}
    nodes = [n("Gather", ["s", "i1"], ["seq"]), n("Range", ["i0", "seq", "i1"], ["r"])]
    with pytest.raises(SmeltError, match=r"Range#2: its limit is \[seq\], so its "
                                         "length is symbolic"):
        import_model(_shape_model(nodes, ints, ["r"]), symbolic=True)


def test_a_filled_tensor_of_symbolic_shape_is_refused_by_name():
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["z"])]
    with pytest.raises(SmeltError, match=r"ConstantOfShape#1: its shape "
                                         r"\[batch, seq, 8\] is symbolic"):
        import_model(_shape_model(nodes, {}, ["z"]), symbolic=True)
