"""An artifact's manifest as hostile input: every field edited, each edit ends in
one clean error or the right answer (never a crash), and the sizes the native code
trusts are refused by name when they are not the code's own."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.errors import InvalidInput, InvalidModel, SmeltError
from smelt.runtime import artifact

HERE = Path(__file__).resolve().parent


def probe_model():
    """Two inputs, two outputs of other shapes, an intermediate in the arena, a
    parallel loop at threads=2 (a thread pool) and a Gather (an index check with
    its message)."""
    rng = np.random.default_rng(5)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 96])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 16])
    g = helper.make_tensor_value_info("g", TensorProto.FLOAT, [3, 32])
    inits = [
        numpy_helper.from_array(rng.standard_normal((96, 128)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal((10, 32)).astype(np.float32), "e"),
        numpy_helper.from_array(rng.standard_normal((128, 16)).astype(np.float32), "v"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Relu", ["m"], ["r"]),
        helper.make_node("MatMul", ["r", "v"], ["y"]),
        helper.make_node("Gather", ["e", "i"], ["g"]),
    ]
    graph = helper.make_graph(nodes, "probe", [x, i], [y, g], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def probe_feeds() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Good inputs, and inputs whose index the Gather's check refuses."""
    x = np.random.default_rng(1).standard_normal((64, 96)).astype(np.float32)
    return {"x": x, "i": np.array([0, 9, -3])}, {"x": x, "i": np.array([0, 11, 2])}


# -- the edits -------------------------------------------------------------------------


def _replacements(value) -> list:
    """Values to put in place of `value`: wrong sizes, wrong types, extremes."""
    if isinstance(value, bool):
        return [not value, None, 0, "x"]
    if isinstance(value, int):
        return [0, -1, value + 1, value - 1, 2 * value + 64, 64, 2**40, 2**64,
                -(2**63), "7", None, 1.5, math.nan]  # fmt: skip
    if isinstance(value, float):
        return [0, -1.0, math.inf, math.nan, None, "x"]
    if isinstance(value, str):
        return ["", value + "x", "float64", "../x", 0, None, []]
    if isinstance(value, list):
        out: list = [[], None, "x", {}, [value]]
        if value:
            out += [value[:-1], value + [value[-1]], value[::-1] if len(value) > 1
                    else value * 2]  # fmt: skip
        return out
    if isinstance(value, dict):
        return [{}, None, [], "x"]
    return [0, "x"]  # None


def edits(manifest) -> Iterator[tuple[str, Callable[[dict], None]]]:
    """(label, edit of a manifest in place) for every field at every depth: each
    value replaced (`_replacements`) and each key or list entry deleted."""

    def walk(value, path: tuple):
        for i, new in enumerate(_replacements(value)):
            if path:
                yield (
                    f"{_label(path)} = {json.dumps(new)[:40]} #{i}",
                    _setter(path, new),
                )
        if path and not isinstance(path[-1], int):
            yield f"del {_label(path)}", _deleter(path)
        if isinstance(value, dict):
            for key, child in value.items():
                yield from walk(child, (*path, key))
        elif isinstance(value, list):
            for i, child in enumerate(value):
                yield from walk(child, (*path, i))
            if value:
                yield f"del {_label(path)}[0]", _deleter((*path, 0))

    yield from walk(manifest, ())


def _label(path: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)[1:]


def _parent(manifest, path: tuple):
    for key in path[:-1]:
        manifest = manifest[key]
    return manifest


def _setter(path: tuple, new) -> Callable[[dict], None]:
    def edit(manifest):
        _parent(manifest, path)[path[-1]] = json.loads(json.dumps(new))

    return edit


def _deleter(path: tuple) -> Callable[[dict], None]:
    def edit(manifest):
        del _parent(manifest, path)[path[-1]]

    return edit


def rewrite(source: Path, target: Path, edit: Callable[[dict], None]) -> None:
    """`source` written again at `target` with its manifest edited."""
    with zipfile.ZipFile(source) as z:
        members = {name: z.read(name) for name in z.namelist()}
    manifest = json.loads(members[artifact.MANIFEST])
    edit(manifest)
    members[artifact.MANIFEST] = json.dumps(manifest).encode()
    with zipfile.ZipFile(target, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)


# -- the worker (a subprocess: a crash ends it, not pytest) ----------------------------


def outcome(path: Path, expected: dict[str, np.ndarray]) -> str:
    """How loading and running the artifact at `path` ends: "same" (the right
    answers, the index check still refusing a bad index), "refused: ..." (a
    SmeltError), or what went wrong ("wrong: ...", "foreign: ...")."""
    good, bad = probe_feeds()
    try:
        model = smelt.load(path, trust=True)
        got = model.run(good)
        for name, want in expected.items():
            if name not in got or not np.array_equal(got[name], want):
                return f"wrong: output {name} differs"
        try:
            model.run(bad)
            return "wrong: an index out of range was not refused"
        except InvalidInput:
            pass
        model.profile()
        return "same"
    except SmeltError as e:
        return f"refused: {type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 (what the probe looks for)
        return f"foreign: {type(e).__name__}: {e}"


def probes(
    source: Path, mode: str, count: int = 0, seed: int = 0
) -> Iterator[tuple[str, Callable[[Path], None]]]:
    """(label, write the probe's file at a path): "fields" edits every manifest
    field (`edits`), "combos" `count` random triples of those edits; "flips" flips `count` random bits of the file (hashes left
    as they are) and "members" `count` bits inside its members with the
    manifest's sizes and sha256 recomputed (what a careless or hostile writer
    makes)."""
    if mode in ("fields", "combos"):
        with zipfile.ZipFile(source) as z:
            manifest = json.loads(z.read(artifact.MANIFEST))
        every = list(edits(manifest))
        if mode == "fields":
            for label, edit in every:
                yield label, lambda target, edit=edit: rewrite(source, target, edit)
            return
        rng = np.random.default_rng(seed)
        for n in range(count):
            picked = [every[int(i)] for i in rng.integers(0, len(every), 3)]
            yield (
                f"combo {n}: " + " & ".join(label for label, _ in picked),
                (
                    lambda target, picked=picked: rewrite(
                        source, target, lambda m: _all(m, [e for _, e in picked])
                    )
                ),
            )
        return
    data = source.read_bytes()
    rng = np.random.default_rng(seed)
    if mode == "flips":
        for _ in range(count):
            at, bit = int(rng.integers(0, len(data))), int(rng.integers(0, 8))
            flipped = bytearray(data)
            flipped[at] ^= 1 << bit
            yield f"flip {at}.{bit}", lambda t, b=bytes(flipped): t.write_bytes(b)
        return
    # the weights: data the code reads (flipping the object code with its hash
    # recomputed is running other code: `test_signed_artifacts` covers it)
    names = [artifact.WEIGHTS]
    for _ in range(count):
        name = names[int(rng.integers(0, len(names)))]
        at, bit = int(rng.integers(0, 1 << 30)), int(rng.integers(0, 8))
        yield (
            f"member {name} {at}.{bit}",
            lambda t, n=name, a=at, b=bit: _flip_member(source, t, n, a, b),
        )


def _all(manifest: dict, changes: list[Callable[[dict], None]]) -> None:
    """Applies `changes` in turn, skipping one that an earlier change made
    impossible (its field deleted or replaced by another type)."""
    for change in changes:
        try:
            change(manifest)
        except (KeyError, IndexError, TypeError):
            pass


def _flip_member(source: Path, target: Path, name: str, at: int, bit: int) -> None:
    """`source` at `target` with one bit of member `name` flipped and the
    manifest's record of it (bytes, sha256) made to match."""
    import hashlib

    with zipfile.ZipFile(source) as z:
        members = {n: z.read(n) for n in z.namelist()}
    data = bytearray(members[name])
    data[at % len(data)] ^= 1 << bit
    members[name] = bytes(data)
    manifest = json.loads(members[artifact.MANIFEST])
    manifest["members"][name] = {
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    members[artifact.MANIFEST] = json.dumps(manifest).encode()
    with zipfile.ZipFile(target, "w") as z:
        for n, d in members.items():
            z.writestr(n, d)


def worker(
    mode: str,
    source: str,
    expected: str,
    start: int,
    folder: str,
    count: int,
    seed: int,
) -> None:
    """Probes `start`… of `probes(...)`, one JSON line before ("begin") and after
    ("end") each, flushed: a crash leaves its "begin". A probe that runs 60 s
    ends the process by SIGALRM (a hang in native code too)."""
    want = dict(np.load(expected))
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    for i, (label, write) in enumerate(probes(Path(source), mode, count, seed)):
        if i < start:
            continue
        print(json.dumps({"begin": i, "label": label}), flush=True)
        target = Path(folder) / f"probe{i}.smelt"
        write(target)
        signal.alarm(60)
        result = outcome(target, want)
        signal.alarm(0)
        target.unlink()
        print(json.dumps({"end": i, "label": label, "outcome": result}), flush=True)


def run_probes(
    source: Path,
    expected: Path,
    folder: Path,
    mode: str = "fields",
    count: int = 0,
    seed: int = 0,
) -> dict[str, str]:
    """Every probe's outcome by label, a crashed or hung probe as "crash: …" or
    "hang", the worker restarted after it."""
    results: dict[str, str] = {}
    start = 0
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); import test_artifact_trust"
        " as t; a = sys.argv; t.worker(a[1], a[2], a[3], int(a[4]), a[5], "
        "int(a[6]), int(a[7]))"
    )
    while True:
        log = folder / f"log{start}.jsonl"
        args = [mode, str(source), str(expected), str(start), str(folder),
                str(count), str(seed)]  # fmt: skip
        with log.open("w") as out:
            process = subprocess.Popen(
                [sys.executable, "-c", code, *args], stdout=out, stderr=out
            )
            process.wait()
        lines = [json.loads(line) for line in log.read_text().splitlines()
                 if line.startswith("{")]  # fmt: skip
        begun = None
        for line in lines:
            if "end" in line:
                results[line["label"]] = line["outcome"]
                begun = None
            else:
                begun = line
        if begun is None:
            assert process.returncode == 0, log.read_text()[-2000:]
            return results
        code_ = process.returncode
        results[begun["label"]] = (
            "hang" if code_ == -signal.SIGALRM else f"crash: exit {code_}"
        )
        start = begun["begin"] + 1


# -- the tests -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    folder = tmp_path_factory.mktemp("probe")
    compiled = smelt.compile(probe_model(), threads=2, profile=True)
    assert compiled.program.pool_threads == 2 and compiled.program.check_messages
    source = compiled.save(folder / "probe.smelt")
    np.savez(folder / "expected.npz", **compiled.run(probe_feeds()[0]))
    return Path(source), folder / "expected.npz"


def test_every_manifest_field_edited_ends_cleanly(probe, tmp_path):
    source, expected = probe
    assert outcome(source, dict(np.load(expected))) == "same"  # the probe itself
    results = run_probes(source, expected, tmp_path)
    with zipfile.ZipFile(source) as z:
        manifest = json.loads(z.read(artifact.MANIFEST))
    assert len(results) == len(list(edits(manifest))) > 500
    bad = {k: v for k, v in results.items()
           if v != "same" and not v.startswith("refused: ")}  # fmt: skip
    assert not bad, json.dumps(bad, indent=1)[:4000]
    # the sizes and tables the native program trusts are refused by name
    named = {
        "program.threads = 64 #5": "program.threads",
        "program.arena_bytes = 0 #0": "program.arena_bytes",
        "program.pool_bytes = 0 #0": "program.pool_bytes",
        "program.weight_bytes = 0 #0": "program.weight_bytes",
        "outputs[0].shape = [] #0": "outputs",
        "outputs[0].shape[0] = 0 #0": "outputs",
        "program.signature[2][0] = [] #0": "program.signature",
        "program.check_messages = [] #0": "program.check_messages",
        "del program.check_messages[0]": "program.check_messages",
        "program.profiled_calls = [] #0": "program.profiled_calls",
        "program.code = [] #0": "object code",
    }
    for label, needle in named.items():
        assert results[label].startswith("refused: InvalidModel"), (
            label,
            results[label],
        )
        assert needle in results[label], (label, results[label])


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda m: m["program"].update(threads=64), "program.threads (64)"),
        (lambda m: m["program"].update(arena_bytes=0), "program.arena_bytes (0)"),
        (lambda m: m["outputs"][0].update(shape=[1, 1]), "outputs record y"),
        (lambda m: m["program"]["signature"][2].__setitem__(0, [1, 1]),
         "program.signature"),
        (lambda m: m["program"]["check_messages"].append("extra"),
         "program.check_messages"),
    ],
)  # fmt: skip
def test_the_probes_of_the_issue_are_refused_by_name(probe, tmp_path, edit, needle):
    path = tmp_path / "m.smelt"
    rewrite(probe[0], path, edit)
    with pytest.raises(InvalidModel, match="is damaged") as info:
        smelt.load(path, trust=True)
    assert needle in str(info.value)


def test_an_edited_cache_entry_is_rebuilt(tmp_path):
    model = probe_model()
    first = smelt.compile(model, cache=tmp_path, threads=2)
    entry = Path(first.info["cache_path"])
    rewrite(entry, entry, lambda m: m["program"].update(threads=64))
    again = smelt.compile(model, cache=tmp_path, threads=2)
    assert again.info["cache"].startswith("rebuilt: ")
    assert "program.threads" in again.info["cache"]
    good = probe_feeds()[0]
    for name, value in first.run(good).items():
        np.testing.assert_array_equal(again.run(good)[name], value)
    assert smelt.compile(model, cache=tmp_path, threads=2).info["cache"] == "hit"


def test_code_without_its_record_is_refused(probe, tmp_path):
    """Code that does not say what it needs (an older smelt's, or code swapped
    in) is refused before it runs."""
    from smelt.lowering.llvm import program

    with pytest.raises(InvalidModel, match="does not record what it needs"):

        class Engine:
            def get_global_value_address(self, name):
                assert name == program.NEEDS_GLOBAL
                return 0

        program.recorded_needs(Engine())  # type: ignore[arg-type]
    assert os.path.exists(probe[0])


# -- files that are not artifacts ------------------------------------------------------


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fails the test (instead of hanging it) when the body takes longer."""

    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_fifo_device_or_folder_is_refused_without_reading(tmp_path):
    fifo = tmp_path / "fifo.smelt"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.smelt"
    zero.symlink_to("/dev/zero")
    folder = tmp_path / "folder.smelt"
    folder.mkdir()
    for path, kind in ((fifo, "a FIFO"), (zero, "a character device"),
                       (folder, "a folder")):  # fmt: skip
        with deadline(20), pytest.raises(InvalidModel, match=kind):
            smelt.load(path, trust=True)
        with deadline(20), pytest.raises(InvalidModel, match=kind):
            artifact.read_manifest(path)


def _zip(path: Path, members: dict[str, bytes], method=zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def test_an_inflating_or_deep_manifest_is_refused(probe, tmp_path):
    size = artifact.MANIFEST_LIMIT + 1024
    bomb = _zip(tmp_path / "bomb.smelt", {artifact.MANIFEST: b" " * size})
    assert bomb.stat().st_size < size // 100  # it inflates
    with deadline(60), pytest.raises(InvalidModel, match="too many"):
        smelt.load(bomb, trust=True)
    deep = _zip(tmp_path / "deep.smelt", {artifact.MANIFEST: b"[" * 200_000})
    with pytest.raises(InvalidModel, match="manifest.json cannot be read"):
        smelt.load(deep, trust=True)
    # a member whose record claims more bytes than the file holds
    lying = tmp_path / "lying.smelt"

    def claim(manifest):
        manifest["members"]["code0.o"]["bytes"] = 2**60

    rewrite(probe[0], lying, claim)
    with deadline(60), pytest.raises(InvalidModel, match="code0.o"):
        smelt.load(lying, trust=True)


@pytest.mark.parametrize("mode", ["flips", "members"])
def test_bit_flips_end_cleanly(probe, tmp_path, mode):
    """Bits flipped across the file (hashes left) or in the weights (hashes
    recomputed): each probe, in a subprocess, ends in a SmeltError or the right
    answers (other weights: other answers, the only "wrong" allowed); none
    crashes or hangs."""
    results = run_probes(*probe, tmp_path, mode, count=60, seed=11)
    assert len(results) > 50
    for label, result in results.items():
        allowed = result == "same" or result.startswith("refused: ")
        if mode == "members":
            allowed = allowed or result.startswith("wrong: output ")
        assert allowed, (label, result)


# -- signatures ------------------------------------------------------------------------


def _keys(folder: Path, name: str) -> tuple[Path, Path]:
    """A fresh Ed25519 key pair as PEM files (what openssl genpkey writes)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate()
    private, public = folder / f"{name}.pem", folder / f"{name}.pub"
    private.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ))  # fmt: skip
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ))  # fmt: skip
    return private, public


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {name: z.read(name) for name in z.namelist()}


def _write(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def _system_object(needs: dict, segments: list[int], marker: Path) -> bytes:
    """Object code with the artifact's entry point and records whose entry point
    calls system("touch MARKER"): code replaced by a hostile writer."""
    import llvmlite.binding as llvm

    from smelt.lowering.llvm import program

    def text(data: bytes) -> str:
        return "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:02X}"
                       for b in data)  # fmt: skip

    command = f"touch {marker}".encode() + b"\0"
    record = json.dumps(needs, sort_keys=True).encode() + b"\0"
    table = ", ".join(f"i64 {n}" for n in segments)
    ir_text = f"""
        @cmd = private constant [{len(command)} x i8] c"{text(command)}"
        @{program.NEEDS_GLOBAL} = constant [{len(record)} x i8] c"{text(record)}"
        @{program.SEGMENTS_GLOBAL} = constant [{len(segments)} x i64] [{table}]
        @{program.STATUS_GLOBAL} = global i32 0
        declare i32 @system(ptr)
        define void @{program.ENTRY}(ptr %io, ptr %arena, ptr %w, ptr %pool) {{
          %r = call i32 @system(ptr @cmd)
          ret void
        }}
    """
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(ir_text)
    module.triple = llvm.get_process_triple()
    target = llvm.Target.from_triple(module.triple)
    machine = target.create_target_machine(codemodel="jitdefault", jit=True)
    return machine.emit_object(module)


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("signed")
    private, public = _keys(folder, "builder")
    compiled = smelt.compile(probe_model())
    path = artifact.save(compiled, folder / "signed.smelt", sign=private)
    return compiled, Path(path), private, public


def test_a_signed_artifact_runs_for_its_key(signed, tmp_path):
    compiled, path, _private, public = signed
    good = probe_feeds()[0]
    model = smelt.load(path, trust=public)
    from cryptography.hazmat.primitives import serialization

    from smelt.runtime.artifact_sign import fingerprint

    raw = serialization.load_pem_public_key(public.read_bytes()).public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    assert model.info["signer"] == fingerprint(raw)
    for name, want in compiled.run(good).items():
        np.testing.assert_array_equal(model.run(good)[name], want)
    _, other = _keys(tmp_path, "other")
    assert smelt.load(path, trust=[other, public]).info["signer"] == fingerprint(raw)
    assert smelt.load(path, trust=True).info["signer"] == fingerprint(raw)
    with pytest.raises(InvalidModel, match="no key named.*trust=True"):
        smelt.load(path)
    with pytest.raises(InvalidModel, match="not a key you trust"):
        smelt.load(path, trust=other)
    unsigned = compiled.save(tmp_path / "unsigned.smelt")
    for trust in (None, False, public):
        with pytest.raises(InvalidModel, match="is unsigned; an artifact is native"):
            smelt.load(unsigned, trust=trust)
    with pytest.raises(SmeltError, match="trust= takes True"):
        smelt.load(path, trust=3)


def test_replaced_code_runs_only_when_trusted(signed, tmp_path):
    """The issue's probe: the object code replaced by code that calls system(),
    the manifest's hashes recomputed. Signed by the builder's key the artifact
    was; the replacement is refused for that key with the old signature, without
    one and with another key's; trust=True runs it (what trusting means)."""
    import hashlib

    from smelt.lowering.llvm import program
    from smelt.runtime import artifact_sign

    compiled, path, _private, public = signed
    marker = tmp_path / "ran"
    needs = program.recorded_needs(compiled.program._engine)
    segments = [len(compiled.program.weights),
                *(w.nbytes for w in compiled.program.weights)]  # fmt: skip
    code = _system_object(needs, segments, marker)
    members = _members(path)
    manifest = json.loads(members[artifact.MANIFEST])
    for name in manifest["program"]["code"]:
        del members[name], manifest["members"][name]
    manifest["program"]["code"] = ["code0.o"]
    manifest["members"]["code0.o"] = {
        "bytes": len(code),
        "sha256": hashlib.sha256(code).hexdigest(),
    }
    members["code0.o"] = code
    members[artifact.MANIFEST] = text = json.dumps(manifest).encode()
    kept = _write(tmp_path / "kept.smelt", members)  # the builder's old signature
    del members[artifact_sign.SIGNATURE]
    bare = _write(tmp_path / "bare.smelt", members)
    mallory, _ = _keys(tmp_path, "mallory")
    members[artifact_sign.SIGNATURE] = artifact_sign.sign(text, mallory)
    resigned = _write(tmp_path / "resigned.smelt", members)
    for hostile, trust, needle in (
        (kept, public, "does not match its manifest"),
        (kept, True, "does not match its manifest"),
        (bare, public, "is unsigned"),
        (bare, None, "is unsigned"),
        (resigned, public, "not a key you trust"),
        (resigned, None, "no key named"),
    ):
        with pytest.raises(InvalidModel, match=needle):
            smelt.load(hostile, trust=trust)
    assert not marker.exists()
    # trusted, the replaced code is what runs: in a subprocess
    run = (
        "import sys, smelt; sys.path.insert(0, sys.argv[2]); "
        "import test_artifact_trust as t; "
        "smelt.load(sys.argv[1], trust=True).run(t.probe_feeds()[0])"
    )
    done = subprocess.run(
        [sys.executable, "-c", run, str(bare), str(HERE)],
        check=False, timeout=120, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert marker.exists()


def test_cli_signs_and_trusts_by_key(signed, tmp_path):
    _compiled, _, private, public = signed
    model = tmp_path / "m.onnx"
    model.write_bytes(probe_model().SerializeToString())
    out = tmp_path / "m.smelt"

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "smelt.compiler.cli", *args],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip

    done = cli("compile", str(model), "-o", str(out), "--sign", str(private), "-q")
    assert done.returncode == 0, done.stderr
    ran = cli("run", str(out), "--trust-key", str(public))
    assert ran.returncode == 0, ran.stderr
    assert "ed25519:" in ran.stdout
    refused = cli("run", str(out))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith("smelt: error: the artifact") and (
        "--trust-key KEY.pub" in refused.stderr
    ), refused.stderr
    assert cli("run", str(out), "--trust").returncode == 0
    bad = cli("compile", str(model), "-o", str(out), "--sign", str(public), "-q")
    assert bad.returncode == 1 and "not an unencrypted PEM private key" in bad.stderr


def test_members_that_are_links_or_folders_are_only_bytes(probe, tmp_path):
    """A zip member marked as a symlink (to /dev/zero) or a folder is never
    followed or opened: its stored bytes are checked like any member's."""
    import stat as st

    members = _members(probe[0])
    for name, mode, data in (
        (artifact.WEIGHTS, st.S_IFLNK | 0o777, b"/dev/zero"),
        ("code0.o", st.S_IFLNK | 0o777, b"/dev/zero"),
        ("code0.o", st.S_IFDIR | 0o755, b""),
    ):
        path = tmp_path / "linked.smelt"
        with zipfile.ZipFile(path, "w") as z:
            for other, content in members.items():
                info = zipfile.ZipInfo(other)
                if other == name:
                    info.external_attr, content = mode << 16, data
                z.writestr(info, content)
        with deadline(30), pytest.raises(InvalidModel, match=name):
            smelt.load(path, trust=True)
