"""The triton target: loop kernels → Triton source (emit.py per phase, emit_dot.py
for contractions, source.py the module, prelude.py what every module shares), GPU
schedules (schedule.py), ahead-of-time checks (aot.py), torch launch plans
(runtime.py)."""
