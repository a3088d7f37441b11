"""A griffe extension for the docs build: Sphinx cross-reference roles as mkdocstrings links.

meshnb's docstrings name other objects with Sphinx roles (``:func:`~meshnb.x.y```, ``:class:`View```,
``:mod:`.pack```).  This resolves each role's target in the scope of the docstring that holds it,
as Python would read the name there (members, then imports, then the enclosing scopes), and writes
it as an autorefs cross-reference, which mkdocs-autorefs turns into a link to the object's heading:

- a target on the API pages (a module rendered by a ``:::`` line under ``docs/api``, one of
  ``meshnb.__all__``, or a public member of those) becomes ``[`title`][full.path]``: a required
  link, so ``mkdocs build --strict`` fails where it does not resolve (a renamed or undocumented
  object);
- any other target (an internal module such as ``meshnb.host``, numpy, a name that does not
  resolve) becomes an optional autoref: a link if some page happens to render it, else the code
  span alone, never a warning.

The names of a numpydoc ``See Also`` section are resolved and linked the same way, each entry a
list item.

The title is the target as written, without ``~``'s prefix (``~`` keeps the last component, as
Sphinx shows it).  Loaded by mkdocstrings (mkdocs.yml); griffe reads the source statically, so
nothing of numba is imported.
"""

from __future__ import annotations

import html
import importlib
import re
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|data|meth|attr|exc|obj|const):`(~?)!?([^`]+)`")
_DIRECTIVE = re.compile(r"^:::\s+(\S+)", re.MULTILINE)
API_PAGES = Path(__file__).resolve().parent / "api"


def rendered_roots(pages: Path = API_PAGES) -> set[str]:
    """The objects the API pages render with ``:::`` (each with its public members)."""
    return {m.group(1) for page in sorted(pages.rglob("*.md")) for m in _DIRECTIVE.finditer(page.read_text("utf-8"))}


def resolve(obj: griffe.Object, target: str) -> str | None:
    """The full path of ``target`` as named in ``obj``'s docstring, or None where it does not resolve.

    A dotted target resolves its first component in ``obj``'s scope (a leading ``.`` as Sphinx
    reads it: relative to the current module) and appends the rest; ``meshnb.``-rooted targets are
    full paths already."""
    target = target.strip()
    if target.startswith("meshnb.") or target == "meshnb":
        return target
    first, _, rest = target.lstrip(".").partition(".")
    scope: griffe.Object | None = obj
    while scope is not None:
        try:
            path = scope.resolve(first)
        except griffe.NameResolutionError:
            scope = scope.parent
            continue
        return f"{path}.{rest}" if rest else path
    return None


def _rendered(pkg: griffe.Module, roots: set[str], path: str) -> bool:
    """Whether mkdocstrings renders ``path`` (a heading to link to) under one of the ``roots``: the
    root itself, or a chain of public, documented (``show_if_no_docstring: false``) members below
    it that are not submodules (a module page does not render its submodules) and not imports
    (unless the module exports them in ``__all__``)."""
    for root in sorted(roots, key=len, reverse=True):
        if path == root:
            return True
        if not path.startswith(root + "."):
            continue
        try:
            obj: Any = pkg[root.removeprefix(pkg.path + ".")] if root != pkg.path else pkg
        except KeyError:
            continue
        for part in path[len(root) + 1 :].split("."):
            member = obj.members.get(part)
            if member is None or part.startswith("_") or member.is_module:
                return False
            if member.is_alias:
                if part not in (obj.exports or ()):
                    return False
                try:
                    member = member.final_target
                except griffe.AliasResolutionError:
                    return False
            if member.docstring is None:
                return False
            obj = member
        return True
    return False


def _reference(written: str, title: str, to_path: Callable[[str], str | None], linked: Callable[[str], bool]) -> str:
    """The Markdown of a reference to ``written`` shown as ``title`` (see the module docstring)."""
    path = to_path(written)
    if path is None:
        return f"`{title}`"
    if linked(path):
        return f"[`{title}`][{path}]"
    return f'<autoref identifier="{html.escape(path)}" optional><code>{html.escape(title)}</code></autoref>'


def rewrite(text: str, to_path: Callable[[str], str | None], linked: Callable[[str], bool]) -> str:
    """``text`` with every Sphinx role as an autorefs cross-reference (see the module docstring),
    and every numpydoc ``See Also`` entry as a list item that links its names."""

    def role(match: re.Match[str]) -> str:
        written = match.group(2).strip()
        title = written.lstrip(".").rsplit(".", 1)[-1] if match.group(1) else written.lstrip(".")
        return _reference(written, title, to_path, linked)

    return _see_also(_ROLE.sub(role, text), to_path, linked)


_SEE_ALSO = re.compile(r"^See Also\n-{3,}[ \t]*\n(.*?)(?=^\S[^\n]*\n-{3,}[ \t]*$|\Z)", re.MULTILINE | re.DOTALL)
_ENTRY = re.compile(r"^([\w.]+(?:\s*,\s*[\w.]+)*)\s*(?::\s*(.*))?$")


def _see_also(text: str, to_path: Callable[[str], str | None], linked: Callable[[str], bool]) -> str:
    """numpydoc's ``See Also`` block (``name : description`` lines, ``a, b : description``, a
    description going on on indented lines) as a Markdown list whose names are links (griffe
    renders the section as an admonition of Markdown, its entries otherwise run together)."""

    def block(match: re.Match[str]) -> str:
        items: list[list[str]] = []
        for line in match.group(1).splitlines():
            entry = _ENTRY.match(line)
            if entry and not line[:1].isspace():
                names = [n.strip() for n in entry.group(1).split(",")]
                refs = ", ".join(_reference(n, n, to_path, linked) for n in names)
                items.append([f"- {refs}" + (f": {entry.group(2).strip()}" if entry.group(2) else "")])
            elif line.strip() and items:
                items[-1].append(line.strip())
            elif line.strip():  # prose before the first entry: kept as it is
                items.append([line])
        body = "\n".join(" ".join(item) for item in items)
        return f"See Also\n--------\n{body}\n\n"

    return _SEE_ALSO.sub(block, text)


def _objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)  # type: ignore[arg-type]


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring of the package once it is loaded (statically)."""

    def __init__(self, pages: str | None = None) -> None:
        self.roots = rendered_roots(Path(pages) if pages else API_PAGES)

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        roots = set(self.roots)
        # meshnb.__all__ is computed, not a literal griffe could read: import the (light) package face
        names = importlib.import_module(pkg.path).__all__ if pkg.path == "meshnb" else []
        for name in names:
            roots.add(f"{pkg.path}.{name}")
            member = pkg.members.get(name)
            if member is not None and member.is_alias:
                roots.add(member.target_path)  # type: ignore[union-attr]
        for obj in _objects(pkg):
            if obj.docstring is not None:
                obj.docstring.value = rewrite(
                    obj.docstring.value, partial(resolve, obj), partial(_rendered, pkg, roots)
                )
