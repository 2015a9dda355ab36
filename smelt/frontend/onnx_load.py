"""Reading an ONNX model: a path, bytes or ModelProto as a ModelProto with its
external data read in safely, and TensorProtos as arrays, every failure one
SmeltError."""

from __future__ import annotations

import os
import stat

import numpy as np
import onnx
from google.protobuf.message import Error as ProtobufError
from onnx import external_data_helper, numpy_helper
from onnx.checker import ValidationError

from smelt.errors import SmeltError

ModelLike = str | os.PathLike | bytes | onnx.ModelProto

_LOAD_ERRORS = (ProtobufError, ValueError, OSError, RuntimeError, ValidationError)


def load_model(
    model: ModelLike, base_dir: str | os.PathLike | None = None
) -> onnx.ModelProto:
    """`model` as a ModelProto with its external data read in; SmeltError when it is
    not a valid ONNX model or its external data cannot be read safely.

    External data is read from the model file's folder, or from `base_dir` for
    bytes and ModelProtos, never from the current directory; onnx's reader refuses
    locations that leave that folder, links and non-regular files."""
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
                proto = onnx.load(os.fspath(model))
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
        t for t in _tensors(proto.graph) if external_data_helper.uses_external_data(t)
    ]
    if external:
        proto = _with_external_data(proto, model, external[0].name, what, base_dir)
    return proto


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


def _tensors(graph: onnx.GraphProto):
    """Every TensorProto of `graph`: initializers and node attributes, subgraphs
    included."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            for sub in [attr.g] if attr.HasField("g") else []:
                yield from _tensors(sub)
            for sub in attr.graphs:
                yield from _tensors(sub)


def _with_external_data(
    proto: onnx.ModelProto, model: ModelLike, first: str, what: str, base_dir
) -> onnx.ModelProto:
    """A copy of `proto` (the caller's stays as it was) with its external tensors
    read from `base_dir`."""
    if base_dir is None:
        raise SmeltError(
            f"{what}: tensor '{first}' keeps its data in an external file, and a "
            "model given as bytes or a ModelProto has no folder: pass base_dir= "
            "(the folder that holds the data), or give the model's path"
        )
    if not os.path.isdir(base_dir):
        raise SmeltError(f"{what}: base_dir '{base_dir}' is not a folder")
    for tensor in _tensors(proto.graph):
        if external_data_helper.uses_external_data(tensor):
            _check_location(base_dir, tensor, what)
    if isinstance(model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)
        proto = copy
    try:
        external_data_helper.load_external_data_for_model(proto, os.fspath(base_dir))
    except _LOAD_ERRORS as e:
        raise SmeltError(
            f"{what}: the external data cannot be read from '{base_dir}' "
            f"({type(e).__name__}: {e})"
        ) from None
    return proto


def tensor_array(tensor: onnx.TensorProto, what: str) -> np.ndarray:
    """The data of a TensorProto as an array; SmeltError when it is malformed (its
    data does not fill its dims, or its data type is unknown)."""
    if tensor.data_type == onnx.TensorProto.UNDEFINED or (
        tensor.data_type not in onnx.TensorProto.DataType.values()
    ):
        raise SmeltError(f"{what}: data type {tensor.data_type} is not an ONNX type")
    try:
        return numpy_helper.to_array(tensor)
    except (ValueError, TypeError, KeyError) as e:
        dims = "x".join(map(str, tensor.dims)) or "a scalar"
        raise SmeltError(
            f"{what}: its data does not make a tensor of {dims} "
            f"{onnx.TensorProto.DataType.Name(tensor.data_type)} ({e}); "
            "is the model corrupt?"
        ) from None
