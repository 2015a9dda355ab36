"""Every registered name follows the naming rules of STYLE.md."""

import re

import pytest

from smelt.universe import SMELT_UNIVERSE, make_context

SMELT_DIALECTS = ("graph", "loop")


def test_pass_names_are_kebab_case_and_match_their_file():
    for name, factory in SMELT_UNIVERSE.all_passes.items():
        assert re.fullmatch(r"[a-z]+(-[a-z0-9]+)+", name), name
        cls = factory()
        assert cls.name == name
        module = cls.__module__.rsplit(".", 1)[-1]
        assert module == name.replace("-", "_"), (name, cls.__module__)
        assert cls.__doc__ and cls.__doc__.strip(), f"{name} has no docstring"


@pytest.mark.parametrize("dialect", SMELT_DIALECTS)
def test_op_names_are_dialect_snake_case(dialect):
    d = SMELT_UNIVERSE.all_dialects[dialect]()
    assert d.name == dialect
    for op in d.operations:
        assert re.fullmatch(rf"{dialect}\.[a-z][a-z0-9_]*", op.name), op.name
        assert op.__name__.endswith("Op"), op.__name__
        assert op.__module__.startswith(f"smelt.dialects.{dialect}"), op.__module__


def test_every_dialect_loads():
    ctx = make_context()
    for name in SMELT_UNIVERSE.all_dialects:
        assert ctx.get_dialect(name).name == name
