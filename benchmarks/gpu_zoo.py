"""Exports the zoo's models (test/zoo/zoo.py, "small" size, the dynamo exporter) with
their feeds into one folder, for a machine that cannot build them (the H200 one
has no transformers): `FOLDER/NAME.onnx` and `FOLDER/NAME.npz`, which
`benchmarks/gpu_check.py FOLDER/*.onnx` reads.

    python benchmarks/gpu_zoo.py wheels/zoo   # benchmarks/gpu_wheels.sh runs this
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent.parent / "test" / "zoo"))

import zoo  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("models", nargs="*", default=list(zoo.MODELS))
    parser.add_argument("--size", default="small", choices=["small", "real"])
    args = parser.parse_args(argv)
    args.folder.mkdir(parents=True, exist_ok=True)
    for name in args.models:
        source = zoo.build(name, args.size, "dynamo")
        shutil.copyfile(source, args.folder / f"{name}.onnx")
        np.savez(args.folder / f"{name}.npz", **zoo.inputs(name, args.size))
        print(f"{name}: {source.stat().st_size / 2**20:.1f} MiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
