"""Symbolic dims on real architectures (#34): the onnx package's light CNNs with
their batch, height and width made symbolic. Those whose graphs hold for every
shape import symbolically and, with the symbols bound to the file's own dims,
give exactly the static import's shapes op by op; those exported with a shape
baked in (a Reshape to [1, 9216]) are refused by name."""

from __future__ import annotations

import os

import onnx
import pytest
from xdsl.dialects import func

from smelt.dialects import graph as g
from smelt.dialects.symbolic import substitute
from smelt.errors import SmeltError
from smelt.frontend.onnx import import_model
from smelt.frontend.symbolic_import import check_ranges

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")

POLYMORPHIC = ["light_squeezenet", "light_densenet121"]
BAKED = {  # the node whose fixed shape holds for one value of the dims only
    "light_bvlc_alexnet": "Reshape 'n15': cannot reshape [N, 256, (H + 13) "
    "floordiv 32 - 1, (W + 13) floordiv 32 - 1] to [1, 9216] for every value",
    "light_vgg19": "Reshape 'n37': cannot reshape [N, 512, H floordiv 32, W "
    "floordiv 32] to [1, 25088]",
    "light_inception_v2": "Concat 'n161': concat shapes",
}


def _symbolic(name: str) -> tuple[onnx.ModelProto, dict[str, int]]:
    """The model with N, H, W of its image input made symbolic, and their values."""
    model = onnx.load(os.path.join(LIGHT_DIR, f"{name}.onnx"))
    weights = {t.name for t in model.graph.initializer}
    (image,) = [i for i in model.graph.input if i.name not in weights]
    bindings = {}
    for axis, symbol in ((0, "N"), (2, "H"), (3, "W")):
        dim = image.type.tensor_type.shape.dim[axis]
        bindings[symbol] = dim.dim_value
        dim.dim_param = symbol
    return model, bindings


def _ops(module):
    main = next(op for op in module.ops if isinstance(op, func.FuncOp))
    return list(main.body.block.ops)


@pytest.mark.parametrize("name", POLYMORPHIC)
def test_light_model_binds_to_its_static_shapes(name):
    model, bindings = _symbolic(name)
    module = import_model(model, symbolic=True)
    static = import_model(os.path.join(LIGHT_DIR, f"{name}.onnx"))
    ops, static_ops = _ops(module), _ops(static)
    assert [op.name for op in ops] == [op.name for op in static_ops]
    symbolic_results = 0
    for op, static_op in zip(ops, static_ops, strict=True):
        for r, s in zip(op.results, static_op.results, strict=True):
            shape = g.shape_of(r)
            symbolic_results += any(isinstance(d, g.Dim) for d in shape)
            assert tuple(substitute(d, bindings) for d in shape) == g.shape_of(s)
    computed = [op for op in ops if op.name not in ("graph.constant", "func.return")]
    assert symbolic_results == len(computed)  # every result depends on the image
    # the file's own shape lies in a range the import can prove
    check_ranges(module, {k: (v, 4 * v) for k, v in bindings.items()})


@pytest.mark.parametrize("name", sorted(BAKED))
def test_light_model_with_a_baked_shape_is_refused_by_name(name):
    model, _ = _symbolic(name)
    with pytest.raises(SmeltError, match="with input_shapes="):
        import_model(model, symbolic=True)
    with pytest.raises(SmeltError) as info:
        import_model(model, symbolic=True)
    assert BAKED[name] in str(info.value)
