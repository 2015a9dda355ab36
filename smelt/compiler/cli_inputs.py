"""What the `smelt` commands read: a model by path or light_* name, `--input-shape`
and `--constant` items, input arrays (an .npz, or random ones for a compiled model)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from smelt.errors import SmeltError

DEFAULT_MODEL = "light_resnet50"


def resolve_model(name: str) -> str:
    """A path, or the name of a `light_*` model shipped in the onnx package."""
    if os.path.exists(name):
        return name
    import onnx

    light = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")
    candidate = os.path.join(light, name if name.endswith(".onnx") else name + ".onnx")
    if os.path.exists(candidate):
        return candidate
    raise SmeltError(f"no model file '{name}' (and no light model of that name in {light})")


def parse_shapes(items: Sequence[str]) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for item in items:
        name, sep, dims = item.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = tuple(int(d) for d in dims.split("x"))
        except ValueError:
            raise SmeltError(
                f"bad --input-shape '{item}': write NAME=DxDx…, e.g. input=1x3x224x224"
            ) from None
    return shapes


def parse_constants(items: Sequence[str]) -> dict[str, np.ndarray]:
    """`--constant NAME=VALUE` items: a number, true / false, or a comma-separated
    list of them (the model input's element type is applied at import)."""
    constants = {}
    for item in items:
        name, sep, text = item.partition("=")
        try:
            if not sep or not name or not text.strip():
                raise ValueError
            words = text.strip().strip("[]").split(",")
            values = [_number(w.strip()) for w in words]
        except ValueError:
            raise SmeltError(
                f"bad --constant '{item}': write NAME=VALUE or NAME=V1,V2,…, e.g. "
                "sr=16000"
            ) from None
        scalar = "," not in text and "[" not in text
        constants[name] = np.asarray(values[0] if scalar else values)
    return constants


def _number(word: str) -> int | float | bool:
    if word.lower() in ("true", "false"):
        return word.lower() == "true"
    try:
        return int(word)
    except ValueError:
        return float(word)


def random_inputs(model, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    opt = getattr(model, "opt_dims", {})  # a run-time dim (smelt run --dim): OPT
    for name, spec_shape, dtype in (
        (spec[0], spec[1], spec[2]) if isinstance(spec, tuple)
        else (spec.name, spec.shape, spec.dtype)
        for spec in model.inputs
    ):  # fmt: skip
        shape = tuple(opt.get(d, 1) if isinstance(d, str) else d for d in spec_shape)
        if dtype.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[name] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            feeds[name] = rng.integers(0, 10, shape).astype(dtype)
    return feeds


def load_inputs(path: str) -> dict[str, np.ndarray]:
    """The arrays of an .npz file by name."""
    import zipfile

    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise SmeltError(
                f"'{path}' holds one unnamed array: save the inputs by name with "
                "np.savez(path, input_name=array, ...)"
            )
        with data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise SmeltError(
            f"cannot read inputs from '{path}' ({type(e).__name__}: {e}); "
            "is it an .npz file written by np.savez?"
        ) from None


def dynamic_inputs(path: str) -> list[str]:
    """The graph inputs of the model at `path` with a dim the model leaves open
    (their shape then comes from the --inputs arrays)."""
    import onnx

    try:
        graph = onnx.load(path, load_external_data=False).graph
    except Exception:  # the compile that follows reports a bad file properly
        return []
    return [
        i.name for i in graph.input
        if any(not d.HasField("dim_value") for d in i.type.tensor_type.shape.dim)
    ]  # fmt: skip


def _graph_inputs(source: str | bytes) -> list:
    return list(onnx_load(source, external_data=False).graph.input)


def onnx_load(source: str | bytes, external_data: bool = True):
    """The ModelProto of a path or of serialized bytes."""
    import onnx

    if isinstance(source, bytes):
        return onnx.load_model_from_string(source)
    return onnx.load(source, load_external_data=external_data)


def model_inputs(path: str) -> tuple[list, set[str]]:
    """(the graph inputs a user feeds: those without an initializer; the names of
    every graph input, overridable initializers included) of the model at
    `path` ([], an empty set when onnx cannot read it: the compile reports it)."""
    import onnx

    try:
        graph = onnx.load(path, load_external_data=False).graph
    except Exception:  # noqa: BLE001 (the compile that follows says what is wrong)
        return [], set()
    initialized = {t.name for t in graph.initializer}
    fed = [i for i in graph.input if i.name not in initialized]
    return fed, {i.name for i in graph.input}


def check_input_names(
    path: str,
    shapes: dict[str, tuple[int, ...]],
    constants: dict[str, np.ndarray],
    feeds: dict[str, np.ndarray] | None = None,
) -> None:
    """Refuses, before compiling, an --input-shape, --constant or --inputs array
    that names no input of the model, listing the inputs it has (not its
    initializers)."""
    if not (shapes or constants or feeds):
        return
    fed, every = model_inputs(path)
    if not every:
        return
    real = {i.name for i in fed}
    wrong = [("--input-shape", n) for n in shapes if n not in real]
    wrong += [("--constant", n) for n in constants if n not in every]
    wrong += [("--inputs", n) for n in feeds or {} if n not in every]
    if wrong:
        named = ", ".join(f"{flag} '{name}'" for flag, name in wrong)
        are = "is not an input" if len(wrong) == 1 else "are not inputs"
        raise SmeltError(
            f"{named} {are} of {os.path.basename(path)} (its inputs: "
            f"{', '.join(i.name for i in fed) or 'none'})"
        )
    for info in fed:
        if info.name in shapes:
            _check_dims(info, shapes[info.name])


def _check_dims(info, dims: tuple[int, ...]) -> None:
    """An --input-shape against the dims the model fixes itself."""
    declared = info.type.tensor_type.shape.dim
    flag = f"--input-shape {info.name}={'x'.join(map(str, dims))}"
    if info.type.tensor_type.HasField("shape") and len(declared) != len(dims):
        raise SmeltError(f"{flag}: '{info.name}' has {len(declared)} dims, not "
                         f"{len(dims)}")
    for axis, (d, given) in enumerate(zip(declared, dims)):
        if d.HasField("dim_value") and d.dim_value != given:
            raise SmeltError(f"{flag}: the model fixes dim {axis} of '{info.name}' "
                             f"to {d.dim_value}")


def compile_inputs(
    args, path: str, feeds: dict[str, np.ndarray] | None = None
) -> tuple[str | bytes, dict[str, tuple[int, ...]], dict[str, np.ndarray]]:
    """What `smelt run` / `smelt compile` compile: the model (its bytes with
    --random-weights), the input shapes (--input-shape, and those of the --inputs
    arrays for inputs the model leaves open) and the --constant values, their
    names checked against the model's inputs."""
    shapes = {}
    if feeds:
        shapes = {k: feeds[k].shape for k in dynamic_inputs(path) if k in feeds}
    shapes.update(parse_shapes(args.input_shape))
    constants = parse_constants(args.constant)
    check_input_names(path, parse_shapes(args.input_shape), constants, feeds)
    source: str | bytes = path
    if args.random_weights is not None:  # the same seeded weights for onnxruntime
        from smelt.frontend.random_weights import random_weights

        proto = random_weights(onnx_load(path), args.random_weights)
        source = proto.SerializeToString()
    return source, shapes, constants
