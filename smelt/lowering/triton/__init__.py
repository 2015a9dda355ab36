"""The triton target: loop kernels → Triton source (emit.py, emit_dot.py), GPU
schedules (schedule.py), ahead-of-time checks (aot.py), torch launch plans
(runtime.py)."""
