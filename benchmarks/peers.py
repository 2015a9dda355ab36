"""The peers smelt is timed against in benchmarks/cpu.py: onnxruntime and OpenVINO,
each set up as its users would for latency at a given thread count, each run with
its outputs bound to preallocated numpy arrays (as smelt's `run(..., outputs=...)`
is), and `interleaved_ms`, which times any number of them side by side.

onnxruntime: CPUExecutionProvider, ORT_ENABLE_ALL, intra_op_num_threads = threads,
inter_op_num_threads = 1 (sequential executor); with an explicit thread count it
sets no thread affinity. Run through an IOBinding: inputs bound with
bind_cpu_input, outputs with bind_output to preallocated arrays.

OpenVINO (`pip install openvino`): device CPU, INFERENCE_PRECISION_HINT=f32,
INFERENCE_NUM_THREADS = threads, NUM_STREAMS=1, PERFORMANCE_HINT=LATENCY,
ENABLE_CPU_PINNING=False unless `pinning` (smelt and onnxruntime pin nothing
either). Its defaults differ: on an AVX512-BF16 host (znver4) OpenVINO 2026.4
reads back INFERENCE_PRECISION_HINT=bf16 and, under the latency hint,
ENABLE_CPU_PINNING=True when they are not set; the report prints the settings
read back from each compiled model. Run through one infer
request whose input and output tensors wrap the numpy arrays
(ov.Tensor(array, shared_memory=True)): `infer()` copies nothing in or out.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

PAUSE_S = 0.2
"""Between blocks: longer than an idle OpenBLAS worker spins (2^28 cycles, about
70 ms here) before it sleeps. With 50 ms, numpy's spinning worker took one of the
two cores from smelt's first runs at 2 threads (smelt's 1024^3 GEMM read 9.2 ms at
2 threads, as at 1, though 4.6 ms alone)."""

TIMING = {"block": 4, "pause": PAUSE_S}  # benchmarks/cpu.py --quick: 1, 0.01
ORT, OV = "onnxruntime", "openvino"
RATIOS = (("smelt", ORT), (OV, ORT), ("smelt", OV))
"""The ratios the tables report, each first-named runtime / second-named."""


@dataclass
class Timing:
    """What `interleaved_ms` measured: every timed run (seconds) of each peer, and
    each round's block medians."""

    runs: dict[str, list[float]] = field(default_factory=dict)
    rounds: list[dict[str, float]] = field(default_factory=list)

    def ms(self, name: str) -> float:
        """Median over all of `name`'s timed runs, in milliseconds."""
        return statistics.median(self.runs[name]) * 1e3

    def paired(self, a: str, b: str) -> float:
        """Median over rounds of a's block median / b's: the blocks of a round run
        a moment apart, so slow drifts of a shared machine (seconds long) cancel."""
        return statistics.median(r[a] / r[b] for r in self.rounds)


def interleaved_ms(fns: dict[str, Callable[[], object]], repeat: int, block: int = 4,
                   pause: float = PAUSE_S) -> Timing:  # fmt: skip
    """Times every peer of `fns` at least `repeat` times, in rounds: each round runs
    a block of `block` timed runs of each peer (after a `pause` (seconds) and one
    untimed warm-up run, so the previous peer's spinning worker threads have gone
    to sleep and this one's caches are warm). The order rotates by one peer per
    round (with three: A B C, B C A, C A B, ...) and the number of rounds is a
    multiple of the number of peers, so every peer runs equally often in every
    position: none always follows the same neighbour or always goes first."""
    names = list(fns)
    timing = Timing({n: [] for n in names})
    blocks = -(-repeat // block)
    rounds = -(-blocks // len(names)) * len(names)
    per_block = [repeat // rounds + (i < repeat % rounds) for i in range(rounds)]
    for r, count in enumerate(per_block):
        count = max(count, 1)
        order = names[r % len(names):] + names[:r % len(names)]
        medians = {}
        for name in order:
            fn = fns[name]
            time.sleep(pause)
            fn()
            runs = []
            for _ in range(count):
                t0 = time.perf_counter()
                fn()
                runs.append(time.perf_counter() - t0)
            timing.runs[name].extend(runs)
            medians[name] = statistics.median(runs)
        timing.rounds.append(medians)
    return timing


# --- onnxruntime ----------------------------------------------------------------


def ort_session(model, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(
        model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )


def ort_settings() -> str:
    return ("CPUExecutionProvider, ORT_ENABLE_ALL, intra_op_num_threads = threads, "
            "inter_op_num_threads 1, sequential, no affinity set; IOBinding "
            "(bind_cpu_input, bind_output to preallocated arrays)")  # fmt: skip


def nan_like(results: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Preallocated output arrays shaped as `results`, filled with NaN (float) or
    a sentinel, so a peer that does not write them is caught by the check."""
    out = {}
    for name, ref in results.items():
        array = np.empty(ref.shape, ref.dtype)
        array.fill(np.nan if array.dtype.kind == "f" else -1)
        out[name] = array
    return out


def ort_bound(sess, feeds: dict[str, np.ndarray]):
    """(run, outputs): `run()` runs `sess` through an IOBinding whose outputs are
    the preallocated arrays of `outputs` (shaped from one plain run)."""
    names = [o.name for o in sess.get_outputs()]
    outputs = nan_like(dict(zip(names, sess.run(names, feeds))))
    binding = sess.io_binding()
    for name, array in feeds.items():
        binding.bind_cpu_input(name, array)
    for name, array in outputs.items():
        binding.bind_output(name, "cpu", 0, array.dtype, list(array.shape),
                            array.ctypes.data)  # fmt: skip

    def run():
        sess.run_with_iobinding(binding)

    return run, outputs


# --- OpenVINO -------------------------------------------------------------------


def openvino():
    """The openvino module, or None when it is not installed."""
    try:
        import openvino as ov
    except ImportError:
        return None
    return ov


_CORE = None

OV_KEYS = ("INFERENCE_PRECISION_HINT", "INFERENCE_NUM_THREADS", "NUM_STREAMS",
           "PERFORMANCE_HINT", "ENABLE_CPU_PINNING", "EXECUTION_MODE_HINT",
           "ENABLE_HYPER_THREADING", "SCHEDULING_CORE_TYPE")  # fmt: skip


def ov_core():
    global _CORE
    if _CORE is None:
        _CORE = openvino().Core()
    return _CORE


def ov_compile(model, threads: int, pinning: bool = False):
    """OpenVINO's CPU plugin on the ONNX `model` (read from its bytes), for latency
    at `threads` threads, f32."""
    core = ov_core()
    config = {
        "INFERENCE_PRECISION_HINT": "f32",
        "INFERENCE_NUM_THREADS": threads,
        "NUM_STREAMS": 1,
        "PERFORMANCE_HINT": "LATENCY",
        "ENABLE_CPU_PINNING": pinning,
    }
    return core.compile_model(core.read_model(model.SerializeToString()), "CPU", config)


def ov_settings(compiled) -> str:
    """The compiled model's settings as OpenVINO reports them back."""
    values = []
    for key in OV_KEYS:
        try:
            value = compiled.get_property(key)
        except RuntimeError:
            continue
        if hasattr(value, "to_string"):  # an element type: f32
            value = value.to_string()
        elif not isinstance(value, (str, int)) and hasattr(value, "name"):  # an enum
            value = value.name
        values.append(f"{key}={value}")
    return ", ".join(values)


def ov_device() -> str:
    try:
        return str(ov_core().get_property("CPU", "FULL_DEVICE_NAME"))
    except RuntimeError:
        return "?"


def _port_name(port, wanted: list[str]) -> str:
    names = port.get_names()
    for name in wanted:
        if name in names:
            return name
    raise KeyError(f"OpenVINO port {sorted(names)} matches none of {wanted}")


def ov_bound(compiled, feeds: dict[str, np.ndarray], output_names: list[str]):
    """(run, outputs): `run()` is one synchronous infer of one infer request whose
    input tensors wrap the arrays of `feeds` and whose output tensors wrap the
    preallocated arrays of `outputs` (keyed by the ONNX output names)."""
    ov = openvino()
    request = compiled.create_infer_request()
    for port in compiled.inputs:
        array = feeds[_port_name(port, list(feeds))]
        request.set_tensor(port, ov.Tensor(array, shared_memory=True))
    outputs = {}
    for port in compiled.outputs:
        name = _port_name(port, output_names)
        array = np.empty(tuple(port.get_shape()), port.get_element_type().to_dtype())
        array.fill(np.nan if array.dtype.kind == "f" else -1)
        request.set_tensor(port, ov.Tensor(array, shared_memory=True))
        outputs[name] = array

    def run():
        request.infer()

    run()
    for port in compiled.outputs:  # the request still writes into our arrays
        data = request.get_tensor(port).data
        assert data.ctypes.data == outputs[_port_name(port, output_names)].ctypes.data
    return run, outputs
