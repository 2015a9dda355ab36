"""Runs seeded fuzz cases (test/fuzz/mutate.py) through smelt and onnxruntime and
classifies each outcome; prints a table and writes it to test/fuzz/results.md.

    python test/fuzz/run_fuzz.py [-n 2000] [--seed 7] [--only 12,40] [--inline]

Cases run in worker processes, in batches: a case that takes longer than
`--timeout` seconds is a hang, one that kills its worker (a signal) a segfault;
either way only that case is lost and a new worker takes the rest of the batch.
Outcomes:

  ok                 compiled, ran, and matches onnxruntime (rtol = atol = 1e-4)
  nonfinite-differs  inputs hold NaN / Inf and the outputs differ only where a
                     value is NaN or infinite: ONNX leaves max over NaN open
                     (onnxruntime skips NaN), onnxruntime's MaxPool of a window
                     of -inf answers -FLT_MAX, and a cast of NaN / inf to an
                     integer is undefined (x86 gives the most negative one)
  refused-clearly    SmeltError whose message names a node, input or tensor
  refused-unclear    SmeltError that names nothing
  accepted-invalid   smelt runs a model that onnxruntime refuses
  accepted-bad-input smelt runs inputs that onnxruntime refuses at run time
  crash              any other exception (a bare traceback)
  wrong-answer       smelt runs but differs from onnxruntime
  hang, segfault     the worker ran out of time / died of a signal in smelt
  ort-crash          onnxruntime itself died or hung on the case (not smelt's)
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter, defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, ROOT]

FAILURES = ("crash", "wrong-answer", "hang", "segfault")
OUTCOMES = (
    "ok", "nonfinite-differs", "refused-clearly", "refused-unclear", "accepted-invalid",
    "accepted-bad-input", *FAILURES, "ort-crash",
)  # fmt: skip
# a name in quotes, a node label (Conv#3, node #3), or a model-level field
_NAMED = re.compile(
    r"'[^']+'|\b\w+#\d+\b|node #\d+|not a valid ONNX model|opset_import"
    r"|ir_version|graph\.output|inputs must be a dict"
)


# --- one case, in a worker -------------------------------------------------------


def _ort(model: bytes, feeds):
    """('ok', outputs) / ('model', error) / ('input', error) from onnxruntime."""
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(
            model, options, providers=["CPUExecutionProvider"]
        )
    except Exception as e:  # noqa: BLE001 (onnxruntime refusing is an outcome)
        return "model", str(e)[:200]
    try:
        if not isinstance(feeds, dict):
            raise TypeError("inputs are not a dict")
        arrays = {k: np.asarray(v) for k, v in feeds.items()}
        names = [o.name for o in session.get_outputs()]
        return "ok", dict(zip(names, session.run(None, arrays), strict=True))
    except Exception as e:  # noqa: BLE001
        return "input", str(e)[:200]


def _nonfinite(feeds) -> bool:
    import numpy as np

    arrays = [np.asarray(v) for v in feeds.values()] if isinstance(feeds, dict) else []
    return any(a.dtype.kind == "f" and not np.isfinite(a).all() for a in arrays)


def _differs(got: dict, want: dict, nonfinite: bool = False) -> str:
    """What differs between smelt's outputs and onnxruntime's ("" if nothing);
    with `nonfinite` inputs, differences only where a value is NaN or infinite
    (or onnxruntime's is ±FLT_MAX, where its pools start) say "nonfinite:"."""
    import numpy as np

    if list(got) != list(want):
        return f"outputs {list(got)} vs onnxruntime's {list(want)}"
    for name, a in got.items():
        b = np.asarray(want[name])
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"'{name}': {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
        if a.dtype.kind in "biu":
            same = a == b
            if same.all():
                continue
            if nonfinite and a.dtype.kind == "i":
                # NaN / ±inf cast to an integer: ONNX leaves it undefined, x86
                # (onnxruntime) gives the most negative integer
                if (b[~same] == np.iinfo(b.dtype).min).all():
                    return f"nonfinite: '{name}' differs only where NaN/inf was cast"
            return f"'{name}': integers differ"
        tol = 1e-2 if a.dtype.itemsize <= 2 else 1e-4
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        close = np.isclose(a64, b64, rtol=tol, atol=tol, equal_nan=True)
        if close.all():
            continue
        top = np.finfo(b.dtype).max
        odd = ~np.isfinite(a64) | ~np.isfinite(b64) | (np.abs(b64) == top)
        odd |= np.isin(b64, [-(2.0**31), -(2.0**63)])  # x86's cast of NaN / inf
        if nonfinite and odd[~close].all():
            # max / min / pooling over NaN, which ONNX leaves open (onnxruntime
            # skips NaN, numpy and torch propagate it), or a window of -inf only
            # (onnxruntime answers -FLT_MAX)
            return f"nonfinite: '{name}' differs only where a value is NaN or ±inf"
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # all NaN: nanmax says so
            err = np.nanmax(np.abs(a64 - b64)[~close])
        return f"'{name}': max abs error {err:.3g}"
    return ""


def _full_check(model: bytes) -> str:
    """onnx's full checker on a model smelt accepted: "ok", or its complaint
    (graph outputs without a shape get their inferred one first, as
    onnxruntime and smelt infer them)."""
    import onnx

    from smelt.frontend.onnx_validate import _with_output_types

    try:
        proto = onnx.ModelProto()
        proto.ParseFromString(model)
        onnx.checker.check_model(_with_output_types(proto), full_check=True)
    except Exception as e:  # noqa: BLE001 (the checker's errors share no base)
        return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    return "ok"


def _site(exc: BaseException) -> str:
    """Where an exception left smelt: the innermost frame inside smelt/."""
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if f"{os.sep}smelt{os.sep}" in f.filename]
    frame = (inside or frames or [None])[-1]
    if frame is None:
        return "?"
    return f"{os.path.relpath(frame.filename, ROOT)}:{frame.lineno}"


def run_case(case, stage=lambda s: None) -> dict:
    """The outcome of one case as a JSON-able dict."""
    import onnx
    from mutate import realize_feeds

    import smelt

    feeds = realize_feeds(case)
    stage("ort")
    ort_status, ort_result = _ort(case.model, feeds)
    stage("smelt")
    result = {"index": case.index, "seed": case.seed, "family": case.family,
              "kind": case.kind, "detail": case.detail, "ort": ort_status}  # fmt: skip
    if case.kind == "selftest-segfault":  # proves the driver counts these
        os.kill(os.getpid(), signal.SIGSEGV)
    if case.kind == "selftest-hang":
        time.sleep(3600)
    t0 = time.perf_counter()
    phase = "compile"
    try:
        model = case.model
        if case.as_proto:
            model = onnx.ModelProto()
            model.ParseFromString(case.model)
        compiled = smelt.compile(model, "cpu")
        phase = "run"
        got = compiled.run(feeds)
    except smelt.SmeltError as e:
        message = str(e)
        named = bool(_NAMED.search(message))
        result.update(outcome="refused-clearly" if named else "refused-unclear")
        result.update(phase=phase, message=" ".join(message.split())[:300])
        return result
    except Exception as e:  # noqa: BLE001 (a crash is the outcome)
        result.update(outcome="crash", phase=phase, site=_site(e),
                      message=f"{type(e).__name__}: {str(e)[:300]}",
                      traceback=traceback.format_exc()[-3000:])  # fmt: skip
        return result
    finally:
        result["seconds"] = round(time.perf_counter() - t0, 3)
    result["checker"] = _full_check(case.model)
    if ort_status == "model":
        result.update(outcome="accepted-invalid", message=ort_result)
    elif ort_status == "input":
        result.update(outcome="accepted-bad-input", message=ort_result)
    else:
        diff = _differs(got, ort_result, _nonfinite(feeds))
        odd = diff.startswith("nonfinite:")
        outcome = "nonfinite-differs" if odd else "wrong-answer"
        result.update(outcome=outcome if diff else "ok", message=diff)
    return result


def worker(path: str, start: int, fd: int, mem_gb: float) -> None:
    """Runs the cases of a batch file from `start`, reporting on pipe `fd`."""
    import resource

    limit = int(mem_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    with open(path, "rb") as f:
        cases = pickle.load(f)
    out = os.fdopen(fd, "w", buffering=1)
    for position in range(start, len(cases)):
        case = cases[position]
        out.write(f"start {position}\n")
        result = run_case(case, lambda s: out.write(f"stage {s}\n"))
        out.write("result " + json.dumps(result) + "\n")
    out.close()


# --- the driver -------------------------------------------------------------------


def _dead(case, outcome: str, detail: str) -> dict:
    return {"index": case.index, "seed": case.seed, "family": case.family,
            "kind": case.kind, "detail": case.detail, "outcome": outcome,
            "message": detail}  # fmt: skip


def run_batch(cases: list, timeout: float, mem_gb: float) -> list[dict]:
    """Every case's outcome; a worker that hangs or dies costs only its case."""
    results: list[dict] = []
    with tempfile.NamedTemporaryFile(suffix=".pkl", delete=False) as f:
        pickle.dump(cases, f)
        path = f.name
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE]))
    env.update(OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="")
    try:
        start = 0
        while start < len(cases):
            start = _run_worker(cases, path, start, timeout, mem_gb, env, results)
    finally:
        os.unlink(path)
    return results


def _run_worker(cases, path, start, timeout, mem_gb, env, results) -> int:
    read, write = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--worker", path, "--start", str(start),
         "--fd", str(write), "--mem-gb", str(mem_gb)],
        pass_fds=(write,), env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(write)
    position, stage, buffer = None, "start", b""
    deadline = time.monotonic() + timeout + 60  # imports of a fresh worker
    with os.fdopen(read, "rb") as pipe:
        while True:
            ready, _, _ = select.select([pipe], [], [], 1.0)
            if not ready:
                if time.monotonic() < deadline:
                    continue
                proc.kill()
                proc.wait()
                if position is None:
                    raise RuntimeError("a fuzz worker did not start")
                what = "ort-crash" if stage == "ort" else "hang"
                results.append(_dead(cases[position], what, f"> {timeout}s in {stage}"))
                return position + 1
            chunk = os.read(pipe.fileno(), 1 << 16)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                key, _, rest = line.decode().partition(" ")
                if key == "start":
                    position, stage = int(rest), "start"
                    deadline = time.monotonic() + timeout
                elif key == "stage":
                    stage = rest
                elif key == "result":
                    results.append(json.loads(rest))
                    position = None
    code = proc.wait()
    if position is None:
        return len(cases)
    if code < 0:
        name = signal.Signals(-code).name
        what = "ort-crash" if stage == "ort" else "segfault"
    else:
        name, what = f"exit code {code}", "crash"
    results.append(_dead(cases[position], what, f"worker died ({name}) in {stage}"))
    return position + 1


def report(results: list[dict], command: str, seed: int, seconds: float) -> str:
    """The outcome table (totals, then per mutation kind) and the failing cases."""
    totals = Counter(r["outcome"] for r in results)
    kinds: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        kinds[f"{r['family']}/{r['kind']}"][r["outcome"]] += 1
    shown = [o for o in OUTCOMES if totals[o] or o in FAILURES]
    lines = [
        "# Fuzz results", "",
        f"Command: `{command}`  ", f"Seed: {seed}; cases: {len(results)}; "
        f"{seconds:.0f} s", "",
        "| outcome | cases |", "|---|---:|",
        *[f"| {o} | {totals[o]} |" for o in shown], "",
        "| mutation | " + " | ".join(shown) + " |",
        "|---|" + "---:|" * len(shown),
    ]  # fmt: skip
    for kind in sorted(kinds):
        counts = " | ".join(str(kinds[kind][o]) for o in shown)
        lines.append(f"| {kind} | {counts} |")
    refused_ort_ok = sum(
        1 for r in results if r["outcome"].startswith("refused") and r["ort"] == "ok"
    ) if results and all("ort" in r for r in results) else None
    if refused_ort_ok is not None:
        lines += ["", f"Refused although onnxruntime runs them: {refused_ort_ok}."]
    unchecked = [r for r in results if r.get("checker", "ok") != "ok"]
    if results and any("checker" in r for r in results):
        lines += [f"Accepted although onnx's full checker rejects them: "
                  f"{len(unchecked)}."]  # fmt: skip
        lines += [f"- case {r['index']} ({r['seed']}, {r['kind']}): {r['checker']}"
                  for r in unchecked[:20]]  # fmt: skip
    for outcome in (*FAILURES, "ort-crash", "refused-unclear", "accepted-invalid",
                    "accepted-bad-input", "nonfinite-differs"):  # fmt: skip
        bad = [r for r in results if r["outcome"] == outcome]
        if not bad:
            continue
        lines += ["", f"## {outcome} ({len(bad)})", ""]
        for r in bad[:40]:
            where = f" at {r['site']}" if r.get("site") else ""
            lines.append(
                f"- case {r['index']} ({r['seed']}, {r['kind']}: {r['detail']})"
                f"{where}: "
                f"{r.get('message', '')[:200]}"
            )
    lines += ["", f"Replay one case: `python test/fuzz/run_fuzz.py --seed {seed} "
              "--only INDEX --inline`", ""]  # fmt: skip
    return "\n".join(lines)


def fuzz(n: int, seed: int, only=None, timeout=30.0, batch=250, mem_gb=6.0,
         backend=True) -> list[dict]:  # fmt: skip
    """The outcomes of cases 0..n-1 (or `only`) of the run seeded `seed`."""
    from mutate import make_case

    indices = list(only) if only else list(range(n))
    cases = [make_case(seed, i, backend) for i in indices]
    results = []
    for first in range(0, len(cases), batch):
        results += run_batch(cases[first : first + batch], timeout, mem_gb)
    return results


KEPT = "\n## Coverage-guided fuzzing"
"""Where the hand-written part of results.md starts, which a run keeps."""


def _kept(path: str) -> str:
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return ""
    start = text.find(KEPT)
    return text[start:] if start >= 0 else ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=20250)
    parser.add_argument("--only", help="comma-separated case indices")
    parser.add_argument("--inline", action="store_true",
                        help="run --only cases in this process, with tracebacks")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument("--mem-gb", type=float, default=6.0)
    parser.add_argument("--no-backend", action="store_true",
                        help="only the seed graphs built by code")
    parser.add_argument("--output", default=os.path.join(HERE, "results.md"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--fd", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.start, args.fd, args.mem_gb)
        return 0
    only = [int(i) for i in args.only.split(",")] if args.only else None
    if args.inline:
        from mutate import make_case

        for index in only or range(args.n):
            case = make_case(args.seed, index, not args.no_backend)
            print(case.seed, case.family, case.kind, case.detail)
            print(json.dumps(run_case(case), indent=1))
        return 0
    t0 = time.time()
    results = fuzz(args.n, args.seed, only, args.timeout, args.batch, args.mem_gb,
                   not args.no_backend)  # fmt: skip
    command = "python test/fuzz/run_fuzz.py " + " ".join(argv or sys.argv[1:])
    text = report(results, command.strip(), args.seed, time.time() - t0)
    print(text)
    if not only:
        kept = _kept(args.output)
        with open(args.output, "w") as f:
            f.write(text + kept)
    return 1 if any(r["outcome"] in FAILURES for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
