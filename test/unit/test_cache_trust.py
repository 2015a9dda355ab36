"""The compile cache as a trust boundary: folders others can write are refused,
entries are written atomically by concurrent processes, a write that fails is a
warning (the compile returns), and keys never read or wait on foreign files."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_artifact_trust import deadline

import smelt
from smelt.errors import SmeltError


def _model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])
    w = numpy_helper.from_array(np.eye(5, dtype=np.float32) * 2, "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    graph = helper.make_graph(nodes, "double", [x], [y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


FEEDS = {"x": np.arange(15, dtype=np.float32).reshape(3, 5)}


def _right(model) -> None:
    np.testing.assert_array_equal(model.run(FEEDS)["y"], FEEDS["x"] * 2)


def test_a_new_cache_folder_is_private(tmp_path):
    folder = tmp_path / "a" / "cache"
    _right(smelt.compile(_model(), cache=folder))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


@pytest.mark.parametrize("mode, who", [(0o775, "group"), (0o757, "others"),
                                       (0o1777, "group and others")])  # fmt: skip
def test_a_folder_others_can_write_is_refused(tmp_path, mode, who):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(mode)
    with pytest.raises(SmeltError, match=f"writable by {who} .*chmod go-w"):
        smelt.compile(_model(), cache=folder)
    assert list(folder.iterdir()) == []  # nothing read, nothing written


def test_a_folder_of_another_user_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)
    with pytest.raises(SmeltError, match="belongs to another user"):
        smelt.compile(_model(), cache=folder)


def test_an_entry_that_cannot_be_written_is_a_warning(tmp_path):
    first = smelt.compile(_model(), cache=tmp_path)
    entry = Path(first.info["cache_path"])
    entry.unlink()
    entry.mkdir()  # the entry's name taken by a folder: the rename fails
    (entry / "x").write_bytes(b"")
    with pytest.warns(UserWarning, match="could not keep this build"):
        again = smelt.compile(_model(), cache=tmp_path)
    assert again.info["cache"].endswith("not stored")
    assert "a folder" in again.info["cache"]
    _right(again)
    assert sorted(p.name for p in tmp_path.iterdir()) == [entry.name]  # no temp


@contextmanager
def read_only(folder: Path):
    """`folder` made read-only for this process (chmod; as root, the immutable
    flag, since root writes through modes)."""
    if os.geteuid() != 0:
        folder.chmod(0o500)
        try:
            yield
        finally:
            folder.chmod(0o700)
        return
    if shutil.which("chattr") is None:
        pytest.skip("root writes through modes and chattr is missing")
    done = subprocess.run(
        ["chattr", "+i", str(folder)], check=False, capture_output=True
    )
    if done.returncode:
        pytest.skip(f"chattr +i refused here: {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_a_read_only_cache_folder_is_a_warning(tmp_path):
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    with read_only(folder):
        with pytest.warns(UserWarning, match="could not keep this build"):
            model = smelt.compile(_model(), cache=folder)
        assert model.info["cache"] == "miss; not stored"
        _right(model)
    assert list(folder.iterdir()) == []


def _in_subprocess(body: str, *args: str, timeout: int = 300):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(body), *args],
        check=False, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_a_full_disk_is_a_warning(tmp_path):
    """A file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes every write past
    4 KiB fail with EFBIG, as a full disk fails with ENOSPC."""
    model = tmp_path / "m.onnx"
    model.write_bytes(_model().SerializeToString())
    done = _in_subprocess(
        """
        import resource, signal, sys, warnings
        import numpy as np
        import smelt
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            m = smelt.compile(sys.argv[1], cache=sys.argv[2])
        x = np.arange(15, dtype=np.float32).reshape(3, 5)
        assert (m.run({"x": x})["y"] == 2 * x).all()
        print(m.info["cache"]); print(*[str(w.message) for w in caught], sep="\\n")
        """,
        str(model), str(tmp_path / "cache"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("miss; not stored"), done.stdout
    assert "could not keep this build" in done.stdout
    assert list((tmp_path / "cache").iterdir()) == []  # the temp file removed


def test_two_processes_write_one_entry(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(_model().SerializeToString())
    # the workers see the host the suite runs as (SMELT_TEST_HOST, test/conftest.py),
    # else under that switch they compile for the real CPU and the parent refuses
    body = f"""
        import os, runpy, sys
        if os.environ.get("SMELT_TEST_HOST"):
            runpy.run_path({str(Path(__file__).parent.parent / "conftest.py")!r})
        import smelt
        for _ in range(3):
            m = smelt.compile(sys.argv[1], cache=sys.argv[2])
            print(m.info["cache"])
    """
    cmd = [sys.executable, "-c", textwrap.dedent(body), str(model), str(tmp_path / "c")]
    runs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(2)]  # fmt: skip
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        # never "rebuilt: damaged ...": a reader sees the whole entry or none
        assert set(out.splitlines()) <= {"miss", "hit"}, out
        assert out.splitlines()[-1] == "hit", out
    # one entry (two if smelt's source changed in between: the key holds it),
    # whole, and no temp file left
    entries = list((tmp_path / "c").iterdir())
    assert entries and all(e.suffix == ".smelt" for e in entries), entries
    for entry in entries:
        _right(smelt.load(entry, trust=True))


def test_a_fifo_or_device_entry_is_rebuilt_without_waiting(tmp_path):
    first = smelt.compile(_model(), cache=tmp_path)
    entry = Path(first.info["cache_path"])
    for make, kind in (
        (os.mkfifo, "a FIFO"),
        (lambda p: p.symlink_to("/dev/zero"), "a character device"),
    ):
        entry.unlink()
        make(entry)
        with deadline(60):
            again = smelt.compile(_model(), cache=tmp_path)
        assert again.info["cache"].startswith("rebuilt: ") and kind in again.info[
            "cache"], again.info["cache"]  # fmt: skip
        _right(again)
        assert entry.is_file() and not entry.is_symlink()  # replaced by a real entry
        assert smelt.compile(_model(), cache=tmp_path).info["cache"] == "hit"


def test_a_fifo_model_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "m.onnx"
    os.mkfifo(fifo)
    with deadline(60), pytest.raises(SmeltError, match="a FIFO"):
        smelt.compile(str(fifo), cache=tmp_path / "c")


def test_the_key_reads_no_file_outside_the_model_folder(tmp_path):
    """External data named outside the model's folder (a FIFO there: reading it
    would wait for ever) is never read by the key; the import refuses it."""
    folder = tmp_path / "model"
    folder.mkdir()
    os.mkfifo(tmp_path / "outside.bin")
    model = _model()
    weight = model.graph.initializer[0]
    weight.data_location = TensorProto.EXTERNAL
    weight.ClearField("raw_data")
    weight.ClearField("float_data")
    for key, value in (("location", "../outside.bin"), ("offset", "0"),
                       ("length", "100")):  # fmt: skip
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    path = folder / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with deadline(60), pytest.raises(SmeltError):
        smelt.compile(str(path), cache=tmp_path / "c")
    from smelt.compiler.cache import model_digest

    with deadline(20):
        assert len(model_digest(str(path))) == 64
