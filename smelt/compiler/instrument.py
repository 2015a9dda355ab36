"""Pass instrumentation: mlir-opt's IR dumps, pass timing and statistics, and the
crash reproducer, shared by `smelt.compile`, `smelt run / report` and `smelt-opt`.

`DumpOptions` says what to show; an `Instrumentation` built from it is the
callback that `runner.lower` calls between passes. Nothing here changes a build.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import IO, Any

from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, ModuleOp
from xdsl.passes import ModulePass
from xdsl.printer import Printer
from xdsl.utils.arg_spec import parse_pipeline

from smelt.compiler.stats import stats
from smelt.dialects.graph_base import FullConstantsPrinter
from smelt.errors import SmeltError


@dataclass(frozen=True)
class DumpOptions:
    """What to show of a pass pipeline as it runs; the defaults show nothing and
    only keep a reproducer ready in case a pass crashes."""

    print_after_all: bool = False
    print_before: tuple[str, ...] = ()  # pass names
    print_after: tuple[str, ...] = ()
    # print after a pass only when it changed the IR (alone: after every pass)
    print_after_change: bool = False
    dump_dir: str | None = None  # DIR/000-import.mlir, DIR/001-<pass>.mlir, …
    time_passes: bool = False  # a wall-time table on the stream
    time_json: str | None = None  # the per-pass records as JSON
    statistics: bool = False  # ops / kernels / bytes before and after each pass
    print_constants: bool = False  # dumps print large constants in full
    print_debuginfo: bool = False  # dumps print locations (the ONNX node names)
    # driver stages whose result is printed (smelt.compiler.stages: --dump-stage)
    print_stages: tuple[str, ...] = ()
    reproducer: bool = True  # on a crash, write the failing pass's input IR
    reproducer_path: str | None = None  # None: a fresh temporary file

    def quiet(self) -> bool:
        """Shows nothing of the passes or stages (a crash reproducer aside)."""
        return DumpOptions() == replace(
            self, reproducer=True, reproducer_path=None, print_constants=False
        )

    def check(self, known: Sequence[str]) -> None:
        """Refuses pass names that no registered pass has."""
        unknown = sorted(set(self.print_before + self.print_after) - set(known))
        if unknown:
            raise SmeltError(
                f"--print-ir-before/--print-ir-after name unknown passes "
                f"{', '.join(unknown)}: see smelt-opt --help for the pass names"
            )


@dataclass
class PassRecord:
    """One pass run: its position (1-based), name, spec, time and statistics."""

    index: int
    name: str
    spec: str
    seconds: float = 0.0
    changed: bool | None = None  # known with --print-ir-after-change
    before: dict[str, int] | None = None  # stats.Stats fields
    after: dict[str, int] | None = None


def pass_specs(spec: str) -> list[str]:
    """The pipeline `spec` as one spec string per pass (each parses alone)."""
    return [str(p) for p in parse_pipeline(spec)] if spec.strip() else []


def module_text(
    module: ModuleOp, full_constants: bool = False, debuginfo: bool = False
) -> str:
    """`module` as MLIR text; large constants elided unless `full_constants` (an
    elided constant does not parse back); with `debuginfo`, every op's location
    (`loc("node")`: the ONNX nodes it came from)."""
    out = io.StringIO()
    cls = FullConstantsPrinter if full_constants else Printer
    cls(stream=out, print_debuginfo=debuginfo).print_op(module)
    return out.getvalue() + "\n"


def _fingerprint(module: ModuleOp) -> tuple[str, tuple[Any, ...]]:
    """Equal before and after a pass that left `module` alone: the elided text,
    plus the dense constants by identity (the text elides their values)."""
    dense = tuple(
        a for op in module.walk()
        for a in (*op.properties.values(), *op.attributes.values())
        if isinstance(a, DenseIntOrFPElementsAttr)
    )  # fmt: skip
    return module_text(module), dense


def _same(a: tuple[str, tuple[Any, ...]], b: tuple[str, tuple[Any, ...]]) -> bool:
    return a[0] == b[0] and len(a[1]) == len(b[1]) and all(
        x is y for x, y in zip(a[1], b[1], strict=True)
    )


def _stats(module: ModuleOp) -> dict[str, int]:
    return asdict(stats(module))


class Instrumentation:
    """The callback `runner.lower` runs between passes (`start` before the first,
    `finish` after the last, `crashed` when a pass raised a bug)."""

    def __init__(
        self,
        options: DumpOptions | None = None,
        stream: IO[str] | None = None,
        source: Callable[[], ModuleOp] | None = None,
    ) -> None:
        """`source`, when given, rebuilds the pipeline's input (the driver
        re-imports the ONNX model): a crash reproducer is then made from it, and
        no copy of the input is kept while the passes run (a copy holds every
        imported weight alive, doubling the peak memory of a compile)."""
        self.options = options or DumpOptions()
        self._source_factory = source
        self.stream = stream if stream is not None else sys.stderr
        self.records: list[PassRecord] = []
        self.stages: dict[str, float] = {}  # import / target / runtime: driver
        self._passes: list[ModulePass] = []
        self._snapshot: ModuleOp | None = None
        self._source = "input"
        self._last: tuple[str, tuple[Any, ...]] | None = None
        self._clock = 0.0
        self._stats_now: dict[str, int] | None = None
        self.records_done = 0  # passes that finished

    # -- the pipeline's life -------------------------------------------------

    def start(
        self,
        module: ModuleOp,
        spec: str,
        passes: Sequence[ModulePass],
        source: str = "input",
    ) -> None:
        """Before the first pass: `source` names the input in dump files."""
        from smelt.universe import SMELT_UNIVERSE

        self.options.check(list(SMELT_UNIVERSE.all_passes))
        self._passes = list(passes)
        self._source = source
        self.records_done = 0
        specs = pass_specs(spec)
        self.records = [
            PassRecord(i + 1, p.name, s)
            for i, (p, s) in enumerate(zip(self._passes, specs, strict=True))
        ]
        if self.options.reproducer and self._source_factory is None:
            self._snapshot = module.clone()
        if self.options.dump_dir:
            self._make_dump_dir()
            self._dump(0, source, module)
        if self.options.print_after_change:
            self._last = _fingerprint(module)
        self._stats_now = _stats(module) if self.options.statistics else None

    def __call__(
        self,
        previous: ModulePass | None,
        module: ModuleOp,
        following: ModulePass | None,
    ) -> None:
        now = time.perf_counter()
        done = self.records_done
        if previous is not None and done < len(self.records):
            self._after(self.records[done], module, now - self._clock)
            self.records_done = done + 1
        if following is not None:
            if following.name in self.options.print_before:
                self._print("Before", following.name, module)
        self._clock = time.perf_counter()

    def _after(self, record: PassRecord, module: ModuleOp, seconds: float) -> None:
        options = self.options
        record.seconds = seconds
        if options.statistics:
            record.before, record.after = self._stats_now, _stats(module)
            self._stats_now = record.after
        show = options.print_after_all or record.name in options.print_after
        if options.print_after_change:
            now = _fingerprint(module)
            record.changed = not _same(now, self._last)
            self._last = now
            alone = not (options.print_after_all or options.print_after)
            show = (show or alone) and record.changed
        if show:
            self._print("After", record.name, module)
        if options.dump_dir:
            self._dump(record.index, record.name, module)

    def finish(self) -> None:
        """After the last pass: the timing and statistics reports."""
        if self.options.time_passes:
            self.stream.write(self.format_times())
        if self.options.statistics:
            self.stream.write(self.format_statistics())
        if self.options.time_json:
            self.write_json(self.options.time_json)
        self.stream.flush()

    # -- what it shows -------------------------------------------------------

    def _print(self, when: str, name: str, module: ModuleOp) -> None:
        self.stream.write(f"// -----// IR Dump {when} {name} //----- //\n")
        self.stream.write(
            module_text(
                module, self.options.print_constants, self.options.print_debuginfo
            )
        )
        self.stream.flush()

    def _make_dump_dir(self) -> None:
        try:
            os.makedirs(self.options.dump_dir, exist_ok=True)
        except OSError as e:
            raise SmeltError(
                f"cannot create --dump-dir '{self.options.dump_dir}': {e}"
            ) from None

    def _dump(self, index: int, name: str, module: ModuleOp) -> None:
        width = max(3, len(str(len(self.records))))
        path = os.path.join(self.options.dump_dir, f"{index:0{width}d}-{name}.mlir")
        header = f"// {name}" + (
            f": {self.records[index - 1].spec}" if index else "") + "\n"
        try:
            with open(path, "w") as f:
                f.write(header + module_text(
                    module, self.options.print_constants, self.options.print_debuginfo
                ))
        except OSError as e:
            raise SmeltError(f"cannot write the dump '{path}': {e}") from None

    def format_times(self) -> str:
        total = sum(r.seconds for r in self.records) or 1e-12
        lines = [
            "===" + "-" * 70 + "===",
            "  Pass execution time report",
            "===" + "-" * 70 + "===",
            f"  Total pass time: {total:.4f} seconds",
            "",
            f"  {'seconds':>9} {'share':>7}  pass",
        ]
        for r in self.records:
            lines.append(f"  {r.seconds:>9.4f} {r.seconds / total:>7.1%}  {r.spec}")
        for stage, seconds in self.stages.items():
            lines.append(f"  {seconds:>9.4f} {'':>7}  ({stage})")
        return "\n".join(lines) + "\n"

    def format_statistics(self) -> str:
        """Per pass: each count as before→after where the pass changed it."""

        def cell(record: PassRecord, key: str, scale: float = 1.0) -> str:
            digits = 0 if scale == 1.0 else 2
            a, b = (
                f"{s[key] / scale:.{digits}f}" for s in (record.before, record.after)
            )
            return b if a == b else f"{a}→{b}"

        head = f"  {'ops':>11} {'kernels':>11} {'MB written':>13} {'MB read':>13}  pass"
        lines = ["Pass statistics (graph ops or calls, kernels, intermediate "
                 "MB written / read back; before→after where a pass changed them)",
                 head]
        for r in self.records:
            if r.before is None or r.after is None:
                continue
            lines.append(
                f"  {cell(r, 'ops'):>11} {cell(r, 'kernels'):>11} "
                f"{cell(r, 'bytes_written', 1e6):>13} {cell(r, 'bytes_read', 1e6):>13}"
                f"  {r.spec}"
            )
        return "\n".join(lines) + "\n"

    def write_json(self, path: str) -> None:
        data = {
            "total_seconds": sum(r.seconds for r in self.records),
            "stages": self.stages,
            "passes": [asdict(r) for r in self.records],
        }
        try:
            with open(path, "w") as f:
                json.dump(data, f, indent=1)
        except OSError as e:
            raise SmeltError(f"cannot write --time-passes-json '{path}': {e}") from None

    # -- the crash reproducer ------------------------------------------------

    def crashed(self, ctx_factory: Any) -> str:
        """A pass raised a bug: writes its input IR and the rest of the pipeline
        and returns the sentence (with the smelt-opt command) for the error."""
        if not self.options.reproducer or not self.records:
            return ""
        snapshot = self._snapshot
        if snapshot is None and self._source_factory is not None:
            try:
                snapshot = self._source_factory()
            except Exception as e:  # noqa: BLE001 (the crash report still goes out)
                return f"no reproducer written (the input did not rebuild: {e})"
        if snapshot is None:
            return ""
        index = min(self.records_done, len(self.records) - 1)
        module = snapshot.clone()
        try:  # replays the passes before the failing one on a copy of the input
            for p in self._passes[:index]:
                p.apply(ctx_factory(), module)
        except Exception:  # noqa: BLE001 (they did not replay: the whole pipeline)
            module, index = snapshot, 0
        rest = ",".join(r.spec for r in self.records[index:])
        failing = self.records[index].name
        try:
            path = self._write_reproducer(module, rest, failing)
        except OSError as e:
            return f"no reproducer written ({e})"
        return f"reproduce with: smelt-opt {path} -p '{rest}'"

    def _write_reproducer(self, module: ModuleOp, rest: str, failing: str) -> str:
        path = self.options.reproducer_path
        if path is None:
            fd, path = tempfile.mkstemp(prefix="smelt-reproducer-", suffix=".mlir")
            os.close(fd)
        # with locations: the replayed failure names the same ONNX nodes
        text = module_text(module, full_constants=True, debuginfo=True)
        with open(path, "w") as f:
            f.write(f"// smelt crash reproducer: pass {failing} failed on this IR\n")
            f.write(f"// smelt-opt {os.path.basename(path)} -p '{rest}'\n")
            f.write(text)
        return path
