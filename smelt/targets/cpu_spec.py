"""CpuSpec: what smelt knows of a CPU (ISA features, vector registers, caches, cores),
read from the host or named as LLVM names CPUs, with LLVM-style feature edits.

    CpuSpec.parse("host")                    # this machine (llvmlite + /sys caches)
    CpuSpec.parse("x86-64-v3")               # AVX2 + FMA, as LLVM's x86-64 levels
    CpuSpec.parse("znver5,-avx512f")         # a named CPU with features taken away

Schedules (`smelt.targets.cpu`) and the llvm backend read only this; nothing tests a
machine by name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import cache
from typing import TYPE_CHECKING

from smelt.errors import SmeltError

if TYPE_CHECKING:  # imported where used: loading an artifact needs no xdsl
    from xdsl.dialects.builtin import ModuleOp

    from smelt.dialects.target import CpuTargetAttr

KNOWN_FEATURES = (
    "sse4.2", "avx", "avx2", "fma", "f16c", "bmi2",
    "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl",
    "avx512vnni", "avx512bf16", "avx512fp16", "avxvnni",
)  # fmt: skip
"""The features smelt reads or passes on to LLVM; others follow the CPU name."""

REQUIRES: dict[str, tuple[str, ...]] = {
    "avx": ("sse4.2",),
    "avx2": ("avx",),
    "fma": ("avx",),
    "f16c": ("avx",),
    "avx512f": ("avx2", "fma", "f16c"),
    "avx512cd": ("avx512f",),
    "avx512bw": ("avx512f",),
    "avx512dq": ("avx512f",),
    "avx512vl": ("avx512f",),
    "avx512vnni": ("avx512f",),
    "avx512bf16": ("avx512bw",),
    "avx512fp16": ("avx512bw", "avx512dq", "avx512vl"),
    "avxvnni": ("avx2",),
}
"""Adding a feature adds what it requires; removing one removes what requires it
(as LLVM does: `-avx512f` leaves no AVX-512 extension on)."""

_V2 = ("sse4.2",)
_V3 = (*_V2, "avx", "avx2", "fma", "f16c", "bmi2")
_V4 = (*_V3, "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl")
_K, _M = 1 << 10, 1 << 20

# name → (features, L1d per core, L2 per core, L3): LLVM's CPU names; cache sizes
# of the common parts (the host's own are read from /sys, see `host_caches`).
NAMED: dict[str, tuple[tuple[str, ...], int, int, int]] = {
    "x86-64": ((), 32 * _K, 256 * _K, 8 * _M),
    "x86-64-v2": (_V2, 32 * _K, 256 * _K, 8 * _M),
    "x86-64-v3": (_V3, 32 * _K, 512 * _K, 16 * _M),
    "x86-64-v4": (_V4, 48 * _K, 1 * _M, 32 * _M),
    "haswell": (_V3, 32 * _K, 256 * _K, 8 * _M),
    "skylake": (_V3, 32 * _K, 256 * _K, 8 * _M),
    "alderlake": ((*_V3, "avxvnni"), 48 * _K, 1280 * _K, 30 * _M),
    "skylake-avx512": (_V4, 32 * _K, 1 * _M, 32 * _M),
    "cascadelake": ((*_V4, "avx512vnni"), 32 * _K, 1 * _M, 32 * _M),
    "icelake-server": ((*_V4, "avx512vnni"), 48 * _K, 1280 * _K, 48 * _M),
    "sapphirerapids": (
        (*_V4, "avx512vnni", "avx512bf16", "avx512fp16", "avxvnni"),
        48 * _K, 2 * _M, 105 * _M,
    ),  # fmt: skip
    "znver2": (_V3, 32 * _K, 512 * _K, 16 * _M),
    "znver3": (_V3, 32 * _K, 512 * _K, 32 * _M),
    "znver4": ((*_V4, "avx512vnni", "avx512bf16", "avxvnni"), 32 * _K, 1 * _M, 32 * _M),
    "znver5": ((*_V4, "avx512vnni", "avx512bf16", "avxvnni"), 48 * _K, 1 * _M, 32 * _M),
}

GENERIC = "x86-64"
"""The base of a CPU name smelt has no table for (its features are all spelled out)."""


def _closure(features: set[str]) -> set[str]:
    todo = list(features)
    while todo:
        for need in REQUIRES.get(todo.pop(), ()):
            if need not in features:
                features.add(need)
                todo.append(need)
    return features


def _without(features: set[str], name: str) -> set[str]:
    gone = {name}
    changed = True
    while changed:
        changed = False
        for f, needs in REQUIRES.items():
            if f in features and f not in gone and gone.intersection(needs):
                gone.add(f)
                changed = True
    return features - gone


def apply_edits(features: frozenset[str], edits: str) -> frozenset[str]:
    """`features` after LLVM-style edits `+a,-b` (with what they require / imply)."""
    result = set(features)
    for item in filter(None, (e.strip() for e in edits.split(","))):
        sign, name = item[0], item[1:]
        if sign not in "+-" or name not in KNOWN_FEATURES:
            known = " ".join(KNOWN_FEATURES)
            raise SmeltError(
                f"bad CPU feature edit '{item}': write +name or -name with a name "
                f"among: {known}"
            )
        result = _closure(result | {name}) if sign == "+" else _without(result, name)
    return frozenset(result)


@dataclass(frozen=True)
class CpuSpec:
    """A CPU as schedules and backends see it (frozen, hashable, printable)."""

    name: str  # the LLVM CPU name
    features: frozenset[str] = field(default_factory=frozenset)  # of KNOWN_FEATURES
    l1d: int = 32 * _K  # bytes per core
    l2: int = 256 * _K  # bytes per core
    l3: int = 8 * _M  # bytes, shared
    cores: int = 0  # 0: not known (a named CPU)

    # -- facts derived from the features ------------------------------------------
    def has(self, feature: str) -> bool:
        return feature in self.features

    @property
    def vector_bits(self) -> int:
        """Width of the widest vector register smelt uses."""
        if self.has("avx512f"):
            return 512
        return 256 if self.has("avx") else 128

    def lanes(self, bits: int = 32) -> int:
        """Lanes of one vector register for elements of `bits` bits (f32: 32)."""
        return self.vector_bits // bits

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers: 32 zmm with AVX-512, else 16."""
        return 32 if self.has("avx512f") else 16

    @property
    def mask_registers(self) -> int:
        """AVX-512 opmask registers k1…k7 (k0 means no mask)."""
        return 7 if self.has("avx512f") else 0

    @property
    def streaming_store_bytes(self) -> int:
        """Buffers this large are written around the caches (nontemporal stores):
        past the L3 they would not be there when read back anyway."""
        return self.l3

    @property
    def fma(self) -> bool:
        return self.has("fma")

    @property
    def int8_dot(self) -> str:
        """The i8 dot-product instruction family: vnni512, vnni256 or none."""
        if self.has("avx512vnni"):
            return "vnni512"
        return "vnni256" if self.has("avxvnni") else "none"

    # -- names and text ------------------------------------------------------------
    def base_features(self) -> frozenset[str]:
        return frozenset(NAMED.get(self.name, NAMED[GENERIC])[0])

    def edits(self) -> str:
        """This spec's features as edits of its CPU name's own (`+a,-b`)."""
        base = self.base_features()
        plus = [f"+{f}" for f in KNOWN_FEATURES if f in self.features - base]
        minus = [f"-{f}" for f in KNOWN_FEATURES if f in base - self.features]
        return ",".join(plus + minus)

    def llvm_features(self) -> str:
        """Every known feature, on or off, as LLVM's target machine takes them."""
        return ",".join(
            ("+" if f in self.features else "-") + f for f in KNOWN_FEATURES
        )

    def __str__(self) -> str:
        isa = " ".join(f for f in KNOWN_FEATURES if f in self.features) or "baseline"
        cores = f", {self.cores} cores" if self.cores else ""
        return (
            f"{self.name}: {isa}; {self.vector_registers} × {self.vector_bits}-bit "
            f"vector registers ({self.lanes()} f32 lanes), {self.mask_registers} mask "
            f"registers; L1d {_size(self.l1d)}, L2 {_size(self.l2)} per core, "
            f"L3 {_size(self.l3)}{cores}"
        )

    # -- construction --------------------------------------------------------------
    @staticmethod
    def named(name: str, edits: str = "") -> CpuSpec:
        """A CPU by LLVM name (`NAMED`), features edited by `edits`."""
        if name not in NAMED and name == host().name:
            base = CpuSpec(name, frozenset(NAMED[GENERIC][0]))
            return replace(host(), features=apply_edits(base.features, edits))
        if name not in NAMED:
            raise SmeltError(
                f"unknown CPU '{name}': choose 'host' or one of {', '.join(NAMED)}"
                " (feature edits may follow: znver5,-avx512f)"
            )
        features, l1d, l2, l3 = NAMED[name]
        return CpuSpec(name, apply_edits(frozenset(features), edits), l1d, l2, l3)

    @staticmethod
    def parse(text: str) -> CpuSpec:
        """`host` or an LLVM CPU name, optionally followed by `,+feat,-feat…`."""
        name, _, edits = text.strip().partition(",")
        if name == "host":
            return replace(host(), features=apply_edits(host().features, edits))
        return CpuSpec.named(name, edits)

    def to_attr(self) -> CpuTargetAttr:
        from smelt.dialects.target import CpuTargetAttr

        return CpuTargetAttr(
            self.name, self.llvm_features(), self.l1d, self.l2, self.l3, self.cores
        )

    @staticmethod
    def from_attr(attr: CpuTargetAttr) -> CpuSpec:
        base = frozenset(NAMED.get(attr.cpu.data, NAMED[GENERIC])[0])
        return CpuSpec(
            attr.cpu.data,
            apply_edits(base, attr.features.data),
            attr.l1d.data,
            attr.l2.data,
            attr.l3.data,
            attr.cores.data,
        )


def _size(n: int) -> str:
    if n >= _M and n % _M == 0:
        return f"{n // _M} MiB"
    return f"{n // _K} KiB" if n % _K == 0 else f"{n} B"


DEFAULT = CpuSpec.named("x86-64-v3")
"""What a pass sizes for when the module carries no target (deterministic IR tests)."""


@cache
def host() -> CpuSpec:
    """This machine: LLVM's host CPU name and features, caches from /sys, cores."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    found = llvm.get_host_cpu_features()
    features = frozenset(f for f in KNOWN_FEATURES if found.get(f, False))
    name = llvm.get_host_cpu_name()
    _, l1d, l2, l3 = NAMED.get(name, NAMED[GENERIC])
    caches = host_caches()
    return CpuSpec(
        name,
        features,
        caches.get("L1d", l1d),
        caches.get("L2", l2),
        caches.get("L3", l3),
        len(os.sched_getaffinity(0)),
    )


def host_caches(root: str = "/sys/devices/system/cpu/cpu0/cache") -> dict[str, int]:
    """Data / unified cache sizes of cpu0 by level ("L1d", "L2", "L3"), from sysfs."""
    sizes: dict[str, int] = {}
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return sizes
    for entry in entries:
        try:
            with open(os.path.join(root, entry, "level")) as f:
                level = int(f.read())
            with open(os.path.join(root, entry, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(root, entry, "size")) as f:
                text = f.read().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        unit = {"K": _K, "M": _M}.get(text[-1:], 1)
        digits = text.rstrip("KM")
        if digits.isdigit():
            sizes["L1d" if level == 1 else f"L{level}"] = int(digits) * unit
    return sizes


def host_lacks(spec: CpuSpec) -> list[str]:
    """Features `spec` uses that this machine does not have."""
    here = host().features
    return [f for f in KNOWN_FEATURES if f in spec.features and f not in here]


def of_module(module: ModuleOp) -> CpuSpec:
    """The CPU a module is compiled for: its `#target.cpu`, else `DEFAULT`."""
    from smelt.dialects.target import cpu_target

    attr = cpu_target(module)
    return DEFAULT if attr is None else CpuSpec.from_attr(attr)
