"""Symbolic import over the ONNX node-conformance models (#34): each model's input
dims greater than 1 made symbolic (one symbol per value, `d3`, so equal dims are
one symbol as in a real model's batch). No outcome but a clean SmeltError or the
static import's shapes (the symbols bound to the file's dims) is allowed (about
20 s for all; of onnx 1.23's cases, 905 import symbolically and bind exactly
since Shape folds into shape values with symbolic dims (759 before), 920 are
refused by name, 59 have no dim above 1)."""

from __future__ import annotations

import onnx
import pytest
from onnx.backend.test.case.node import collect_testcases

from smelt.dialects.symbolic import substitute
from smelt.errors import SmeltError
from smelt.frontend.onnx import import_model
from smelt.frontend.symbolic_import import symbolic_shapes

CASES = collect_testcases()
PARAMS = [pytest.param(c, id=c.name) for c in CASES]


def _symbolic(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, int]]:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    weights = {t.name for t in model.graph.initializer}
    bindings = {}
    for info in model.graph.input:
        if info.name in weights or not info.type.HasField("tensor_type"):
            continue
        for d in info.type.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 1:
                bindings[f"d{d.dim_value}"] = d.dim_value
                d.dim_param = f"d{d.dim_value}"
    return model, bindings


@pytest.mark.parametrize("case", PARAMS)
def test_node_case_imports_symbolically_or_is_refused(case):
    model, bindings = _symbolic(case.model)
    if not bindings:
        pytest.skip("no input dim above 1")
    try:
        module = import_model(model, symbolic=True, check_model=False)
    except SmeltError:
        return  # refused by name: the outcome allowed besides the right shapes
    try:
        static = import_model(case.model, check_model=False)
    except SmeltError:
        return
    want = symbolic_shapes(static)
    got = symbolic_shapes(module)
    assert got.keys() == want.keys()
    for name, shape in got.items():
        assert tuple(substitute(d, bindings) for d in shape) == want[name], name
