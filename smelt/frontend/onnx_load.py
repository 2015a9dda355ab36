"""Reading an ONNX model: a path, bytes or ModelProto as a ModelProto with its
external data read in safely, and TensorProtos as arrays, every failure one
SmeltError."""

from __future__ import annotations

import os
import stat
import sys

import numpy as np
import onnx
from google.protobuf.message import Error as ProtobufError
from onnx import external_data_helper, numpy_helper
from onnx.checker import ValidationError

from smelt.dialects.weights import ALIGNED_BYTES, WeightBytes, held
from smelt.errors import ResourceLimit, SmeltError
from smelt.targets.memory import describe_limit, gib, resolve_limit

ModelLike = str | os.PathLike | bytes | onnx.ModelProto

_LOAD_ERRORS = (ProtobufError, ValueError, OSError, RuntimeError, ValidationError)


def load_model(
    model: ModelLike, base_dir: str | os.PathLike | None = None
) -> tuple[onnx.ModelProto, str | None]:
    """`model` as a ModelProto, and the folder of its external data (None when it
    has none); SmeltError when it is not a valid ONNX model or its external data
    cannot be read safely.

    External data stays on disk here: `tensor_array` reads each tensor once,
    straight into the bytes that the graph's constant keeps (reading it into the
    ModelProto first would hold every weight twice). It is read from the model
    file's folder, or from `base_dir` for bytes and ModelProtos, never from the
    current directory; locations that leave that folder, links and non-regular
    files are refused before anything is read."""
    if isinstance(model, onnx.ModelProto):
        proto, what = model, "the model"
    else:
        what = "the given bytes" if isinstance(model, bytes) else f"'{model}'"
        if not isinstance(model, bytes) and not os.path.isfile(model):
            raise SmeltError(f"{what}: no such file")
        try:
            if isinstance(model, bytes):
                proto = onnx.load_model_from_string(model)
            else:
                proto = onnx.load(os.fspath(model), load_external_data=False)
                if base_dir is None:
                    base_dir = os.path.dirname(os.path.abspath(model))
        except _LOAD_ERRORS as e:
            raise SmeltError(
                f"{what} is not a valid ONNX model or its external data cannot be "
                f"read ({type(e).__name__}: {e}); is the file truncated or corrupt?"
            ) from None
    if not proto.HasField("graph") or not (proto.graph.node or proto.graph.output):
        raise SmeltError(
            f"{what} is not a valid ONNX model: it holds no graph; "
            "is the file truncated or corrupt?"
        )
    external = [
        t for t in graph_tensors(proto.graph) if external_data_helper.uses_external_data(t)
    ]
    if not external:
        return proto, None
    if base_dir is None:
        raise SmeltError(
            f"{what}: tensor '{external[0].name}' keeps its data in an external "
            "file, and a model given as bytes or a ModelProto has no folder: pass "
            "base_dir= (the folder that holds the data), or give the model's path"
        )
    if not os.path.isdir(base_dir):
        raise SmeltError(f"{what}: base_dir '{base_dir}' is not a folder")
    for tensor in external:
        _check_location(base_dir, tensor, what)
    return proto, os.fspath(base_dir)


def _check_location(base_dir, tensor: onnx.TensorProto, what: str) -> None:
    """Refuses an external-data location that is absolute, leaves `base_dir`, goes
    through a symbolic link (file or folder), or names anything but a regular file
    with one name (a FIFO would block, a device never ends, a hard link's other
    names may lie anywhere)."""
    entries = {e.key: e.value for e in tensor.external_data}
    location = entries.get("location", "")
    refuse = f"{what}: tensor '{tensor.name}' keeps its data at '{location}', "
    if not location or os.path.isabs(location):
        raise SmeltError(refuse + "which is not a path inside the model's folder")
    root = os.path.realpath(base_dir)
    path = root
    for part in os.path.normpath(location).split(os.sep):
        path = os.path.join(path, part)
        if part == ".." or os.path.islink(path):
            raise SmeltError(
                refuse + "which leaves the model's folder or goes through a link"
            )
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError as e:
        raise SmeltError(refuse + f"which cannot be read ({e.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise SmeltError(refuse + "which is not a regular file")
    if info.st_nlink > 1:
        raise SmeltError(
            refuse + f"which is a hard link ({info.st_nlink} names); copy the data "
            "into a file of its own"
        )
    try:
        extent = external_data_helper.ExternalDataInfo(tensor)
    except ValueError as e:
        raise SmeltError(f"{what}: tensor '{tensor.name}': {e}") from None
    offset = extent.offset or 0
    length = extent.length if extent.length is not None else declared_bytes(tensor)
    if length is not None and offset + length > info.st_size:
        end = offset + length
        raise SmeltError(
            refuse + f"bytes {offset} to {end}, but the file ends "
            f"{end - info.st_size} bytes early; is it truncated?"
        )


def graph_tensors(graph: onnx.GraphProto):
    """Every TensorProto of `graph`: initializers and node attributes, subgraphs
    included."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            for sub in [attr.g] if attr.HasField("g") else []:
                yield from graph_tensors(sub)
            for sub in attr.graphs:
                yield from graph_tensors(sub)


def declared_bytes(tensor: onnx.TensorProto) -> int | None:
    """The bytes of `tensor`'s array as its dims and data type declare them (None
    for strings, unknown types and negative dims: the import refuses those)."""
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
    except (KeyError, ValueError, TypeError):
        return None
    if dtype == np.dtype(object) or any(d < 0 for d in tensor.dims):
        return None
    count = 1
    for d in tensor.dims:  # Python ints: 2**70 bytes does not overflow
        count *= d
    if tensor.data_type in _PACKED_TYPES:  # 4 or 2 bits each in the file
        name = onnx.TensorProto.DataType.Name(tensor.data_type)
        bits = 2 if name.endswith("2") else 4
        return -(-count * bits // 8)
    return count * dtype.itemsize


def held_bytes(tensor: onnx.TensorProto) -> int:
    """About the bytes the import holds for `tensor`: its declared size for
    external data (`load_model` checked that the file has them), else no more
    than the data the ModelProto stores (a tensor whose data does not fill its
    dims is refused when it is read)."""
    declared = declared_bytes(tensor)
    if declared is None:
        return sum(len(s) for s in tensor.string_data)
    if external_data_helper.uses_external_data(tensor):
        return declared
    if tensor.HasField("raw_data"):
        return min(declared, len(tensor.raw_data))
    values = sum(
        len(field)
        for field in (
            tensor.float_data, tensor.int32_data, tensor.int64_data,
            tensor.double_data, tensor.uint64_data,
        )
    )  # fmt: skip
    itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    return min(declared, values * itemsize)


def check_weights_fit(
    proto: onnx.ModelProto, memory_limit: int, what: str = "the model"
) -> None:
    """Refuses a model whose tensors (initializers, Constant attributes, subgraphs)
    alone need more than `memory_limit` bytes (0: the machine's memory), before
    the import reads a byte of external data or makes an array."""
    allowed = resolve_limit(memory_limit)
    sizes = [
        (held_bytes(t), t.name or "a Constant without a name")
        for t in graph_tensors(proto.graph)
    ]
    total = sum(n for n, _ in sizes)
    if not allowed or total <= allowed:
        return
    top = sorted(sizes, key=lambda s: s[0])[-3:][::-1]
    largest = ", ".join(f"'{name}' ({gib(n)})" for n, name in top if n)
    raise ResourceLimit(
        f"{what}: its initializers and constants hold {gib(total)}, more than "
        f"{describe_limit(memory_limit)}, so importing them cannot fit; the "
        f"largest: {largest}"
    )


def tensor_array(
    tensor: onnx.TensorProto, what: str, data_dir: str | None = None
) -> np.ndarray:
    """The data of a TensorProto as an array; SmeltError when it is malformed (its
    data does not fill its dims, or its data type is unknown). External data is
    read from `data_dir` (`load_model` checked its location)."""
    if tensor.data_type == onnx.TensorProto.UNDEFINED or (
        tensor.data_type not in onnx.TensorProto.DataType.values()
    ):
        raise SmeltError(f"{what}: data type {tensor.data_type} is not an ONNX type")
    if external_data_helper.uses_external_data(tensor):
        return _read_external(tensor, what, data_dir)
    try:
        return held(numpy_helper.to_array(tensor))
    except (ValueError, TypeError, KeyError) as e:
        dims = "x".join(map(str, tensor.dims)) or "a scalar"
        raise SmeltError(
            f"{what}: its data does not make a tensor of {dims} "
            f"{onnx.TensorProto.DataType.Name(tensor.data_type)} ({e}); "
            "is the model corrupt?"
        ) from None


def _read_external(tensor: onnx.TensorProto, what: str, data_dir: str | None):
    """An external tensor read from its file into one buffer (bytes, or aligned
    `WeightBytes` when big), which the array views (and the graph's constant
    then keeps: no second copy)."""
    if data_dir is None:
        raise SmeltError(f"{what}: its data is external and no folder holds it")
    info = external_data_helper.ExternalDataInfo(tensor)
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
    count = int(np.prod(tensor.dims, dtype=np.int64)) if tensor.dims else 1
    packed = tensor.data_type in _PACKED_TYPES
    if packed or dtype == np.dtype(object):  # 4-bit types, strings: onnx's reader
        copy = onnx.TensorProto()
        copy.CopyFrom(tensor)
        try:
            external_data_helper.load_external_data_for_tensor(copy, data_dir)
            return numpy_helper.to_array(copy)
        except _LOAD_ERRORS as e:
            raise SmeltError(f"{what}: its external data cannot be read ({e})") from None
    nbytes = count * dtype.itemsize
    if info.length is not None and info.length != nbytes:
        raise SmeltError(
            f"{what}: its external data is {info.length} bytes long, but "
            f"{'x'.join(map(str, tensor.dims)) or 'a scalar'} "
            f"{onnx.TensorProto.DataType.Name(tensor.data_type)} needs {nbytes}"
        )
    # big tensors go straight into aligned memory the program will read in place
    data = WeightBytes.empty(nbytes) if nbytes >= ALIGNED_BYTES else bytearray(nbytes)
    try:
        with open(os.path.join(data_dir, info.location), "rb") as f:
            f.seek(info.offset or 0)
            got = f.readinto(data)
    except OSError as e:
        raise SmeltError(f"{what}: its external data cannot be read ({e})") from None
    if got != nbytes:
        raise SmeltError(
            f"{what}: its external file '{info.location}' ends {nbytes - got} "
            "bytes early; is it truncated?"
        )
    data = data.freeze() if isinstance(data, WeightBytes) else bytes(data)
    array = np.frombuffer(data, dtype).reshape(tuple(tensor.dims))
    return array.byteswap() if sys.byteorder == "big" else array


_PACKED_TYPES = {
    getattr(onnx.TensorProto, n)
    for n in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2")
    if hasattr(onnx.TensorProto, n)
}
