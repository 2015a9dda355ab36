"""The compile cache: builds kept as artifacts, keyed by everything that decides them.

    key = sha256(model bytes (+ its external data files), CompileOptions.record(),
                 the TargetSpec as text, smelt's version, sha256 of smelt's source)

An entry is `DIR/<key>.smelt` (default DIR: ~/.cache/smelt). A hit loads the
artifact, which checks every member's sha256; an entry that fails to load, was
built by another smelt (version or source) or for another key is rebuilt and
overwritten, never trusted. Entries are written atomically (temp file, rename).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from smelt.errors import SmeltError
from smelt.runtime import artifact
from smelt.runtime.model import CompiledModel
from smelt.targets.cpu_spec import CpuSpec, host_lacks

if TYPE_CHECKING:
    from smelt.compiler.driver import CompileOptions, ModelLike

DEFAULT_DIR = Path("~/.cache/smelt")


def cache_dir(where: bool | str | os.PathLike) -> Path:
    """The cache folder: `where`, or DEFAULT_DIR for True."""
    return (DEFAULT_DIR if where is True else Path(where)).expanduser()


def compile_cached(
    model: ModelLike,
    options: CompileOptions,
    where: bool | str | os.PathLike,
    base_dir: str | os.PathLike | None,
    build: Callable[[], CompiledModel],
    lookup: bool = True,
) -> CompiledModel:
    """The cached build of `model` with `options`, or `build()`'s, then stored
    (always `build()`'s without `lookup`: a compile asked to dump its IR).
    `info["cache"]` says which: "hit", "miss" or "rebuilt: <why the entry was
    not used>"; `info["cache_path"]` is the entry."""
    check_cacheable(options.target)
    key = cache_key(model, options, base_dir)
    path = cache_dir(where) / f"{key}{artifact.SUFFIX}"
    status = "miss"
    if lookup and path.exists():
        try:
            cached = artifact.load(path, check_cpu=False)
            stale = _stale(cached.info["manifest"], key, options)
            if stale is None:
                cached.info.update(cache="hit", cache_path=str(path))
                return cached
            status = f"rebuilt: {stale}"
        except SmeltError as e:
            status = f"rebuilt: {e}"
    compiled = build()
    artifact.save(compiled, path, {"cache_key": key, "smelt_source": source_digest()})
    compiled.info.update(cache=status, cache_path=str(path))
    return compiled


def check_cacheable(target: str) -> None:
    """Refuses a target whose builds the cache does not keep."""
    if target != "cpu":
        raise SmeltError(
            f"the compile cache keeps cpu builds; target '{target}' is "
            "compiled every time (drop cache=)"
        )


def _stale(
    manifest: dict[str, Any], key: str, options: CompileOptions
) -> str | None:
    """Why an entry that loaded is not this build's, or None."""
    if manifest.get("smelt_source") != source_digest():
        return "built by another smelt source tree"
    if manifest.get("cache_key") != key:
        return "its key does not match its name"
    missing = artifact.lacking(manifest)
    if missing and not host_lacks(CpuSpec.parse(options.cpu)):  # a shared folder
        return f"built on a CPU with {', '.join(missing)}, which this one lacks"
    return None


def cache_key(
    model: ModelLike, options: CompileOptions, base_dir: str | os.PathLike | None
) -> str:
    """The hex sha256 that names `model`'s build with `options` in the cache."""
    parts = {
        "model": model_digest(model, base_dir),
        "options": options.record(),
        "target": str(CpuSpec.parse(options.cpu)),
        "smelt": artifact.smelt_version(),
        "source": source_digest(),
    }
    text = json.dumps(parts, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def model_digest(model: ModelLike, base_dir: str | os.PathLike | None = None) -> str:
    """sha256 of an ONNX model's bytes and of the external data files it names."""
    import onnx

    if isinstance(model, str | os.PathLike):
        try:
            data = Path(model).read_bytes()
        except OSError as e:
            name = os.fspath(model)
            raise SmeltError(f"cannot read the model '{name}': {e}") from None
        base_dir = base_dir or os.path.dirname(os.path.abspath(model))
    elif isinstance(model, bytes):
        data = model
    elif isinstance(model, onnx.ModelProto):
        data = model.SerializeToString()
    else:
        raise SmeltError(
            "cache= keys a build by the ONNX model's bytes: give a path, bytes or a "
            f"ModelProto, not a {type(model).__name__}"
        )
    digest = hashlib.sha256(data)
    for location in _external_files(data):
        digest.update(location.encode())
        file = Path(base_dir or ".") / location
        if file.is_file():  # a missing one: the import names it
            digest.update(_file_digest(file).encode())
    return digest.hexdigest()


def _external_files(data: bytes) -> list[str]:
    """The external data files of a serialized model (sorted, once each)."""
    if b"location" not in data:  # the key of every external data entry
        return []
    import onnx
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    try:
        proto = onnx.ModelProto.FromString(data)
    except Exception:  # noqa: BLE001 (the import reports a bad model properly)
        return []
    found = set()
    for tensor in _get_all_tensors(proto):
        if uses_external_data(tensor):
            for entry in tensor.external_data:
                if entry.key == "location":
                    found.add(entry.value)
    return sorted(found)


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


@cache
def source_digest() -> str:
    """sha256 of smelt's Python source: a build from other compiler code is stale
    even when the version number did not change (a development tree)."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for file in sorted(root.rglob("*.py")):
        digest.update(str(file.relative_to(root)).encode() + b"\0")
        digest.update(file.read_bytes())
    return digest.hexdigest()
