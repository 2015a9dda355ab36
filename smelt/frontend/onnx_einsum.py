"""ONNX Einsum as graph ops: diagonals as strided slices, labels of one operand
summed by `graph.reduce_sum`, each pair of operands contracted by one (batched)
`graph.matmul` between transposes and reshapes, the result transposed to the
output order. Operands are contracted left to right.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.frontend.onnx import NodeContext, Value, shape_of
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py
handles = HANDLERS.register

# Labels that stand for the dims under an ellipsis (never letters of an equation).
_ELLIPSIS_LABELS = "0123456789!#$%&*+/:;<=>?@^_|~"


def parse_equation(
    ctx: NodeContext, equation: str, ranks: Sequence[int]
) -> tuple[list[str], str]:
    """(labels of each operand, output labels), each dim one character; the dims
    under "..." get labels of their own, right-aligned across operands."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise SmeltError(
            f"{ctx.label}: equation '{equation}' has {len(terms)} operands, "
            f"the node {len(ranks)}"
        )
    ellipsis = 0
    for term, rank in zip(terms, ranks):
        if "..." in term:
            ellipsis = max(ellipsis, rank - len(term.replace("...", "")))
    if ellipsis > len(_ELLIPSIS_LABELS):
        raise ctx.unsupported(f"an ellipsis of {ellipsis} dims is not supported")
    every = _ELLIPSIS_LABELS[:ellipsis]
    labels = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            own = rank - len(term.replace("...", ""))
            term = term.replace("...", every[ellipsis - own :] if own else "")
        if len(term) != rank or not all(c.isalpha() or c in every for c in term):
            raise SmeltError(
                f"{ctx.label}: equation term '{term}' does not fit rank {rank}"
            )
        labels.append(term)
    if arrow:
        out = rhs.replace("...", every)
    else:  # implicit: the labels used once, in alphabetical order, after "..."
        letters = "".join(labels)
        out = every + "".join(
            sorted(c for c in set(letters) if c.isalpha() and letters.count(c) == 1)
        )
    if any(c not in "".join(labels) for c in out) or len(set(out)) != len(out):
        raise SmeltError(f"{ctx.label}: bad output labels in '{equation}'")
    return labels, out


def _transpose(ctx: NodeContext, x: Value, labels: str, to: str) -> Value:
    if labels == to:
        return x
    return ctx.emit(g.TransposeOp, [x], perm=[labels.index(c) for c in to])[0]


def _diagonal(ctx: NodeContext, x: Value, labels: str) -> tuple[Value, str]:
    """x with each label repeated in `labels` reduced to its diagonal."""
    while len(set(labels)) != len(labels):
        c = next(c for c in labels if labels.count(c) > 1)
        i = labels.index(c)
        j = labels.index(c, i + 1)
        shape = shape_of(x)
        if shape[i] != shape[j]:
            raise SmeltError(
                f"{ctx.label}: label '{c}' has sizes {shape[i]} and {shape[j]}"
            )
        n = shape[i]
        rest = "".join(d for k, d in enumerate(labels) if k not in (i, j))
        x = _transpose(ctx, x, labels, rest + c + c)
        lead = [shape[k] for k, d in enumerate(labels) if k not in (i, j)]
        x = ctx.reshape(x, (*lead, n * n))
        # Cells (k, k) of an n x n block are every (n + 1)-th of its n * n.
        x = ctx.emit(
            g.SliceOp,
            [x],
            starts=[0] * (len(lead) + 1),
            ends=[*lead, n * n],
            steps=[1] * len(lead) + [n + 1],
        )[0]
        labels = rest + c
    return x, labels


def _sum_out(ctx: NodeContext, x: Value, labels: str, keep: str) -> tuple[Value, str]:
    """x summed over its labels not in `keep`."""
    axes = [i for i, c in enumerate(labels) if c not in keep]
    if not axes:
        return x, labels
    x = ctx.emit(g.ReduceSumOp, [x], axes=axes, keepdims=0)[0]
    return x, "".join(c for c in labels if c in keep)


def _contract(
    ctx: NodeContext, a: Value, la: str, b: Value, lb: str, keep: str
) -> tuple[Value, str]:
    """a * b summed over their shared labels not in `keep`, as one matmul."""
    batch = "".join(c for c in la if c in lb and c in keep)
    summed = "".join(c for c in la if c in lb and c not in keep)
    left = "".join(c for c in la if c not in lb)
    right = "".join(c for c in lb if c not in la)
    sa, sb = dict(zip(la, shape_of(a))), dict(zip(lb, shape_of(b)))
    for c in summed:
        if sa[c] != sb[c]:
            raise SmeltError(f"{ctx.label}: label '{c}' has sizes {sa[c]}, {sb[c]}")
    a = _transpose(ctx, a, la, batch + left + summed)
    b = _transpose(ctx, b, lb, batch + summed + right)
    k = math.prod(sa[c] for c in summed)
    m = math.prod(sa[c] for c in left)
    n = math.prod(sb[c] for c in right)
    a = ctx.reshape(a, (*(sa[c] for c in batch), m, k))
    b = ctx.reshape(b, (*(sb[c] for c in batch), k, n))
    y = ctx.emit(g.MatMulOp, [a, b])[0]
    batch_shape = shape_of(y)[:-2]
    shape = (*batch_shape, *(sa[c] for c in left), *(sb[c] for c in right))
    return ctx.reshape(y, shape), batch + left + right


@handles("Einsum")
def _einsum(ctx: NodeContext) -> list[Value]:
    operands = [v for v in ctx.inputs if v is not None]
    if not operands:
        raise SmeltError(f"{ctx.label}: Einsum needs an operand")
    labels, out = parse_equation(
        ctx, str(ctx.attr("equation", "")), [len(shape_of(v)) for v in operands]
    )
    values = [_diagonal(ctx, x, ls) for x, ls in zip(operands, labels)]
    x, lx = _sum_out(ctx, *values[0], out + "".join(ls for _, ls in values[1:]))
    for i in range(1, len(values)):
        later = out + "".join(ls for _, ls in values[i + 1 :])
        b, lb = _sum_out(ctx, *values[i], later + lx)
        x, lx = _contract(ctx, x, lx, b, lb, later)
    return [_transpose(ctx, x, lx, out)]
