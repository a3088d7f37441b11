"""A griffe extension for the docs build: Sphinx cross-reference roles as Markdown code.

meshnb's docstrings are prose with ``literals`` and Sphinx roles (``:func:`~meshnb.x.y```); Markdown
reads the double-backtick literals as code already, and this turns each role into a code span of its
target (``~`` keeps the last component, as Sphinx shows it).  Loaded by mkdocstrings (mkdocs.yml).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|data|meth|attr|exc|obj|const):`(~?)!?([^`]+)`")


def _code(match: re.Match[str]) -> str:
    target = match.group(2).strip().lstrip(".")
    if match.group(1):
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def clean(text: str) -> str:
    """The docstring ``text`` with every Sphinx role written as a Markdown code span."""
    return _ROLE.sub(_code, text)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles in every docstring griffe reads (statically: nothing is imported)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = clean(obj.docstring.value)
