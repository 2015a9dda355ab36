"""A thread pool written in LLVM IR, for loops marked `loop.threads`.

The compiled model stays one native call: `smelt_main` receives a pool that
lives as long as the `NativeProgram` (`jit.py` starts it once and stops it when
the program is collected). Each marked loop is outlined into a task
`void(ptr ctx, i64 begin, i64 end)` over a range of its iterations and handed to

    void smelt.parallel_for(ptr pool, ptr task, ptr ctx, i64 trips)

which publishes the task (a new *generation*), runs chunks itself and spins until
every worker has checked in. Chunks are claimed with one atomic counter, so a
slow thread takes fewer. Workers spin on the generation for a while (the next
parallel loop usually follows within microseconds), then sleep on a condition
variable, so an idle program costs no CPU. A null pool, or one of one thread,
runs the task serially.

The pool is one block of memory that the caller allocates (`pool_bytes`):

    0   generation i64   8 stop i32   12 threads i32   16 task ptr   24 ctx ptr
    32  trips i64        40 chunks i64
    64  next chunk i64 (own cache line)     128 workers still busy i64 (own line)
    192 pthread mutex (128 bytes)           320 pthread condition (128 bytes)
    448 per thread: pthread_t, pool ptr, thread index (24 bytes each)
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache

import llvmlite.binding as llvm
from llvmlite import ir

from smelt.lowering.llvm.types import I32, I64, PTR, VOID, constant

PARALLEL_FOR = "smelt.parallel_for"
START = "smelt_pool_start"
"""i32 smelt_pool_start(ptr pool, i32 threads): starts threads-1 workers, returns
how many threads the pool has (fewer if the system refused some)."""
STOP = "smelt_pool_stop"
"""void smelt_pool_stop(ptr pool): wakes, stops and joins every worker."""

TASK = ir.FunctionType(VOID, [PTR, I64, I64])
"""An outlined parallel loop: void(ptr ctx, i64 begin, i64 end), iterations."""

GENERATION, STOP_FLAG, THREADS, FN, CTX, TRIPS, CHUNKS = 0, 8, 12, 16, 24, 32, 40
NEXT, PENDING, MUTEX, COND, RECORDS, RECORD_BYTES = 64, 128, 192, 320, 448, 24
CHUNKS_PER_THREAD = 4
WORKER_SPINS = 1 << 14  # pause loops before a worker sleeps (about 0.1-1 ms)


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


class _Pool:
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
        if triple.startswith(("x86_64", "i686", "i386")):
            fn = ir.Function(module, ir.FunctionType(VOID, []), "llvm.x86.sse2.pause")
            self.pause_hint = (fn, [])
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

    def pause(self, b: ir.IRBuilder) -> None:
        if self.pause_hint is not None:
            b.call(*self.pause_hint)

    def bump_generation(self, b: ir.IRBuilder, pool: ir.Value) -> None:
        """Publishes what was stored before: wakes spinning and sleeping workers."""
        mutex, cond = self.at(b, pool, MUTEX), self.at(b, pool, COND)
        self.call(b, "pthread_mutex_lock", mutex)
        b.atomic_rmw("add", self.at(b, pool, GENERATION), constant(I64, 1), "acq_rel")
        self.call(b, "pthread_cond_broadcast", cond)
        self.call(b, "pthread_mutex_unlock", mutex)

    # --- functions ------------------------------------------------------------

    def define_run_chunks(self) -> ir.Function:
        """Claims chunks of the current task until none is left, running each."""
        fn, b = self.function("smelt.pool.run_chunks", ir.FunctionType(VOID, [PTR]))
        (pool,) = fn.args
        task = b.load(self.at(b, pool, FN), typ=PTR)
        ctx = b.load(self.at(b, pool, CTX), typ=PTR)
        trips = b.load(self.at(b, pool, TRIPS), typ=I64)
        chunks = b.load(self.at(b, pool, CHUNKS), typ=I64)
        head = fn.append_basic_block("claim")
        body = fn.append_basic_block("run")
        done = fn.append_basic_block("done")
        b.branch(head)
        b.position_at_end(head)
        c = b.atomic_rmw("add", self.at(b, pool, NEXT), constant(I64, 1), "monotonic")
        b.cbranch(b.icmp_unsigned("<", c, chunks), body, done)
        b.position_at_end(body)
        begin = b.udiv(b.mul(c, trips), chunks)
        end = b.udiv(b.mul(b.add(c, constant(I64, 1)), trips), chunks)
        _indirect_call(b, task, [ctx, begin, end])
        b.branch(head)
        b.position_at_end(done)
        b.ret_void()
        return fn

    def define_worker(self, run_chunks: ir.Function) -> ir.Function:
        """The thread body: wait for a new generation, run chunks, check in."""
        fn, b = self.function("smelt.pool.worker", ir.FunctionType(PTR, [PTR]))
        (record,) = fn.args
        pool = b.load(record, typ=PTR)
        entry = b.block
        wait = fn.append_basic_block("wait")
        spin = fn.append_basic_block("spin")
        spin_next = fn.append_basic_block("spin.next")
        sleep = fn.append_basic_block("sleep")
        sleep_check = fn.append_basic_block("sleep.check")
        sleep_wait = fn.append_basic_block("sleep.wait")
        sleep_done = fn.append_basic_block("sleep.done")
        got = fn.append_basic_block("got")
        task = fn.append_basic_block("task")
        leave = fn.append_basic_block("leave")
        generation = self.at(b, pool, GENERATION)
        b.branch(wait)

        b.position_at_end(wait)
        seen = b.phi(I64, "seen")
        seen.add_incoming(constant(I64, 0), entry)
        b.branch(spin)

        b.position_at_end(spin)
        k = b.phi(I64, "k")
        k.add_incoming(constant(I64, 0), wait)
        g = b.load_atomic(generation, "acquire", 8, typ=I64)
        b.cbranch(b.icmp_unsigned("!=", g, seen), got, spin_next)

        b.position_at_end(spin_next)
        self.pause(b)
        k_next = b.add(k, constant(I64, 1))
        k.add_incoming(k_next, spin_next)
        b.cbranch(
            b.icmp_unsigned("<", k_next, constant(I64, WORKER_SPINS)), spin, sleep
        )

        b.position_at_end(sleep)
        mutex, cond = self.at(b, pool, MUTEX), self.at(b, pool, COND)
        self.call(b, "pthread_mutex_lock", mutex)
        b.branch(sleep_check)
        b.position_at_end(sleep_check)
        g_slept = b.load_atomic(generation, "acquire", 8, typ=I64)
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
        b.call(run_chunks, [pool])
        b.atomic_rmw("sub", self.at(b, pool, PENDING), constant(I64, 1), "release")
        seen.add_incoming(new, task)
        b.branch(wait)

        b.position_at_end(leave)
        b.ret(ir.Constant(PTR, None))
        return fn

    def define_parallel_for(self, run_chunks: ir.Function) -> ir.Function:
        fn, b = self.function(PARALLEL_FOR, ir.FunctionType(VOID, [PTR, PTR, PTR, I64]))
        pool, task, ctx, trips = fn.args
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

        b.position_at_end(dispatch)
        wanted = b.mul(threads, constant(I64, CHUNKS_PER_THREAD))
        chunks = b.select(b.icmp_unsigned("<", trips, wanted), trips, wanted)
        b.store(task, self.at(b, pool, FN))
        b.store(ctx, self.at(b, pool, CTX))
        b.store(trips, self.at(b, pool, TRIPS))
        b.store(chunks, self.at(b, pool, CHUNKS))
        b.atomic_rmw("xchg", self.at(b, pool, NEXT), constant(I64, 0), "monotonic")
        workers = b.sub(threads, constant(I64, 1))
        pending = self.at(b, pool, PENDING)
        b.atomic_rmw("xchg", pending, workers, "monotonic")
        self.bump_generation(b, pool)
        b.call(run_chunks, [pool])
        b.branch(wait)

        b.position_at_end(wait)
        k = b.phi(I64, "k")
        k.add_incoming(constant(I64, 0), dispatch)
        left = b.load_atomic(pending, "acquire", 8, typ=I64)
        b.cbranch(b.icmp_unsigned("==", left, constant(I64, 0)), done, spin)

        b.position_at_end(spin)
        self.pause(b)
        k_next = b.add(k, constant(I64, 1))
        k.add_incoming(k_next, spin)
        k.add_incoming(k_next, relax)
        # a descheduled worker gets the core back sooner if the caller yields
        often = b.and_(k_next, constant(I64, 1023))
        b.cbranch(b.icmp_unsigned("==", often, constant(I64, 0)), relax, wait)

        b.position_at_end(relax)
        self.call(b, "sched_yield")
        b.branch(wait)

        b.position_at_end(done)
        b.ret_void()
        return fn

    def define_start(self, worker: ir.Function) -> None:
        fn, b = self.function(START, ir.FunctionType(I32, [PTR, I32]), internal=False)
        pool, wanted = fn.args
        for offset, ty in ((GENERATION, I64), (NEXT, I64), (PENDING, I64)):
            b.store(constant(ty, 0), self.at(b, pool, offset))
        b.store(constant(I32, 0), self.at(b, pool, STOP_FLAG))
        threads = self.at(b, pool, THREADS)
        b.store(constant(I32, 1), threads)
        null = ir.Constant(PTR, None)
        self.call(b, "pthread_mutex_init", self.at(b, pool, MUTEX), null)
        self.call(b, "pthread_cond_init", self.at(b, pool, COND), null)
        entry = b.block
        head = fn.append_basic_block("spawn.check")
        spawn = fn.append_basic_block("spawn")
        spawned = fn.append_basic_block("spawned")
        done = fn.append_basic_block("done")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I32, "i")
        i.add_incoming(constant(I32, 1), entry)
        b.cbranch(b.icmp_signed("<", i, wanted), spawn, done)
        b.position_at_end(spawn)
        record = self.at(
            b, pool, b.add(constant(I64, RECORDS),
                           b.mul(b.zext(i, I64), constant(I64, RECORD_BYTES)))
        )  # fmt: skip
        arg = b.gep(
            record, [constant(I64, 8)], inbounds=True, source_etype=ir.IntType(8)
        )
        b.store(pool, arg)
        slot = b.gep(
            record, [constant(I64, 16)], inbounds=True, source_etype=ir.IntType(8)
        )
        b.store(b.zext(i, I64), slot)
        rc = self.call(b, "pthread_create", record, null, worker, arg)
        b.cbranch(b.icmp_signed("==", rc, constant(I32, 0)), spawned, done)
        b.position_at_end(spawned)
        following = b.add(i, constant(I32, 1))
        b.store(following, threads)
        i.add_incoming(following, spawned)
        b.branch(head)
        b.position_at_end(done)
        b.ret(b.load(threads, typ=I32))

    def define_stop(self) -> None:
        fn, b = self.function(STOP, ir.FunctionType(VOID, [PTR]), internal=False)
        (pool,) = fn.args
        b.atomic_rmw("xchg", self.at(b, pool, STOP_FLAG), constant(I32, 1), "acq_rel")
        self.bump_generation(b, pool)
        threads_slot = self.at(b, pool, THREADS)
        threads = b.load(threads_slot, typ=I32)
        entry = b.block
        head = fn.append_basic_block("join.check")
        join = fn.append_basic_block("join")
        done = fn.append_basic_block("done")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I32, "i")
        i.add_incoming(constant(I32, 1), entry)
        b.cbranch(b.icmp_signed("<", i, threads), join, done)
        b.position_at_end(join)
        record = self.at(
            b, pool, b.add(constant(I64, RECORDS),
                           b.mul(b.zext(i, I64), constant(I64, RECORD_BYTES)))
        )  # fmt: skip
        self.call(b, "pthread_join", b.load(record, typ=I64), ir.Constant(PTR, None))
        following = b.add(i, constant(I32, 1))
        i.add_incoming(following, join)
        b.branch(head)
        b.position_at_end(done)
        self.call(b, "pthread_mutex_destroy", self.at(b, pool, MUTEX))
        self.call(b, "pthread_cond_destroy", self.at(b, pool, COND))
        b.store(constant(I32, 1), threads_slot)
        b.ret_void()


def define_pool(module: ir.Module) -> ir.Function:
    """Defines the pool's functions in `module` (once); returns smelt.parallel_for."""
    existing = module.globals.get(PARALLEL_FOR)
    if existing is not None:
        return existing
    pool = _Pool(module)
    run_chunks = pool.define_run_chunks()
    pool.define_start(pool.define_worker(run_chunks))
    pool.define_stop()
    return pool.define_parallel_for(run_chunks)
