"""Deployable artifacts: a compiled CPU model saved as one file and loaded without
recompiling, with numpy, llvmlite and the standard library only (no xdsl, no onnx).

An artifact is native code: loading one runs the machine code it holds in this
process. `load` takes one only when the caller trusts it (`trust=True`) or names
the key that signed it (`artifact_sign`).

An artifact is a zip archive, stored uncompressed:

    manifest.json  format and version, smelt / llvmlite versions, target triple,
                   CpuSpec, compile options and pipeline, inputs and outputs, what
                   the native program needs (arena bytes, threads, …) and the size
                   and sha256 of each other member
    signature.json (signed artifacts) the Ed25519 signature of manifest.json
    code0.o, …     the object code built for the model (relocatable ELF: one per
                   part the compile split the model in), linked at load
    weights.bin    the weight segments the entry point reads (the blob, then each
                   weight kept apart, at ALIGN-aligned offsets the manifest lists)

Loading checks everything before the code is touched: that the file is a regular
file, the manifest's size, the format version, the signature against `trust`,
every member's size and sha256, the smelt version, the target triple, that the
host CPU has every ISA feature the code was built for (by the manifest and by the
code's own record), and that each symbol the objects import and none defines
(libm, pthreads, compiler runtime) resolves in this process (`object_code`). Then
every size and table the native program trusts (arena, pool, threads, @main's
buffers, check messages, weight segments) is compared with what the code recorded
when it was built (`program.NEEDS_GLOBAL`): a manifest edited by hand is refused
by the name of the field, never run. Whatever the file holds, only SmeltErrors
leave `load`.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import struct
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import llvmlite
import llvmlite.binding as llvm
import numpy as np

from smelt.dialects.weights import ALIGN, aligned_empty
from smelt.errors import InvalidModel, ResourceLimit, SmeltError, UnsupportedModel
from smelt.lowering.llvm.object_code import load_objects
from smelt.lowering.llvm.program import (
    ENTRY,
    NativeProgram,
    NeedsMismatch,
    cpu_record,
    recorded_needs,
)
from smelt.runtime import artifact_sign
from smelt.runtime.files import open_regular
from smelt.runtime.model import CompiledModel, TensorSpec
from smelt.targets.cpu_spec import CpuSpec, host, host_lacks

FORMAT = "smelt-artifact"
FORMAT_VERSION = 4
"""Bumped whenever the manifest or the native interface changes meaning."""
MANIFEST, WEIGHTS = "manifest.json", "weights.bin"
SUFFIX = ".smelt"


def smelt_version() -> str:
    from smelt.version import __version__

    return __version__


def save(
    model: CompiledModel,
    path: str | os.PathLike,
    extra: dict | None = None,
    sign: Any = None,
) -> str:
    """Writes `model` (compiled for the cpu target) as an artifact at `path`,
    atomically: a reader sees the old file or the whole new one. `extra` joins the
    manifest (the cache's key); `sign`, an Ed25519 private key (or its PEM file),
    signs it (`artifact_sign`); returns the path."""
    if sign is not None:
        sign = artifact_sign.private_key(sign)  # a bad key: before anything
    program = model.program
    if not isinstance(program, NativeProgram):
        raise UnsupportedModel(
            "only models compiled for the cpu target can be saved as artifacts"
        )
    if program.object_code is None:
        raise UnsupportedModel(
            "this model's object code was not kept (compile it with smelt.compile)"
        )
    segments = [np.ascontiguousarray(w).view(np.uint8).reshape(-1)
                for w in program.weights]  # fmt: skip
    offsets, weights_hash, total = [], hashlib.sha256(), 0
    for segment in segments:
        offsets.append([total, segment.nbytes])
        weights_hash.update(segment)
        total += segment.nbytes
        pad = -total % ALIGN
        weights_hash.update(bytes(pad))
        total += pad
    code = {f"code{i}.o": part for i, part in enumerate(program.object_code)}
    options = model.info.get("options")  # CompileOptions: its JSON record
    options = options.record() if hasattr(options, "record") else options
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "smelt_version": smelt_version(),
        "llvmlite_version": llvmlite.__version__,
        "llvm_version": ".".join(map(str, llvm.llvm_version_info)),
        "triple": llvm.get_process_triple(),
        "cpu": cpu_record(program.spec),
        "cpu_text": str(program.spec),
        "pipeline": model.info.get("pipeline"),
        "options": options,
        "stats": model.info.get("stats"),  # kernels, bytes, arena (smelt.report)
        "inputs": [_tensor_record(s) for s in model.inputs],
        "outputs": [_tensor_record(s) for s in model.outputs],
        "program": {
            "signature": [[list(s), d.name] for s, d in program.signature],
            "arena_bytes": program.arena_bytes,
            "weight_bytes": program.weight_bytes,
            "weight_segments": offsets,
            "threads": program.pool_threads,
            "pool_bytes": program.pool_bytes,
            "profiled_calls": list(program.profiled_calls),
            "profiled_nodes": [list(n) for n in program.profiled_nodes],
            "code": list(code),
            "check_messages": list(program.check_messages),
        },
        "members": {
            **{
                name: {"bytes": len(part), "sha256": hashlib.sha256(part).hexdigest()}
                for name, part in code.items()
            },
            WEIGHTS: {"bytes": total, "sha256": weights_hash.hexdigest()},
        },
        **(extra or {}),
    }
    path = os.fspath(path)
    # a fresh name beside `path` (same file system: the rename is atomic), made
    # with the umask's permissions like any file the user writes
    temp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        text = json.dumps(manifest, indent=1, default=str).encode()
        with open(temp, "xb") as f, zipfile.ZipFile(f, "w") as z:
            z.writestr(MANIFEST, text)
            if sign is not None:
                z.writestr(artifact_sign.SIGNATURE, artifact_sign.sign(text, sign))
            for name, part in code.items():
                z.writestr(name, part)
            with z.open(WEIGHTS, "w", force_zip64=True) as w:
                for segment in segments:
                    w.write(memoryview(segment))
                    w.write(bytes(-segment.nbytes % ALIGN))
        os.replace(temp, path)
    except BaseException as e:
        if os.path.exists(temp):
            os.unlink(temp)
        if isinstance(e, OSError):
            raise SmeltError(f"cannot write the artifact '{path}': {e}") from None
        raise
    return path


def is_artifact(path: str | os.PathLike) -> bool:
    """Whether `path` names an artifact (by its suffix, or a zip with a manifest)."""
    path = os.fspath(path)
    if path.endswith(SUFFIX):
        return True
    return os.path.isfile(path) and zipfile.is_zipfile(path) and _has_manifest(path)


def _has_manifest(path: str) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            return MANIFEST in z.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """The manifest of the artifact at `path`, with its format checked."""
    path = os.fspath(path)
    with _refusing_foreign(path), _open(path) as z:
        return _manifest(_manifest_text(z, path), path)


def load(
    path: str | os.PathLike, *, check_cpu: bool = True, trust: Any = None
) -> CompiledModel:
    """The model saved at `path`, ready to run (nothing is compiled).

    An artifact is native code that runs in this process: it loads only when
    `trust` says so, True for any artifact (unsigned, or signed by anyone: a
    signature must still verify), or the public keys (`artifact_sign.public_keys`:
    PEM files or keys) one of which must have signed it; None refuses them all.
    Refuses a damaged file, another format or smelt version, another
    architecture and, with `check_cpu`, a CPU that lacks an ISA feature the code
    uses (without: the model loads and refuses to run, as a model compiled here
    for such a CPU does). Only SmeltErrors leave it, whatever the file holds;
    `info["signer"]` says who signed it ("unsigned" or a key's fingerprint)."""
    path = os.fspath(path)
    with _refusing_foreign(path):
        return _load(path, check_cpu, trust)


@contextmanager
def _refusing_foreign(path: str) -> Iterator[None]:
    """Turns what a hostile file can make Python raise (a manifest nested past
    the recursion limit, a value of the wrong type deep inside, an allocation
    too big) into the artifact's one error."""
    try:
        yield
    except SmeltError:
        raise
    except MemoryError:
        raise ResourceLimit(
            f"the artifact '{path}' asks for more memory than this machine has "
            "free: it is damaged, or compile it for a smaller model"
        ) from None
    except Exception as e:  # noqa: BLE001 (a file decides these; none escapes)
        raise _damaged(path, f"{type(e).__name__}: {e}") from None


def _load(path: str, check_cpu: bool, trust: Any) -> CompiledModel:
    t0 = time.perf_counter()
    with _open(path) as z:
        text = _manifest_text(z, path)
        manifest = _manifest(text, path)
        signer = artifact_sign.check(text, _signature(z, path), trust, path)
        spec, missing = _check_host(manifest, path, check_cpu)
        code = tuple(
            _member(z, manifest, name, path).tobytes() for name in _code(manifest, path)
        )
        blob = _member(z, manifest, WEIGHTS, path)
    engine = load_objects(code, ENTRY, f"the artifact '{path}'")
    spec, missing = _check_code_cpu(engine, missing, path, check_cpu)
    p = manifest["program"]  # a dict (`_code`)
    segments = _segments(blob, p.get("weight_segments"), path)
    try:
        signature = [(tuple(s), _dtype(d)) for s, d in p["signature"]]
        program = NativeProgram(
            engine,
            signature,
            [t["name"] for t in manifest["inputs"]],
            [t["name"] for t in manifest["outputs"]],
            int(p["arena_bytes"]),
            segments,
            int(p["weight_bytes"]),
            int(p["threads"]),
            int(p["pool_bytes"]),
            tuple(p["profiled_calls"]),
            spec,
            tuple(p["check_messages"]),
            object_code=code,
            missing_features=missing,
            profiled_nodes=_profiled_nodes(p.get("profiled_nodes", [])),
        )
        inputs = [_tensor_spec(t) for t in manifest["inputs"]]
        outputs = [_tensor_spec(t) for t in manifest["outputs"]]
    except NeedsMismatch as e:
        field = _MANIFEST_FIELDS.get(e.field, f"program.{e.field}")
        why = (
            f"its manifest's {field} ({e.given}) is not what its code was built "
            f"for ({e.recorded})"
        )
        raise _damaged(path, why) from None
    except InvalidModel as e:  # the code's records (program.py)
        raise _damaged(path, str(e)) from None
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
        why = f"its manifest is incomplete ({type(e).__name__}: {e})"
        raise _damaged(path, why) from None
    _check_tensors(inputs + outputs, program, path)
    info = {
        "pipeline": manifest.get("pipeline"),
        "target": "cpu",
        "cpu": str(spec),
        "options": manifest.get("options"),
        "stats": manifest.get("stats"),
        "artifact": path,
        "signer": signer,
        "manifest": manifest,
        "seconds": {"load": time.perf_counter() - t0},
    }
    return CompiledModel(program, inputs, outputs, info)


_MANIFEST_FIELDS = {"input_names": "inputs", "output_names": "outputs", "cpu": "cpu"}
"""The manifest's name of a `code_needs` field (the others sit under program.)."""


def _profiled_nodes(records) -> tuple[tuple[str, ...], ...]:
    """The ONNX node names of each profiled call (lists of strings)."""
    if not isinstance(records, list) or not all(
        isinstance(r, list) and all(isinstance(n, str) for n in r) for r in records
    ):
        raise TypeError("program.profiled_nodes is not a list of lists of names")
    return tuple(tuple(r) for r in records)


def _check_tensors(specs: list[TensorSpec], program: NativeProgram, path: str):
    """Refuses inputs / outputs records other than the buffers the code takes."""
    names = [*program.input_names, *program.output_names]
    for i, spec in enumerate(specs):
        kind = "inputs" if i < len(program.input_names) else "outputs"
        if i >= len(names) or spec.name != names[i] or i >= len(program.signature):
            raise _damaged(path, f"its manifest's {kind} do not match its code")
        shape, dtype = program.signature[i]
        signless = {spec.dtype.kind, dtype.kind} <= set("iu")  # loop-level ints
        same = spec.dtype == dtype or (
            signless and spec.dtype.itemsize == dtype.itemsize
        )
        if spec.shape != shape or not same:
            raise _damaged(
                path,
                f"its manifest's {kind} record {spec.name} as {spec.dtype}"
                f"{list(spec.shape)}; its code takes {dtype}{list(shape)}",
            )
    if len(specs) != len(names):
        raise _damaged(path, "its manifest's inputs / outputs do not match its code")


# -- reading -------------------------------------------------------------------------


MANIFEST_LIMIT = 64 << 20
"""The most bytes a manifest may hold (inflated): a real one holds kilobytes."""


@contextmanager
def _open(path: str) -> Iterator[zipfile.ZipFile]:
    f = open_regular(path, "artifact")
    try:
        try:
            z = zipfile.ZipFile(f)
        except (OSError, zipfile.BadZipFile, EOFError, ValueError) as e:
            raise _damaged(path, f"it is not a readable zip archive ({e})") from None
        with z:
            yield z
    finally:
        f.close()


def _code(manifest: dict[str, Any], path: str) -> list[str]:
    program = manifest.get("program")
    names = program.get("code") if isinstance(program, dict) else None
    if not names or not all(isinstance(n, str) for n in names):
        raise _damaged(path, "its manifest lists no object code")
    return names


def _damaged(path: str, why: str) -> InvalidModel:
    return InvalidModel(
        f"the artifact '{path}' is damaged or not a smelt artifact: {why}; compile "
        "it again (smelt compile MODEL -o FILE)"
    )


def _manifest_text(z: zipfile.ZipFile, path: str) -> bytes:
    return _small_member(z, MANIFEST, MANIFEST_LIMIT, path)


def _signature(z: zipfile.ZipFile, path: str) -> bytes | None:
    if artifact_sign.SIGNATURE not in z.namelist():
        return None
    return _small_member(
        z, artifact_sign.SIGNATURE, artifact_sign.SIGNATURE_LIMIT, path
    )


def _small_member(z: zipfile.ZipFile, name: str, limit: int, path: str) -> bytes:
    """A member read whole, refused past `limit` bytes (inflated: a deflate bomb
    stops there)."""
    try:
        size = z.getinfo(name).file_size
        if size > limit:
            raise _damaged(path, f"its {name} holds {size} bytes, too many")
        with z.open(name) as f:
            text = f.read(limit + 1)  # zipfile checks its CRC-32
    except KeyError:
        raise _damaged(path, f"it has no {name}") from None
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as e:
        raise _damaged(path, f"its {name} cannot be read ({e})") from None
    if len(text) > limit:
        raise _damaged(path, f"its {name} inflates past {limit} bytes")
    return text


def _manifest(text: bytes, path: str) -> dict[str, Any]:
    try:
        manifest = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise _damaged(path, f"its {MANIFEST} cannot be read ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _damaged(path, f"its {MANIFEST} is not a smelt manifest")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise UnsupportedModel(
            f"the artifact '{path}' has format version {version}; this smelt "
            f"({smelt_version()}) reads version {FORMAT_VERSION}: compile the model "
            "again with this smelt"
        )
    if manifest.get("smelt_version") != smelt_version():
        raise UnsupportedModel(
            f"the artifact '{path}' was built by smelt {manifest.get('smelt_version')}"
            f", this is smelt {smelt_version()}: compile the model again with this "
            "smelt (code and runtime must come from the same version)"
        )
    return manifest


def _check_host(
    manifest: dict[str, Any], path: str, check_cpu: bool
) -> tuple[CpuSpec, list[str]]:
    """The artifact's CpuSpec and the ISA features this CPU lacks (refused
    unless not `check_cpu`); a foreign architecture is always refused."""
    triple = llvm.get_process_triple()
    if manifest.get("triple") != triple:
        raise UnsupportedModel(
            f"the artifact '{path}' holds code for {manifest.get('triple')}; this "
            f"machine is {triple}: compile the model on (or for) this machine"
        )
    spec = manifest_spec(manifest, path)
    missing = lacking(manifest, path)
    if check_cpu and missing:
        raise _lacks(path, spec, missing)
    return spec, missing


def _lacks(path: str, spec: CpuSpec, missing: list[str]) -> UnsupportedModel:
    return UnsupportedModel(
        f"the artifact '{path}' was compiled for {spec.name} with "
        f"{', '.join(missing)}, which this CPU ({host().name}) lacks: compile the "
        "model here, or for a CPU this one covers (an artifact built with --cpu "
        "x86-64-v3 or x86-64-v4 runs on every CPU of that level)"
    )


def _check_code_cpu(
    engine, missing: list[str], path: str, check_cpu: bool
) -> tuple[CpuSpec, list[str]]:
    """The CpuSpec the code records it was built for, and the ISA features this
    CPU lacks of it or of the manifest's (an edited manifest can add refusals,
    never remove one)."""
    try:
        recorded = recorded_needs(engine)
        cpu = {"cpu": {**recorded["cpu"], "implied": recorded.get("implied")}}
    except (InvalidModel, KeyError, TypeError) as e:
        raise _damaged(path, str(e)) from None
    spec = manifest_spec(cpu, path)
    lacks = lacking(cpu, path)
    if check_cpu and lacks:
        raise _lacks(path, spec, lacks)
    return spec, sorted({*missing, *lacks})


def manifest_spec(manifest: dict[str, Any], path: str = "") -> CpuSpec:
    """The CpuSpec the artifact's code was built for."""
    try:
        cpu = manifest["cpu"]
        if not isinstance(cpu, dict) or not isinstance(cpu.get("implied"), list | None):
            raise TypeError("not a record")
        return CpuSpec(
            str(cpu["name"]),
            frozenset(cpu["features"]),
            int(cpu["l1d"]),
            int(cpu["l2"]),
            int(cpu["l3"]),
            int(cpu["cores"]),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise _damaged(path, f"its CPU record is incomplete ({e})") from None


def lacking(manifest: dict[str, Any], path: str = "") -> list[str]:
    """The ISA features the artifact's code may use that this CPU lacks: smelt's
    known features (`host_lacks`) and, for code built for another CPU model than
    this one, the features LLVM takes from that CPU's name (recorded when it was
    the build host's own, see `implied_features`)."""
    spec = manifest_spec(manifest, path)
    missing = host_lacks(spec)
    implied = manifest["cpu"].get("implied") or []
    if spec.name != host().name:
        here = llvm.get_host_cpu_features()
        missing += [str(f) for f in implied if not here.get(str(f), False)]
    return missing


def _segments(blob: np.ndarray, records, path: str) -> tuple[np.ndarray, ...]:
    """The weight segments: views of the member at the manifest's offsets."""
    try:
        spans = [(int(start), int(size)) for start, size in records]
    except (TypeError, ValueError):
        raise _damaged(path, "its weight segments are not listed") from None
    if not spans or any(
        start < 0 or size < 0 or start % ALIGN or start + size > blob.nbytes
        for start, size in spans
    ):
        raise _damaged(path, "its weight segments lie outside its weights")
    return tuple(blob[start : start + size] for start, size in spans)


def _member(
    z: zipfile.ZipFile, manifest: dict[str, Any], name: str, path: str
) -> np.ndarray:
    """The member's bytes in a fresh ALIGN-aligned array, read straight from the
    file (weights can be large: one read, one hash) and checked against the
    manifest's size and sha256."""
    try:
        record = manifest["members"][name]
        size, digest = int(record["bytes"]), str(record["sha256"])
        info = z.getinfo(name)
    except (KeyError, TypeError, ValueError):
        raise _damaged(path, f"its member {name} is missing") from None
    if info.compress_type != zipfile.ZIP_STORED or info.file_size != size:
        raise _damaged(path, f"its member {name} has the wrong size or compression")
    if not 0 <= size <= os.fstat(z.fp.fileno()).st_size:  # before allocating it
        raise _damaged(path, f"its member {name} is larger than the file")
    data = aligned_empty(size)
    f = z.fp
    try:
        f.seek(info.header_offset)
        header = f.read(30)
        if len(header) != 30 or header[:4] != b"PK\x03\x04":
            raise _damaged(path, f"the header of {name} is broken")
        name_bytes, extra_bytes = struct.unpack("<HH", header[26:30])
        f.seek(info.header_offset + 30 + name_bytes + extra_bytes)
        got = f.readinto(memoryview(data)[:size]) if size else 0
    except OSError as e:
        raise _damaged(path, f"{name} cannot be read ({e})") from None
    if got != size:
        raise _damaged(path, f"{name} is truncated ({got} of {size} bytes)")
    if hashlib.sha256(memoryview(data)[:size]).hexdigest() != digest:
        raise _damaged(path, f"the sha256 of {name} does not match its manifest")
    return data


# -- records ---------------------------------------------------------------------------


def _tensor_record(spec: TensorSpec) -> dict[str, Any]:
    return {"name": spec.name, "dtype": spec.dtype.name, "shape": list(spec.shape)}


def _tensor_spec(record: dict[str, Any]) -> TensorSpec:
    return TensorSpec(
        str(record["name"]), tuple(int(d) for d in record["shape"]),
        _dtype(record["dtype"]),
    )  # fmt: skip


def _dtype(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # bfloat16 and the float8 types

        return np.dtype(getattr(ml_dtypes, name))
