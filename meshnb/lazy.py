"""PEP 562 lazy faces: a package's names load from their modules on first use."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from importlib import import_module
from typing import Any


def lazy_face(
    package: str,
    exports: Mapping[str, str],
    modules: Iterable[str] = (),
    computed: Mapping[str, Callable[[], Any]] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``exports`` maps a name to the submodule
    that holds it, ``modules`` names public submodules, ``computed`` makes a value on first use.
    A name loads once: it is stored in the package, so the next lookup is a plain attribute."""
    namespace = vars(sys.modules[package])
    modules = tuple(modules)
    computed = dict(computed or {})

    def __getattr__(name: str) -> Any:
        if name in computed:
            value = computed[name]()
        elif name in exports:
            value = getattr(import_module(f".{exports[name]}", package), name)
        elif name in modules:
            value = import_module(f".{name}", package)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(namespace["__all__"]))

    return __getattr__, __dir__
