"""The triton target: loop kernels → Triton source (emit.py per phase, emit_lanes.py
for elementwise and rows phases, emit_dot.py for contractions, writer.py the text, source.py the module, prelude.py what every module shares), GPU
schedules (schedule.py), ahead-of-time checks (aot.py), torch launch plans
(runtime.py)."""
