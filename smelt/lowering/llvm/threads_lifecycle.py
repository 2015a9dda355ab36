"""The thread pool's life in LLVM IR: `smelt_pool_start` (its memory set up,
workers created with pthreads) and `smelt_pool_stop` (workers woken with the stop
flag and joined), and `define_pool`, which builds all of the pool's functions
(the rest are in `threads.py`: the work loop, the worker, `smelt.parallel_for`)."""

from __future__ import annotations

from llvmlite import ir

from smelt.lowering.llvm.program import POOL_START as START
from smelt.lowering.llvm.program import POOL_STOP as STOP
from smelt.lowering.llvm.threads import (
    ATTR,
    CHUNKS,
    CLAIM,
    COND,
    FINISHED,
    MUTEX,
    PARALLEL_FOR,
    RECORD_BYTES,
    RECORDS,
    STACK_BYTES,
    STOP_FLAG,
    THREADS,
    Pool,
)
from smelt.lowering.llvm.types import I32, I64, PTR, VOID, constant


def _record(builder: Pool, b: ir.IRBuilder, pool: ir.Value, i: ir.Value) -> ir.Value:
    """The address of thread `i`'s record (pthread_t, pool ptr, index)."""
    offset = b.mul(b.zext(i, I64), constant(I64, RECORD_BYTES))
    return builder.at(b, pool, b.add(constant(I64, RECORDS), offset))


def define_start(builder: Pool, worker: ir.Function) -> None:
    """int32 smelt_pool_start(pool, threads): the pool's memory set up and its
    workers created (returns how many threads it has, the caller included)."""
    fn, b = builder.function(
        START, ir.FunctionType(I32, [PTR, I32]), internal=False
    )
    pool, wanted = fn.args
    pool.name, wanted.name = "pool", "threads"
    for offset in (CLAIM, CHUNKS, FINISHED):
        b.store(constant(I64, 0), builder.at(b, pool, offset))
    b.store(constant(I32, 0), builder.at(b, pool, STOP_FLAG))
    threads = builder.at(b, pool, THREADS)
    b.store(constant(I32, 1), threads)
    null = ir.Constant(PTR, None)
    builder.call(b, "pthread_mutex_init", builder.at(b, pool, MUTEX), null)
    builder.call(b, "pthread_cond_init", builder.at(b, pool, COND), null)
    attr = builder.at(b, pool, ATTR)
    builder.call(b, "pthread_attr_init", attr)
    builder.call(b, "pthread_attr_setstacksize", attr, constant(I64, STACK_BYTES))
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
    record = _record(builder, b, pool, i)
    arg = b.gep(
        record, [constant(I64, 8)], inbounds=True, source_etype=ir.IntType(8)
    )
    b.store(pool, arg)
    slot = b.gep(
        record, [constant(I64, 16)], inbounds=True, source_etype=ir.IntType(8)
    )
    b.store(b.zext(i, I64), slot)
    rc = builder.call(b, "pthread_create", record, attr, worker, arg)
    b.cbranch(b.icmp_signed("==", rc, constant(I32, 0)), spawned, done)
    b.position_at_end(spawned)
    following = b.add(i, constant(I32, 1))
    b.store(following, threads)
    i.add_incoming(following, spawned)
    b.branch(head)
    b.position_at_end(done)
    builder.call(b, "pthread_attr_destroy", attr)
    b.ret(b.load(threads, typ=I32))

def define_stop(builder: Pool) -> None:
    """void smelt_pool_stop(pool): wakes the workers with the stop flag set and
    joins them."""
    fn, b = builder.function(STOP, ir.FunctionType(VOID, [PTR]), internal=False)
    (pool,) = fn.args
    pool.name = "pool"
    b.atomic_rmw("xchg", builder.at(b, pool, STOP_FLAG), constant(I32, 1), "acq_rel")
    builder.write(b, pool, CHUNKS, constant(I64, 0))
    old = b.load_atomic(builder.at(b, pool, CLAIM), "monotonic", 8, typ=I64)
    builder.publish_next(b, pool, old)
    threads_slot = builder.at(b, pool, THREADS)
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
    record = _record(builder, b, pool, i)
    builder.call(b, "pthread_join", b.load(record, typ=I64), ir.Constant(PTR, None))
    following = b.add(i, constant(I32, 1))
    i.add_incoming(following, join)
    b.branch(head)
    b.position_at_end(done)
    builder.call(b, "pthread_mutex_destroy", builder.at(b, pool, MUTEX))
    builder.call(b, "pthread_cond_destroy", builder.at(b, pool, COND))
    b.store(constant(I32, 1), threads_slot)
    b.ret_void()


def define_pool(module: ir.Module) -> ir.Function:
    """Defines the pool's functions in `module` (once); returns smelt.parallel_for."""
    existing = module.globals.get(PARALLEL_FOR)
    if existing is not None:
        return existing
    pool = Pool(module)
    work = pool.define_work()
    define_start(pool, pool.define_worker(work))
    define_stop(pool)
    return pool.define_parallel_for(work)
