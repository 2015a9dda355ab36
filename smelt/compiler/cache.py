"""The compile cache: builds kept as artifacts, keyed by everything that decides them.

    key = sha256(model bytes (+ its external data files), CompileOptions.record(),
                 the TargetSpec as text, smelt's version, sha256 of smelt's source)

An entry is `DIR/<key>.smelt` (default DIR: ~/.cache/smelt). A hit loads the
artifact, which checks every member's sha256; an entry that fails to load, was
built by another smelt (version or source) or for another key is rebuilt and
overwritten, never trusted. Entries are written atomically (temp file, rename);
one that cannot be written (a read-only or full disk) is a warning, and the
compile returns its build all the same.

An entry is native code that a hit runs in this process: like ssh with ~/.ssh,
the cache refuses a folder that another user owns or that group or others may
write (`check_folder`), and makes its own folder private (mode 0700).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import warnings
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from smelt.errors import SmeltError
from smelt.runtime import artifact
from smelt.runtime.files import open_regular
from smelt.runtime.model import CompiledModel
from smelt.targets.cpu_spec import CpuSpec, host_lacks

if TYPE_CHECKING:
    from smelt.compiler.options import CompileOptions
    from smelt.compiler.runner import ModelLike

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
    folder = cache_dir(where)
    usable = check_folder(folder)
    path = folder / f"{key}{artifact.SUFFIX}"
    status = "miss"
    if lookup and usable and os.path.lexists(path):
        try:
            # trusted: this user's own folder, which nobody else can write
            # (check_folder)
            cached = artifact.load(path, check_cpu=False, trust=True)
            stale = _stale(cached.info["manifest"], key, options)
            if stale is None:
                cached.info.update(cache="hit", cache_path=str(path))
                return cached
            status = f"rebuilt: {stale}"
        except SmeltError as e:
            status = f"rebuilt: {e}"
    compiled = build()
    if usable:
        extra = {"cache_key": key, "smelt_source": source_digest()}
        try:
            artifact.save(compiled, path, extra)
        except SmeltError as e:  # the disk: the build itself is good
            warnings.warn(
                f"the compile cache could not keep this build ({e}); the compile "
                "goes on without it", stacklevel=3,
            )  # fmt: skip
            status += "; not stored"
    compiled.info.update(cache=status, cache_path=str(path))
    return compiled


def check_folder(folder: Path) -> bool:
    """Makes the cache folder (mode 0700) if it is missing; refuses one that
    another user owns or that group or others may write (their files would run
    as native code here). False, with a warning, when it cannot be made."""
    try:
        if not folder.exists():
            folder.parent.mkdir(parents=True, exist_ok=True)
            folder.mkdir(mode=0o700, exist_ok=True)
        st = folder.stat()
    except OSError as e:
        warnings.warn(
            f"the compile cache folder '{folder}' cannot be made or read ({e}); "
            "compiling without the cache", stacklevel=3,
        )  # fmt: skip
        return False
    if not stat.S_ISDIR(st.st_mode):
        raise SmeltError(f"the compile cache '{folder}' is not a folder: give a folder")
    if st.st_uid != os.geteuid():
        raise SmeltError(
            f"the compile cache folder '{folder}' belongs to another user (uid "
            f"{st.st_uid}); its entries are native code that would run in this "
            "process: use a folder of your own (cache=DIR, --cache DIR)"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = " and ".join(
            w for w, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH))
            if st.st_mode & bit
        )  # fmt: skip
        raise SmeltError(
            f"the compile cache folder '{folder}' is writable by {who} (mode "
            f"{stat.S_IMODE(st.st_mode):o}); its entries are native code that would "
            f"run in this process: chmod go-w '{folder}' (or use a private folder)"
        )
    return True


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
        name = os.fspath(model)
        try:
            with open_regular(name, "model") as f:
                data = f.read()
        except OSError as e:
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
    base = Path(base_dir or ".").resolve()
    for location in _external_files(data):
        digest.update(location.encode())
        file = (base / location).resolve()
        # only regular files inside the model's folder (the import refuses the
        # others and names them; a key never reads elsewhere, nor waits on a FIFO)
        if file.is_relative_to(base) and file.is_file():
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
    with open_regular(str(path), "external data") as f:
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
