"""`smelt.compile`'s dispatch, under the package face so that the CLIs call it
without importing the face: a static compile (driver.compile), or with `dims=`
one compile for a run-time batch in a range (dynamic.compile_dynamic)."""

from __future__ import annotations


def compile(model, target: str = "cpu", **options):
    """See `smelt.compile`."""
    if options.get("dims") is not None:
        from smelt.compiler.dynamic import compile_dynamic

        return compile_dynamic(model, target=target, **options)
    from smelt.compiler.driver import compile as _compile

    return _compile(model, target, **options)
