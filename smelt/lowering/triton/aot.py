"""Ahead-of-time compilation of generated Triton kernels for a GPU architecture,
without a GPU: `triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))`
(ptxas ships in the Triton wheel). Reports block sizes, shared memory and whether a
kernel uses Hopper's wgmma; identical kernels (same body and signature) compile once.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

from smelt.errors import SmeltError
from smelt.lowering.triton.emit import TritonKernel
from smelt.lowering.triton.prelude import PRELUDE


@dataclass(frozen=True)
class CompiledKernel:
    """What compiling one kernel for one architecture gave."""

    name: str
    mode: str
    blocks: dict[str, int]
    num_warps: int
    num_stages: int
    shared_bytes: int
    uses_wgmma: bool
    seconds: float
    cached: bool = False


def parse_arch(arch: str | int) -> int:
    """`sm_90`, `90` or 90 -> 90."""
    text = str(arch).lower().removeprefix("sm_").removeprefix("sm")
    if not text.rstrip("a").isdigit():
        raise SmeltError(f"bad GPU architecture '{arch}': write it as sm_90 or 90")
    return int(text.rstrip("a"))


def kernel_key(k: TritonKernel) -> str:
    """Same body, signature and launch options -> same compiled kernel."""
    body = k.source.split("\n", 2)[2]
    text = "|".join([body, ",".join(k.signature), repr(k.schedule)])
    return hashlib.sha256(text.encode()).hexdigest()


def compile_kernel(k: TritonKernel, arch: int = 90) -> CompiledKernel:
    """Compiles one kernel to cubin for `arch` and inspects the result."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from smelt.lowering.triton.runtime import load_source

    # its compiler, not its interpreter, whatever TRITON_INTERPRET says
    module = load_source(PRELUDE + "\n" + k.source, interpret=False)
    fn = getattr(module, k.name)
    signature = dict(zip(k.params, k.signature))
    signature |= {name: "constexpr" for name in k.constexprs}
    constexprs = {(fn.arg_names.index(n),): v for n, v in k.constexprs.items()}
    # buffers are 64-byte aligned (arena offsets, torch allocations): the same
    # 16-byte divisibility Triton's JIT specializes on at launch, which lets
    # 16-bit loads become cp.async copies that the pipeliner multi-buffers
    aligned = {(i,): [["tt.divisibility", 16]] for i in range(len(k.params))}
    src = ASTSource(fn, signature, constexprs, aligned)
    options = {
        "num_warps": k.schedule.num_warps,
        "num_stages": k.schedule.num_stages,
        "enable_fp_fusion": True,
    }
    t0 = time.perf_counter()
    try:
        compiled = triton.compile(
            src, target=GPUTarget("cuda", arch, 32), options=options
        )
    except Exception as e:  # Triton raises many types; report the kernel
        raise SmeltError(
            f"triton could not compile kernel {k.name} (from @{k.kernel}) for "
            f"sm_{arch}: {str(e)[:2000]}"
        ) from e
    seconds = time.perf_counter() - t0
    ptx = compiled.asm.get("ptx", "")
    shared = getattr(compiled.metadata, "shared", 0)
    return CompiledKernel(
        k.name, k.mode, k.constexprs, k.schedule.num_warps, k.schedule.num_stages,
        int(shared), bool(re.search(r"\bwgmma\.", ptx)), seconds,
    )  # fmt: skip


def compile_all(
    kernels: Iterable[TritonKernel], arch: int = 90, jobs: int = 1
) -> list[CompiledKernel]:
    """Every kernel in order, each distinct one compiled once (in `jobs` processes);
    duplicates are marked cached. The first compile error is raised."""
    kernels = list(kernels)
    compiled, errors, _ = compile_distinct(kernels, arch, jobs)
    if errors:
        raise SmeltError(errors[0])
    by_key = {kernel_key(k): r for k, r in compiled}
    out, seen = [], set()
    for k in kernels:
        key = kernel_key(k)
        first = by_key[key]
        if key in seen:
            first = CompiledKernel(
                k.name, k.mode, first.blocks, first.num_warps, first.num_stages,
                first.shared_bytes, first.uses_wgmma, 0.0, True,
            )  # fmt: skip
        seen.add(key)
        out.append(first)
    return out


def _compile_one(args: tuple[TritonKernel, int]) -> CompiledKernel | str:
    try:
        return compile_kernel(*args)
    except SmeltError as e:
        return str(e)


def compile_distinct(
    kernels: Iterable[TritonKernel],
    arch: int = 90,
    jobs: int = 1,
    budget_s: float | None = None,
) -> tuple[list[tuple[TritonKernel, CompiledKernel]], list[str], int]:
    """Compiles each distinct kernel once, in order, in `jobs` processes, until
    `budget_s` seconds have passed. Returns ((kernel, result) pairs, errors, number
    of distinct kernels)."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    distinct: dict[str, TritonKernel] = {}
    for k in kernels:
        distinct.setdefault(kernel_key(k), k)
    todo = list(distinct.values())
    done: list[tuple[TritonKernel, CompiledKernel]] = []
    errors: list[str] = []
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        running: dict = {}
        while todo or running:
            in_time = budget_s is None or time.perf_counter() - start < budget_s
            while todo and in_time and len(running) < max(1, jobs):
                k = todo.pop(0)
                running[pool.submit(_compile_one, (k, arch))] = k
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in finished:
                k, r = running.pop(f), f.result()
                (errors.append(r) if isinstance(r, str) else done.append((k, r)))
    return done, errors, len(distinct)


def format_table(rows: list[CompiledKernel], arch: int) -> str:
    """A table of compiled kernels and a total line."""
    head = f"{'kernel':<40} {'mode':<12} {'blocks':<44} {'warps':>5} {'stages':>6} {'smem B':>8} {'wgmma':>5}"
    lines = [head, "-" * len(head)]
    for r in rows:
        blocks = " ".join(f"{k}={v}" for k, v in r.blocks.items())
        lines.append(
            f"{r.name[:40]:<40} {r.mode:<12} {blocks[:44]:<44} {r.num_warps:>5} "
            f"{r.num_stages:>6} {r.shared_bytes:>8} {'yes' if r.uses_wgmma else 'no':>5}"
        )
    distinct = [r for r in rows if not r.cached]
    dots = [r for r in rows if r.mode == "dot"]
    lines.append(
        f"total: {len(rows)} kernels ({len(distinct)} distinct) compiled for sm_{arch} "
        f"in {sum(r.seconds for r in rows):.1f} s; {sum(r.uses_wgmma for r in rows)} use "
        f"wgmma ({sum(r.uses_wgmma for r in dots)} of {len(dots)} dot kernels); max "
        f"shared memory {max((r.shared_bytes for r in rows), default=0)} B"
    )
    return "\n".join(lines)


def write_sources(
    kernels: dict[str, list[TritonKernel]], directory: str, name: str
) -> str:
    """Writes the model's kernels as one importable, readable module and returns its
    path. `LAUNCHES` at its end lists the launch plan in @main's order of kernels."""
    from smelt.lowering.triton.source import module_source

    os.makedirs(directory, exist_ok=True)
    stem = re.sub(r"\W", "_", name)
    path = os.path.join(directory, f"{stem}_triton.py")
    launches = [
        f"    ({k.name!r}, ({k.grid},), {k.constexprs!r}, "
        f"dict(num_warps={k.schedule.num_warps}, num_stages={k.schedule.num_stages})),"
        for fns in kernels.values()
        for k in fns
    ]
    text = module_source(kernels)
    text += (
        "\n\n# (kernel, grid, constexprs, launch options) per launch: run as\n"
        "# globals()[name][grid](*buffers, **constexprs, **options)\n"
        "LAUNCHES = [\n" + "\n".join(launches) + "\n]\n"
    )
    with open(path, "w") as f:
        f.write(text)
    return path
