"""A griffe extension for the docs build: dataclass signatures as a user calls them.

griffe builds a dataclass's ``__init__`` from its fields, and shows each field's right-hand side as
the parameter's default.  An options table whose fields are ``_opt(None, Flag("--steps", ...))``
(the default and the command-line flag's metadata, :class:`meshnb.options.RunOptions`) then renders
a signature of thousands of characters of internals.  This shows the default a caller gets
instead: for a default written as a call to ``dataclasses.field``, to the tables'
``option_field`` or to a private helper (``_name(...)``), its ``default=`` argument, else its
first positional argument, else ``factory()`` for a ``default_factory=factory``.  Loaded by mkdocstrings (mkdocs.yml).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import griffe


def user_default(default: Any) -> Any:
    """The default a caller gets for a field whose right-hand side is ``default``; ``default``
    itself where it is not a ``field(...)`` or private helper call."""
    if not isinstance(default, griffe.ExprCall):
        return default
    if not _is_field_call(default):
        return default
    keywords = {a.name: a.value for a in default.arguments if isinstance(a, griffe.ExprKeyword)}
    if "default" in keywords:
        return keywords["default"]
    if "default_factory" in keywords:
        return f"{keywords['default_factory']}()"
    positional = [a for a in default.arguments if not isinstance(a, (griffe.ExprKeyword, griffe.ExprVarKeyword))]
    return positional[0] if positional else default


HELPERS = ("field", "option_field")
"""The calls that give a field's default with metadata: ``dataclasses.field`` and the options
tables' ``option_field(default, Flag(...))`` (any private ``_name(...)`` too)."""


def _is_field_call(value: Any) -> bool:
    name = str(value.function).rsplit(".", 1)[-1]
    return name in HELPERS or name.startswith("_")


def _classes(obj: griffe.Object) -> Iterator[griffe.Class]:
    for member in obj.members.values():
        if member.is_alias:
            continue
        if isinstance(member, griffe.Class):
            yield member
        if isinstance(member, (griffe.Module, griffe.Class)):
            yield from _classes(member)


def _is_dataclass_field(value: griffe.ExprCall) -> bool:
    return str(value.function).rsplit(".", 1)[-1] == "field"


def _is_dataclass(cls: griffe.Class) -> bool:
    return any(str(d.value).split("(")[0].rsplit(".", 1)[-1] == "dataclass" for d in cls.decorators)


class FieldDefaults(griffe.Extension):
    """Rewrites the field defaults of every dataclass, whichever of this and griffe's dataclasses
    extension (which makes ``__init__`` from the fields when the package is loaded) runs first: the
    fields' values where a private helper gives them (``field(...)`` stays for griffe to read its
    ``init=``/``kw_only=``), and the parameters of an ``__init__`` made already."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for cls in _classes(pkg):
            if not _is_dataclass(cls):
                continue
            for member in cls.members.values():
                value = member.value if isinstance(member, griffe.Attribute) else None
                if isinstance(value, griffe.ExprCall) and _is_field_call(value) and not _is_dataclass_field(value):
                    member.value = user_default(value)  # type: ignore[union-attr]
            init = cls.members.get("__init__")
            if isinstance(init, griffe.Function):
                for parameter in init.parameters:
                    parameter.default = user_default(parameter.default)
