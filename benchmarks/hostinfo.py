"""The header of every benchmark table: the host's CPU as the OS and smelt's
TargetSpec see it (`smelt target`: LLVM CPU name, ISA, caches, cores), which BLAS
kernel numpy runs (threadpoolctl), and the peers' versions (onnxruntime,
OpenVINO where installed)."""

from __future__ import annotations

import os
import platform


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def blas() -> str:
    """numpy's BLAS: library, kernel (OpenBLAS' 'architecture'), threads, version."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed: pip install threadpoolctl"
    rows = [
        f"{p.get('internal_api')} {p.get('version')} kernel "
        f"{p.get('architecture', '?')}, {p.get('num_threads')} threads"
        for p in threadpool_info()
        if p.get("user_api") == "blas"
    ]
    return "; ".join(rows) or "no BLAS found"


def openvino_version() -> str:
    try:
        import openvino
    except ImportError:
        return "not installed"
    return openvino.__version__


def header_lines() -> list[str]:
    from smelt.targets.cpu_spec import host

    env = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
           if k in os.environ}  # fmt: skip
    import numpy
    import onnxruntime

    return [
        f"host: {cpu_model()}, {os.cpu_count()} cpus, {platform.system()}",
        f"smelt TargetSpec (ISA, as `smelt target` prints it): {host()}",
        f"numpy {numpy.__version__} BLAS: {blas()}; OPENBLAS_* set: {env or 'none'}",
        f"onnxruntime {onnxruntime.__version__}; openvino {openvino_version()}",
    ]
