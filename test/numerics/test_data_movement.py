"""graph-simplify's composition of reshape / transpose chains keeps every element
where it was: random chains (seeded) through the reference executor, before and
after, and the number of transposes never grows."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper

from smelt.compiler.driver import lower
from smelt.dialects import graph
from smelt.frontend.onnx import import_model
from smelt.reference.executor import run_graph


def random_chain(rng: np.random.Generator, steps: int):
    """A model x → `steps` random transposes and reshapes (splits and merges of
    adjacent dims) → y."""
    shape = [int(d) for d in rng.choice([1, 2, 3, 4, 6], size=rng.integers(2, 5))]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    nodes, inits, prev = [], [], "x"
    for i in range(steps):
        out = f"t{i}"
        if rng.random() < 0.5 or len(shape) < 2:
            perm = [int(p) for p in rng.permutation(len(shape))]
            nodes.append(helper.make_node("Transpose", [prev], [out], perm=perm))
            shape = [shape[p] for p in perm]
        else:
            k = int(rng.integers(0, len(shape) - 1))
            merged = shape[:k] + [shape[k] * shape[k + 1]] + shape[k + 2 :]
            # sometimes split the merged dim another way
            d = merged[k]
            divisors = [f for f in range(1, d + 1) if d % f == 0]
            f = int(rng.choice(divisors))
            shape = merged[:k] + [f, d // f] + merged[k + 1 :] if rng.random() < 0.5 else merged
            inits.append(helper.make_tensor(f"s{i}", TensorProto.INT64, [len(shape)], shape))
            nodes.append(helper.make_node("Reshape", [prev, f"s{i}"], [out]))
        prev = out
    y = helper.make_tensor_value_info(prev, TensorProto.FLOAT, shape)
    g = helper.make_graph(nodes, "chain", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def transposes(module) -> int:
    return sum(isinstance(op, graph.TransposeOp) for op in module.walk())


@pytest.mark.parametrize("seed", range(40))
def test_random_chains_keep_their_elements(seed):
    rng = np.random.default_rng(seed)
    model = random_chain(rng, int(rng.integers(3, 8)))
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.arange(math.prod(dims), dtype=np.float32).reshape(dims)
    module = import_model(model)
    before = run_graph(module, {"x": x})
    count = transposes(module)
    lower(module, "graph-simplify")
    after = run_graph(module, {"x": x})
    for name, value in before.items():
        np.testing.assert_array_equal(after[name], value)
    assert transposes(module) <= max(1, count)
