"""Whole models through the compiled CPU path against onnxruntime: the nine light_*
architectures with their shipped weights (and shipped outputs) and with random
weights (logits before the final Softmax compared too), the MLP and the encoder
layer. Error: max|a - b| / max|b| <= 1e-4.

Both ISA paths and threads on any host: shipped weights run the AVX2 code
(cpu="x86-64-v3", one thread), random weights the host's own code on two threads
(AVX-512 where the host has it); the MLP runs every combination."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from models import (
    LIGHT_MODELS,
    encoder_layer_model,
    light_expected_output,
    light_inputs,
    light_model_path,
    mlp_model,
    random_weights,
    rel_error,
    run_onnxruntime,
    with_logits,
)
from test_reference_vs_ort import TOL, check_outputs, ill_conditioned, softmax_inputs

import smelt

AVX2 = "x86-64-v3"


def compiled_outputs(
    model: onnx.ModelProto, feeds: dict, cpu: str = "host", threads: int = 1
) -> dict[str, np.ndarray]:
    return smelt.compile(model, "cpu", cpu=cpu, threads=threads).run(feeds)


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_shipped_weights(name):
    model = with_logits(onnx.load(light_model_path(name)))
    feeds = light_inputs(model)
    ours = compiled_outputs(model, feeds, cpu=AVX2)
    theirs = run_onnxruntime(model, feeds)
    check_outputs(model, ours, theirs, "compiled vs onnxruntime")
    out = model.graph.output[0].name
    logits = softmax_inputs(model).get(out)
    if logits is None or not ill_conditioned(theirs[logits]):
        shipped = light_expected_output(name).reshape(theirs[out].shape)
        assert rel_error(ours[out], shipped) <= TOL


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_random_weights(name):
    model = random_weights(onnx.load(light_model_path(name)), seed=0)
    feeds = light_inputs(model)
    ours = compiled_outputs(model, feeds, threads=2)
    check_outputs(model, ours, run_onnxruntime(model, feeds),
                  "compiled, random weights, 2 threads vs onnxruntime")  # fmt: skip


@pytest.mark.parametrize("cpu", ["host", AVX2])
@pytest.mark.parametrize("threads", [1, 2])
def test_mlp(cpu, threads):
    model = with_logits(mlp_model())
    x = np.random.default_rng(1).standard_normal((8, 256)).astype(np.float32)
    check_outputs(model, compiled_outputs(model, {"x": x}, cpu, threads),
                  run_onnxruntime(model, {"x": x}), "compiled mlp")  # fmt: skip


def test_encoder_layer():
    model = encoder_layer_model()
    x = np.random.default_rng(1).standard_normal((1, 128, 768)).astype(np.float32)
    check_outputs(model, compiled_outputs(model, {"x": x}, threads=2),
                  run_onnxruntime(model, {"x": x}), "compiled encoder layer")  # fmt: skip
