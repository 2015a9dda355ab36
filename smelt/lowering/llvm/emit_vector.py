"""Per-op emitters for xDSL's `vector` ops on 1-d vectors → LLVM vector IR.

Elementwise arith/math ops on vectors are handled by `emit_ops.py`; this file adds
the ops that move data between memory, scalars and vectors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir
from xdsl.dialects import vector
from xdsl.dialects.builtin import IntegerAttr
from xdsl.ir import Operation

from smelt.errors import SmeltError
from smelt.lowering.llvm.types import (
    I32,
    I64,
    VOID,
    buffer_info,
    constant,
    memory_type,
    suffix,
    value_type,
)

if TYPE_CHECKING:
    from smelt.lowering.llvm.emit_kernel import KernelEmitter, OpEmitter



def _memory_vector(ty: ir.VectorType, element_type) -> ir.VectorType:
    return ir.VectorType(memory_type(element_type), ty.count)


def emit_vector_load(em: KernelEmitter, op: Operation) -> None:
    buffer, *indices = op.operands
    info = buffer_info(buffer.type)
    ty = value_type(op.results[0].type)
    mem = _memory_vector(ty, info.element)
    # Only element alignment is known: the vector may start anywhere in a row.
    value = em.builder.load(
        em.address(buffer, indices), typ=mem, align=info.element_bytes
    )
    em.bind(op.results[0], value if mem == ty else em.builder.trunc(value, ty))


def emit_vector_store(em: KernelEmitter, op: Operation) -> None:
    """A vector store; a `nontemporal` one streams (bypasses the caches) where its
    address is vector-aligned, as x86 streaming stores need, else stores plainly."""
    stored, buffer, *indices = op.operands
    info = buffer_info(buffer.type)
    value = em.get(stored)
    mem = _memory_vector(value.type, info.element)
    if mem != value.type:
        value = em.builder.zext(value, mem)
    b = em.builder
    address = em.address(buffer, indices)
    if not is_streaming(op):
        b.store(value, address, align=info.element_bytes)
        return
    size = info.element_bytes * mem.count
    offset = b.and_(b.ptrtoint(address, I64), constant(I64, size - 1))
    with b.if_else(b.icmp_unsigned("==", offset, constant(I64, 0))) as (aligned, other):
        with aligned:
            streamed = b.store(value, address, align=size)
            streamed.set_metadata("nontemporal", em.module.add_metadata([I32(1)]))
        with other:
            b.store(value, address, align=info.element_bytes)


def _masked_memory(em: KernelEmitter, op: Operation, value_ty: ir.VectorType):
    """(address, vector type in memory, alignment, suffix) of a masked access."""
    info = buffer_info(op.base.type)
    mem = _memory_vector(value_ty, info.element)
    address = em.address(op.base, list(op.indices))
    name = f"{suffix(mem)}.p0"
    return address, mem, constant(I32, info.element_bytes), name


def _declare(em: KernelEmitter, name: str, ret: ir.Type, args: list) -> ir.Function:
    from smelt.lowering.llvm.emit_kernel import declare_function  # import cycle

    return declare_function(em.module, name, ret, [a.type for a in args])


def emit_create_mask(em: KernelEmitter, op: Operation) -> None:
    """vector.create_mask %n: lanes 0 … n-1 set (a constant n folds in LLVM)."""
    ty = value_type(op.results[0].type)
    lanes = ir.Constant(ir.VectorType(I64, ty.count), list(range(ty.count)))
    count = splat(em, em.get(op.operands[0]), ir.VectorType(I64, ty.count))
    em.bind(op.results[0], em.builder.icmp_signed("<", lanes, count))


def emit_masked_load(em: KernelEmitter, op: Operation) -> None:
    """vector.maskedload → llvm.masked.load: inactive lanes read no memory and
    take the pass-through value's lanes."""
    ty = value_type(op.results[0].type)
    address, mem, align, name = _masked_memory(em, op, ty)
    passthru = em.get(op.pass_thru)
    if mem != ty:
        passthru = em.builder.zext(passthru, mem)
    args = [address, align, em.get(op.mask), passthru]
    fn = _declare(em, f"llvm.masked.load.{name}", mem, args)
    value = em.builder.call(fn, args)
    em.bind(op.results[0], value if mem == ty else em.builder.trunc(value, ty))


def emit_masked_store(em: KernelEmitter, op: Operation) -> None:
    """vector.maskedstore → llvm.masked.store: only active lanes write."""
    value = em.get(op.value_to_store)
    address, mem, align, name = _masked_memory(em, op, value.type)
    if mem != value.type:
        value = em.builder.zext(value, mem)
    args = [value, address, align, em.get(op.mask)]
    fn = _declare(em, f"llvm.masked.store.{name}", VOID, args)
    em.builder.call(fn, args)


def emit_lane_select(em: KernelEmitter, op: Operation) -> None:
    mask, a, b = em.operands(op)
    em.bind(op.results[0], em.builder.select(mask, a, b))


def is_streaming(op: Operation) -> bool:
    flag = op.properties.get("nontemporal") if isinstance(op, vector.StoreOp) else None
    return isinstance(flag, IntegerAttr) and bool(flag.value.data)


def fence_streams(em: KernelEmitter, region_op: Operation) -> None:
    """An `sfence` after the streaming stores of `region_op` (x86 orders them with
    nothing else): the next kernel, or another thread, sees their data."""
    if any(is_streaming(o) for o in region_op.walk()):
        from smelt.lowering.llvm.emit_kernel import declare_function

        fn = declare_function(em.module, "llvm.x86.sse.sfence", VOID, [])
        em.builder.call(fn, [])


def splat(em: KernelEmitter, scalar: ir.Value, ty: ir.VectorType) -> ir.Value:
    """`scalar` in every lane of `ty` (insertelement + zero-mask shufflevector)."""
    b = em.builder
    one = b.insert_element(ir.Constant(ty, ir.Undefined), scalar, constant(I32, 0))
    mask = ir.Constant(ir.VectorType(I32, ty.count), [constant(I32, 0)] * ty.count)
    return b.shuffle_vector(one, ir.Constant(ty, ir.Undefined), mask)


def emit_broadcast(em: KernelEmitter, op: Operation) -> None:
    (source,) = em.operands(op)
    ty = value_type(op.results[0].type)
    if source.type == ty:
        em.bind(op.results[0], source)
    elif isinstance(source.type, ir.VectorType):
        raise SmeltError(f"broadcast of {source.type} to {ty}")
    else:
        em.bind(op.results[0], splat(em, source, ty))


def emit_vector_fma(em: KernelEmitter, op: Operation) -> None:
    a, b, acc = em.operands(op)
    em.bind(
        op.results[0],
        em.call_intrinsic("llvm.fma", [a, b, acc], a.type, flags=em.fp_flags(op)),
    )


# kind → (LLVM reduction intrinsic, scalar emitter combining it with `acc`)
_REDUCTIONS = {
    "add": ("add", "add"),
    "mul": ("mul", "mul"),
    "and": ("and", "and_"),
    "or": ("or", "or_"),
    "xor": ("xor", "xor"),
    "maxsi": ("smax", "llvm.smax"),
    "minsi": ("smin", "llvm.smin"),
    "maxui": ("umax", "llvm.umax"),
    "minui": ("umin", "llvm.umin"),
    "maxnumf": ("fmax", "llvm.maxnum"),
    "minnumf": ("fmin", "llvm.minnum"),
    "maximumf": ("fmaximum", "llvm.maximum"),
    "minimumf": ("fminimum", "llvm.minimum"),
}


def emit_reduction(em: KernelEmitter, op: Operation) -> None:
    """vector.reduction: ordered for float add/mul unless fastmath allows reassoc."""
    vec, *acc = em.operands(op)
    kind = str(op.properties["kind"].data)
    scalar = vec.type.element
    floating = isinstance(scalar, ir.HalfType | ir.FloatType | ir.DoubleType)
    flags = em.fp_flags(op) if floating else ()
    b = em.builder
    if floating and kind in ("add", "mul"):
        start = acc[0] if acc else constant(scalar, -0.0 if kind == "add" else 1.0)
        base = f"llvm.vector.reduce.f{kind}"
        result = em.call_intrinsic(
            base, [start, vec], scalar, overloads=[vec.type], flags=flags
        )
        em.bind(op.results[0], result)
        return
    intrinsic, combine = _REDUCTIONS[kind]
    result = em.call_intrinsic(
        f"llvm.vector.reduce.{intrinsic}",
        [vec],
        scalar,
        overloads=[vec.type],
        flags=flags,
    )
    if acc:
        if combine.startswith("llvm."):
            result = em.call_intrinsic(combine, [result, acc[0]], scalar, flags=flags)
        elif floating:
            result = getattr(b, "f" + combine)(result, acc[0], flags=flags)
        else:
            result = getattr(b, combine)(result, acc[0])
    em.bind(op.results[0], result)


def _position(em: KernelEmitter, op: Operation, dynamic) -> ir.Value:
    positions = list(op.properties["static_position"].get_values())
    if len(positions) != 1:
        raise SmeltError("only 1-d vectors are supported")
    if positions[0] < 0:  # the dynamic marker
        return em.builder.trunc(em.get(dynamic[0]), I32)
    return constant(I32, positions[0])


def emit_extract(em: KernelEmitter, op: Operation) -> None:
    vec, *dynamic = op.operands
    index = _position(em, op, dynamic)
    em.bind(op.results[0], em.builder.extract_element(em.get(vec), index))


def emit_insert(em: KernelEmitter, op: Operation) -> None:
    source, dest, *dynamic = op.operands
    index = _position(em, op, dynamic)
    value = em.builder.insert_element(em.get(dest), em.get(source), index)
    em.bind(op.results[0], value)


def _lanes(lanes: list[int]) -> ir.Constant:
    return ir.Constant(ir.VectorType(I32, len(lanes)), lanes)


def emit_shuffle(em: KernelEmitter, op: Operation) -> None:
    """vector.shuffle of two 1-d vectors; LLVM's shufflevector wants both of one
    length, so the shorter is first widened (its extra lanes repeat lane 0, which
    the mask never picks)."""
    first, second = em.get(op.operands[0]), em.get(op.operands[1])
    mask = list(op.properties["mask"].get_values())
    b = em.builder
    size = max(first.type.count, second.type.count)

    def widened(value: ir.Value) -> ir.Value:
        count = value.type.count
        if count == size:
            return value
        lanes = list(range(count)) + [0] * (size - count)
        return b.shuffle_vector(value, value, _lanes(lanes))

    split = first.type.count
    lanes = [k if k < split else k - split + size for k in mask]
    value = b.shuffle_vector(
        widened(first),
        widened(second),
        _lanes(lanes),
    )
    em.bind(op.results[0], value)


VECTOR_EMITTERS: dict[str, OpEmitter] = {
    "vector.load": emit_vector_load,
    "vector.store": emit_vector_store,
    "vector.broadcast": emit_broadcast,
    "vector.fma": emit_vector_fma,
    "vector.reduction": emit_reduction,
    "vector.extract": emit_extract,
    "vector.insert": emit_insert,
    "vector.shuffle": emit_shuffle,
    "vector.create_mask": emit_create_mask,
    "vector.maskedload": emit_masked_load,
    "vector.maskedstore": emit_masked_store,
    "loop.select": emit_lane_select,
}
"""Op name → emitter for the vector ops of the llvm target."""
