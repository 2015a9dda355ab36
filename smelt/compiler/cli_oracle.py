"""The onnxruntime oracle that `smelt run --check` compares with (a float model:
compiler/cli_output.py; a quantized one: compiler/check_quant.py)."""

from __future__ import annotations

import numpy as np

from smelt.compiler.cli_inputs import _graph_inputs
from smelt.errors import SmeltError


def oracle_feeds(source, feeds: dict, constants: dict | None) -> dict:
    """`feeds` plus the inputs smelt compiled in as constants (--constant), as
    arrays for an oracle that runs the model as written."""
    feeds = dict(feeds)
    if constants:
        from smelt.frontend.onnx_constants import constant_array

        for info in _graph_inputs(source):
            if info.name in constants:
                feeds[info.name] = constant_array(info, constants[info.name])
    return feeds


def onnxruntime_outputs(
    source, feeds: dict, constants: dict | None = None, optimized: bool = True
) -> dict[str, np.ndarray]:
    """onnxruntime's outputs of the model at `source` (a path or its bytes) by
    name: its default run, or (`optimized` False) the graph as written."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise SmeltError("--check needs onnxruntime: pip install onnxruntime") from None
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    got = session.run(names, oracle_feeds(source, feeds, constants))
    return dict(zip(names, got))


def same_kind(name: str, value: np.ndarray, ref: np.ndarray) -> bool:
    """Whether smelt's output `name` has the oracle's shape and dtype; prints how
    they differ when not."""
    if value.shape == ref.shape and value.dtype == ref.dtype:
        return True
    print(f"  vs onnxruntime {name}: smelt gave {value.dtype}{list(value.shape)}"
          f", onnxruntime {ref.dtype}{list(ref.shape)}")
    return False
