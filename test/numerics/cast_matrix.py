"""Runs Cast between every pair of the 13 element types smelt supports through the
compiled CPU code and compares with numpy's astype (ml_dtypes for bfloat16: the
ONNX reference's semantics), on values every type holds. Run as a script, so that
a crash in native code is seen by the caller (test_cast_matrix.py) as a failure,
not a dead test process; prints one line per pair, then the word done."""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np
from onnx import TensorProto, helper

import smelt

TYPES = {
    "float16": (TensorProto.FLOAT16, np.float16),
    "bfloat16": (TensorProto.BFLOAT16, ml_dtypes.bfloat16),
    "float": (TensorProto.FLOAT, np.float32),
    "double": (TensorProto.DOUBLE, np.float64),
    "bool": (TensorProto.BOOL, np.bool_),
    "int8": (TensorProto.INT8, np.int8),
    "int16": (TensorProto.INT16, np.int16),
    "int32": (TensorProto.INT32, np.int32),
    "int64": (TensorProto.INT64, np.int64),
    "uint8": (TensorProto.UINT8, np.uint8),
    "uint16": (TensorProto.UINT16, np.uint16),
    "uint32": (TensorProto.UINT32, np.uint32),
    "uint64": (TensorProto.UINT64, np.uint64),
}

# Values in range for every type (a float → integer cast of a value out of range
# is undefined in ONNX); fractions and ties where the source is a float; for
# double → float16 a value that double rounding through float32 gets wrong.
INTEGERS = [0, 1, 2, 3, 7, 42, 100, 127, 0, 5, 9, 64, 77, 1, 126, 33]
FRACTIONS = [0.0, 0.5, 1.25, 2.75, 1 / 3, 100.0, 126.9, 0.1, 7.5, 42.0, 3.0,
             1 + 2**-11 + 2**-40, 1 + 2**-9, 65.5, 99.99, 1.0]  # fmt: skip


def source_values(name: str, dtype) -> np.ndarray:
    floating = name in ("float16", "bfloat16", "float", "double")
    values = np.array(FRACTIONS if floating else INTEGERS, np.float64)
    if name == "bool":
        return (values > 50).astype(np.bool_)
    return values.astype(dtype)


def cast_model(src: int, dst: int, n: int):
    node = helper.make_node("Cast", ["x"], ["y"], to=dst)
    graph = helper.make_graph(
        [node], "cast",
        [helper.make_tensor_value_info("x", src, [n])],
        [helper.make_tensor_value_info("y", dst, [n])],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def main(cpu: str) -> int:
    wrong = 0
    for a, (src, src_dtype) in TYPES.items():
        x = source_values(a, src_dtype)
        for b, (dst, dst_dtype) in TYPES.items():
            print(f"{a} -> {b}", end=" ", flush=True)
            got = smelt.compile(cast_model(src, dst, x.size), "cpu", cpu=cpu).run(
                {"x": x}
            )["y"]
            want = x.astype(dst_dtype)
            same = got.dtype == want.dtype and np.array_equal(
                got.view(np.uint8), want.view(np.uint8)
            )
            print("ok" if same else f"WRONG got {got!r} want {want!r}", flush=True)
            wrong += not same
    print("done", flush=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "host"))
