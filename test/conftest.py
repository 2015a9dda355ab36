"""Suite-wide set-up: `SMELT_TEST_HOST=NAME[,+feat,-feat…]` runs the suite as if
this machine were the LLVM CPU `NAME` with those feature edits (a name smelt has
no table for starts from plain x86-64, as on such a host: a Zen 1 is
`znver1,+avx2,+fma,+f16c,+bmi2`).

CI's machines change kind (an AVX2 Zen 1, an AVX2 Zen 3, an AVX-512 Zen 5), and a
suite that is green on one and red on the next cannot land. On a machine whose
features include `NAME`'s, this runs every host-dependent choice the way that
machine would see it: `smelt.targets.cpu_spec.host()` (presets, schedules, which
micro-kernel, which tests run here or only print assembly) reads `NAME`'s
features, and the code built for them runs natively. It is a test-only switch:
llvmlite's host queries are answered before smelt reads them, nothing in smelt
reads the variable. What it cannot change is onnxruntime's own kernel choice,
which is why no test may treat onnxruntime's int8 as exact unless the weights are
7-bit (see test/numerics/int8_oracle.py).
"""

from __future__ import annotations

import os

_AS = os.environ.get("SMELT_TEST_HOST", "").strip()

if _AS:
    import llvmlite.binding as _llvm

    from smelt.targets import cpu_spec as _cpu_spec

    _real_features = _llvm.get_host_cpu_features

    def _named_features():
        real = _real_features()
        name, _, edits = _AS.partition(",")
        base = _cpu_spec.NAMED.get(name, _cpu_spec.NAMED[_cpu_spec.GENERIC])[0]
        spec = _cpu_spec.apply_edits(frozenset(base), edits)
        missing = [f for f in spec if not real.get(f, False)]
        if missing:
            raise RuntimeError(
                f"SMELT_TEST_HOST={_AS}: this machine lacks {', '.join(missing)}; "
                "choose a CPU whose features it has"
            )
        features = type(real)() if hasattr(real, "flatten") else {}
        for name in real:  # features smelt reads follow NAME, the rest the CPU
            known = name in _cpu_spec.KNOWN_FEATURES
            features[name] = name in spec if known else real[name]
        return features

    _cpu_spec.host.cache_clear()
    _llvm.get_host_cpu_features = _named_features
    _llvm.get_host_cpu_name = lambda: _AS.partition(",")[0]
