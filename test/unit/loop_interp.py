"""A slow, strict interpreter of loop-level IR for tests: bounds-checked, exact types.

Every memref.load/store checks its indices, allocations start filled with a
sentinel (NaN for floats) so unwritten elements show, and scalar arithmetic runs on
numpy scalars of the IR's types so f32 rounding and integer wrapping are exact.
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    AnyFloat,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue

from smelt.dialects import graph, loop

_FLOATS = {16: np.float16, 32: np.float32, 64: np.float64}
_INTS = {1: np.bool_, 8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}
_UINTS = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


class OutOfBounds(Exception):
    pass


def np_type(t: Attribute):
    if isinstance(t, AnyFloat):
        return _FLOATS[t.bitwidth]
    if isinstance(t, IntegerType):
        return _INTS[t.width.data]
    assert isinstance(t, IndexType), t
    return int


def _unsigned(v):
    if isinstance(v, int):  # index: a 64-bit word
        return v % (1 << 64)
    return v if isinstance(v, np.bool_) else v.view(_UINTS[v.dtype.itemsize * 8])


def _wrap(value: int, t: Attribute):
    if isinstance(t, IndexType):
        return value
    w = t.width.data
    if w == 1:
        return np.bool_(value & 1)
    value &= (1 << w) - 1
    if value >= 1 << (w - 1):
        value -= 1 << w
    return np_type(t)(value)


def _int_binary(fn):
    def run(op, a, b):
        return _wrap(fn(int(a), int(b)), op.result.type)

    return run


def _udiv(op, a, b):
    return _wrap(int(_unsigned(a)) // int(_unsigned(b)), op.result.type)


def _sdiv(op, a, b):
    q = abs(int(a)) // abs(int(b))
    return _wrap(q if (int(a) < 0) == (int(b) < 0) else -q, op.result.type)


def _srem(op, a, b):
    a, b = int(a), int(b)
    q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    return _wrap(a - b * q, op.result.type)


def _urem(op, a, b):
    return _wrap(int(_unsigned(a)) % int(_unsigned(b)), op.result.type)


def _shift(kind: str):
    """shli / shrui / shrsi; an amount of the bit width or more (unsigned) shifts
    every bit out: 0, or the sign fill for shrsi."""

    def run(op, a, b):
        t = op.result.type
        w = t.width.data
        n = int(_unsigned(b))
        if kind == "shrsi":
            return _wrap(int(a) >> min(n, w - 1), t)
        if n >= w:
            return _wrap(0, t)
        value = int(a) << n if kind == "shli" else int(_unsigned(a)) >> n
        return _wrap(value, t)

    return run


_CMPI = {
    0: lambda a, b: a == b, 1: lambda a, b: a != b, 2: lambda a, b: a < b,
    3: lambda a, b: a <= b, 4: lambda a, b: a > b, 5: lambda a, b: a >= b,
}  # fmt: skip


def _cmpi(op, a, b):
    p = op.predicate.value.data
    if p >= 6:
        a, b, p = int(_unsigned(a)), int(_unsigned(b)), p - 4
    else:
        a, b = int(a), int(b)
    return np.bool_(_CMPI[p](a, b))


def _cmpf(op, a, b):
    p = op.predicate.value.data
    nan = bool(np.isnan(a) or np.isnan(b))
    base = {1: a == b, 2: a > b, 3: a >= b, 4: a < b, 5: a <= b, 6: a != b, 7: True}
    if p == 0 or p == 15:
        return np.bool_(p == 15)
    if p == 14:
        return np.bool_(nan)
    if p <= 7:
        return np.bool_(not nan and base[p])
    return np.bool_(nan or base[p - 7])


def _cast(fn):
    return lambda op, a: fn(a, op.result.type)


def _fptoi(a, t):
    return _wrap(int(np.trunc(a)), t)


def _float_fn(fn):
    return lambda op, a: np_type(op.result.type)(fn(a))


_SCALAR = {
    "arith.addi": _int_binary(lambda a, b: a + b),
    "arith.subi": _int_binary(lambda a, b: a - b),
    "arith.muli": _int_binary(lambda a, b: a * b),
    "arith.andi": _int_binary(lambda a, b: a & b),
    "arith.ori": _int_binary(lambda a, b: a | b),
    "arith.xori": _int_binary(lambda a, b: a ^ b),
    "arith.divsi": _sdiv,
    "arith.remsi": _srem,
    "arith.divui": _udiv,
    "arith.remui": _urem,
    "arith.shli": _shift("shli"),
    "arith.shrui": _shift("shrui"),
    "arith.shrsi": _shift("shrsi"),
    "arith.remf": lambda op, a, b: np.fmod(a, b),
    "arith.cmpi": _cmpi,
    "arith.cmpf": _cmpf,
    "arith.select": lambda op, c, a, b: a if c else b,
    "arith.addf": lambda op, a, b: a + b,
    "arith.subf": lambda op, a, b: a - b,
    "arith.mulf": lambda op, a, b: a * b,
    "arith.divf": lambda op, a, b: a / b,
    "arith.negf": lambda op, a: -a,
    "arith.maximumf": lambda op, a, b: np.maximum(a, b),
    "arith.minimumf": lambda op, a, b: np.minimum(a, b),
    "arith.extf": _cast(lambda a, t: np_type(t)(a)),
    "arith.truncf": _cast(lambda a, t: np_type(t)(a)),
    "arith.sitofp": _cast(lambda a, t: np_type(t)(int(a))),
    "arith.uitofp": _cast(lambda a, t: np_type(t)(int(_unsigned(a)))),
    "arith.fptosi": _cast(_fptoi),
    "arith.fptoui": _cast(_fptoi),
    "arith.extsi": _cast(lambda a, t: _wrap(int(a), t)),
    "arith.extui": _cast(lambda a, t: _wrap(int(_unsigned(a)), t)),
    "arith.trunci": _cast(lambda a, t: _wrap(int(a), t)),
    "arith.index_cast": _cast(lambda a, t: _wrap(int(a), t)),
    "math.exp": _float_fn(np.exp),
    "math.log": _float_fn(np.log),
    "math.tanh": _float_fn(np.tanh),
    "math.sqrt": _float_fn(np.sqrt),
    "math.absf": _float_fn(np.abs),
    "math.floor": _float_fn(np.floor),
    "math.ceil": _float_fn(np.ceil),
    "math.erf": _float_fn(lambda a: math.erf(float(a))),
    "math.powf": lambda op, a, b: np.power(a, b),
    "math.roundeven": _float_fn(np.round),  # numpy rounds halves to even
    "math.sin": _float_fn(np.sin),
    "math.cos": _float_fn(np.cos),
    "math.tan": _float_fn(np.tan),
    "math.asin": _float_fn(np.arcsin),
    "math.acos": _float_fn(np.arccos),
    "math.atan": _float_fn(np.arctan),
    "math.sinh": _float_fn(np.sinh),
    "math.cosh": _float_fn(np.cosh),
    "math.asinh": _float_fn(np.arcsinh),
    "math.acosh": _float_fn(np.arccosh),
    "math.atanh": _float_fn(np.arctanh),
}


class Interpreter:
    def __init__(self, module: ModuleOp):
        self.funcs = {
            f.sym_name.data: f
            for f in module.body.block.ops
            if isinstance(f, func.FuncOp)
        }
        self.ops_run = 0
        self.failed_checks: list[str] = []

    def run(self, name: str, args: list[np.ndarray]) -> None:
        f = self.funcs[name]
        env: dict[SSAValue, object] = dict(zip(f.body.block.args, args))
        with np.errstate(all="ignore"):
            self._block(f.body.block, env)

    def _block(self, block: Block, env: dict) -> list:
        for op in block.ops:
            self.ops_run += 1
            if isinstance(op, loop.YieldOp | func.ReturnOp):
                return [env[v] for v in op.operands]
            self._op(op, env)
        raise AssertionError("block without terminator")

    def _op(self, op: Operation, env: dict) -> None:
        name = op.name
        vals = [env[v] for v in op.operands]
        if name in _SCALAR:
            result = _SCALAR[name](op, *vals)
            t = op.results[0].type
            if not isinstance(t, IndexType) and np_type(t) is not type(result):
                raise AssertionError(f"{name} gave {type(result)} for {t}")
            env[op.results[0]] = result
        elif name == "arith.constant":
            v = op.value
            if isinstance(v, FloatAttr):
                env[op.result] = np_type(v.type)(v.value.data)
            else:
                assert isinstance(v, IntegerAttr)
                env[op.result] = _wrap(v.value.data, v.type)
        elif name in ("memref.load", "memref.store"):
            buf, idx = (
                (vals[0], vals[1:]) if name == "memref.load" else (vals[1], vals[2:])
            )
            if len(idx) != buf.ndim or any(
                not 0 <= i < d for i, d in zip(idx, buf.shape)
            ):
                raise OutOfBounds(f"{name} at {idx} of shape {buf.shape}")
            if name == "memref.load":
                env[op.results[0]] = buf[tuple(idx)]
            else:
                if type(vals[0]) is not buf.dtype.type:
                    raise AssertionError(f"store of {type(vals[0])} into {buf.dtype}")
                buf[tuple(idx)] = vals[0]
        elif isinstance(op, loop.ForOp):
            carried = vals
            for i in range(op.lb.data, op.ub.data, op.step.data):
                inner = dict(env)
                inner.update(zip(op.body.block.args, [i, *carried]))
                carried = self._block(op.body.block, inner)
            env.update(zip(op.results, carried))
        elif isinstance(op, loop.AllocOp):
            env[op.result] = sentinel(op.result.type)
        elif isinstance(op, loop.ConstantOp):
            array = graph.dense_to_array(op.value)
            env[op.result] = array.astype(
                np_type(op.result.type.element_type), copy=True
            )
        elif isinstance(op, loop.ViewOp):
            env[op.result] = vals[0].reshape(op.result.type.get_shape())
        elif isinstance(op, func.CallOp):
            self.run(op.callee.root_reference.data, vals)
        elif isinstance(op, loop.CheckOp):
            if not vals[0]:
                self.failed_checks.append(op.message.data)
        else:
            raise AssertionError(f"the interpreter does not know {name}")


def sentinel(t: MemRefType) -> np.ndarray:
    """A buffer whose unwritten elements are visible: NaN, or 77 for integers."""
    dtype = np_type(t.element_type)
    fill = np.nan if dtype in _FLOATS.values() else (True if dtype is np.bool_ else 77)
    return np.full(tuple(t.get_shape()), fill, dtype=dtype)
