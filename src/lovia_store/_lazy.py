"""A package's public names imported on first use (PEP 562): a process pays for the
modules it uses, not for every name the package offers."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def by_name(modules: Mapping[str, str]) -> dict[str, str]:
    """``{module: "name name ..."}`` as ``{name: module}``."""
    return {name: module for module, names in modules.items() for name in names.split()}


def lazy_names(
    package: str, lazy: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` for ``lazy`` (name: the
    module holding it, relative to the package). A name, once imported, is kept in
    the package's namespace, so later lookups never reach ``__getattr__``."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module = lazy.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *lazy})

    return __getattr__, __dir__
