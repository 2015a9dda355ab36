"""Fuzzes a real artifact (test/unit/test_artifact_trust.py's probe model: two
inputs and outputs, an arena, a thread pool, an index check, a profile): every
manifest field edited, random triples of those edits, random bit flips of the
file, and bit flips in its weights with the hashes recomputed. Each case loads
and runs in a worker process (a crash or a 60 s hang loses that case only) and
must end in a SmeltError or the right answers; prints a table.

    python test/fuzz/fuzz_artifacts.py [-n 500] [--seed 7]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "unit"))

import numpy as np
import test_artifact_trust as probe

import smelt

MODES = ("fields", "combos", "flips", "members")


def kind(outcome: str) -> str:
    """The outcome's class: same, refused (SmeltError type), wrong, foreign,
    crash, hang."""
    if outcome.startswith("refused: "):
        return "refused " + outcome.split(":")[1].strip()
    return outcome.split(":")[0]


def fuzz(n: int, seed: int, folder: Path) -> dict[str, dict[str, str]]:
    compiled = smelt.compile(probe.probe_model(), threads=2, profile=True)
    source = Path(compiled.save(folder / "probe.smelt"))
    expected = folder / "expected.npz"
    np.savez(expected, **compiled.run(probe.probe_feeds()[0]))
    return {
        mode: probe.run_probes(source, expected, folder, mode, n, seed)
        for mode in MODES
    }  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "-n",
        type=int,
        default=500,
        help="cases of each random mode (combos, flips, members)",
    )
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        results = fuzz(args.n, args.seed, Path(folder))
    failures = 0
    print("| mode | cases | outcomes |\n|---|---|---|")
    for mode, outcomes in results.items():
        counts = Counter(kind(o) for o in outcomes.values())
        shown = ", ".join(f"{k} {v}" for k, v in counts.most_common())
        print(f"| {mode} | {len(outcomes)} | {shown} |")
        for label, outcome in outcomes.items():
            # other weights give other answers: the only "wrong" allowed
            ok = kind(outcome) == "same" or kind(outcome).startswith("refused ")
            ok = ok or (mode == "members" and outcome.startswith("wrong: output "))
            if not ok:
                failures += 1
                print(f"  FAIL {mode} {label}: {outcome[:300]}")
    total = sum(len(o) for o in results.values())
    print(
        f"{total} cases in {time.perf_counter() - t0:.0f} s (seed {args.seed}), "
        f"{failures} failures (crash, hang, foreign exception, wrong answer)"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
