"""The exception types at smelt's API boundary: `SmeltError` and the kinds a caller
may want to tell apart. Nothing else escapes `smelt.compile`, `CompiledModel.run` or
the CLIs: a bug inside smelt becomes an `InternalError` naming the stage."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class SmeltError(Exception):
    """A problem with the user's model or inputs; the message says what to do."""


class InvalidModel(SmeltError):
    """The model breaks ONNX's rules (onnxruntime refuses it too)."""


class UnsupportedModel(SmeltError):
    """A valid model that uses an op, type or feature smelt cannot compile."""


class InvalidInput(SmeltError):
    """Run-time inputs or outputs that do not fit the compiled model."""


class ResourceLimit(SmeltError):
    """The model needs more memory (or larger sizes) than allowed."""


class InternalError(SmeltError):
    """A bug in smelt, caught at a stage boundary; `details` holds the traceback."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


@contextmanager
def internal_errors(
    stage: str, note: Callable[[], str] | None = None
) -> Iterator[None]:
    """Turns any exception other than a SmeltError raised in `stage` into an
    InternalError that says where it happened and asks for a report; `note`
    (called then) adds a sentence, such as where a crash reproducer lies."""
    try:
        yield
    except SmeltError:
        raise
    except MemoryError:
        raise ResourceLimit(
            f"out of memory in {stage}: the model needs more memory than this "
            "machine has free"
        ) from None
    except Exception as e:  # noqa: BLE001 (the point: nothing else escapes)
        details = traceback.format_exc()
        extra = note() if note is not None else ""
        # notes say where inside the stage (locations.naming_errors: the nodes)
        where = "".join(f" ({n})" for n in getattr(e, "__notes__", []))
        raise InternalError(
            f"internal error in {stage}{where}: {type(e).__name__}: {e} — this is a "
            "bug in smelt; please report it with the model (rerun with --debug for "
            "the traceback)" + (f"; {extra}" if extra else ""),
            details,
        ) from e
