"""smelt: a multi-level IR research compiler for neural-network inference on xDSL."""

from smelt.errors import (
    InternalError,
    InvalidInput,
    InvalidModel,
    ResourceLimit,
    SmeltError,
    UnsupportedModel,
)
from smelt.version import __version__


def compile(model, target: str = "cpu", **options):
    """Compile an ONNX model (path, bytes or ModelProto); see compiler.driver.compile.
    `dims={"batch": (1, 64)}` opts in to one compile for a run-time batch in that
    range (compiler.dynamic.compile_dynamic: a small op set for now)."""
    from smelt.compiler.entry import compile as _compile

    return _compile(model, target, **options)


def load(path, *, check_cpu: bool = True, trust=None):
    """A model saved by `smelt compile -o` / `CompiledModel.save`, ready to run
    without compiling (and without importing xdsl); see runtime.artifact.load.
    An artifact is native code: it loads only if `trust` is True (you trust
    where it came from) or names the public key(s) one of which signed it."""
    from smelt.runtime.artifact import load as _load

    return _load(path, check_cpu=check_cpu, trust=trust)


def __getattr__(name: str):
    # `smelt.quantize` is the package smelt/quantize/, callable as the function
    # smelt.quantize.quantize (a function here would be replaced by the package
    # the first time a submodule is imported); imported on first use
    if name == "quantize":
        import importlib

        return importlib.import_module("smelt.quantize")
    if name == "DumpOptions":  # compile(..., dump=smelt.DumpOptions(...))
        from smelt.compiler.instrument import DumpOptions

        return DumpOptions
    raise AttributeError(f"module 'smelt' has no attribute '{name}'")


__all__ = [
    "DumpOptions",
    "InternalError",
    "InvalidInput",
    "InvalidModel",
    "ResourceLimit",
    "SmeltError",
    "UnsupportedModel",
    "__version__",
    "compile",
    "load",
    "quantize",
]
