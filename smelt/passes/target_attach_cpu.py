"""target-attach-cpu: records the CPU a module is compiled for as `#target.cpu`."""

from __future__ import annotations

from dataclasses import dataclass, replace

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from smelt.dialects import target
from smelt.errors import SmeltError
from smelt.targets.cpu_spec import CpuSpec, apply_edits


@dataclass(frozen=True)
class TargetAttachCpuPass(ModulePass):
    """Attaches the CPU target to the module (as MLIR's `nvvm-attach-target`).

    `cpu` is an LLVM CPU name (`x86-64-v3`, `x86-64-v4`, `znver5`,
    `skylake-avx512`, …) or `host` (this machine, read when the pass runs: a
    pipeline meant to replay elsewhere names the CPU, as the presets do);
    `features` edits its features LLVM-style (`+avx512f,-avx512vnni`); `l1d`,
    `l2`, `l3` (bytes) and `cores` replace the CPU's own where not 0. Any level;
    the module gets `target.spec = #target.cpu<...>`, replacing one it had.
    `loop-schedule`, `loop-vectorize` and the llvm backend read it.

        builtin.module {...}
      → builtin.module attributes {target.spec = #target.cpu<"x86-64-v3",
                                   "+sse4.2,+avx,+avx2,...", 32768, 524288, ...>} {...}
    """

    name = "target-attach-cpu"

    cpu: str = "host"
    features: str = ""
    l1d: int = 0
    l2: int = 0
    l3: int = 0
    cores: int = 0

    def spec(self) -> CpuSpec:
        base = CpuSpec.parse(self.cpu)
        return replace(
            base,
            features=apply_edits(base.features, self.features),
            l1d=self.l1d or base.l1d,
            l2=self.l2 or base.l2,
            l3=self.l3 or base.l3,
            cores=self.cores or base.cores,
        )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        try:
            spec = self.spec()
        except SmeltError as e:  # a user error (the pipeline text), not a crash
            raise SmeltError(f"target-attach-cpu: {e}") from None
        target.attach(op, spec.to_attr())


def attach_pass(spec: CpuSpec) -> str:
    """The pipeline text of a `target-attach-cpu` that attaches exactly `spec`
    on any machine (the name, its feature edits, sizes that differ from the
    name's own)."""
    named = CpuSpec.named(spec.name)
    options = [f'cpu="{spec.name}"']
    if edits := spec.edits():
        options.append(f'features="{edits}"')
    for key in ("l1d", "l2", "l3", "cores"):
        value = getattr(spec, key)
        if value != getattr(named, key):
            options.append(f"{key}={value}")
    return f"{TargetAttachCpuPass.name}{{{' '.join(options)}}}"

