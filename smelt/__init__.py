"""smelt: a multi-level IR research compiler for neural-network inference on xDSL."""

from smelt.errors import (
    InternalError,
    InvalidInput,
    InvalidModel,
    ResourceLimit,
    SmeltError,
    UnsupportedModel,
)


def compile(model, target: str = "cpu", **options):
    """Compile an ONNX model (path, bytes or ModelProto); see compiler.driver.compile."""
    from smelt.compiler.driver import compile as _compile

    return _compile(model, target, **options)


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
    "compile",
    "quantize",
]
