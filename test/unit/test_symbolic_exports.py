"""Real exports with dynamic axes imported with symbolic dims (#34): a plain
torch encoder exported by torch.onnx (the TorchScript exporter, dynamic_axes on
batch and seq) computes its head reshapes at run time from `Shape` (Shape ->
Gather -> Unsqueeze -> Concat -> Reshape, and int64 Mul / Div on the sizes);
the import folds that arithmetic over the symbolic dims (`onnx_dims`). Oracle:
with the symbols bound, each op's shapes are those of the static import of the
same file at those dims, op by op."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects import func

import smelt
from smelt.dialects import graph as g
from smelt.dialects.symbolic import SymbolicDimError, substitute, sym
from smelt.errors import SmeltError
from smelt.frontend.onnx import import_model
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
