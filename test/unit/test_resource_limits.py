"""A model bigger than the machine, or than `memory_limit` / `--memory-limit`, is
refused at compile time with the sizes and its largest buffers named, before
anything is allocated; weights above the limit before the import reads them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.compiler import cli
from smelt.compiler.driver import CompileOptions
from smelt.errors import ResourceLimit, SmeltError
from smelt.lowering.memory_plan import machine_memory
from smelt.targets.memory import parse_size


@pytest.mark.parametrize("shape", [[1 << 20, 1 << 15], [1 << 30, 1 << 30]])
def test_a_model_larger_than_the_machine_is_refused(shape):
    if not machine_memory():
        pytest.skip("the OS does not report the machine's memory")
    with pytest.raises(SmeltError, match=r"than this machine's .* GiB; its largest"):
        smelt.compile(relu_model(shape), "cpu")


def relu_model(shape, weight: np.ndarray | None = None) -> onnx.ModelProto:
    """z = relu(x) (+ w when given, an initializer)."""
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    inits = []
    if weight is None:
        nodes.append(helper.make_node("Relu", ["y"], ["z"]))
    else:
        nodes.append(helper.make_node("Add", ["y", "w"], ["z"]))
        inits.append(numpy_helper.from_array(weight, "w"))
    graph = helper.make_graph(
        nodes, "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, shape)], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def external(tensor: TensorProto, **entries: str) -> None:
    """Makes `tensor` keep its data at the external-data `entries` (location, …)."""
    tensor.ClearField("raw_data")
    for key, value in entries.items():
        tensor.external_data.add(key=key, value=value)
    tensor.data_location = TensorProto.EXTERNAL


def matmul_model() -> onnx.ModelProto:
    """z = relu(x) @ x on 512x512 f32: 1 MiB per tensor, x, relu(x) (the arena)
    and z."""
    model = relu_model([512, 512])
    model.graph.node[1].CopyFrom(helper.make_node("MatMul", ["y", "x"], ["z"]))
    return model


@pytest.mark.parametrize(
    ("text", "size"),
    [("8G", 8 << 30), ("512M", 512 << 20), ("1.5g", 3 << 29), ("64KiB", 65536),
     ("4096", 4096), (" 2 GB ", 2 << 30), (123, 123)],
)  # fmt: skip
def test_memory_sizes_parse(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "8X", "G", "-1G", "0", 0, -5, "1e9", "8 G B"])
def test_bad_memory_sizes_are_one_clear_error(text):
    with pytest.raises(SmeltError, match="memory"):
        parse_size(text)


def test_a_model_above_the_memory_limit_is_refused_naming_its_largest_buffers():
    with pytest.raises(ResourceLimit) as info:
        smelt.compile(matmul_model(), "cpu", memory_limit="2M")
    message = str(info.value)
    assert "needs 3.0 MiB (arena 1.0 MiB, weights 0.0 MiB, inputs and outputs " \
        "2.0 MiB), more than the memory limit of 2.0 MiB" in message
    assert "--memory-limit" in message
    assert "a temporary memref<512x512xf32> of ONNX node 'Relu#0' (1.0 MiB)" in message
    assert "'x' memref<512x512xf32> (1.0 MiB)" in message
    assert "'z' memref<512x512xf32> (1.0 MiB)" in message


def test_a_model_within_the_memory_limit_compiles_and_runs():
    model = relu_model([256, 1024])
    compiled = smelt.compile(model, "cpu", memory_limit=16 << 20)
    assert compiled.info["options"].memory_limit == 16 << 20
    x = np.linspace(-1, 1, 256 * 1024, dtype=np.float32).reshape(256, 1024)
    np.testing.assert_array_equal(compiled.run({"x": x})["z"], np.maximum(x, 0))


def test_the_memory_limit_is_a_compile_option():
    assert CompileOptions().memory_limit == 0  # the machine's memory
    options = CompileOptions(memory_limit=1 << 30)
    assert options.record()["memory_limit"] == 1 << 30
    with pytest.raises(SmeltError, match="memory limit must be positive"):
        smelt.compile(relu_model([2, 2]), "cpu", memory_limit=-1)


def test_weights_above_the_limit_are_refused_before_the_import_reads_them(
    monkeypatch,
):
    """A 4 MiB initializer under a 1 MiB limit: refused by name before any
    tensor becomes an array (tensor_array is never called)."""
    import smelt.frontend.onnx as importer

    def never(*args, **kwargs):
        raise AssertionError("the import read a tensor")

    monkeypatch.setattr(importer, "tensor_array", never)
    model = relu_model([1024, 1024], np.ones((1024, 1024), np.float32))
    with pytest.raises(ResourceLimit, match=r"constants hold 4.0 MiB, more than the "
                       r"memory limit of 1.0 MiB.*'w' \(4.0 MiB\)"):  # fmt: skip
        smelt.compile(model, "cpu", memory_limit="1M")


def test_external_weights_above_the_limit_are_refused_before_they_are_read(
    tmp_path, monkeypatch
):
    """A 1 GiB external tensor (a sparse file) under a 256 MiB limit: one clear
    error from its declared size, never an attempt to read it."""
    import smelt.frontend.onnx_load as loader

    monkeypatch.setattr(loader, "_read_external", None)  # called: a TypeError
    weight = numpy_helper.from_array(np.zeros(1, np.float32), "w")
    weight.dims[:] = [1 << 14, 1 << 14]  # 2**28 floats: 1 GiB
    external(weight, location="w.bin")
    model = relu_model([1 << 14, 1 << 14])
    model.graph.initializer.append(weight)
    model.graph.node[1].CopyFrom(helper.make_node("Add", ["y", "w"], ["z"]))
    with open(tmp_path / "w.bin", "wb") as f:
        f.truncate(1 << 30)  # sparse: no disk used
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(ResourceLimit, match=r"hold 1.0 GiB, more than the memory "
                       r"limit of 256.0 MiB.*'w' \(1.0 GiB\)"):  # fmt: skip
        smelt.compile(str(tmp_path / "m.onnx"), "cpu", memory_limit="256M")


def test_an_external_extent_beyond_its_file_is_refused_before_reading(tmp_path):
    weight = numpy_helper.from_array(np.zeros(1, np.float32), "w")
    weight.dims[:] = [1 << 14, 1 << 14]  # 1 GiB declared, 16 bytes on disk
    external(weight, location="w.bin", offset="8")
    model = relu_model([1 << 14, 1 << 14])
    model.graph.initializer.append(weight)
    model.graph.node[1].CopyFrom(helper.make_node("Add", ["y", "w"], ["z"]))
    (tmp_path / "w.bin").write_bytes(bytes(16))
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(SmeltError, match=r"tensor 'w' keeps its data at 'w.bin', "
                       r"bytes 8 to 1073741832, but the file ends 1073741816 bytes "
                       r"early"):  # fmt: skip
        smelt.compile(str(tmp_path / "m.onnx"), "cpu")


@pytest.mark.parametrize("key", ["offset", "length"])
def test_a_malformed_external_extent_is_one_clear_error(tmp_path, key):
    model = relu_model([4], np.ones(4, np.float32))
    weight = model.graph.initializer[0]
    (tmp_path / "w.bin").write_bytes(weight.raw_data)
    external(weight, location="w.bin", **{key: "-3"})
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(SmeltError, match=f"tensor 'w'.*{key}"):
        smelt.compile(str(tmp_path / "m.onnx"), "cpu", check_model=False)


@pytest.mark.parametrize("command", ["run", "compile"])
def test_the_cli_takes_a_memory_limit(tmp_path, capsys, command):
    path = str(tmp_path / "relu.onnx")
    onnx.save(matmul_model(), path)
    extra = ["-o", str(tmp_path / "relu.smelt")] if command == "compile" else []
    assert cli.main([command, path, "--memory-limit", "2M", *extra]) == 1
    err = capsys.readouterr().err
    assert err.startswith("smelt: error: ") and err.count("\n") == 1
    assert "more than the memory limit of 2.0 MiB" in err
    assert cli.main([command, path, "--memory-limit", "64M", *extra]) == 0
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, path, "--memory-limit", "lots"])
    assert exit_info.value.code == 2
    assert "bad memory size 'lots'" in capsys.readouterr().err


@pytest.mark.parametrize("op", ["ConstantOfShape", "Expand"])
def test_a_constant_too_large_for_the_limit_is_not_built_at_import(op):
    """A 40 GB constant folded at import used to be allocated (and filled)
    before any check: now its node is named and nothing is built."""
    shape = numpy_helper.from_array(np.array([100_000, 100_000], np.int64), "s")
    one = numpy_helper.from_array(np.ones(1, np.float32), "one")
    if op == "ConstantOfShape":
        make = helper.make_node(op, ["s"], ["c"], value=one)
    else:
        make = helper.make_node(op, ["one", "s"], ["c"])
    nodes = [make, helper.make_node("ReduceSum", ["c"], ["r"], keepdims=0),
             helper.make_node("Add", ["x", "r"], ["y"])]  # fmt: skip
    graph = helper.make_graph(
        nodes, "big_constant",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [shape] + ([one] if op == "Expand" else []),
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ResourceLimit, match=rf"{op}#0: its result .*100000(, |x)100000"
                       r".* would take 37.3 GiB, more than the memory limit of "
                       r"1.0 GiB"):  # fmt: skip
        smelt.compile(model, "cpu", memory_limit="1G")


def range_model(limit: float) -> onnx.ModelProto:
    inits = [
        numpy_helper.from_array(np.array(v, np.float32), n)
        for n, v in (("start", 0.0), ("limit", limit), ("delta", 1.0))
    ]
    graph = helper.make_graph(
        [helper.make_node("Range", ["start", "limit", "delta"], ["y"])], "range", [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_range_too_long_for_the_limit_is_not_built_at_import():
    with pytest.raises(ResourceLimit, match=r"Range#0: its result \(\[999999995904\] "
                       r"float32\) .* 3725.3 GiB, more than the memory limit"):
        smelt.compile(range_model(1e12), "cpu", memory_limit="1G")
    np.testing.assert_array_equal(
        smelt.compile(range_model(5.0), "cpu").run({})["y"], np.arange(5.0)
    )


@pytest.mark.parametrize("limit", [np.inf, np.nan])
def test_a_range_of_no_finite_length_is_one_clear_error(limit):
    with pytest.raises(SmeltError, match="Range#0: .* give no finite length"):
        smelt.compile(range_model(limit), "cpu")


@pytest.mark.parametrize(
    "shape", [[0, 1 << 62], [1, 0, 1 << 62, 1], [1 << 61, 3], [1 << 33, 1 << 33]]
)
def test_input_shapes_whose_bytes_overflow_64_bits_are_refused(shape):
    """An empty input of 0 x 2**62 compiled (0 bytes) although no array of that
    shape can exist (numpy refuses to make one) and its strides overflow."""
    with pytest.raises(SmeltError, match=r"input 'x' shape \[.*\]: its size in "
                       r"bytes overflows 64-bit offsets"):  # fmt: skip
        smelt.compile(relu_model(shape), "cpu")


def test_negative_input_shapes_are_refused_naming_the_input():
    model = relu_model(["n", 3])
    with pytest.raises(SmeltError, match=r"input_shapes gives input 'x' dim 0 = -1: "
                       r"dims are >= 0"):  # fmt: skip
        smelt.compile(model, "cpu", input_shapes={"x": (-1, 3)})


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_a_pool_of_windows_that_are_mostly_padding_is_refused(op):
    """A 2 x 2**40 window (pads just below the kernel, as onnxruntime allows)
    over a 4 x 4 input looped for hours (atheris found the MaxPool); now it is
    refused, and a kernel of a million still runs."""
    def pool(k: int) -> onnx.ModelProto:
        node = helper.make_node(op, ["x"], ["y"], kernel_shape=[2, k],
                                pads=[0, k - 1, 0, k - 1], strides=[1, k])  # fmt: skip
        graph = helper.make_graph(
            [node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                           [1, 1, 4, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        )  # fmt: skip
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    with pytest.raises(smelt.UnsupportedModel, match=rf"ONNX node '{op}#0'.* "
                       r"visits 1.32e\+13 window positions for an input of 16 "
                       r"elements: its windows are mostly padding"):  # fmt: skip
        smelt.compile(pool(1 << 40), "cpu")
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    y = smelt.compile(pool(1 << 20), "cpu").run({"x": x})["y"]
    assert y.shape == (1, 1, 3, 2)
