"""The zoo of real architectures (test/zoo/zoo.py) against onnxruntime: per model and
exporter, its op count, smelt's compile time, the error against onnxruntime and the
latency ratio at 1 and 2 threads (interleaved blocks, median of --repeat runs).

    python benchmarks/zoo.py [--set zoo|arch] [--size small|real] [--threads 1 2]
        [--repeat 20] [--exporters dynamo torchscript] [MODEL ...]

`--set arch`: the real-architecture set of test/zoo/arch.py (PP-LCNet-style,
DB-style text detector, YOLOv8-style detector, CRNN, BERT-mini; issue 30).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "test" / "zoo"))

import arch  # noqa: E402
import zoo  # noqa: E402
from cpu import compare_ms, compile_cpu, ort_session, rel_error  # noqa: E402
from hostinfo import header_lines  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--set", default="zoo", choices=["zoo", "arch"],
                        help="the default MODELs: test/zoo/zoo.py's or arch.py's")
    parser.add_argument("--size", default="small", choices=["small", "real"])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--level", default="O2")
    parser.add_argument("--exporters", nargs="+", default=list(zoo.EXPORTERS),
                        choices=zoo.EXPORTERS)
    parser.add_argument("models", nargs="*")
    args = parser.parse_args(argv)
    args.models = args.models or list(arch.ARCH if args.set == "arch" else zoo.MODELS)
    unknown = [m for m in args.models if m not in zoo.MODELS and m not in arch.ARCH]
    if unknown:
        parser.error(f"unknown models {unknown}: choose from "
                     f"{sorted(zoo.MODELS)} or {sorted(arch.ARCH)}")  # fmt: skip
    for line in header_lines():
        print(line)
    print(f"size {args.size}, level {args.level}, median of {args.repeat} runs\n")
    print("| model | exporter | family | ops | threads | compile s | error "
          "| onnxruntime ms | smelt ms | smelt / ort |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.models:
        for exporter in args.exporters:
            path = zoo.build(name, args.size, exporter)
            model = onnx.load(path)
            feeds = zoo.inputs(name, args.size)
            for threads in args.threads:
                compiled, compile_s = compile_cpu(model, args.level, threads)
                session = ort_session(model, threads)
                names = [o.name for o in session.get_outputs()]
                theirs = dict(zip(names, session.run(None, feeds)))
                error = rel_error(compiled.run(feeds), theirs)
                peer_ms, smelt_ms, ratio = compare_ms(
                    lambda: session.run(None, feeds),
                    lambda: compiled.run(feeds),
                    args.repeat,
                )
                print(f"| {name} | {exporter} | {zoo.spec(name).family} "
                      f"| {len(model.graph.node)} | {threads} | {compile_s:.1f} "
                      f"| {error:.1e} | {peer_ms:.3f} | {smelt_ms:.3f} "
                      f"| {ratio:.2f} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
