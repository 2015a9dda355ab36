"""The numpy reference executor of the graph dialect: the oracle every pass is
checked against, and the evaluator behind constant folding.

`evaluate(op, args)` runs one graph op with ONNX semantics; `run_graph(module,
inputs)` runs `@main` of a graph-level module. Each result has exactly its op's
result type (dtype and shape); float32 ops compute in float32, but for
contractions, which accumulate in float64 (`smelt.reference.nn.contract`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr, TensorType
from xdsl.ir import Block, Operation, SSAValue

from smelt.dialects import dtypes
from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.registry import Table

Kernel = Callable[[g.GraphOp, list[np.ndarray]], "np.ndarray | list[np.ndarray]"]
KERNELS = Table()  # this module's kernels; `reference/kernels.py` lists them all
kernel = KERNELS.register


def evaluate(op: Operation, args: list[np.ndarray]) -> list[np.ndarray]:
    """The results of graph op `op` (a `graph.fused` too) applied to `args`."""
    if isinstance(op, g.FusedOp):
        return run_block(op.body.block, args)
    from smelt.reference.kernels import ALL_KERNELS  # (it imports this module)

    fn = ALL_KERNELS.get(type(op))  # type: ignore[arg-type]
    if fn is None:
        raise SmeltError(f"the reference executor has no kernel for {op.name}")
    nhwc = op.attributes.get("layout") == StringAttr("nhwc")
    if nhwc:  # run the NCHW kernel on channels-first views, then move channels back
        args = [_first(a) for a in args[:2]] + args[2:]
    with np.errstate(all="ignore"):
        out = fn(op, args)  # type: ignore[arg-type]
    outs = out if isinstance(out, list) else [out]
    if nhwc:
        outs = [np.ascontiguousarray(np.moveaxis(v, 1, -1)) for v in outs]
    return [_conform(op, r.type, v) for r, v in zip(op.results, outs, strict=True)]


def _first(array: np.ndarray) -> np.ndarray:
    """A channels-last (N...C) array as channels-first (NC...)."""
    return np.ascontiguousarray(np.moveaxis(array, -1, 1))


def _conform(op: Operation, t: TensorType, value: np.ndarray) -> np.ndarray:
    """`value` checked against result type `t`: a mismatch is a kernel bug."""
    value = np.asarray(value)
    dtype, shape = dtypes.to_numpy(t.element_type), tuple(t.get_shape())
    if value.dtype != dtype or value.shape != shape:
        raise AssertionError(
            f"{op.name} kernel returned {value.dtype}{list(value.shape)}, "
            f"expected {dtype}{list(shape)}"
        )
    return value


def run_block(block: Block, args: list[np.ndarray]) -> list[np.ndarray]:
    """Runs the graph ops of `block` on `args`; returns its terminator's operands."""
    env: dict[SSAValue, np.ndarray] = dict(zip(block.args, args, strict=True))
    ops = list(block.ops)
    last_use = {v: i for i, op in enumerate(ops) for v in op.operands}
    for i, op in enumerate(ops):
        if isinstance(op, func.ReturnOp | g.YieldOp):
            return [env[v] for v in op.operands]
        if not isinstance(op, g.GraphOp | g.FusedOp):
            raise SmeltError(
                f"the reference executor runs graph ops only, not {op.name}"
            )
        env.update(zip(op.results, evaluate(op, [env[v] for v in op.operands])))
        for v in set(op.operands):
            if last_use[v] == i:  # free intermediates early: big models stay small
                del env[v]
    raise SmeltError("the block has no func.return or graph.yield")


def run_graph(
    module: ModuleOp, inputs: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Runs `@main` of graph-level `module` on `inputs` (name → array)."""
    main = _main(module)
    block = main.body.block
    in_names = _names(main, "smelt.input_names", "input", len(block.args))
    missing = [n for n in in_names if n not in inputs]
    unknown = [n for n in inputs if n not in in_names]
    if missing or unknown:
        raise SmeltError(
            f"the model takes inputs {in_names}; missing {missing}, unknown {unknown}"
        )
    args = [_check_input(n, a.type, inputs[n]) for n, a in zip(in_names, block.args)]
    outputs = run_block(block, args)
    out_names = _names(main, "smelt.output_names", "output", len(outputs))
    return dict(zip(out_names, outputs, strict=True))


def _main(module: ModuleOp) -> func.FuncOp:
    for op in module.ops:
        if isinstance(op, func.FuncOp) and op.sym_name.data == "main":
            return op
    raise SmeltError("the module has no @main function")


def _names(main: func.FuncOp, key: str, kind: str, n: int) -> list[str]:
    attr = main.attributes.get(key)
    if isinstance(attr, ArrayAttr):
        return [a.data for a in attr.data if isinstance(a, StringAttr)]
    return [f"{kind}_{i}" for i in range(n)]


def _check_input(name: str, t: TensorType, value: np.ndarray) -> np.ndarray:
    value = np.asarray(value)
    dtype, shape = dtypes.to_numpy(t.element_type), tuple(t.get_shape())
    if value.dtype != dtype or value.shape != shape:
        raise SmeltError(
            f"input '{name}' is {value.dtype}{list(value.shape)}, "
            f"the model expects {dtype}{list(shape)}"
        )
    return value


# --- elementwise -------------------------------------------------------------------


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))  # never overflows
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


_ERF = np.frompyfunc(math.erf, 1, 1)


def _erf(x: np.ndarray) -> np.ndarray:
    return _ERF(x.astype(np.float64)).astype(x.dtype)


def _float_only(fn: Callable[[np.ndarray], np.ndarray]) -> Callable:
    return lambda x: fn(x) if x.dtype.kind == "f" else x


_UNARY: dict[type[g.GraphOp], Callable[[np.ndarray], np.ndarray]] = {
    g.ReluOp: lambda x: np.maximum(x, np.zeros((), x.dtype)),
    g.SigmoidOp: _sigmoid,
    g.TanhOp: np.tanh,
    g.ExpOp: np.exp,
    g.LogOp: np.log,
    g.ErfOp: _erf,
    g.SqrtOp: np.sqrt,
    g.NegOp: np.negative,
    g.AbsOp: np.abs,
    g.ReciprocalOp: lambda x: np.ones((), x.dtype) / x,
    g.FloorOp: _float_only(np.floor),
    g.CeilOp: _float_only(np.ceil),
    g.IdentityOp: lambda x: x,
    g.DropoutOp: lambda x: x,
    g.SignOp: np.sign,
    g.RoundOp: _float_only(np.round),  # numpy rounds halves to even
    g.SinOp: np.sin,
    g.CosOp: np.cos,
    g.TanOp: np.tan,
    g.AsinOp: np.arcsin,
    g.AcosOp: np.arccos,
    g.AtanOp: np.arctan,
    g.SinhOp: np.sinh,
    g.CoshOp: np.cosh,
    g.AsinhOp: np.arcsinh,
    g.AcoshOp: np.arccosh,
    g.AtanhOp: np.arctanh,
    g.NotOp: np.invert,
    g.IsNanOp: np.isnan,
}


@kernel(*_UNARY)
def _unary(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    return _UNARY[type(op)](args[0])


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind not in "iu":
        return a / b
    q = np.floor_divide(a, b)
    # numpy floors; ONNX truncates toward zero: step back up where signs differ.
    return q + ((q * b != a) & ((a < 0) != (b < 0))).astype(a.dtype)


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind not in "iu":
        return np.power(a, b)
    neg = b < 0
    r = np.power(a, np.where(neg, np.zeros((), b.dtype), b))
    if not neg.any():
        return r
    # a ** -n truncated: only |a| == 1 gives a nonzero result.
    sign = np.where(b % 2 == 0, 1, -1).astype(a.dtype)
    recip = np.where(a == 1, 1, np.where(a == -1, sign, 0)).astype(a.dtype)
    return np.where(neg, recip, r)


def _shift(left: bool) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """a << b or a >> b (arithmetic on signed types); an amount of the bit width or
    more, read as unsigned, shifts every bit out."""

    def shift(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        width = a.dtype.itemsize * 8
        far = b.astype(f"u{b.dtype.itemsize}") >= width
        amount = np.where(far, 0, b).astype(a.dtype)
        if left:
            return np.where(far, 0, np.left_shift(a, amount)).astype(a.dtype)
        shifted = np.right_shift(a, amount)
        fill = np.right_shift(a, width - 1) if a.dtype.kind == "i" else 0
        return np.where(far, fill, shifted).astype(a.dtype)

    return shift


_BINARY: dict[type[g.GraphOp], Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    g.AddOp: np.add,
    g.SubOp: np.subtract,
    g.MulOp: np.multiply,
    g.DivOp: _div,
    g.PowOp: _pow,
    g.MaxOp: np.maximum,
    g.MinOp: np.minimum,
    g.EqualOp: np.equal,
    g.LessOp: np.less,
    g.GreaterOp: np.greater,
    g.LessEqualOp: np.less_equal,
    g.GreaterEqualOp: np.greater_equal,
    g.AndOp: np.bitwise_and,
    g.OrOp: np.bitwise_or,
    g.XorOp: np.bitwise_xor,
    g.ShiftLeftOp: _shift(left=True),
    g.ShiftRightOp: _shift(left=False),
    g.PreluOp: lambda x, slope: np.where(x < 0, slope * x, x),
}


@kernel(*_BINARY)
def _binary(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    return _BINARY[type(op)](args[0], args[1])


@kernel(g.LeakyReluOp)
def _leaky_relu(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x = args[0]
    return np.where(x >= 0, x, x * x.dtype.type(op.attr("alpha")))


@kernel(g.ModOp)
def _mod(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    # numpy's integer x % 0 and fmod(x, 0) are 0, as the kernels compute them
    return (np.fmod if op.attr("fmod") else np.mod)(*args)


@kernel(g.IsInfOp)
def _is_inf(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x = args[0]
    positive = np.isposinf(x) & bool(op.attr("detect_positive"))
    return positive | (np.isneginf(x) & bool(op.attr("detect_negative")))


@kernel(g.CastOp)
def _cast(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    return args[0].astype(dtypes.to_numpy(op.attr("to")))


@kernel(g.ClipOp)
def _clip(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x, lo, hi = args
    return np.minimum(np.maximum(x, lo.reshape(())), hi.reshape(()))


@kernel(g.WhereOp)
def _where(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    return np.where(*args)


# --- reductions and normalizations -------------------------------------------------


def lowest(dtype: np.dtype) -> np.generic:
    """The identity of max: -inf, INT_MIN or False (bf16's numpy kind is 'V')."""
    if dtype.kind == "f" or dtype == dtypes.to_numpy(dtypes.bf16):
        return dtype.type(-np.inf)
    return dtype.type(np.iinfo(dtype).min) if dtype.kind in "iu" else dtype.type(0)


def highest(dtype: np.dtype) -> np.generic:
    """The identity of min: +inf, INT_MAX or True."""
    if dtype.kind == "f" or dtype == dtypes.to_numpy(dtypes.bf16):
        return dtype.type(np.inf)
    return dtype.type(np.iinfo(dtype).max) if dtype.kind in "iu" else dtype.type(1)


def widened(x: np.ndarray) -> np.ndarray:
    """16-bit floats as float32, the type the compiled kernels accumulate them in."""
    narrow = (np.dtype(np.float16), dtypes.to_numpy(dtypes.bf16))
    return x.astype(np.float32) if x.dtype in narrow else x


@kernel(g.ReduceSumOp, g.ReduceMeanOp, g.ReduceMaxOp, g.ReduceMinOp, g.ReduceProdOp)
def _reduce(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x = args[0]
    axes = g.reduced_axes(op.attr("axes"), x.ndim)
    keep = bool(op.attr("keepdims"))
    if isinstance(op, g.ReduceMaxOp):
        return np.max(x, axis=axes, keepdims=keep, initial=lowest(x.dtype))
    if isinstance(op, g.ReduceMinOp):
        return np.min(x, axis=axes, keepdims=keep, initial=highest(x.dtype))
    if isinstance(op, g.ReduceProdOp):
        wide = widened(x)
        y = np.prod(wide, axis=axes, keepdims=keep, dtype=wide.dtype)
        return y.astype(x.dtype)
    if isinstance(op, g.ReduceSumOp) or x.dtype.kind == "b":
        return np.sum(x, axis=axes, keepdims=keep, dtype=x.dtype)
    if x.dtype.kind == "f":
        return np.mean(x, axis=axes, keepdims=keep)
    return np.mean(x, axis=axes, keepdims=keep).astype(x.dtype)


@kernel(g.SoftmaxOp)
def _softmax(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x = args[0]
    axis = g.normalize_axis(op.attr("axis"), x.ndim)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


@kernel(g.LogSoftmaxOp)
def _log_softmax(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x = widened(args[0])
    axis = g.normalize_axis(op.attr("axis"), x.ndim)
    shifted = x - np.max(x, axis=axis, keepdims=True)
    y = shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    return y.astype(args[0].dtype)


@kernel(g.HardmaxOp)
def _hardmax(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x = args[0]
    axis = g.normalize_axis(op.attr("axis"), x.ndim)
    first = np.expand_dims(np.argmax(x, axis=axis), axis)
    positions = np.arange(x.shape[axis]).reshape(
        [-1 if i == axis else 1 for i in range(x.ndim)]
    )
    return (positions == first).astype(x.dtype)


# --- data movement -------------------------------------------------------------------


def result_shape(op: g.GraphOp, i: int = 0) -> tuple[int, ...]:
    """The result's shape as the kernel computes it (channels first for nhwc ops)."""
    return g.channels_first(g.shape_of(op.results[i]), op.attr("layout", "nchw"))


@kernel(g.ReshapeOp)
def _reshape(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    return args[0].reshape(result_shape(op))


@kernel(g.BitcastOp)
def _bitcast(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    # np.require keeps a 0-d array 0-d (np.ascontiguousarray makes it 1-d)
    return np.require(args[0], requirements="C").view(dtypes.to_numpy(op.attr("to")))


@kernel(g.ExpandOp)
def _expand(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    return np.array(np.broadcast_to(args[0], result_shape(op)))


@kernel(g.TransposeOp)
def _transpose(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    return np.ascontiguousarray(args[0].transpose(op.attr("perm")))


@kernel(g.ConcatOp)
def _concat(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(args, axis=op.attr("axis"))


@kernel(g.SplitOp)
def _split(op: g.GraphOp, args: list[np.ndarray]) -> list[np.ndarray]:
    cuts = np.cumsum(op.attr("sizes"))[:-1]
    return [np.ascontiguousarray(p) for p in np.split(args[0], cuts, op.attr("axis"))]


@kernel(g.SliceOp)
def _slice(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    bounds = zip(op.attr("starts"), op.attr("ends"), op.attr("steps"))
    index = tuple(slice(s, e if e >= 0 else None, st) for s, e, st in bounds)
    return np.ascontiguousarray(args[0][index])


@kernel(g.GatherOp)
def _gather(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x, indices = args
    axis = op.attr("axis")
    size = x.shape[axis]
    indices = indices.astype(np.int64)
    if indices.size and (indices.min() < -size or indices.max() >= size):
        raise SmeltError(
            f"Gather along axis {axis} of a {'x'.join(map(str, x.shape))} tensor: "
            f"an index is out of range [-{size}, {size}); check the indices input"
        )
    return np.take(x, indices, axis=axis)


@kernel(g.PadOp)
def _pad(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x, value = args
    pads, r = op.attr("pads"), x.ndim
    widths = [(max(pads[i], 0), max(pads[i + r], 0)) for i in range(r)]
    mode = op.attr("mode")
    if mode == "constant":
        y = np.pad(x, widths, constant_values=value.reshape(()))
    else:
        y = np.pad(x, widths, mode=mode)
    # Negative pads crop.
    crop = tuple(
        slice(-min(pads[i], 0), y.shape[i] + min(pads[i + r], 0)) for i in range(r)
    )
    return np.ascontiguousarray(y[crop])

