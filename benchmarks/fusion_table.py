"""Graph-level effect of the graph pipeline on every light_* model (and the MLP and
encoder layer): ops before → kernels after, and the bytes that intermediate tensors
write to memory and read back, before → after.

    python benchmarks/fusion_table.py [--pipeline P]
"""

from __future__ import annotations

import argparse
import os
import sys

import onnx

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test", "numerics"))


def main(argv=None) -> int:
    import models

    from smelt.compiler import pipelines
    from smelt.compiler.report import report
    from smelt.frontend.onnx import import_model

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pipeline", default=pipelines.GRAPH_OPT)
    args = parser.parse_args(argv)
    cases = {name: (lambda n=name: onnx.load(models.light_model_path(n)))
             for name in models.LIGHT_MODELS}
    cases["mlp"], cases["encoder"] = models.mlp_model, models.encoder_layer_model
    print(f"pipeline: {args.pipeline}")
    print(f"{'model':<22}{'ops':>6}{'→kernels':>10}{'MB written':>18}{'MB read back':>18}")
    for name, build in cases.items():
        rows = report(import_model(build()), args.pipeline)
        first, last = rows[0][1], rows[-1][1]
        print(
            f"{name:<22}{first.ops:>6}{last.kernels:>10}"
            f"{first.bytes_written / 1e6:>9.1f} → {last.bytes_written / 1e6:<6.1f}"
            f"{first.bytes_read / 1e6:>9.1f} → {last.bytes_read / 1e6:<6.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
