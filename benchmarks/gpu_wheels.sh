#!/usr/bin/env bash
# Run here, before a session with the H200: downloads into wheels/ (git-ignored)
# what that machine lacks for smelt (xdsl and its dependencies, for its Python
# 3.12; it has torch, triton, onnx, onnxruntime, numpy and llvmlite), and the
# zoo's models exported with their feeds (wheels/zoo, benchmarks/gpu_zoo.py), so
# that the device call can carry the folder: run(carry=["wheels"], command="bash
# benchmarks/gpu_session.sh").
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(python -c 'import importlib.metadata as m; print(m.version("xdsl"))')
rm -rf wheels
python -m pip download --quiet --only-binary=:all: --python-version 3.12 \
  --platform manylinux2014_x86_64 --implementation cp -d wheels "xdsl==$version"
# the zoo's small models and their feeds (that machine has no transformers)
python benchmarks/gpu_zoo.py wheels/zoo
ls -l wheels
