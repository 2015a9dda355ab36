"""graph-fuse: groups graph ops into `graph.fused` kernels (anchor + prologue/epilogue,
elementwise chains)."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from smelt.dialects import graph, locations
from smelt.dialects.graph_base import shape_of

# The fusion rules read each op's facts (graph_base.GraphOp: ELEMENTWISE, ANCHOR).


def is_elementwise(op: Operation) -> bool:
    return isinstance(op, graph.GraphOp) and op.ELEMENTWISE


def is_anchor(op: Operation) -> bool:
    return isinstance(op, graph.GraphOp) and op.ANCHOR is not None


def is_contraction(op: Operation) -> bool:
    return isinstance(op, graph.GraphOp) and op.ANCHOR == "contraction"


def kind_of(op: Operation) -> str:
    return op.name.removeprefix("graph.") if is_anchor(op) else "elementwise"


@dataclass
class Group:
    ops: list[Operation]

    @property
    def tip(self) -> Operation:
        return self.ops[-1]

    def contains(self, value: SSAValue) -> bool:
        return value.owner in self.ops


def _single_user(op: Operation) -> Operation | None:
    """The one op using `op`'s first result, when that is its only use and the other
    results (layer_norm's mean and 1/std) are unused."""
    if not op.results or any(r.uses for r in op.results[1:]):
        return None
    if not op.results[0].has_one_use():
        return None
    return op.results[0].get_user_of_unique_use()


@dataclass(frozen=True)
class GraphFusePass(ModulePass):
    """Groups ops into `graph.fused` kernels; each becomes one loop kernel.

    Expects a graph-level module (after graph-fold-batchnorm, so a conv's epilogue is
    visible). Produces the same module with groups wrapped in `graph.fused`:
    * an anchor (conv2d / matmul / gemm, or with `reductions`: softmax, layer_norm,
      reduce_*, pools, lrn) with the elementwise ops that follow it (`epilogue`: bias,
      activation, residual add, scale), keeping its shape, computed from its result
      and values from outside; every value but the last used only inside (one
      output per kernel: gelu's x·Φ(x) uses x twice and still fuses);
    * with `prologue`, cheap elementwise producers of a reduction anchor's first
      operand that nothing else uses (recomputed by each pass over the input: at
      most `max_prologue` ops, so no expensive work is recomputed silently);
    * chains of elementwise ops (`elementwise`), up to `max_ops` ops per kernel.

        %0 = graph.conv2d %x, %w, %b ; %1 = graph.relu %0
        → %1 = graph.fused %x, %w, %b {kind = "conv2d"} { conv2d ; relu ; yield }

    The fused op's location names every member's ONNX nodes (`loc(fused[...])`);
    the members keep their own.
    """

    name = "graph-fuse"

    epilogue: bool = True
    elementwise: bool = True
    reductions: bool = True
    prologue: bool = True
    max_ops: int = 16
    max_prologue: int = 4

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for f in op.ops:
            if isinstance(f, func.FuncOp) and f.body.blocks:
                self.fuse(f.body.block)

    def fuse(self, block: Block) -> None:
        """Fuses the ops of `block`, then those of each loop body in it (a
        `graph.loop` region is isolated: its groups stay inside it)."""
        for group in self.groups(block):
            wrap(group)
        for o in block.ops:
            if isinstance(o, graph.LoopOp):
                self.fuse(o.body.block)

    def groups(self, block: Block) -> list[Group]:
        taken: set[Operation] = set()
        groups: list[Group] = []
        # positions in the block, read once (the block's own index is a linear scan:
        # asked per candidate it made fusion quadratic in the model's size)
        order = {o: i for i, o in enumerate(block.ops)}
        for op in list(block.ops):
            if op in taken:
                continue
            anchor = is_anchor(op) and (
                is_contraction(op) or self.reductions
            )
            if anchor:
                ops = self.prologue_of(op, taken) + [op]
                if self.epilogue:
                    ops += self.chain_after(op, taken | set(ops), len(ops), order)
            elif is_elementwise(op) and self.elementwise:
                ops = [op] + self.chain_after(op, taken, 1, order)
            else:
                continue
            if len(ops) > 1 or anchor:
                taken.update(ops)
                groups.append(Group(ops))
        return groups

    def chain_after(
        self,
        op: Operation,
        taken: set[Operation],
        size: int,
        order: dict[Operation, int],
    ) -> list[Operation]:
        """The elementwise ops after `op` that join its kernel: users of the group's
        values, all of `op`'s result type, taken in block order while the group
        stays acyclic; then cut back to the longest run whose values are used only
        inside the group, except the last one's (the kernel's one output). So a
        value used twice (gelu's x in x·Φ(x)) fuses when both uses do."""
        if not op.results or any(r.uses for r in op.results[1:]):
            return []
        block, result_type = op.parent_block(), op.results[0].type
        members = {op}
        chain: list[Operation] = []
        while size + len(chain) < self.max_ops:
            candidates = {
                use.operation
                for member in members
                for use in member.results[0].uses
                if use.operation not in members
            }
            joinable = [
                user for user in candidates
                if user not in taken and is_elementwise(user)
                and user.parent_block() is block
                and len(user.results) == 1
                and shape_of(user.results[0].type) == shape_of(result_type)
                and not _reaches_from(user, members, op, order)
            ]  # fmt: skip
            if not joinable:
                break
            user = min(joinable, key=order.__getitem__)
            chain.append(user)
            members.add(user)
        return _closed_prefix(op, chain)

    def prologue_of(self, anchor: Operation, taken: set[Operation]) -> list[Operation]:
        if not self.prologue or is_contraction(anchor) or not anchor.operands:
            return []
        chain: list[Operation] = []
        value = anchor.operands[0]
        while len(chain) < self.max_prologue:
            producer = value.owner
            if (
                not isinstance(producer, Operation) or producer in taken
                or not is_elementwise(producer) or _single_user(producer) is None
                or producer.results[0].type != value.type
            ):
                break
            chain.insert(0, producer)
            value = producer.operands[0]
        return chain


def _reaches_from(
    user: Operation,
    members: set[Operation],
    first: Operation,
    order: dict[Operation, int],
) -> bool:
    """Whether an operand of `user` from outside `members` is computed from a
    member (fusing `user` would then make the kernel depend on itself). Only ops
    after `first` in the block (`order`: positions) can be such paths."""
    start = order[first]
    seen: set[Operation] = set()
    stack = [
        v.owner for v in user.operands
        if isinstance(v.owner, Operation) and v.owner not in members
    ]  # fmt: skip
    while stack:
        producer = stack.pop()
        if producer in members:
            return True
        if producer in seen or producer.parent_block() is not first.parent_block():
            continue
        seen.add(producer)
        if order.get(producer, -1) > start:
            stack += [v.owner for v in producer.operands if isinstance(v.owner, Operation)]
    return False


def _closed_prefix(op: Operation, chain: list[Operation]) -> list[Operation]:
    """The longest prefix of `chain` after which every value of `op` and the prefix
    but the last is used only inside them."""
    for end in range(len(chain), 0, -1):
        group = {op, *chain[:end]}
        inner = [op, *chain[: end - 1]]
        if all(use.operation in group for o in inner for use in o.results[0].uses):
            return chain[:end]
    return []


def wrap(group: Group) -> graph.FusedOp:
    """Moves the group's ops into a `graph.fused` placed where its last op was."""
    members = set(group.ops)
    inputs: list[SSAValue] = []
    for op in group.ops:
        for operand in op.operands:
            if operand.owner not in members and operand not in inputs:
                inputs.append(operand)
    outputs = [
        r for op in group.ops for r in op.results
        if any(use.operation not in members for use in r.uses)
    ]
    block = Block(arg_types=[v.type for v in inputs])
    fused = graph.FusedOp.create(
        operands=inputs,
        result_types=[r.type for r in outputs],
        attributes={"kind": StringAttr(_kind(group))},
        regions=[Region(block)],
    )
    fused.location = locations.merge(*group.ops)  # every member node, in order
    Rewriter.insert_op(fused, InsertPoint.after(group.tip))
    for old, new in zip(outputs, fused.results):
        old.replace_uses_with_if(new, lambda use: use.operation not in members)
    for op in group.ops:
        op.detach()
        block.add_op(op)
    for arg, value in zip(block.args, inputs):
        value.replace_uses_with_if(arg, lambda use: use.operation in members)
    block.add_op(graph.YieldOp.create(operands=outputs))
    return fused


def _kind(group: Group) -> str:
    anchors = [op for op in group.ops if is_anchor(op)]
    return kind_of(anchors[0]) if anchors else "elementwise"
