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


__all__ = [
    "InternalError",
    "InvalidInput",
    "InvalidModel",
    "ResourceLimit",
    "SmeltError",
    "UnsupportedModel",
    "compile",
]
