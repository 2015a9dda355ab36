"""Coverage-guided fuzzing of the import + compile path with atheris (libFuzzer).

    pip install -e '.[fuzz]'                         # atheris
    python test/fuzz/atheris_import.py --seconds 600 [--work DIR]
    python test/fuzz/atheris_import.py --replay DIR/finding-….onnx

libFuzzer mutates model bytes, seeded with the small valid models of seeds.py;
half of the mutations edit the parsed ModelProto instead: mutate.py's STRUCTURE
(mostly invalid models) or `MILD` (another op in a node's place, an attribute
nudged: mostly valid ones), so coverage guides all three. Only smelt's own
modules are instrumented. Each input goes through `smelt.compile(bytes, "cpu")`
(with a memory limit) and, when it compiles, one run on seeded inputs next to
onnxruntime's (in a process of its own: onnxruntime crashes on some models).

A SmeltError (refused) is fine, and so is a model that onnxruntime refuses but
smelt runs (accepted-invalid), or one that kills onnxruntime (ort-crash). A
finding is any other exception, an input that takes more than `--input-timeout`
CPU seconds (or libFuzzer's -timeout, 3x that, of wall time: it ends the
session), a crash of the process, or an answer that differs from onnxruntime's
and from onnx's reference implementation (`judge`): each is saved as
DIR/finding-KIND-HASH.onnx with a .txt (the traceback or the difference), or
by libFuzzer as DIR/crash-… / timeout-…, and fuzzing goes on where it can.
DIR/stats.json counts outcomes. `run()` starts a fuzzing process and returns its
numbers: executions, coverage (libFuzzer's edges and features of smelt's code)
and findings.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import pickle
import re
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import AttributeProto, defs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, ROOT]

MEMORY_LIMIT = "1G"  # smelt's own: models that need more are refused
ADDRESS_SPACE_GB = 8  # the process's: a larger allocation is a MemoryError
INPUT_TIMEOUT = 20.0  # seconds per input before it counts as a hang


class _Timeout(BaseException):  # not an Exception: smelt's handlers let it pass
    pass


@dataclass
class Harness:
    """Runs one input and keeps the outcome counts and findings of a session."""

    work: str
    input_timeout: float = INPUT_TIMEOUT
    outcomes: Counter = field(default_factory=Counter)
    sites: dict[str, str] = field(default_factory=dict)  # finding key → file
    executions: int = 0

    def __call__(self, data: bytes) -> None:
        self.executions += 1
        outcome, detail = self.check(data)
        self.outcomes[outcome] += 1
        if outcome.startswith("finding-"):
            self._save(data, outcome, detail)
        if outcome.startswith("finding-") or self.executions % 25 == 0:
            self._write_stats()

    def check(self, data: bytes) -> tuple[str, str]:
        """(outcome, detail): refused / ok / accepted-invalid / skipped-run /
        ort-crash (onnxruntime died) / matches-reference / oracles-differ (see
        `judge`) or finding-crash / finding-hang / finding-wrong-answer."""
        import smelt

        # CPU seconds (SIGVTALRM): SIGALRM is libFuzzer's -timeout, which also
        # ends a hang inside native code, where a Python handler never runs
        signal.signal(signal.SIGVTALRM, _alarm)
        signal.setitimer(signal.ITIMER_VIRTUAL, self.input_timeout)
        try:
            compiled = smelt.compile(data, "cpu", memory_limit=MEMORY_LIMIT)
            feeds = _feeds(compiled)
            if feeds is None:
                return "skipped-run", ""
            got = compiled.run(feeds)
            status, want = _onnxruntime(data, feeds)
        except smelt.SmeltError:
            return "refused", ""
        except _Timeout:
            return "finding-hang", f"more than {self.input_timeout:g} CPU s\n" + (
                traceback.format_exc()
            )
        except Exception:  # noqa: BLE001 (the point: anything else is a finding)
            return "finding-crash", traceback.format_exc()
        finally:
            signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        if status == "ort-crash":
            return "ort-crash", str(want)
        if status != "ok":
            return "accepted-invalid", want
        return judge(data, feeds, got, want)

    def _save(self, data: bytes, outcome: str, detail: str) -> None:
        digest = hashlib.sha1(data).hexdigest()[:12]
        base = os.path.join(self.work, f"{outcome}-{digest}")
        with open(base + ".onnx", "wb") as f:
            f.write(data)
        with open(base + ".txt", "w") as f:
            f.write(detail)
        where = _site(detail) if "Traceback" in detail else _ops(data)
        self.sites.setdefault(f"{outcome} {where}", base + ".onnx")

    def _write_stats(self) -> None:
        stats = {"executions": self.executions, "outcomes": dict(self.outcomes),
                 "findings": self.sites}  # fmt: skip
        path = os.path.join(self.work, "stats.json")
        with open(path + ".tmp", "w") as f:
            json.dump(stats, f, indent=1)
        os.replace(path + ".tmp", path)


def judge(data: bytes, feeds: dict, got: dict, want: dict) -> tuple[str, str]:
    """smelt's outputs `got` against onnxruntime's `want`: ok, or (when they
    differ) a second opinion from onnx's reference implementation: smelt agrees
    with it ("matches-reference": the runtimes read the spec differently, as
    onnxruntime's pool output size where the window does not fit), or the two
    oracles disagree with each other too ("oracles-differ": NaN handling that
    ONNX leaves open, or an output so ill-conditioned, sin of 1e5, that
    rounding decides it; also when the reference fails and the outputs differ
    only where a value is NaN or infinite), else a wrong answer."""
    from run_fuzz import _differs

    diff = _differs(got, want)
    if not diff:
        return "ok", ""
    ref = _reference(data, feeds)
    if isinstance(ref, str):
        if _differs(got, want, nonfinite=True).startswith("nonfinite:"):
            return "oracles-differ", f"{diff}; only where a value is NaN / inf"
        return "finding-wrong-answer", f"{diff} (onnx's reference failed: {ref})"
    if not _differs(got, ref):
        return "matches-reference", diff
    if _differs(want, ref):
        return "oracles-differ", diff
    return "finding-wrong-answer", f"{diff}; vs onnx's reference: {_differs(got, ref)}"


def _reference(data: bytes, feeds: dict) -> dict | str:
    """The outputs of onnx's reference implementation, or why it failed."""
    import warnings

    from onnx.reference import ReferenceEvaluator

    try:
        model = onnx.load_model_from_string(data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            values = ReferenceEvaluator(model).run(None, feeds)
        return dict(zip([o.name for o in model.graph.output], values))
    except Exception as e:  # noqa: BLE001 (the reference's failure is a note)
        return f"{type(e).__name__}: {str(e)[:200]}"


def _alarm(signum, frame):
    raise _Timeout


def _site(detail: str) -> str:
    """The innermost smelt frame of a traceback, and the exception's type."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', detail)
    inside = [(f, n) for f, n in frames if f"{os.sep}smelt{os.sep}" in f]
    where = (inside or frames or [("?", "0")])[-1]
    lines = [line for line in detail.strip().splitlines() if line.strip()]
    kind = lines[-1].split(":")[0] if lines else "?"
    return f"{os.path.relpath(where[0], ROOT)}:{where[1]} {kind}"


def _ops(data: bytes) -> str:
    """The op types of a model, for telling findings apart."""
    try:
        nodes = onnx.load_model_from_string(data).graph.node
    except Exception:  # noqa: BLE001
        return "?"
    return "+".join(n.op_type for n in nodes)


def _feeds(compiled) -> dict | None:
    """Seeded inputs for the compiled model's inputs (integers in [0, 3), so
    that they index the seeds' data), or None when they would be large."""
    rng = np.random.default_rng(0)
    feeds = {}
    for spec in compiled.inputs:
        nonzero = math.prod(d for d in spec.shape if d)
        if math.prod(spec.shape) > 1 << 20 or nonzero > 1 << 40:
            return None  # large, or (0, 2**62), which numpy cannot make
        if spec.dtype.kind == "f":
            feeds[spec.name] = rng.standard_normal(spec.shape).astype(spec.dtype)
        elif spec.dtype.kind == "b":
            feeds[spec.name] = rng.random(spec.shape) < 0.5
        else:
            feeds[spec.name] = rng.integers(0, 3, spec.shape).astype(spec.dtype)
    return feeds


class OnnxRuntime:
    """onnxruntime in a process of its own, so that its crashes (a
    LayerNormalization with a scalar scale kills it while it loads the model)
    cost only its verdict: ('ok', outputs) / ('model', why) / ('input', why) as
    run_fuzz._ort says, or ('ort-crash', why)."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None

    def __call__(self, data: bytes, feeds: dict) -> tuple[str, object]:
        if self.proc is None or self.proc.poll() is not None:
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE]))
            self.proc = subprocess.Popen(
                [sys.executable, __file__, "--ort-server"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
            )  # fmt: skip
        proc = self.proc
        try:
            pickle.dump((data, feeds), proc.stdin)
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], self.timeout)
            if not ready:
                proc.kill()
                raise EOFError(f"no answer in {self.timeout:g} s")
            return pickle.load(proc.stdout)
        except (EOFError, OSError, pickle.UnpicklingError) as e:
            code = proc.poll() if proc.poll() is not None else proc.wait()
            self.proc = None
            why = signal.Signals(-code).name if code and code < 0 else str(e)
            return "ort-crash", f"onnxruntime died ({why})"


def ort_server() -> None:
    """The loop of OnnxRuntime's process: (model, feeds) in, verdicts out."""
    from run_fuzz import _ort

    while True:
        try:
            data, feeds = pickle.load(sys.stdin.buffer)
        except EOFError:
            return
        pickle.dump(_ort(data, feeds), sys.stdout.buffer)
        sys.stdout.buffer.flush()


_onnxruntime = OnnxRuntime()


def mutate(data: bytes, max_size: int, seed: int) -> bytes:
    """libFuzzer's byte mutation, or (when `data` parses, half of the time) an
    edit of the model: one of mutate.py's STRUCTURE mutations (mostly invalid
    models) or one that tends to keep it valid (`MILD`: another op in a node's
    place, an attribute nudged), so that coverage reaches more handlers."""
    import atheris

    rng = np.random.default_rng(seed)
    if rng.random() < 0.5:
        try:
            model = onnx.ModelProto.FromString(data)
            from mutate import STRUCTURE, _pick

            table = MILD if rng.random() < 0.5 else STRUCTURE
            table[_pick(rng, sorted(table))](model, rng)
            out = model.SerializeToString()
            if 0 < len(out) <= max_size:
                return out
        except Exception:  # noqa: BLE001 (bytes that do not parse: mutate bytes)
            pass
    return atheris.Mutate(data, max_size)


def swap_op(model, rng) -> None:
    """A node becomes another op of the default domain that takes as many
    inputs and outputs; attributes the new op lacks go, graph outputs lose
    their declared types (inferred again), so the model often stays valid."""
    from mutate import _node, _pick

    _, node = _node(model, rng)
    if node is None:
        return
    opset = next((o.version for o in model.opset_import if o.domain == ""), 17)
    fits = [
        schema for schema in _schemas(opset)
        if schema.min_input <= len(node.input) <= schema.max_input
        and schema.min_output <= len(node.output) <= schema.max_output
    ]  # fmt: skip
    schema = _pick(rng, fits)
    if schema is None:
        return
    node.op_type = schema.name
    keep = [a for a in node.attribute if a.name in schema.attributes]
    del node.attribute[:]
    node.attribute.extend(keep)
    for output in model.graph.output:
        output.ClearField("type")
    del model.graph.value_info[:]


def _schemas(opset: int) -> list:
    key = ("schemas", opset)
    if key not in _CACHE:
        names = {s.name for s in defs.get_all_schemas() if s.domain == ""}
        found = []
        for name in sorted(names):
            try:
                schema = defs.get_schema(name, opset, "")
            except Exception:  # noqa: BLE001 (not defined at this opset)
                continue
            if not schema.deprecated:
                found.append(schema)
        _CACHE[key] = found
    return _CACHE[key]


_CACHE: dict = {}


def nudge_attribute(model, rng) -> None:
    """An int attribute ±1 (or an element of an ints one), a float one scaled."""
    from mutate import _pick

    pair = _pick(rng, [(n, a) for n in model.graph.node for a in n.attribute])
    if pair is None:
        return
    _, attr = pair
    step = int(_pick(rng, [-1, 1]))
    if attr.type == AttributeProto.INT:
        attr.i += step
    elif attr.type == AttributeProto.INTS and attr.ints:
        attr.ints[int(rng.integers(len(attr.ints)))] += step
    elif attr.type == AttributeProto.FLOAT:
        attr.f *= float(_pick(rng, [0.5, 2.0, -1.0]))
    for output in model.graph.output:
        output.ClearField("type")


MILD = {"swap_op": swap_op, "nudge_attribute": nudge_attribute}


def write_seeds(corpus: str) -> int:
    """The seed models as files of `corpus` (kept when there already)."""
    from seeds import seeds

    os.makedirs(corpus, exist_ok=True)
    for seed in seeds():
        path = os.path.join(corpus, f"seed-{seed.name}.onnx")
        if not os.path.exists(path):
            with open(path, "wb") as f:
                f.write(seed.model.SerializeToString())
    return len(seeds())


def import_smelt() -> int:
    """Imports every module of smelt but the GPU target's (which the cpu path
    never reaches), so that instrumentation sees the modules that the compile
    path imports lazily; returns how many."""
    import importlib
    import pkgutil

    import smelt

    names = [
        m.name for m in pkgutil.walk_packages(smelt.__path__, "smelt.")
        if ".triton" not in m.name
    ]  # fmt: skip
    for name in names:
        importlib.import_module(name)
    return len(names)


def fuzz_here(work: str, libfuzzer_args: list[str], input_timeout: float) -> None:
    """Fuzzes in this process until libFuzzer stops (it exits the process)."""
    import atheris

    limit = ADDRESS_SPACE_GB << 30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    corpus = os.path.join(work, "corpus")
    write_seeds(corpus)
    with atheris.instrument_imports(include=["smelt"]):
        import_smelt()
    harness = Harness(work, input_timeout)
    argv = [sys.argv[0], corpus, f"-artifact_prefix={work}{os.sep}",
            "-max_len=65536", "-rss_limit_mb=6144", "-print_final_stats=1",
            f"-timeout={int(input_timeout * 3)}", *libfuzzer_args]  # fmt: skip
    atheris.Setup(argv, harness, custom_mutator=mutate)
    atheris.Fuzz()


@dataclass
class Summary:
    """What one fuzzing session did."""

    seconds: float
    executions: int  # libFuzzer's count (the harness's when libFuzzer said none)
    edges: int  # libFuzzer's "cov": edges of smelt's code reached
    features: int  # libFuzzer's "ft"
    corpus: int  # inputs kept for new coverage
    outcomes: dict[str, int]
    findings: dict[str, str]  # "finding-KIND site" → a saved input
    returncode: int
    log_tail: str

    def format(self) -> str:
        lines = [
            f"{self.executions} executions in {self.seconds:.0f} s; coverage: "
            f"{self.edges} edges, {self.features} features; corpus {self.corpus}",
            "outcomes: "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items())),
            f"findings: {len(self.findings)}",
            *[f"  {key}: {path}" for key, path in sorted(self.findings.items())],
        ]
        return "\n".join(lines)


def run(
    seconds: float = 600,
    runs: int = 0,
    work: str | None = None,
    input_timeout: float = INPUT_TIMEOUT,
    nice: int = 10,
    extra: tuple[str, ...] = (),
) -> Summary:
    """Fuzzes in a child process for `seconds` (or `runs` executions) and returns
    its numbers; `work` keeps the corpus, findings and logs (default: a new
    temporary folder)."""
    work = work or tempfile.mkdtemp(prefix="smelt-atheris-")
    os.makedirs(work, exist_ok=True)
    args = [f"-max_total_time={int(seconds)}"] + ([f"-runs={runs}"] if runs else [])
    command = [sys.executable, __file__, "--child", "--work", work,
               "--input-timeout", str(input_timeout), "--", *args, *extra]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE]))
    t0 = time.time()
    with open(os.path.join(work, "libfuzzer.log"), "w") as log:
        proc = subprocess.run(
            command, stdout=log, stderr=subprocess.STDOUT, env=env,
            preexec_fn=(lambda: os.nice(nice)) if nice else None,
        )  # fmt: skip
    seconds = time.time() - t0
    with open(os.path.join(work, "libfuzzer.log"), errors="replace") as f:
        text = f.read()
    stats = {}
    if os.path.exists(os.path.join(work, "stats.json")):
        with open(os.path.join(work, "stats.json")) as f:
            stats = json.load(f)
    status = re.findall(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)", text)
    final = re.search(r"stat::number_of_executed_units: (\d+)", text)
    executions = int(final[1]) if final else stats.get("executions", 0)
    edges, features, corpus = (int(x) for x in status[-1][1:]) if status else (0, 0, 0)
    findings = dict(stats.get("findings", {}))
    for crash in re.findall(r"Test unit written to (\S+)", text):
        findings[f"libfuzzer {os.path.basename(crash)}"] = crash
    return Summary(seconds, executions, edges, features, corpus,
                   stats.get("outcomes", {}), findings, proc.returncode,
                   text[-4000:])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--runs", type=int, default=0, help="stop after N inputs")
    parser.add_argument("--work", help="corpus, findings and logs (default: a "
                        "temporary folder)")
    parser.add_argument("--input-timeout", type=float, default=INPUT_TIMEOUT)
    parser.add_argument("--replay", nargs="+", metavar="FILE",
                        help="run these inputs once each and print their outcome")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ort-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("libfuzzer", nargs="*", help="flags for libFuzzer "
                        "(after --), e.g. -jobs=2 -dict=…")
    args = parser.parse_args(argv)
    if args.ort_server:
        ort_server()
        return 0
    if args.replay:
        harness = Harness(tempfile.mkdtemp(prefix="smelt-replay-"), args.input_timeout)
        for path in args.replay:
            with open(path, "rb") as f:
                outcome, detail = harness.check(f.read())
            print(f"{path}: {outcome}\n{detail}")
        return 0
    if args.child:
        fuzz_here(args.work, args.libfuzzer, args.input_timeout)
        return 0
    summary = run(args.seconds, args.runs, args.work, args.input_timeout,
                  extra=tuple(args.libfuzzer))  # fmt: skip
    print(summary.format())
    return 1 if summary.findings else 0


if __name__ == "__main__":
    sys.exit(main())
