"""Determinism and concurrency: two compiles of one model give the same LLVM IR and
bit-identical outputs; 8 Python threads calling one compiled model (itself running
2 worker threads) get exactly the serial results."""

import threading

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.compiler import opt, pipelines

RNG = np.random.default_rng(11)


def _model():
    w = numpy_helper.from_array(RNG.standard_normal((8, 3, 3, 3), np.float32), "w")
    m = numpy_helper.from_array(RNG.standard_normal((8 * 6 * 6, 10), np.float32), "m")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("MatMul", ["f", "m"], ["l"]),
        helper.make_node("Softmax", ["l"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 10])], [w, m],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_two_compiles_are_identical(tmp_path):
    path = tmp_path / "net.onnx"
    path.write_bytes(_model().SerializeToString())
    spec = pipelines.preset("cpu", "O2", 2, "host")
    texts = []
    for i in range(2):
        out = tmp_path / f"net{i}.ll"
        assert opt.main([str(path), "-p", spec, "-t", "llvm", "-o", str(out)]) == 0
        texts.append(out.read_text())
    assert texts[0] == texts[1]
    x = RNG.standard_normal((4, 3, 12, 12), np.float32)
    a, b = (smelt.compile(path, "cpu", threads=2).run({"x": x})["y"] for _ in "ab")
    assert a.tobytes() == b.tobytes()


def test_threads_calling_one_model_get_the_serial_results():
    model = smelt.compile(_model(), "cpu", threads=2)
    inputs = [RNG.standard_normal((4, 3, 12, 12), np.float32) for _ in range(8)]
    serial = [model.run({"x": x})["y"].copy() for x in inputs]
    got: dict[int, list[np.ndarray]] = {}

    def worker(i: int) -> None:
        got[i] = [model.run({"x": inputs[i]})["y"].copy() for _ in range(50)]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, runs in got.items():
        assert all(r.tobytes() == serial[i].tobytes() for r in runs), i
