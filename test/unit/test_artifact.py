"""Artifacts (compile once, run many) and the compile cache: round trips in a fresh
process without xdsl, damaged / stale / foreign files refused or rebuilt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.errors import InvalidModel, SmeltError, UnsupportedModel
from smelt.runtime import artifact
from smelt.targets.cpu_spec import KNOWN_FEATURES, host


def _tanh_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])
    w = np.linspace(-1, 1, 25, dtype=np.float32).reshape(5, 5)
    w = numpy_helper.from_array(w, "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Tanh", ["m"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "tanh", [x], [y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _mlp_model():
    rng = np.random.default_rng(7)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 96])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 10])
    shapes = {"w1": (96, 128), "b1": (128,), "w2": (128, 10), "b2": (10,)}
    inits = [
        numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), name)
        for name, s in shapes.items()
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["z"]),
        helper.make_node("Softmax", ["z"], ["y"], axis=1),
    ]
    graph = helper.make_graph(nodes, "mlp", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(model) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {s.name: rng.standard_normal(s.shape).astype(s.dtype) for s in model.inputs}


# Loads and runs an artifact in a fresh interpreter, writes the outputs, and checks
# that neither xdsl nor onnx was imported on the way.
RUNNER = textwrap.dedent("""
    import sys
    import numpy as np
    import smelt
    model = smelt.load(sys.argv[1], trust=True)
    feeds = dict(np.load(sys.argv[2]))
    np.savez(sys.argv[3], **model.run(feeds))
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("xdsl", "onnx"))
    assert not heavy, heavy
    print("threads", model.program.threads)
""")


@pytest.mark.parametrize(
    "make, threads", [(_tanh_model, 1), (_mlp_model, 1), (_mlp_model, 2)]
)
def test_round_trip_in_a_fresh_process(tmp_path, make, threads):
    compiled = smelt.compile(make(), threads=threads)
    feeds = _feeds(compiled)
    expected = compiled.run(feeds)
    path = compiled.save(tmp_path / "m.smelt")
    np.savez(tmp_path / "in.npz", **feeds)
    result = subprocess.run(
        [sys.executable, "-c", RUNNER, path, str(tmp_path / "in.npz"),
         str(tmp_path / "out.npz")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    got = np.load(tmp_path / "out.npz")
    for name, value in expected.items():
        assert got[name].dtype == value.dtype
        np.testing.assert_array_equal(got[name], value)  # bit for bit
    if threads > 1 and compiled.program.threads > 1:
        assert "threads 2" in result.stdout


def test_manifest_records_the_build(tmp_path):
    compiled = smelt.compile(_tanh_model(), cpu="x86-64-v3", fast_math=True)
    manifest = artifact.read_manifest(compiled.save(tmp_path / "m.smelt"))
    assert manifest["format_version"] == artifact.FORMAT_VERSION
    assert manifest["smelt_version"] == smelt.__version__
    assert manifest["cpu"]["name"] == "x86-64-v3"
    assert manifest["options"]["fast_math"] is True
    assert manifest["options"]["cpu"] == "x86-64-v3"
    assert manifest["pipeline"] == compiled.info["pipeline"]
    assert manifest["inputs"] == [{"name": "x", "dtype": "float32", "shape": [3, 5]}]
    code = manifest["program"]["code"]
    assert code and set(manifest["members"]) == {*code, artifact.WEIGHTS}


def _rewrite(path, edit_manifest=None, edit_member=None) -> None:
    """Writes the artifact again with its manifest (a dict) or a member (name,
    bytes) changed by the given functions."""
    with zipfile.ZipFile(path) as z:
        members = {name: z.read(name) for name in z.namelist()}
    manifest = json.loads(members[artifact.MANIFEST])
    if edit_manifest:
        edit_manifest(manifest)
    members[artifact.MANIFEST] = json.dumps(manifest).encode()
    if edit_member:
        name, change = edit_member
        members[name] = change(members[name])
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)


def _flip(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    compiled = smelt.compile(_tanh_model())
    path = tmp_path_factory.mktemp("artifact") / "tanh.smelt"
    compiled.save(path)
    return compiled, path


def test_a_loaded_model_saves_again(saved, tmp_path):
    compiled, path = saved
    copy = smelt.load(path, trust=True).save(tmp_path / "copy.smelt")
    again = smelt.load(copy, trust=True)
    feeds = _feeds(compiled)
    np.testing.assert_array_equal(again.run(feeds)["y"], compiled.run(feeds)["y"])
    assert again.info["pipeline"] == compiled.info["pipeline"]


@pytest.mark.parametrize(
    "edit, kind, needle",
    [
        ({"edit_member": (artifact.WEIGHTS, _flip)}, InvalidModel, "sha256"),
        ({"edit_member": ("code0.o", _flip)}, InvalidModel, "sha256"),
        ({"edit_member": ("code0.o", lambda d: d[:-7])}, InvalidModel, "size"),
        ({"edit_manifest": lambda m: m.update(format_version=99)},
         UnsupportedModel, "format version 99"),
        ({"edit_manifest": lambda m: m.update(smelt_version="0.0.1")},
         UnsupportedModel, "smelt 0.0.1"),
        ({"edit_manifest": lambda m: m.update(triple="riscv64-unknown-linux-gnu")},
         UnsupportedModel, "riscv64"),
        ({"edit_manifest": lambda m: m.pop("format")}, InvalidModel, "manifest"),
        ({"edit_manifest": lambda m: m["program"].update(weight_segments=[[8, 4]])},
         InvalidModel, "weight segments lie outside"),
        ({"edit_manifest": lambda m: m["program"].pop("weight_segments")},
         InvalidModel, "weight segments are not listed"),
        # more segments than the code reads, or one smaller than it reads
        ({"edit_manifest": lambda m: m["program"].update(weight_segments=[[0, 1]] * 2)},
         InvalidModel, "do not belong to its code"),
        ({"edit_manifest": lambda m: m["program"].update(weight_segments=[[0, 0]])},
         InvalidModel, "do not belong to its code"),
    ],
)  # fmt: skip
def test_damaged_or_foreign_artifacts_are_refused(saved, tmp_path, edit, kind, needle):
    path = tmp_path / "m.smelt"
    path.write_bytes(saved[1].read_bytes())
    _rewrite(path, **edit)
    with pytest.raises(kind, match=needle):
        smelt.load(path, trust=True)


def test_truncated_or_foreign_files_are_refused(saved, tmp_path):
    data = saved[1].read_bytes()
    cut = tmp_path / "cut.smelt"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(InvalidModel, match="cut.smelt"):
        smelt.load(cut, trust=True)
    other = tmp_path / "model.onnx"
    other.write_bytes(_tanh_model().SerializeToString())
    with pytest.raises(InvalidModel, match="not a readable zip"):
        smelt.load(other, trust=True)
    with pytest.raises(SmeltError, match="no artifact file"):
        smelt.load(tmp_path / "absent.smelt", trust=True)


def test_a_cpu_the_host_lacks_is_refused(saved, tmp_path):
    lacking = [f for f in KNOWN_FEATURES if not host().has(f)]
    if not lacking:
        pytest.skip("this host has every ISA feature smelt knows")
    path = tmp_path / "m.smelt"
    path.write_bytes(saved[1].read_bytes())
    _rewrite(path, edit_manifest=lambda m: m["cpu"]["features"].append(lacking[0]))
    with pytest.raises(UnsupportedModel, match=f"{lacking[0]}, which this CPU"):
        smelt.load(path, trust=True)
    model = smelt.load(path, check_cpu=False, trust=True)  # loads, refuses to run
    with pytest.raises(SmeltError, match="lacks"):
        model.run(_feeds(model))


def test_features_of_another_cpu_name_are_checked(saved, tmp_path):
    """Code built for a CPU name may use the features LLVM's table gives that
    name; the manifest records them when the name was the build host's."""
    path = tmp_path / "m.smelt"
    path.write_bytes(saved[1].read_bytes())

    def foreign(manifest):
        manifest["cpu"]["name"] = "someothercpu"
        manifest["cpu"]["implied"] = ["sse2", "imaginaryext"]

    _rewrite(path, edit_manifest=foreign)
    with pytest.raises(UnsupportedModel, match="with imaginaryext, which this CPU"):
        smelt.load(path, trust=True)
    with pytest.raises(SmeltError, match="imaginaryext"):
        smelt.load(path, check_cpu=False, trust=True).run(_feeds(saved[0]))


def test_cache_hit_then_corrupt_entry_rebuilt(tmp_path):
    model = _mlp_model()
    first = smelt.compile(model, cache=tmp_path)
    assert first.info["cache"] == "miss"
    feeds = _feeds(first)
    expected = first.run(feeds)["y"]
    hit = smelt.compile(model, cache=tmp_path)
    assert hit.info["cache"] == "hit" and "artifact" in hit.info
    np.testing.assert_array_equal(hit.run(feeds)["y"], expected)
    entry = tmp_path / os.path.basename(first.info["cache_path"])

    _rewrite(entry, edit_member=(artifact.WEIGHTS, _flip))  # corrupt weights
    rebuilt = smelt.compile(model, cache=tmp_path)
    assert rebuilt.info["cache"].startswith("rebuilt: ")
    assert "sha256" in rebuilt.info["cache"]
    np.testing.assert_array_equal(rebuilt.run(feeds)["y"], expected)
    assert smelt.compile(model, cache=tmp_path).info["cache"] == "hit"  # overwritten

    entry.write_bytes(entry.read_bytes()[:1000])  # truncated
    assert smelt.compile(model, cache=tmp_path).info["cache"].startswith("rebuilt")
    again = smelt.compile(model, cache=tmp_path)
    assert again.info["cache"] == "hit"
    np.testing.assert_array_equal(again.run(feeds)["y"], expected)
    assert [p.name for p in tmp_path.iterdir()] == [entry.name]  # no temp files left


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m.update(smelt_version="0.0.1"),
        lambda m: m.update(smelt_source="0" * 64),
        lambda m: m.update(cache_key="f" * 64),
        lambda m: m["cpu"].update(name="othercpu", implied=["imaginaryext"]),
    ],
)
def test_stale_cache_entry_rebuilt(tmp_path, edit):
    model = _tanh_model()
    first = smelt.compile(model, cache=tmp_path)
    _rewrite(first.info["cache_path"], edit_manifest=edit)
    assert smelt.compile(model, cache=tmp_path).info["cache"].startswith("rebuilt")
    assert smelt.compile(model, cache=tmp_path).info["cache"] == "hit"


def test_cache_key_covers_options_and_model(tmp_path):
    model = _tanh_model()
    smelt.compile(model, cache=tmp_path)
    assert smelt.compile(model, cache=tmp_path, fast_math=True).info["cache"] == "miss"
    assert smelt.compile(model, cache=tmp_path, opt_level=1).info["cache"] == "miss"
    assert smelt.compile(model, cache=tmp_path, cpu="x86-64-v3").info["cache"] == "miss"
    other = _tanh_model()
    other.graph.initializer[0].float_data[:] = []
    other.graph.initializer[0].raw_data = np.ones((5, 5), np.float32).tobytes()
    assert smelt.compile(other, cache=tmp_path).info["cache"] == "miss"
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    assert smelt.compile(str(path), cache=tmp_path).info["cache"] == "hit"  # same bytes
    assert len(list(tmp_path.glob("*.smelt"))) == 5


def test_cache_refuses_what_it_cannot_key():
    with pytest.raises(SmeltError, match="cpu builds"):
        smelt.compile(_tanh_model(), "gpu", cache=True)


def smelt_cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "smelt.compiler.cli", *args],
        capture_output=True, text=True, timeout=300, cwd=cwd,
    )


def test_cli_compile_then_run(tmp_path):
    onnx_path = tmp_path / "mlp.onnx"
    onnx_path.write_bytes(_mlp_model().SerializeToString())
    feeds = {"x": np.random.default_rng(3).standard_normal((64, 96)).astype(np.float32)}
    np.savez(tmp_path / "in.npz", **feeds)
    done = smelt_cli("compile", str(onnx_path), "-o", str(tmp_path / "mlp.smelt"))
    assert done.returncode == 0, done.stderr
    assert "mlp.smelt" in done.stdout
    ran = smelt_cli("run", str(tmp_path / "mlp.smelt"), "--trust", "--inputs",
                    str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz"))
    assert ran.returncode == 0, ran.stderr
    assert "loaded mlp.smelt" in ran.stdout
    expected = smelt.compile(str(onnx_path)).run(feeds)["y"]
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["y"], expected)
    # the run path imports neither xdsl nor onnx
    check = (
        "import sys; from smelt.compiler.cli import main; "
        f"assert main(['run', {str(tmp_path / 'mlp.smelt')!r}, '--trust']) == 0; "
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('xdsl', 'onnx')]; "
        "assert not heavy, heavy"
    )
    light = subprocess.run([sys.executable, "-c", check], capture_output=True,
                           text=True, timeout=120)
    assert light.returncode == 0, light.stderr
    # through the cache: a miss, then a hit that is saved again
    for status in ("miss", "hit"):
        done = smelt_cli("compile", str(onnx_path), "-o", str(tmp_path / "c.smelt"),
                         "--cache", str(tmp_path / "cache"))
        assert done.returncode == 0 and f"(cache {status})" in done.stdout, done
    ran = smelt_cli("run", str(tmp_path / "c.smelt"), "--trust", "--inputs",
                    str(tmp_path / "in.npz"), "-o", str(tmp_path / "out2.npz"))
    assert ran.returncode == 0, ran.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out2.npz")["y"], expected)
    # a compile option of `smelt run MODEL` is an error on an artifact, by name
    wrong = smelt_cli("run", str(tmp_path / "mlp.smelt"), "--level", "O3")
    assert wrong.returncode != 0 and "--level decides a build" in wrong.stderr


def test_cli_refuses_a_damaged_artifact_in_one_line(tmp_path):
    path = tmp_path / "bad.smelt"
    path.write_bytes(b"not a zip")
    result = smelt_cli("run", str(path))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("smelt: error: the artifact")
