"""The README's promises, run (#36): every shell command of its ```sh blocks that
runs smelt or smelt-opt, as written, in one folder, on the light models and on
small models standing for its `model.onnx` (a dynamic-dims one where the command
fixes the dims, one with an `sr` input where it fixes that). A command this test
cannot run is skipped with its reason (a skip, never a pass); a README command
that none of the tables below knows still runs, on the default model.

The set-up prefix (venv, pip) is dropped; the whole-suite command does not run
smelt and is not run here. About 2-3 minutes on 2 loaded cores."""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

README = Path(__file__).resolve().parents[2] / "README.md"
SETUP = "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && "

NOT_RUN = {
    "smelt aot light_resnet50 --arch sm_90":
        "compiles every Triton kernel of light_resnet50 (minutes on 2 cores; "
        "test_triton_aot runs smelt aot on small models)",
    "smelt explore light_resnet50 --orders 7 --passes 'graph-fold-constants,"
    "graph-simplify,graph-fold-batchnorm,graph-convert-layout{layout=nhwc},"
    "graph-fuse'":
        "compiles and times 8+ pipelines of light_resnet50 (minutes; test_explore "
        "covers explore on small models)",
    "smelt explore model.onnx --executor ray --orders 4 --option "
    "loop-schedule.mr=4,6 --passes 'loop-schedule,loop-vectorize,"
    "loop-unroll{loop=\"n.2\"},loop-unroll{loop=\"m.2\" jam=true}'":
        "needs Ray (pip install 'smelt[explore]') and minutes of candidates",
    'smelt compile light_resnet50 -p "$P" -o r4.smelt':
        "$P is candidate #4 of the smelt explore run above, which is not run here",
}
"""README commands this test does not run, and why."""

DYNAMIC, WITH_SR, STATIC = "dynamic.onnx", "with_sr.onnx", "static.onnx"
MODEL_OF = {
    "--input-shape x=": DYNAMIC,  # the command fixes x's dims: they are open
    "--constant sr=": WITH_SR,  # the command fixes the input sr
}
"""What `model.onnx` stands for in a command holding the key (else STATIC)."""

WORDS = {"PIPELINE": "O2"}
"""Other placeholders of the README's commands."""


def readme_commands(text: str) -> list[str]:
    """The command lines of the ```sh blocks: comments dropped, continued lines
    joined, the set-up prefix removed."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        pending = ""
        for line in block.splitlines():
            line = re.sub(r"\s+#(\s.*)?$", "", line).strip()
            if not line or line.startswith("#"):
                continue
            if line.endswith("\\"):
                pending += line[:-1].strip() + " "
                continue
            commands.append((pending + line).removeprefix(SETUP))
            pending = ""
    return commands


COMMANDS = readme_commands(README.read_text())
SMELT = [c for c in COMMANDS if c.split()[0] in ("smelt", "smelt-opt")]


def test_the_readme_has_commands_to_run():
    assert len(SMELT) >= 20, SMELT
    assert SMELT[0] == "smelt run light_resnet50 --random-weights 0 --check"
    for command in NOT_RUN:  # a reason for a command the README no longer has
        assert command in SMELT, f"NOT_RUN names a command not in the README: {command}"
    suite = [c for c in COMMANDS if "pytest" in c]
    assert suite and all(c.split()[0] not in ("smelt", "smelt-opt") for c in suite)


def _conv_model(path: Path, dims: list) -> None:
    """x[N,3,H,W] → Conv 3x3 (8) → Relu → GlobalAveragePool → Flatten → Gemm (4)
    → y: float, with a conv and a gemm for quantize."""
    rng = np.random.default_rng(0)

    def init(name, *shape):
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1],
                         name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], transB=1, name="fc"),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "convnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0], 4])],
        [init("w", 8, 3, 3, 3), init("b", 8), init("wg", 4, 8), init("bg", 4)],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              path)


def _sr_model(path: Path) -> None:
    """x[1,16], sr (int64 scalar) → If(sr == 16000: x * 2, else x * 3) → y: the
    If folds once sr is fixed."""
    def branch(name, factor):
        k = numpy_helper.from_array(np.array(factor, np.float32), f"k_{name}")
        out = helper.make_tensor_value_info(f"o_{name}", TensorProto.FLOAT, [1, 16])
        mul = helper.make_node("Mul", ["x", f"k_{name}"], [f"o_{name}"])
        return helper.make_graph([mul], name, [], [out], [k])

    nodes = [
        helper.make_node("Equal", ["sr", "rate"], ["is16k"], name="is16k"),
        helper.make_node("If", ["is16k"], ["y"], name="if",
                         then_branch=branch("then", 2.0),
                         else_branch=branch("else", 3.0)),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "with_sr",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [numpy_helper.from_array(np.array(16000, np.int64), "rate")],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              path)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The folder the commands run in, with the files they name."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    here = tmp_path_factory.mktemp("readme")
    _conv_model(here / DYNAMIC, ["N", 3, "H", "W"])
    _conv_model(here / STATIC, [1, 3, 32, 32])
    _sr_model(here / WITH_SR)
    rng = np.random.default_rng(1)
    np.savez(here / "x.npz", x=rng.standard_normal((1, 3, 224, 224)).astype(np.float32))
    np.savez(here / "data.npz",
             x=rng.standard_normal((16, 1, 3, 32, 32)).astype(np.float32))
    key = Ed25519PrivateKey.generate()  # as the README's two openssl lines
    (here / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))  # fmt: skip
    (here / "key.pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return here


def as_run(command: str) -> str:
    """`command` with its placeholders replaced by the files of `folder`."""
    model = next((m for key, m in MODEL_OF.items() if key in command), STATIC)
    words = {"model.onnx": model, **WORDS}
    return re.sub(r"(?<![\w.])(" + "|".join(map(re.escape, words)) + r")(?![\w.])",
                  lambda m: words[m.group(1)], command)


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=600)


def _producer(name: str) -> str | None:
    """The README command that writes `name` (`-o name`), if one does."""
    return next((c for c in SMELT if f"-o {name}" in c), None)


@pytest.mark.parametrize("command", SMELT)
def test_readme_command(command, folder):
    if command in NOT_RUN:
        pytest.skip(f"not run: {NOT_RUN[command]}")
    for word in command.split()[1:]:  # inputs written by an earlier command
        producer = _producer(word)
        if producer and producer != command and not (folder / word).exists():
            done = shell(as_run(producer), folder)
            assert done.returncode == 0, (producer, done.stdout, done.stderr)
    ran = shell(as_run(command), folder)
    tail = ran.stdout[-3000:], ran.stderr[-3000:]
    assert ran.returncode == 0, (as_run(command), *tail)
    if "--check" in command:
        assert "check PASSED" in ran.stdout, ran.stdout
    if " -o " in command:
        assert (folder / command.split(" -o ")[1].split()[0]).exists()
