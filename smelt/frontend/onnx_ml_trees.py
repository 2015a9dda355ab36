"""ai.onnx.ml TreeEnsemble (opset 5) as graph ops. The trees are constants,
so each is walked level by level for all rows at once: at every level each row
gathers its node's feature, split, mode and children from constant tables,
compares, and steps to a child until it reaches a leaf; the walk is unrolled to
the trees' depth (found at import). Leaves add (or average, min, max) their
weight into their target's column; a target no leaf reached is 0 (onnxruntime;
onnx's reference leaves the float range's end there for MIN / MAX).

Set membership (mode MEMBER) compares with the node's members (NaN-separated
groups of membership_values, in node order); a missing value (NaN) goes to the
true child where nodes_missing_value_tracks_true says so. post_transform other
than NONE is refused (onnx's reference ignores it, onnxruntime applies it)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from smelt.dialects import graph as g
from smelt.frontend.onnx import Const, NodeContext, Value, numpy_type_of, shape_of
from smelt.frontend.onnx_arith import Arith
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py
MAX_NODES = 1 << 16  # nodes of all trees: each level is a few ops per tree
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)


def _array(ctx: NodeContext, name: str, dtype, required: bool = True) -> np.ndarray:
    value = ctx.attr(name)
    if value is None:
        if required:
            raise ctx.invalid(f"required attribute '{name}' is missing")
        return np.zeros(0, dtype)
    if isinstance(value, onnx.TensorProto):
        value = numpy_helper.to_array(value)
    return np.asarray(value).astype(dtype).reshape(-1)


def _depths(ctx: NodeContext, roots, true_ids, false_ids, true_leaf, false_leaf):
    """Each tree's depth (the levels of nodes on its longest path), checking
    that the children are in range and that no path loops."""
    count = len(true_ids)
    depths = []
    for root in roots:
        depth, level = 0, {int(root)}
        while level:
            depth += 1
            if depth > count:
                raise ctx.invalid(f"the tree from node {root} loops")
            following = set()
            for node in level:
                if not 0 <= node < count:
                    raise ctx.invalid(f"node {node} does not exist ({count} nodes)")
                for child, leaf in ((true_ids[node], true_leaf[node]),
                                    (false_ids[node], false_leaf[node])):  # fmt: skip
                    if not leaf:
                        following.add(int(child))
            level = following
        depths.append(depth)
    return depths


@HANDLERS.register("ai.onnx.ml::TreeEnsemble")
def _tree_ensemble(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    dtype = numpy_type_of(x)
    if dtype not in (np.float32, np.float64) or len(shape_of(x)) != 2:
        raise ctx.unsupported(
            f"X of {dtype}{list(shape_of(x))} is not supported (2-D float32 / float64)"
        )
    if int(ctx.attr("post_transform", 0)) != 0:
        raise ctx.unsupported(
            f"attribute 'post_transform' = {ctx.attr('post_transform')} is not "
            "supported (NONE is)"
        )
    aggregate = int(ctx.attr("aggregate_function", 1))
    if aggregate not in (0, 1, 2, 3):
        raise ctx.invalid(f"attribute 'aggregate_function' is {aggregate}")
    splits = _array(ctx, "nodes_splits", dtype)
    features = _array(ctx, "nodes_featureids", np.int64)
    modes = _array(ctx, "nodes_modes", np.int64)
    true_ids = _array(ctx, "nodes_truenodeids", np.int64)
    false_ids = _array(ctx, "nodes_falsenodeids", np.int64)
    true_leaf = _array(ctx, "nodes_trueleafs", np.int64).astype(bool)
    false_leaf = _array(ctx, "nodes_falseleafs", np.int64).astype(bool)
    targets = _array(ctx, "leaf_targetids", np.int64)
    weights = _array(ctx, "leaf_weights", dtype)
    roots = _array(ctx, "tree_roots", np.int64)
    missing = _array(ctx, "nodes_missing_value_tracks_true", np.int64, False)
    n_targets = int(ctx.attr("n_targets", 0))
    count = len(splits)
    sizes = {len(a) for a in (features, modes, true_ids, false_ids, true_leaf,
                              false_leaf)}  # fmt: skip
    lengths_ok = len(missing) in (0, count) and len(targets) == len(weights)
    if sizes != {count} or not lengths_ok:
        raise ctx.invalid("its nodes_* (and leaf_*) attributes differ in length")
    if count > MAX_NODES:
        raise ctx.unsupported(
            f"{count} nodes are more than smelt unrolls ({MAX_NODES})"
        )
    in_range = not targets.size or 0 <= targets.min() <= targets.max() < n_targets
    if n_targets < 1 or not in_range:
        raise ctx.invalid(
            f"its leaf_targetids must be in 0..n_targets-1 (n_targets {n_targets})"
        )
    leaves = len(weights)
    for ids, leaf in ((true_ids, true_leaf), (false_ids, false_leaf)):
        if np.any(leaf & ((ids < 0) | (ids >= leaves))):
            raise ctx.invalid(f"a leaf index is out of range ({leaves} leaves)")
    if np.any((features < 0) | (features >= shape_of(x)[1])) or np.any(
        (modes < LEQ) | (modes > MEMBER)
    ):
        raise ctx.invalid("a node's feature id or mode is out of range")
    members = _members(ctx, modes, dtype)
    rows = shape_of(x)[0]
    m = Arith(ctx, dtype)
    total: Value | None = None
    columns = m.const(np.arange(n_targets).reshape(1, n_targets), np.int64)
    for root, depth in zip(roots, _depths(ctx, roots, true_ids, false_ids,
                                          true_leaf, false_leaf)):  # fmt: skip
        if true_leaf[root] and false_leaf[root] and true_ids[root] == false_ids[root]:
            leaf: Value = m.const(np.full(rows, true_ids[root]), np.int64)
        else:
            tables = (features, splits, modes, true_ids, false_ids, true_leaf,
                      false_leaf, missing, members)  # fmt: skip
            leaf = _walk(ctx, m, x, int(root), depth, tables)
        weight = ctx.reshape(ctx.emit(g.GatherOp, [Const(weights), leaf], axis=0)[0],
                             (rows, 1))  # fmt: skip
        target = ctx.reshape(ctx.emit(g.GatherOp, [Const(targets), leaf], axis=0)[0],
                             (rows, 1))  # fmt: skip
        hit = m.op(g.EqualOp, target, columns)  # (rows, n_targets)
        if aggregate == 0:
            weight = m.div(weight, float(len(roots)))
        if aggregate in (0, 1):
            part = m.where(hit, weight, 0.0)
            total = part if total is None else m.add(total, part)
        else:
            far = np.finfo(dtype).max if aggregate == 2 else np.finfo(dtype).min
            part = m.where(hit, weight, far)
            if total is None:
                total = part
            else:
                total = m.op(g.MinOp if aggregate == 2 else g.MaxOp, total, part)
    if total is None:
        return [m.const(np.zeros((rows, n_targets), dtype))]
    if aggregate in (2, 3):  # a target no leaf reached is 0, as onnxruntime
        total = m.where(m.op(g.EqualOp, total, m.const(far)), 0.0, total)
    return [total]


def _members(ctx: NodeContext, modes: np.ndarray, dtype) -> np.ndarray:
    """(nodes, most members) of each MEMBER node's set, NaN-padded."""
    values = _array(ctx, "membership_values", dtype, required=False)
    member_nodes = np.flatnonzero(modes == MEMBER)
    groups: list[list[float]] = [[]]
    for v in values:
        if np.isnan(v):
            groups.append([])
        else:
            groups[-1].append(v)
    groups = groups[: len(member_nodes)]
    if len(groups) < len(member_nodes) or (len(member_nodes) and np.isnan(values).sum()
                                          != len(member_nodes)):  # fmt: skip
        raise ctx.invalid(
            "membership_values must hold one NaN-ended set per MEMBER node "
            f"({len(member_nodes)})"
        )
    width = max((len(grp) for grp in groups), default=0) or 1
    table = np.full((len(modes), width), np.nan, dtype)
    for node, grp in zip(member_nodes, groups):
        table[node, : len(grp)] = grp
    return table


def _walk(ctx, m: Arith, x: Value, root: int, depth: int, tables) -> Value:
    """The leaf each row of x reaches from `root`, in `depth` levels."""
    features, splits, modes, true_ids, false_ids, true_leaf, false_leaf, missing, \
        members = tables  # fmt: skip
    rows = shape_of(x)[0]
    i64 = np.int64

    def take(table: np.ndarray, at: Value) -> Value:
        return ctx.emit(g.GatherOp, [Const(table), at], axis=0)[0]

    node: Value = m.const(np.full(rows, root), i64)
    leaf: Value = m.const(np.zeros(rows), i64)
    done: Value = m.const(np.zeros(rows, bool), bool)
    used = set(modes.tolist())
    for _ in range(depth):
        column = ctx.reshape(take(features, node), (rows, 1))
        value = ctx.reshape(ctx.emit(g.GatherElementsOp, [x, column], axis=1)[0],
                            (rows,))  # fmt: skip
        split = take(splits, node)
        less, equal = m.less(value, split), m.op(g.EqualOp, value, split)
        greater = m.greater(value, split)
        outcome = {
            LEQ: lambda: m.either(less, equal), LT: lambda: less,
            GTE: lambda: m.either(greater, equal), GT: lambda: greater,
            EQ: lambda: equal, NEQ: lambda: m.op(g.NotOp, equal),
            MEMBER: lambda: _is_member(ctx, m, value, take(members, node), rows),
        }  # fmt: skip
        mode = take(modes, node)
        cond: Value | None = None
        for kind in sorted(used):
            this = outcome[kind]()
            cond = this if cond is None else m.where(
                m.op(g.EqualOp, mode, m.const(kind, i64)), this, cond
            )
        if missing.size and missing.any():
            tracks = take(missing.astype(bool), node)
            cond = m.either(cond, m.both(m.op(g.IsNanOp, value), tracks))
        child = m.where(cond, take(true_ids, node), take(false_ids, node))
        at_leaf = m.where(cond, take(true_leaf, node), take(false_leaf, node))
        arrived = m.both(m.op(g.NotOp, done), at_leaf)
        leaf = m.where(arrived, child, leaf)
        done = m.either(done, at_leaf)
        node = m.where(done, node, child)
    return leaf


def _is_member(ctx, m: Arith, value: Value, sets: Value, rows: int) -> Value:
    """Whether each row's value is in its node's set (rows, width)."""
    hits = m.op(g.EqualOp, ctx.reshape(value, (rows, 1)), sets)
    count = ctx.emit(g.ReduceMaxOp, [m.cast(hits, np.int32)], axes=[1], keepdims=0)[0]
    return m.greater(count, m.const(0, np.int32))
