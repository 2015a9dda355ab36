"""External data is read from the model's own folder (a path) or `base_dir` (bytes,
ModelProto), never from the current directory; what onnx's reader refuses, and a
missing folder, give one SmeltError."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.errors import SmeltError

W = np.arange(12, dtype=np.float32).reshape(3, 4)


def external_model(folder, location: str = "weights.bin") -> onnx.ModelProto:
    """y = x @ w with w stored in `folder/location` (written here)."""
    w = numpy_helper.from_array(W, "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, os.path.join(folder, "m.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location=location, size_threshold=0)  # fmt: skip
    return onnx.load(os.path.join(folder, "m.onnx"), load_external_data=False)


def run(compiled) -> np.ndarray:
    x = np.ones((2, 3), np.float32)
    return compiled.run({"x": x})["y"]


def enter_decoy(tmp_path, monkeypatch) -> None:
    """Makes the current directory one holding a decoy weights.bin (all 99s)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "weights.bin").write_bytes(np.full(12, 99, np.float32).tobytes())
    monkeypatch.chdir(cwd)


def test_a_path_reads_its_own_folder(tmp_path, monkeypatch):
    folder = tmp_path / "model"
    folder.mkdir()
    external_model(str(folder))
    enter_decoy(tmp_path, monkeypatch)
    got = run(smelt.compile(str(folder / "m.onnx"), "cpu"))
    np.testing.assert_allclose(got, np.ones((2, 3)) @ W)


@pytest.mark.parametrize("form", ["bytes", "proto"])
def test_bytes_and_protos_need_base_dir_and_never_read_the_cwd(
    tmp_path, monkeypatch, form
):
    folder = tmp_path / "model"
    folder.mkdir()
    proto = external_model(str(folder))
    enter_decoy(tmp_path, monkeypatch)
    model = proto.SerializeToString() if form == "bytes" else proto
    with pytest.raises(SmeltError, match="tensor 'w' keeps its data in an external"):
        smelt.compile(model, "cpu")
    got = run(smelt.compile(model, "cpu", base_dir=str(folder)))
    np.testing.assert_allclose(got, np.ones((2, 3)) @ W)
    if form == "proto":  # the caller's proto is left as it was
        assert onnx.external_data_helper.uses_external_data(proto.graph.initializer[0])


HOSTILE = [
    "../weights.bin", "/etc/passwd", "/dev/zero", "link.bin", "linked/weights.bin",
    "hard.bin", "fifo.bin", "folder",
]  # fmt: skip


@pytest.mark.parametrize("location", HOSTILE)
def test_hostile_locations_are_refused(tmp_path, location):
    folder = tmp_path / "model"
    folder.mkdir()
    proto = external_model(str(folder))
    (folder / "link.bin").symlink_to(folder / "weights.bin")
    (folder / "linked").symlink_to(folder, target_is_directory=True)
    os.link(folder / "weights.bin", tmp_path / "elsewhere.bin")
    os.link(folder / "weights.bin", folder / "hard.bin")
    os.mkfifo(folder / "fifo.bin")
    (folder / "folder").mkdir()
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    with pytest.raises(SmeltError, match="tensor 'w' keeps its data at") as e:
        smelt.compile(proto, "cpu", base_dir=str(folder))
    assert "\n" not in str(e.value)
    with pytest.raises(SmeltError):
        smelt.compile(proto.SerializeToString(), "cpu", base_dir=str(tmp_path / "no"))


def two_weight_model(folder) -> str:
    """y = (x @ w1) @ w2 with both weights in one external file (at offsets)."""
    rng = np.random.default_rng(7)
    w1 = rng.standard_normal((3, 5)).astype(np.float32)
    w2 = rng.standard_normal((5, 2)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]),
         helper.make_node("MatMul", ["h", "w2"], ["y"])], "ext2",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = os.path.join(folder, "m2.onnx")
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="both.bin", size_threshold=0)  # fmt: skip
    return path


def test_tensors_at_offsets_of_one_file_are_read_where_they_lie(tmp_path):
    path = two_weight_model(str(tmp_path))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = smelt.compile(path, "cpu").run({"x": x})["y"]
    proto = onnx.load(path)  # onnx's own reader, for the expected weights
    w1, w2 = (numpy_helper.to_array(t) for t in proto.graph.initializer)
    np.testing.assert_allclose(got, x @ w1 @ w2, rtol=1e-5)


def test_a_truncated_data_file_is_one_clear_error(tmp_path):
    path = two_weight_model(str(tmp_path))
    data = tmp_path / "both.bin"
    data.write_bytes(data.read_bytes()[:-8])
    with pytest.raises(SmeltError, match="tensor .w2. keeps .* ends 8 bytes early"):
        smelt.compile(path, "cpu")
