"""ai.onnx.ml TreeEnsemble (opset 5) compiled for the CPU against onnxruntime
(and onnx's reference) on random ensembles: every node mode, set membership,
missing values that go to the true child, the four aggregations. Fixed seeds."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import smelt
from smelt.errors import UnsupportedModel

GRID = np.array([-1.0, 0.0, 0.5, 1.0, 2.0], np.float32)  # splits, inputs
# set members: integers (onnxruntime takes no others), not 0 (onnx's reference
# ends a set at a 0 as at the NaN)
MEMBERS = np.array([-1.0, 1.0, 2.0, 3.0], np.float32)


def _ensemble(rng, trees: int, depth: int, features: int, targets: int) -> dict:
    nodes: dict[str, list] = {k: [] for k in (
        "modes", "featureids", "splits", "truenodeids", "falsenodeids",
        "trueleafs", "falseleafs", "missing")}  # fmt: skip
    leaves: dict[str, list] = {"targetids": [], "weights": []}
    members: list[float] = []

    def leaf() -> int:
        leaves["targetids"].append(int(rng.integers(targets)))
        leaves["weights"].append(float(rng.normal()))
        return len(leaves["weights"]) - 1

    def node(level: int) -> int:
        index = len(nodes["modes"])
        mode = int(rng.integers(7))
        nodes["modes"].append(mode)
        nodes["featureids"].append(int(rng.integers(features)))
        nodes["splits"].append(float(rng.choice(GRID)))
        nodes["missing"].append(int(rng.integers(2)))
        for key in ("truenodeids", "falsenodeids", "trueleafs", "falseleafs"):
            nodes[key].append(0)
        if mode == 6:
            members.extend([*rng.choice(MEMBERS, 2, replace=False).tolist(), np.nan])
        for side in ("true", "false"):
            is_leaf = level + 1 >= depth or rng.random() < 0.3
            child = leaf() if is_leaf else node(level + 1)
            nodes[f"{side}nodeids"][index] = child
            nodes[f"{side}leafs"][index] = int(is_leaf)
        return index

    roots = [node(0) for _ in range(trees)]
    return dict(nodes=nodes, leaves=leaves, members=members, roots=roots)


def _model(e: dict, features: int, targets: int, aggregate: int) -> onnx.ModelProto:
    n, f32 = e["nodes"], TensorProto.FLOAT
    attrs = dict(
        aggregate_function=aggregate, n_targets=targets, tree_roots=e["roots"],
        nodes_featureids=n["featureids"], nodes_truenodeids=n["truenodeids"],
        nodes_falsenodeids=n["falsenodeids"], nodes_trueleafs=n["trueleafs"],
        nodes_falseleafs=n["falseleafs"], leaf_targetids=e["leaves"]["targetids"],
        nodes_missing_value_tracks_true=n["missing"],
        nodes_modes=numpy_helper.from_array(np.array(n["modes"], np.uint8)),
        nodes_splits=numpy_helper.from_array(np.array(n["splits"], np.float32)),
        leaf_weights=numpy_helper.from_array(
            np.array(e["leaves"]["weights"], np.float32)),
    )  # fmt: skip
    if e["members"]:
        attrs["membership_values"] = numpy_helper.from_array(
            np.array(e["members"], np.float32)
        )
    node = helper.make_node("TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", f32, [None, features])],
        [helper.make_tensor_value_info("y", f32, None)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)])  # fmt: skip


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_random_ensembles_against_onnxruntime(aggregate, seed):
    rng = np.random.default_rng(seed)
    features, targets = 3, 3
    model = _model(_ensemble(rng, 4, 5, features, targets), features, targets,
                   aggregate)  # fmt: skip
    x = rng.choice(GRID, (64, features)).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = np.nan
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    (want,) = session.run(None, {"x": x})
    got = smelt.compile(model, "cpu", input_shapes={"x": x.shape}).run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # onnx's reference agrees but for MIN / MAX's targets no leaf adds to: it
    # leaves the float range's end there, onnxruntime (and smelt) 0
    (reference,) = ReferenceEvaluator(model).run(None, {"x": x})
    touched = np.abs(reference) < np.finfo(np.float32).max
    np.testing.assert_allclose(got[touched], reference[touched], rtol=1e-6, atol=1e-6)
    assert (touched.all() or aggregate in (2, 3)) and not np.any(got[~touched])


def test_post_transform_is_refused_naming_it():
    rng = np.random.default_rng(0)
    model = _model(_ensemble(rng, 1, 2, 2, 2), 2, 2, 1)
    helper_attr = helper.make_attribute("post_transform", 1)
    model.graph.node[0].attribute.append(helper_attr)
    with pytest.raises(UnsupportedModel, match="TreeEnsemble#0: attribute 'post_tr"):
        smelt.compile(model, "cpu", input_shapes={"x": (4, 2)})
