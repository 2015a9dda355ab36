"""Progress of a long compile on a terminal: the driver's stages (import, graph,
loop, target, runtime) on one status line that a ticker keeps current.

`driver.compile(progress=...)` reports to a `Progress` (the base class shows
nothing); the CLI hands it a `TerminalProgress` when stderr is a terminal and
`-q` is not given (`terminal_progress`). Nothing here changes a build.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.passes import ModulePass

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


class Progress:
    """What the driver reports, here ignored: a stage starts (`total` steps, 0 if
    unknown), a step of it starts; `close` ends the display (its owner calls it,
    also when the compile failed)."""

    def stage(self, name: str, total: int = 0) -> None:
        pass

    def step(self, detail: str) -> None:
        pass

    def close(self) -> None:
        pass

    def callback(
        self,
        previous: ModulePass | None,
        module: ModuleOp,
        following: ModulePass | None,
    ) -> None:
        """A pass pipeline's callback: each pass is a step as it starts."""
        if following is not None:
            self.step(following.name)


SILENT = Progress()


class TerminalProgress(Progress):
    """One status line on `stream`, redrawn by a daemon thread every `tick`
    seconds so that the clock moves during a long stage (LLVM codegen):

        ⠹ light_resnet50.onnx  [3/5 loop] 14/22 loop-unroll  4.1 s

    `close` erases the line; the caller prints its own summary."""

    STAGES = ("import", "graph", "loop", "target", "runtime")  # compiler.stages

    def __init__(
        self, title: str = "", stream: IO[str] | None = None, tick: float = 0.2
    ) -> None:
        self.title = title
        self.stream = stream if stream is not None else sys.stderr
        self._start = time.perf_counter()
        self._stage, self._total, self._done, self._detail = "", 0, 0, ""
        self._frame = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(tick,), daemon=True)
        self._thread.start()

    def stage(self, name: str, total: int = 0) -> None:
        with self._lock:
            self._stage, self._total, self._done, self._detail = name, total, 0, ""
        self._draw()

    def step(self, detail: str) -> None:
        with self._lock:
            self._done += 1
            self._detail = detail
        self._draw()

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        with self._lock:
            self.stream.write("\r\033[K")
            self.stream.flush()

    def line(self) -> str:
        """The status line as it is drawn now."""
        stage = self._stage
        if stage in self.STAGES:
            stage = f"{self.STAGES.index(stage) + 1}/{len(self.STAGES)} {stage}"
        steps = f" {self._done}/{self._total}" if self._total else ""
        detail = f" {self._detail}" if self._detail else ""
        seconds = time.perf_counter() - self._start
        title = f"{self.title}  " if self.title else ""
        utf = "utf" in str(getattr(self.stream, "encoding", "")).lower()
        spinner = SPINNER if utf else "|/-\\"
        spin = spinner[self._frame % len(spinner)]
        return f"{spin} {title}[{stage}]{steps}{detail}  {seconds:.1f} s"

    def _draw(self) -> None:
        with self._lock:
            if self._stop.is_set():
                return
            self._frame += 1
            width = shutil.get_terminal_size().columns - 1  # a wrapped line stays
            self.stream.write("\r\033[K" + self.line()[:width])
            self.stream.flush()

    def _run(self, tick: float) -> None:
        while not self._stop.wait(tick):
            self._draw()


def terminal_progress(
    title: str = "", quiet: bool = False, stream: IO[str] | None = None
) -> TerminalProgress | None:
    """A TerminalProgress on `stream` (stderr) when it is a terminal and not
    `quiet`; None (no progress shown) otherwise."""
    stream = stream if stream is not None else sys.stderr
    if quiet or not getattr(stream, "isatty", lambda: False)():
        return None
    return TerminalProgress(title, stream)


@contextmanager
def shown(title: str = "", quiet: bool = False) -> Iterator[Progress]:
    """`terminal_progress(title, quiet)` (or SILENT), closed on the way out."""
    progress = terminal_progress(title, quiet) or SILENT
    try:
        yield progress
    finally:
        progress.close()
