"""Where `smelt explore` runs its candidates: an `Executor` yields one record per
candidate as each finishes. Two implementations:

- `LocalExecutor` (default): worker processes on this machine, each pinned to a
  physical core of its own, so that no two measurements share a core; one core is
  left to the calling process (2 cores: 1 worker).
- `RayExecutor`: Ray tasks (`ray.init()` here, or an existing cluster's address),
  one CPU each, for searches larger than one machine.

A worker that dies (a native crash in generated code) costs only its candidate,
which is recorded as `crashed`.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from smelt.compiler.explore_eval import Job, evaluate, record
from smelt.compiler.explore_space import Candidate
from smelt.errors import SmeltError

CRASHED = (
    "the worker process died while compiling or running this candidate "
    "(a native crash in generated code?)"
)


class Executor:
    """Runs candidates: `results` yields their records in completion order."""

    name = "executor"
    workers = 1

    def describe(self) -> str:
        return self.name

    def results(self, job: Job, candidates: Sequence[Candidate]) -> Iterator[dict]:
        raise NotImplementedError

    def close(self) -> None:
        pass


def physical_cores() -> list[int]:
    """One logical CPU per physical core that this process may run on (Linux
    topology; elsewhere every CPU counts as a core)."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return list(range(os.cpu_count() or 1))
    first: dict[object, int] = {}
    for cpu in allowed:
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{topology}/physical_package_id") as a, open(
                f"{topology}/core_id"
            ) as b:
                key: object = (a.read().strip(), b.read().strip())
        except OSError:
            key = cpu
        first.setdefault(key, cpu)
    return sorted(first.values())


# The worker process's job and core (set once by `_start_worker`).
_WORKER_JOB: list[Job] = []


def _start_worker(job: Job, cores) -> None:
    _WORKER_JOB[:] = [job]
    if cores is not None:
        os.sched_setaffinity(0, {cores.get()})


def _evaluate_in_worker(candidate: Candidate) -> dict:
    return evaluate(_WORKER_JOB[0], candidate)


class LocalExecutor(Executor):
    """`workers` processes (default: one per physical core but one), each pinned
    to its own core; more workers than cores are not pinned (and say so)."""

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        cores = physical_cores()
        self.workers = workers or max(1, len(cores) - 1)
        if self.workers < 1:
            raise SmeltError(f"--workers must be at least 1, not {self.workers}")
        # the last cores: the first one stays with this process and the OS
        self.cores = cores[::-1][: self.workers] if self.workers <= len(cores) else []
        self.total_cores = len(cores)

    def describe(self) -> str:
        if not self.cores:
            return (
                f"local: {self.workers} worker processes on {self.total_cores} "
                "cores, not pinned: measurements share cores"
            )
        return (
            f"local: {self.workers} timing worker process"
            f"{'es' if self.workers > 1 else ''}, each pinned to its own core "
            f"(cpu {', '.join(map(str, self.cores))}) of {self.total_cores} physical "
            "cores: one measurement per core"
        )

    def _pool(self, job: Job) -> ProcessPoolExecutor:
        context = multiprocessing.get_context("spawn")  # no fork of a JIT's threads
        cores = None
        if self.cores:
            cores = context.Queue()
            for core in self.cores:
                cores.put(core)
        return ProcessPoolExecutor(
            self.workers, context, initializer=_start_worker, initargs=(job, cores)
        )

    def results(self, job: Job, candidates: Sequence[Candidate]) -> Iterator[dict]:
        queue = deque(candidates)
        broke: dict[int, int] = {}  # candidate → pools that broke while it ran
        pool = self._pool(job)
        pending = {}
        try:
            while queue or pending:
                while queue and len(pending) < self.workers:
                    candidate = queue.popleft()
                    pending[pool.submit(_evaluate_in_worker, candidate)] = candidate
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                broken = False
                for future in done:
                    candidate = pending.pop(future)
                    try:
                        yield future.result()
                    except BrokenProcessPool:
                        broken = True
                        # alone in the pool, or broken twice: this one crashed
                        broke[candidate.index] = broke.get(candidate.index, 0) + 1
                        if self.workers == 1 or broke[candidate.index] >= 2:
                            yield record(candidate, "crashed", CRASHED)
                        else:
                            queue.appendleft(candidate)
                if broken:
                    for future, candidate in pending.items():
                        queue.appendleft(candidate)
                    pending.clear()
                    pool.shutdown(wait=False, cancel_futures=True)
                    pool = self._pool(job)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def _evaluate_on_ray(job: Job, candidate: Candidate) -> dict:
    return evaluate(job, candidate)


class RayExecutor(Executor):
    """Ray tasks of one CPU each: on a local `ray.init()` with `workers` CPUs
    (default as LocalExecutor's), or on the cluster at `address` (each node then
    runs as many measurements at once as it has CPUs: start its raylet with
    --num-cpus equal to its physical cores)."""

    name = "ray"

    def __init__(self, workers: int | None = None, address: str | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise SmeltError(
                "--executor ray needs Ray: pip install 'smelt[explore]' (or ray)"
            ) from None
        self._ray = ray
        self.address = address
        self.workers = workers or max(1, len(physical_cores()) - 1)
        self._started = not ray.is_initialized()
        if self._started:
            options = {"address": address} if address else {
                "num_cpus": self.workers, "include_dashboard": False
            }  # fmt: skip
            ray.init(log_to_driver=False, logging_level="ERROR", **options)

    def describe(self) -> str:
        cpus = int(self._ray.cluster_resources().get("CPU", 0))
        where = f"cluster {self.address}" if self.address else "local ray.init()"
        plural = "s" if cpus != 1 else ""
        return f"ray: {where}, {cpus} CPU{plural}, one CPU per candidate"

    def results(self, job: Job, candidates: Sequence[Candidate]) -> Iterator[dict]:
        ray = self._ray
        remote = ray.remote(num_cpus=1, max_retries=0)(_evaluate_on_ray)
        job_ref = ray.put(job)
        pending = {remote.remote(job_ref, c): c for c in candidates}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                candidate = pending.pop(ref)
                try:
                    yield ray.get(ref)
                except ray.exceptions.RayError as e:
                    crashed = isinstance(e, ray.exceptions.WorkerCrashedError)
                    why = CRASHED if crashed else f"ray: {type(e).__name__}: {e}"
                    yield record(candidate, "crashed", why.splitlines()[0])

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()


def make_executor(
    kind: str, workers: int | None = None, address: str | None = None
) -> Executor:
    """The executor named `kind` ("local" or "ray")."""
    if kind == "local":
        if address:
            raise SmeltError("--ray-address goes with --executor ray")
        return LocalExecutor(workers)
    if kind == "ray":
        return RayExecutor(workers, address)
    raise SmeltError(f"unknown executor '{kind}': choose local or ray")
