"""The float epilogue of an integer kernel (#32): the elementwise chain between a
requantized conv result and the next QuantizeLinear, run on each output element
in the kernel's body instead of in elementwise kernels of its own.

An epilogue is a program, one string (`quant.dwconv`'s `epilogue` attribute),
steps separated by ";", each defining the next value v0, v1, …:

    deq A S Z       (A − Z) · S            a dequantize (Z an integer)
    add A B, sub A B, mul A B, div A B, min A B, max A B
                                           the f32 operation of graph's op
    quant A S Z T   saturate(round_half_even(A / S) + Z) as T (ui8 / i8):
                    the last step, and the result of the kernel

A program without a quant step (where the kernel allows an f32 result:
quant.qgemm's, not quant.dwconv's) gives its last value in f32: a chain that
ends in a float op (a residual add before a float global pool).

Operands: `y` the kernel's requantized result (an integral f32, its zero point
included), `vN` an earlier step, `pN` the kernel's post operand N (f32 [C], one
value per channel, or a tensor of the result's shape: a residual, f32 or 8-bit),
`#X` an f32 literal (X as Python's float.hex: exact). Every step is the f32
operation that the unfused graph computes, in its order, so the fusion changes
no bit (a residual's `deq` included: it is the graph's dequantize of it).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "min": np.minimum,
    "max": np.maximum,
}
STORAGE = {"ui8": np.uint8, "i8": np.int8}


class Step(NamedTuple):
    op: str
    args: tuple[str, ...]


def literal(value: float) -> str:
    """An f32 value as a step operand, exactly."""
    return "#" + float(np.float32(value)).hex()


def parse(program: str, float_result: bool = False) -> list[Step]:
    """The steps of `program`; ValueError names what is malformed. With
    `float_result`, a program may end without a quant step (an f32 result)."""
    steps = []
    for i, text in enumerate(s.strip() for s in program.split(";")):
        op, *args = text.split()
        arity = {"deq": 3, "quant": 4}.get(op, 2 if op in BINARY else None)
        if arity is None or len(args) != arity:
            raise ValueError(f"epilogue step {i} {text!r}: unknown op or arity")
        operands = args[:1] if op in ("deq", "quant") else args
        if op in ("deq", "quant"):
            z = args[2].lstrip("-")
            if not args[1].startswith("#") or not z.isdigit():
                raise ValueError(f"epilogue step {i} {text!r}: scale #X, zero int")
        for a in operands:
            ok = a == "y" or a.startswith("#")
            ok = ok or (a[:1] in "vp" and a[1:].isdigit())
            if not ok or (a[:1] == "v" and int(a[1:]) >= i):
                raise ValueError(f"epilogue step {i} {text!r}: bad operand {a!r}")
        steps.append(Step(op, tuple(args)))
    if any(s.op == "quant" for s in steps[:-1]):
        raise ValueError("an epilogue's quant step is its last")
    if not steps or (steps[-1].op != "quant" and not float_result):
        raise ValueError("an epilogue ends with its only quant step")
    if steps[-1].op == "quant" and steps[-1].args[3] not in STORAGE:
        raise ValueError(f"epilogue result type {steps[-1].args[3]!r}: ui8 or i8")
    return steps


def result_storage(program: str, float_result: bool = False) -> str:
    """ui8 / i8, or f32 (a program without a quant step, where allowed)."""
    last = parse(program, float_result)[-1]
    return last.args[3] if last.op == "quant" else "f32"


def posts_used(program: str) -> set[int]:
    return {
        int(a[1:])
        for s in parse(program, float_result=True)
        for a in s.args
        if a.startswith("p")
    }


def evaluate(program: str, y: np.ndarray, post: list[np.ndarray]) -> np.ndarray:
    """The epilogue in numpy on y (the requantized result, integers, [..., C])."""
    values: list[np.ndarray] = []
    f32 = np.float32

    def operand(a: str) -> np.ndarray:
        if a == "y":
            return y.astype(f32)
        if a.startswith("#"):
            return f32(float.fromhex(a[1:]))
        if a.startswith("v"):
            return values[int(a[1:])]
        return post[int(a[1:])].astype(f32)  # [C] broadcasts along the last dim

    for step in parse(program, float_result=True):
        if step.op == "deq":
            a, s, z = step.args
            values.append(
                ((operand(a) - f32(int(z))) * operand(s)).astype(f32)
            )
        elif step.op == "quant":
            a, s, z, t = step.args
            info = np.iinfo(STORAGE[t])
            q = np.rint((operand(a) / operand(s)).astype(f32).astype(np.float64))
            q = np.where(np.isnan(q), info.min, q + int(z))
            return np.clip(q, info.min, info.max).astype(STORAGE[t])
        else:
            a, b = (operand(x) for x in step.args)
            values.append(BINARY[step.op](a, b).astype(f32))
    return np.broadcast_to(values[-1], y.shape).astype(f32)  # an f32 result
