"""KernelBuilder: writes one loop-level kernel (loop nests, loads, stores, indices)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import (
    AnyFloat,
    Float32Type,
    FloatAttr,
    FunctionType,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    StringAttr,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from smelt.dialects import locations
from smelt.dialects.loop import (
    PARALLEL,
    PATTERN_ATTR,
    REDUCTION,
    ROLE_ATTR,
    CheckOp,
    ForOp,
    YieldOp,
    kernel_attr,
)

Index = SSAValue  # an SSA value of type `index`
Body = Callable[[list[SSAValue], list[SSAValue]], Sequence[SSAValue]]

_LOW_PRECISION_FLOATS = (16,)  # f16/bf16 are loaded as f32 and stored back rounded

# What the scheduling passes key on: ROLE_ATTR, PATTERN_ATTR (smelt/dialects/loop.py)
BATCH_ROLE = "batch"
MATMUL_PATTERN = "matmul"
CONV_PATTERN = "conv2d"
TRANSPOSE_PATTERN = "transpose"  # a copy whose innermost dims are swapped
WINDOW_PATTERN = "window"  # a small window reduction innermost (pools, LRN)


def tag_loops(ivs: Sequence[SSAValue], roles: Sequence[str]) -> None:
    """Sets `loop.role` on the loops of these induction variables."""
    for iv, name in zip(ivs, roles, strict=True):
        owner = iv.owner
        assert isinstance(owner, Block)
        op = owner.parent_op()
        assert isinstance(op, ForOp)
        op.attributes[ROLE_ATTR] = StringAttr(name)


def mark_pattern(k: KernelBuilder, name: str) -> None:
    """Sets `loop.pattern` on the kernel (which schedule applies to it)."""
    k.func.attributes[PATTERN_ATTR] = StringAttr(name)


def shape(buffer: SSAValue) -> tuple[int, ...]:
    t = buffer.type
    assert isinstance(t, MemRefType)
    return tuple(t.get_shape())


def element_type(buffer: SSAValue) -> Attribute:
    t = buffer.type
    assert isinstance(t, MemRefType)
    return t.element_type


def compute_type(storage: Attribute) -> Attribute:
    """The type arithmetic happens in: f32 for 16-bit floats, else the storage type."""
    if isinstance(storage, AnyFloat) and storage.bitwidth in _LOW_PRECISION_FLOATS:
        return Float32Type()
    return storage


class KernelBuilder:
    """Builds a `func.func` kernel over memref arguments (inputs, then outputs).

    Ops go to the current block (the innermost open loop); constants are cached and
    hoisted to the kernel entry when `finish` runs, so every use is dominated.
    """

    def __init__(
        self, name: str, inputs: Sequence[MemRefType], outputs: Sequence[MemRefType]
    ):
        self.block = Block(arg_types=[*inputs, *outputs])
        args = list(self.block.args)
        self.inputs = args[: len(inputs)]
        self.outputs = args[len(inputs) :]
        self.func = func.FuncOp(name, ([*inputs, *outputs], []), Region(self.block))
        self.func.attributes.update(kernel_attr())
        self._cursor = self.block
        self._constants: dict[tuple[Attribute, str], SSAValue] = {}
        self._constant_ops: list[Operation] = []
        # integer value → the float that holds it exactly (a quantize's saturated
        # value): a dequantize in the same kernel reads that instead of converting
        self.exact_floats: dict[SSAValue, SSAValue] = {}

    @property
    def name(self) -> str:
        return self.func.sym_name.data

    # --- emission ------------------------------------------------------------------

    def emit(self, op: Operation) -> SSAValue:
        """Appends `op` at the cursor and returns its first result (if any)."""
        self._cursor.add_op(op)
        return op.results[0] if op.results else None  # type: ignore[return-value]

    def op(self, cls: type[Operation], *args: object, **kwargs: object) -> SSAValue:
        return self.emit(cls(*args, **kwargs))  # type: ignore[call-arg]

    def check(self, ok: SSAValue, message: str) -> None:
        """A run-time check (`loop.check`) whose message names the kernel's ONNX
        nodes, so that the error a run raises points into the model."""
        check = CheckOp(ok, locations.prefixed(message, self.func))
        check.location = self.func.location
        self.emit(check)

    def drop_unused_inputs(self) -> set[int]:
        """Removes the input arguments that nothing reads; returns their positions."""
        unused = {i for i, arg in enumerate(self.inputs) if not arg.uses}
        for i in sorted(unused, reverse=True):
            self.block.erase_arg(self.inputs[i])
        self.inputs = [a for i, a in enumerate(self.inputs) if i not in unused]
        if unused:
            self.func.function_type = FunctionType.from_lists(self.block.arg_types, [])
        return unused

    def finish(self) -> func.FuncOp:
        self.block.add_op(func.ReturnOp())
        first = self.block.first_op
        for op in self._constant_ops:
            self.block.insert_op_before(op, first)  # type: ignore[arg-type]
        return self.func

    # --- constants -----------------------------------------------------------------

    def constant(self, value: float | bool, type: Attribute) -> SSAValue:
        """A hoisted `arith.constant` of `type` (index, integer or float)."""
        key = (type, repr(value))
        if key not in self._constants:
            if isinstance(type, AnyFloat):
                attr: Attribute = FloatAttr(float(value), type)
            else:
                assert isinstance(type, IntegerType | IndexType)
                attr = IntegerAttr(int(value), type)
            op = arith.ConstantOp(attr, type)
            self._constant_ops.append(op)
            self._constants[key] = op.result
        return self._constants[key]

    def index(self, value: int) -> Index:
        return self.constant(value, IndexType())

    # --- loops ---------------------------------------------------------------------

    @contextmanager
    def loop(self, ub: int, kind: str = PARALLEL, lb: int = 0) -> Iterator[Index]:
        """`with k.loop(n) as i:` opens a loop; ops emitted inside go to its body."""
        op = ForOp(lb, ub, 1, kind)
        self.emit(op)
        outer, self._cursor = self._cursor, op.body.block
        try:
            yield op.iv
        finally:
            self._cursor.add_op(YieldOp())
            self._cursor = outer

    @contextmanager
    def nest(
        self, bounds: Sequence[int], kind: str = PARALLEL
    ) -> Iterator[list[Index]]:
        """Perfectly nested loops over `bounds`, outermost first (zero loops: none)."""
        ivs: list[Index] = []
        outer = self._cursor
        ops = []
        for ub in bounds:
            op = ForOp(0, ub, 1, kind)
            self.emit(op)
            ops.append(op)
            self._cursor = op.body.block
            ivs.append(op.iv)
        try:
            yield ivs
        finally:
            for op in reversed(ops):
                op.body.block.add_op(YieldOp())
            self._cursor = outer

    def reduce(
        self, bounds: Sequence[int], inits: Sequence[SSAValue], body: Body
    ) -> list[SSAValue]:
        """Reduction loops over `bounds` carrying `inits`; `body(ivs, accs)` gives the
        next accumulators. Returns the final ones."""
        if not bounds:
            return list(body([], list(inits)))
        outer = self._cursor
        accs, ivs, ops = list(inits), [], []
        for ub in bounds:
            op = ForOp(0, ub, 1, REDUCTION, accs)
            self.emit(op)
            ops.append(op)
            self._cursor = op.body.block
            ivs.append(op.iv)
            accs = list(op.body.block.args[1:])
        results = list(body(ivs, accs))
        for op in reversed(ops):
            op.body.block.add_op(YieldOp(*results))
            results = list(op.res)
        self._cursor = outer
        return results

    # --- index arithmetic ----------------------------------------------------------

    def affine(self, terms: Sequence[tuple[Index, int]], offset: int = 0) -> Index:
        """sum(value * scale) + offset on `index`, skipping zero and unit factors."""
        total: Index | None = None
        for value, scale in terms:
            if scale == 0:
                continue
            if scale != 1:
                value = self.op(arith.MuliOp, value, self.index(scale))
            total = value if total is None else self.op(arith.AddiOp, total, value)
        if total is None:
            return self.index(offset)
        if offset:
            total = self.op(arith.AddiOp, total, self.index(offset))
        return total

    def cmp_index(self, lhs: Index, pred: str, rhs: int | Index) -> SSAValue:
        if isinstance(rhs, int):
            rhs = self.index(rhs)
        return self.op(arith.CmpiOp, lhs, rhs, pred)

    def in_range(self, value: Index, lo: int, hi: int) -> SSAValue:
        """lo <= value < hi as an i1."""
        return self.op(
            arith.AndIOp,
            self.cmp_index(value, "sge", lo),
            self.cmp_index(value, "slt", hi),
        )

    def clamp(self, value: Index, lo: int, hi: int) -> Index:
        """min(max(value, lo), hi) on `index`."""
        lo_v, hi_v = self.index(lo), self.index(hi)
        value = self.op(arith.SelectOp, self.cmp_index(value, "slt", lo), lo_v, value)
        return self.op(arith.SelectOp, self.cmp_index(value, "sgt", hi), hi_v, value)

    def positive_mod(self, value: Index, modulus: int) -> Index:
        """value mod modulus in [0, modulus) for any sign of value (modulus > 0)."""
        rem = self.op(arith.RemSIOp, value, self.index(modulus))
        wrapped = self.op(arith.AddiOp, rem, self.index(modulus))
        return self.op(arith.SelectOp, self.cmp_index(rem, "slt", 0), wrapped, rem)

    def and_all(self, conditions: Sequence[SSAValue]) -> SSAValue | None:
        result = None
        for c in conditions:
            result = c if result is None else self.op(arith.AndIOp, result, c)
        return result

    # --- memory --------------------------------------------------------------------

    def load(self, buffer: SSAValue, indices: Sequence[Index]) -> SSAValue:
        """The element as stored (signless, f16 stays f16)."""
        return self.emit(memref.LoadOp.get(buffer, list(indices)))

    def store(
        self, value: SSAValue, buffer: SSAValue, indices: Sequence[Index]
    ) -> None:
        self.emit(memref.StoreOp.get(value, buffer, list(indices)))

    def load_value(self, buffer: SSAValue, indices: Sequence[Index]) -> SSAValue:
        """The element in its compute type (16-bit floats widened to f32)."""
        value = self.load(buffer, indices)
        wide = compute_type(value.type)
        return value if wide == value.type else self.op(arith.ExtFOp, value, wide)

    def store_value(
        self, value: SSAValue, buffer: SSAValue, indices: Sequence[Index]
    ) -> None:
        """Stores `value`, rounding or widening a float to the buffer's float type."""
        self.store(self.float_to(value, element_type(buffer)), buffer, indices)

    def float_to(self, value: SSAValue, target: Attribute) -> SSAValue:
        """Converts a float to another float width (no-op when the types match)."""
        source = value.type
        if source == target or not isinstance(target, AnyFloat):
            return value
        assert isinstance(source, AnyFloat)
        if target.bitwidth == source.bitwidth:  # f16 <-> bf16 goes through f32
            value = self.op(arith.ExtFOp, value, Float32Type())
            return self.op(arith.TruncFOp, value, target)
        if target.bitwidth > source.bitwidth:
            return self.op(arith.ExtFOp, value, target)
        return self.op(arith.TruncFOp, value, target)
