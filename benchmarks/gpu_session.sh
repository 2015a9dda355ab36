#!/usr/bin/env bash
# The one script of a session with the H200 (prepared and checked on the CPU; see
# benchmarks/gpu_wheels.sh for the wheels it installs). It installs xdsl from the
# carried wheels, runs smelt from this checkout, checks every model (the light
# ones, MLPs, encoder, and the zoo carried in wheels/zoo) against onnxruntime (f32
# products), then times benchmarks/gpu.py.
# Everything it prints also lands in $OUT (the device call brings that back).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/smelt-gpu}
mkdir -p "$out"
site=$(mktemp -d)  # xdsl goes here, not into that machine's Python (PEP 668)
export PYTHONPATH=$PWD:$site${PYTHONPATH:+:$PYTHONPATH}
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 --version
  python3 -m pip install --quiet --no-index --find-links wheels --target "$site" xdsl
  python3 -c "import torch, triton, onnxruntime, xdsl, smelt; print('torch', \
torch.__version__, 'triton', triton.__version__, 'onnxruntime', onnxruntime.__version__)"
} 2>&1 | tee "$out/env.txt"
status=0
# budgets: the device call may run 600 s (gpu.py checks its own cases with tf32)
timeout 250 python3 benchmarks/gpu_check.py --budget 200 --jobs 8 default wheels/zoo/*.onnx \
  2>&1 | tee "$out/check.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
timeout 300 python3 benchmarks/gpu.py 2>&1 | tee "$out/gpu.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
exit $status
