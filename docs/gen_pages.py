"""Pages made at build time (mkdocs-gen-files, mkdocs.yml): the notebooks and the top-level API page.

- ``notebooks/*.ipynb`` are copied in as they are committed (with their outputs), for mkdocs-jupyter
  to render without executing them;
- ``api/meshnb.md`` documents every name of ``meshnb.__all__`` (the one definition of public), each
  from the module that defines it, found statically with griffe (nothing of numba is imported).
"""

from __future__ import annotations

from pathlib import Path

import griffe
import mkdocs_gen_files

import meshnb

ROOT = Path(__file__).resolve().parent.parent

for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
    with mkdocs_gen_files.open(f"notebooks/{notebook.name}", "wb") as out:
        out.write(notebook.read_bytes())
    mkdocs_gen_files.set_edit_path(f"notebooks/{notebook.name}", notebook)


def _defined(package: griffe.Module, name: str) -> str:
    """The path to document ``meshnb.<name>`` by: ``meshnb.<name>`` where ``__init__`` imports it
    statically (griffe resolves the alias), else the one public definition of that name in a
    submodule (a name that ``__init__`` loads lazily with no static import)."""
    member = package.members.get(name)
    if member is not None:
        return member.path
    found = []
    stack = [package]
    while stack:
        module = stack.pop()
        for child in module.members.values():
            if child.is_alias:
                continue
            if child.is_module:
                stack.append(child)
            elif child.name == name:
                found.append(child.path)
    if len(found) != 1:
        raise LookupError(f"meshnb.{name}: {len(found)} definitions found ({found})")
    return found[0]


package = griffe.load("meshnb", search_paths=[str(ROOT)], resolve_aliases=False)
with mkdocs_gen_files.open("api/meshnb.md", "w") as out:
    print("# meshnb: the public API\n", file=out)
    print(
        "Every name of `meshnb.__all__`, each documented where it is defined. "
        "`import meshnb` is light: the names load on first use (PEP 562), so numba loads only when a run needs it. "
        "The words they use (page, step base, LR word, backend, ...): the [glossary](index.md#glossary).\n",
        file=out,
    )
    for name in meshnb.__all__:
        if name in package.modules:  # a public module (meshnb.testing): its own page
            page = f"{name}/index.md" if (ROOT / "docs" / "api" / name / "index.md").is_file() else f"{name}.md"
            print(f"## meshnb.{name} {{#meshnb.{name}}}\n\nThe module [`meshnb.{name}`]({page}).\n", file=out)
        else:
            path = _defined(package, name)
            options = "    options:\n      show_root_heading: true\n      show_root_full_path: false\n"
            print(f"::: {path}\n{options}", file=out)
