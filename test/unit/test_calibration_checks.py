"""smelt.quantize's calibration data as untrusted input: dtypes converted or
refused by name, non-finite or overflowing samples refused with their index and
input, files that are not regular files (or inflate past memory) refused without
reading them; only SmeltErrors leave."""

from __future__ import annotations

import os
import struct
import zipfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_artifact_trust import deadline

import smelt
from smelt.errors import ResourceLimit, SmeltError


def mlp() -> onnx.ModelProto:
    """x[4,32] → MatMul → Relu → MatMul → y[4,8]."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((32, 64)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((64, 8)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu1"),
        helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2"),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [w1, w2],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def samples(n: int = 6) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((n, 4, 32)).astype(np.float32)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_other_float_types_are_converted(dtype):
    data = samples()
    if dtype == np.float16:
        data = data.astype(np.float16).astype(np.float32)  # exact in both
    want = smelt.quantize(mlp(), {"x": data})
    got = smelt.quantize(mlp(), {"x": data.astype(dtype)})
    assert got.ranges == want.ranges
    assert got.model.SerializeToString() == want.model.SerializeToString()


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.bool_])
def test_other_kinds_are_refused_by_name(dtype):
    with pytest.raises(SmeltError, match=f"input 'x' is {np.dtype(dtype).name}; the "
                       "model takes float32: convert it"):  # fmt: skip
        smelt.quantize(mlp(), {"x": samples().astype(dtype)})


@pytest.mark.parametrize(
    "value, shown",
    [(np.nan, "NaN"), (np.inf, "inf"), (-np.inf, "-inf"), (3e38, "3e\\+38, beyond"),
     (-2e38, "-2e\\+38, beyond")],
)  # fmt: skip
def test_non_finite_samples_are_refused_with_their_index(tmp_path, value, shown):
    data = samples()
    data[4, 2, 7] = value
    with pytest.raises(SmeltError, match=f"sample 4 of input 'x' holds {shown}"):
        smelt.quantize(mlp(), {"x": data})
    np.savez(tmp_path / "cal.npz", x=data)
    with pytest.raises(SmeltError, match=f"sample 4 of input 'x' holds {shown}"):
        smelt.quantize(mlp(), str(tmp_path / "cal.npz"))
    folder = tmp_path / "folder"
    folder.mkdir()
    for i, sample in enumerate(data):
        np.savez(folder / f"s{i:02}.npz", x=sample)
    with pytest.raises(SmeltError, match="s04.npz'.*sample 4 of input 'x' holds"):
        smelt.quantize(mlp(), str(folder))


def test_float64_past_float32_is_refused():
    data = samples().astype(np.float64)
    data[1, 0, 0] = 1e39
    with pytest.raises(SmeltError, match="sample 1 of input 'x' holds 1e\\+39"):
        smelt.quantize(mlp(), {"x": data})


def test_an_activation_that_overflows_is_refused_with_the_sample():
    data = samples()
    data[2] *= np.float32(1e37)  # finite input; h = x·w1 overflows float32
    with pytest.raises(SmeltError, match="sample 2: the model's tensor 'h' reaches"):
        smelt.quantize(mlp(), {"x": data})


def test_special_files_are_refused_without_reading(tmp_path):
    fifo = tmp_path / "cal.npz"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.npz"
    zero.symlink_to("/dev/zero")
    folder = tmp_path / "folder"
    folder.mkdir()
    os.mkfifo(folder / "s0.npz")
    model = tmp_path / "m.onnx"
    onnx.save(mlp(), model)
    model_fifo = tmp_path / "fifo.onnx"
    os.mkfifo(model_fifo)
    for args, needle in (
        ((str(model), str(fifo)), "a FIFO"),
        ((str(model), str(zero)), "a character device"),
        ((str(model), str(folder)), "a FIFO"),
        ((str(model_fifo), {"x": samples()}), "a FIFO"),
    ):
        with deadline(30), pytest.raises(SmeltError, match=needle):
            smelt.quantize(*args)


def test_a_file_that_inflates_past_memory_is_refused(tmp_path):
    """An .npz whose members say they inflate to 400 GB (the central directory
    edited: the bytes behind are tiny) is refused before anything is inflated."""
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for i in range(100):
            z.writestr(f"x{i}.npy", b"\0" * 64)
    data = bytearray(path.read_bytes())
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        struct.pack_into("<I", data, at + 24, 4_000_000_000)  # uncompressed size
        at = data.find(b"PK\x01\x02", at + 4)
    path.write_bytes(data)
    with pytest.raises(ResourceLimit, match="inflates to 400,000,000,000 bytes"):
        smelt.quantize(mlp(), str(path))


@pytest.mark.parametrize(
    "calibration",
    [{"x": np.array([object()] * 6)}, {"x": [[1, 2], [3]]}, {"x": np.float32(1)},
     {"x": samples()[:, :, :5]}],
)  # fmt: skip
def test_odd_arrays_end_in_a_smelt_error(calibration):
    with pytest.raises(SmeltError):
        smelt.quantize(mlp(), calibration)
