"""A package's public surface, loaded lazily: ``lazy_surface`` gives a package's ``__init__`` its
``__all__`` and a module ``__getattr__`` (PEP 562) that imports a name's module the first time the
name is asked for.

Lazy so that importing one module of the core (``include.errors``, a store) does not import every
package beside it, and so that packages that use each other's modules never meet half-initialised
at import time. ``from include.runs import EpochRun`` imports ``include.runs.epoch_run`` then.
"""

from __future__ import annotations

import importlib
from typing import Callable, Mapping, Sequence


def lazy_surface(package: str, exports: Mapping[str, Sequence[str]]
                 ) -> tuple[list[str], Callable[[str], object], Callable[[], list[str]]]:
    """``__all__``, ``__getattr__`` and ``__dir__`` for ``package``, whose public names are
    ``exports``: per module of the package (its name relative to the package), the names it
    defines that the package exports. A name exported twice is refused, and so is a name that is
    also one of the package's modules (importing the module would replace the name with it)."""
    where: dict[str, str] = {}
    modules = {module.split(".")[0] for module in exports}
    for module, names in exports.items():
        for name in names:
            if name in modules:
                raise ValueError(f"{package} exports {name!r}, also the name of its module {package}.{name}")
            if name in where:
                raise ValueError(f"{package} exports {name!r} from both {where[name]} and {package}.{module}")
            where[name] = f"{package}.{module}"
    public = sorted(where)

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        return list(public)

    return public, __getattr__, __dir__
