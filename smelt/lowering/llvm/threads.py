"""A thread pool written in LLVM IR, for loops marked `loop.threads`.

The compiled model stays one native call: `smelt_main` receives a pool that
lives as long as the `NativeProgram` (`jit.py` starts it once and stops it when
the program is collected). Each marked loop is outlined into a task
`void(ptr ctx, i64 begin, i64 end)` over a range of its iterations and handed to

    void smelt.parallel_for(ptr pool, ptr task, ptr ctx, i64 trips)

which splits the iterations into chunks (a few per thread), publishes the task
and runs chunks itself until none is left, then waits for the chunks that workers
took. Everything a worker needs to take a chunk is one 64-bit *claim word*:
the task's generation (high half) and the next chunk (low half); a worker takes
chunk c of generation g with one compare-and-swap, so a worker that wakes up late,
even after the task is over, can never run a chunk twice or of the wrong task, and
the caller never waits for a worker that took nothing: tiny tasks on a busy machine
cost what they cost serially. Workers spin on the claim word for a while (the next
parallel loop usually follows within microseconds, the next run within
milliseconds), then sleep on a condition variable, so an idle program costs no
CPU once `WORKER_SPINS` is over. A null pool, or one of one thread, runs the task
serially.

The pool is one block of memory that the caller allocates (`pool_bytes`):

    0   claim word i64: generation << 32 | next chunk (own cache line)
    64  task ptr   72 ctx ptr   80 trips i64   88 chunks i64   96 stop i32
    100 threads i32
    128 chunks finished i64 (own cache line)
    192 pthread mutex (128 bytes)           320 pthread condition (128 bytes)
    448 pthread attributes (128 bytes)
    576 per thread: pthread_t, pool ptr, index (24 bytes each)

This module builds the work loop, the worker and `smelt.parallel_for`;
`threads_lifecycle.py` the pool's start and stop and `define_pool`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache

import llvmlite.binding as llvm
from llvmlite import ir

from smelt.lowering.llvm.types import I32, I64, PTR, VOID, constant

PARALLEL_FOR = "smelt.parallel_for"

TASK = ir.FunctionType(VOID, [PTR, I64, I64])
"""An outlined parallel loop: void(ptr ctx, i64 begin, i64 end), iterations."""

CLAIM, FN, CTX, TRIPS, CHUNKS, STOP_FLAG, THREADS = 0, 64, 72, 80, 88, 96, 100
FINISHED, MUTEX, COND, ATTR, RECORDS, RECORD_BYTES = 128, 192, 320, 448, 576, 24
STACK_BYTES = 64 << 20
"""Worker stacks: tasks keep their scratch buffers (memref.alloca) on the stack,
and a reservation costs only address space until it is touched."""
CHUNKS_PER_THREAD = 8  # finer chunks: less waiting on a descheduled thread
WORKER_SPINS = 1 << 20
"""Pause loops before an idle worker sleeps: about 30 ms on Zen 5 (27 ns per
`pause`), 3-40 ms elsewhere; onnxruntime's workers spin about 40 ms after a run
here, OpenMP's 200 ms. With 2^14 (0.5 ms) the worker slept between two runs a few
ms apart, and the runs after a wake-up went at one-thread speed for about 10 ms
(its core clocked down while idle): the int8 GELU MLP at 2 threads took 1.6 ms
instead of 1.1 in benchmarks/quant.py's interleaved blocks."""
SPIN_TICKS = 1 << 26
"""Where the CPU has a time-stamp counter (x86), the spin also ends after this
many ticks (17-34 ms at a 2-4 GHz counter): on a busy machine each sched_yield
may give the core away for milliseconds, and 2^20 pauses would last seconds."""
YIELD_EVERY = 256  # pause loops between sched_yield calls of a waiting caller
IDLE_YIELD_EVERY = 1 << 14
"""Pause loops between sched_yield calls of an idle worker (about 0.45 ms on Zen
5). With 256 (7 us) the idle worker's system calls slowed the caller's serial
kernels on the other core: light_shufflenet's 3x3 pads took 0.12-0.18 ms at 2
threads instead of 0.007-0.036 at 1 (0.017-0.054 without yields, 0.021-0.072
with 2^14; measured per kernel, in one process against the 1-thread model)."""


class _Callee:
    """A task pointer seen as a callee: llvmlite reads `function_type` from it."""

    function_type = TASK

    def __init__(self, pointer: ir.Value):
        self.pointer = pointer
        self.type = pointer.type

    def get_reference(self) -> str:
        return self.pointer.get_reference()


def _indirect_call(b: ir.IRBuilder, task: ir.Value, args: list[ir.Value]) -> None:
    b.call(_Callee(task), args)


def pool_bytes(threads: int) -> int:
    """The size of the memory block of a pool of `threads` threads."""
    return RECORDS + RECORD_BYTES * max(1, threads)


_LIBC = {
    "pthread_create": (I32, [PTR, PTR, PTR, PTR]),
    "pthread_join": (I32, [I64, PTR]),
    "pthread_attr_init": (I32, [PTR]),
    "pthread_attr_setstacksize": (I32, [PTR, I64]),
    "pthread_attr_destroy": (I32, [PTR]),
    "pthread_mutex_init": (I32, [PTR, PTR]),
    "pthread_mutex_lock": (I32, [PTR]),
    "pthread_mutex_unlock": (I32, [PTR]),
    "pthread_mutex_destroy": (I32, [PTR]),
    "pthread_cond_init": (I32, [PTR, PTR]),
    "pthread_cond_wait": (I32, [PTR, PTR]),
    "pthread_cond_broadcast": (I32, [PTR]),
    "pthread_cond_destroy": (I32, [PTR]),
    "sched_yield": (I32, []),
}


@cache
def register_symbols() -> None:
    """Makes the pthread functions that the pool calls known to the JIT linker."""
    libs = [ctypes.CDLL(None)]
    path = ctypes.util.find_library("pthread")
    if path:
        libs.append(ctypes.CDLL(path))
    for symbol in _LIBC:
        for lib in libs:
            fn = getattr(lib, symbol, None)
            address = ctypes.cast(fn, ctypes.c_void_p).value if fn else None
            if address:
                llvm.add_symbol(symbol, address)
                break


class Pool:
    """Builds the pool's functions into one LLVM module."""

    def __init__(self, module: ir.Module):
        self.module = module
        self.libc = {}
        for name, (ret, args) in _LIBC.items():
            fn = module.globals.get(name) or ir.Function(
                module, ir.FunctionType(ret, args), name
            )
            self.libc[name] = fn
        # the spin-wait hint of the CPU: x86 `pause`, arm64 `yield` (hint #1)
        triple = module.triple or ""
        self.pause_hint: tuple[ir.Function, list[ir.Value]] | None = None
        self.clock: ir.Function | None = None  # the time-stamp counter (x86)
        if triple.startswith(("x86_64", "i686", "i386")):
            fn = ir.Function(module, ir.FunctionType(VOID, []), "llvm.x86.sse2.pause")
            self.pause_hint = (fn, [])
            self.clock = module.globals.get("llvm.readcyclecounter") or ir.Function(
                module, ir.FunctionType(I64, []), "llvm.readcyclecounter"
            )
        elif triple.startswith(("aarch64", "arm64")):
            fn = ir.Function(module, ir.FunctionType(VOID, [I32]), "llvm.aarch64.hint")
            self.pause_hint = (fn, [constant(I32, 1)])

    def function(self, name: str, ty: ir.FunctionType, internal: bool = True):
        fn = ir.Function(self.module, ty, name)
        fn.attributes.add("nounwind")
        if internal:
            fn.linkage = "internal"
        return fn, ir.IRBuilder(fn.append_basic_block("entry"))

    @staticmethod
    def at(b: ir.IRBuilder, pool: ir.Value, offset: ir.Value | int) -> ir.Value:
        index = constant(I64, offset) if isinstance(offset, int) else offset
        return b.gep(pool, [index], inbounds=True, source_etype=ir.IntType(8))

    def call(self, b: ir.IRBuilder, name: str, *args: ir.Value) -> ir.Value:
        return b.call(self.libc[name], list(args))

    # Task fields are read by workers that may race with the next task's writes
    # (the claim word then tells them to discard what they read): atomic, relaxed.
    def read(self, b: ir.IRBuilder, pool: ir.Value, offset: int) -> ir.Value:
        return b.load_atomic(self.at(b, pool, offset), "monotonic", 8, typ=I64)

    def write(self, b: ir.IRBuilder, pool: ir.Value, offset: int, value: ir.Value):
        b.atomic_rmw("xchg", self.at(b, pool, offset), value, "monotonic")

    def pause(self, b: ir.IRBuilder) -> None:
        if self.pause_hint is not None:
            b.call(*self.pause_hint)

    def publish_next(self, b: ir.IRBuilder, pool: ir.Value, old: ir.Value) -> ir.Value:
        """Publishes the generation after the one in claim word `old` (chunk 0 of
        it next) and returns that generation."""
        generation = b.add(b.lshr(old, constant(I64, 32)), constant(I64, 1))
        generation = b.and_(generation, constant(I64, 0xFFFFFFFF))
        self.publish(b, pool, b.shl(generation, constant(I64, 32)))
        return generation

    def publish(self, b: ir.IRBuilder, pool: ir.Value, word: ir.Value) -> None:
        """Stores a new claim word (after what was stored before it) and wakes
        sleeping workers; spinning ones see the word change."""
        mutex, cond = self.at(b, pool, MUTEX), self.at(b, pool, COND)
        b.atomic_rmw("xchg", self.at(b, pool, CLAIM), word, "acq_rel")
        self.call(b, "pthread_mutex_lock", mutex)
        self.call(b, "pthread_cond_broadcast", cond)
        self.call(b, "pthread_mutex_unlock", mutex)

    # --- functions ------------------------------------------------------------

    def define_work(self) -> ir.Function:
        """void work(pool, i64 generation): takes and runs chunks of that
        generation's task until none is left (or the task is another one)."""
        fn, b = self.function(
            "smelt.pool.work", ir.FunctionType(VOID, [PTR, I64]), internal=True
        )
        pool, generation = fn.args
        pool.name, generation.name = "pool", "generation"
        claim = self.at(b, pool, CLAIM)
        head = fn.append_basic_block("claim")
        take = fn.append_basic_block("take")
        run = fn.append_basic_block("run")
        done = fn.append_basic_block("done")
        b.branch(head)

        b.position_at_end(head)
        word = b.load_atomic(claim, "acquire", 8, typ=I64)
        same = b.icmp_unsigned("==", b.lshr(word, constant(I64, 32)), generation)
        chunk = b.and_(word, constant(I64, 0xFFFFFFFF))
        chunks = self.read(b, pool, CHUNKS)
        left = b.icmp_unsigned("<", chunk, chunks)
        b.cbranch(b.and_(same, left), take, done)

        # the task fields were published before this generation's word, and stay
        # until all its chunks finish, which needs this one: read them, then claim
        b.position_at_end(take)
        task = b.inttoptr(self.read(b, pool, FN), PTR)
        ctx = b.inttoptr(self.read(b, pool, CTX), PTR)
        trips = self.read(b, pool, TRIPS)
        swap = b.cmpxchg(
            claim, word, b.add(word, constant(I64, 1)), "acq_rel", "acquire"
        )
        b.cbranch(b.extract_value(swap, 1), run, head)

        b.position_at_end(run)
        begin = b.udiv(b.mul(chunk, trips), chunks)
        end = b.udiv(b.mul(b.add(chunk, constant(I64, 1)), trips), chunks)
        _indirect_call(b, task, [ctx, begin, end])
        b.atomic_rmw("add", self.at(b, pool, FINISHED), constant(I64, 1), "release")
        b.branch(head)

        b.position_at_end(done)
        b.ret_void()
        return fn

    def define_worker(self, work: ir.Function) -> ir.Function:
        """The thread body: wait for a new generation, work on it, repeat."""
        fn, b = self.function("smelt.pool.worker", ir.FunctionType(PTR, [PTR]))
        (record,) = fn.args
        record.name = "record"
        pool = b.load(record, typ=PTR)
        entry = b.block
        wait = fn.append_basic_block("wait")
        spin = fn.append_basic_block("spin")
        spin_next = fn.append_basic_block("spin.next")
        spin_check_yield = fn.append_basic_block("spin.check_yield")
        spin_yield = fn.append_basic_block("spin.yield")
        sleep = fn.append_basic_block("sleep")
        sleep_check = fn.append_basic_block("sleep.check")
        sleep_wait = fn.append_basic_block("sleep.wait")
        sleep_done = fn.append_basic_block("sleep.done")
        got = fn.append_basic_block("got")
        task = fn.append_basic_block("task")
        leave = fn.append_basic_block("leave")
        claim = self.at(b, pool, CLAIM)
        b.branch(wait)

        def generation(name: str) -> ir.Value:
            word = b.load_atomic(claim, "acquire", 8, typ=I64)
            return b.lshr(word, constant(I64, 32), name=name)

        b.position_at_end(wait)
        seen = b.phi(I64, "seen")
        # generation 0 is the pool's start: a worker that gets the CPU only after
        # tasks (or the stop) were published still sees them as new
        seen.add_incoming(constant(I64, 0), entry)
        began = b.call(self.clock, []) if self.clock is not None else None
        b.branch(spin)

        b.position_at_end(spin)
        k = b.phi(I64, "k")
        k.add_incoming(constant(I64, 0), wait)
        g = generation("g")
        b.cbranch(b.icmp_unsigned("!=", g, seen), got, spin_next)

        b.position_at_end(spin_next)
        self.pause(b)
        k_next = b.add(k, constant(I64, 1))
        k.add_incoming(k_next, spin_check_yield)
        k.add_incoming(k_next, spin_yield)
        more = b.icmp_unsigned("<", k_next, constant(I64, WORKER_SPINS))
        b.cbranch(more, spin_check_yield, sleep)

        # on a busy machine a spinning worker may hold the core that the caller
        # needs: every so often give it away
        b.position_at_end(spin_check_yield)
        often = b.and_(k_next, constant(I64, IDLE_YIELD_EVERY - 1))
        b.cbranch(b.icmp_unsigned("==", often, constant(I64, 0)), spin_yield, spin)
        b.position_at_end(spin_yield)
        self.call(b, "sched_yield")
        if began is None:
            b.branch(spin)
        else:  # on a busy machine yields take long: spin SPIN_TICKS at most
            spent = b.sub(b.call(self.clock, []), began)
            late = b.icmp_unsigned(">", spent, constant(I64, SPIN_TICKS))
            b.cbranch(late, sleep, spin)

        b.position_at_end(sleep)
        mutex, cond = self.at(b, pool, MUTEX), self.at(b, pool, COND)
        self.call(b, "pthread_mutex_lock", mutex)
        b.branch(sleep_check)
        b.position_at_end(sleep_check)
        g_slept = generation("g.slept")
        b.cbranch(b.icmp_unsigned("!=", g_slept, seen), sleep_done, sleep_wait)
        b.position_at_end(sleep_wait)
        self.call(b, "pthread_cond_wait", cond, mutex)
        b.branch(sleep_check)
        b.position_at_end(sleep_done)
        self.call(b, "pthread_mutex_unlock", mutex)
        b.branch(got)

        b.position_at_end(got)
        new = b.phi(I64, "generation")
        new.add_incoming(g, spin)
        new.add_incoming(g_slept, sleep_done)
        stop = b.load_atomic(self.at(b, pool, STOP_FLAG), "acquire", 4, typ=I32)
        b.cbranch(b.icmp_unsigned("!=", stop, constant(I32, 0)), leave, task)

        b.position_at_end(task)
        b.call(work, [pool, new])
        seen.add_incoming(new, task)
        b.branch(wait)

        b.position_at_end(leave)
        b.ret(ir.Constant(PTR, None))
        return fn

    def define_parallel_for(self, work: ir.Function) -> ir.Function:
        fn, b = self.function(PARALLEL_FOR, ir.FunctionType(VOID, [PTR, PTR, PTR, I64]))
        pool, task, ctx, trips = fn.args
        pool.name, task.name, ctx.name, trips.name = "pool", "task", "ctx", "trips"
        serial = fn.append_basic_block("serial")
        check = fn.append_basic_block("check")
        dispatch = fn.append_basic_block("dispatch")
        wait = fn.append_basic_block("wait")
        spin = fn.append_basic_block("spin")
        relax = fn.append_basic_block("yield")
        done = fn.append_basic_block("done")
        b.cbranch(b.icmp_unsigned("==", pool, ir.Constant(PTR, None)), serial, check)

        b.position_at_end(serial)
        _indirect_call(b, task, [ctx, constant(I64, 0), trips])
        b.ret_void()

        b.position_at_end(check)
        threads = b.zext(b.load(self.at(b, pool, THREADS), typ=I32), I64)
        few = b.or_(
            b.icmp_unsigned("<=", threads, constant(I64, 1)),
            b.icmp_unsigned("<=", trips, constant(I64, 1)),
        )
        b.cbranch(few, serial, dispatch)

        # only this thread writes the task fields and the generation. First the
        # claim word is closed (next chunk = all ones, same generation): a worker
        # that read the old word and then a new field fails its compare-and-swap,
        # so it never runs a chunk of a half-written task (or counts one twice)
        b.position_at_end(dispatch)
        claim = self.at(b, pool, CLAIM)
        old = b.load_atomic(claim, "monotonic", 8, typ=I64)
        closed = b.or_(old, constant(I64, 0xFFFFFFFF))
        b.atomic_rmw("xchg", claim, closed, "acq_rel")
        wanted = b.mul(threads, constant(I64, CHUNKS_PER_THREAD))
        chunks = b.select(b.icmp_unsigned("<", trips, wanted), trips, wanted)
        self.write(b, pool, FN, b.ptrtoint(task, I64))
        self.write(b, pool, CTX, b.ptrtoint(ctx, I64))
        self.write(b, pool, TRIPS, trips)
        self.write(b, pool, CHUNKS, chunks)
        finished = self.at(b, pool, FINISHED)
        b.atomic_rmw("xchg", finished, constant(I64, 0), "monotonic")
        generation = self.publish_next(b, pool, old)
        b.call(work, [pool, generation])
        b.branch(wait)

        b.position_at_end(wait)
        k = b.phi(I64, "k")
        k.add_incoming(constant(I64, 0), dispatch)
        count = b.load_atomic(finished, "acquire", 8, typ=I64)
        b.cbranch(b.icmp_unsigned("==", count, chunks), done, spin)

        b.position_at_end(spin)
        self.pause(b)
        k_next = b.add(k, constant(I64, 1))
        k.add_incoming(k_next, spin)
        k.add_incoming(k_next, relax)
        # a worker descheduled in the middle of a chunk gets a core sooner
        often = b.and_(k_next, constant(I64, YIELD_EVERY - 1))
        b.cbranch(b.icmp_unsigned("==", often, constant(I64, 0)), relax, wait)

        b.position_at_end(relax)
        self.call(b, "sched_yield")
        b.branch(wait)

        b.position_at_end(done)
        b.ret_void()
        return fn
