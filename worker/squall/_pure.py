"""Squall's compiled modules, and ``SQUALL_PURE_PYTHON=1``: import their Python sources instead of their
compiled form, to run or test the pure Python path on a machine where they are built (the sources
are the same modules, interpreted).

``setup.py`` builds :data:`COMPILED` with Cython in pure Python mode: each is a plain Python module,
and a ``.pxd`` beside it gives the C types its hot loops run with when compiled.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

ENV = "SQUALL_PURE_PYTHON"
# setup.py reads this line
COMPILED = ("squall.acker.table", "squall.tuples", "squall.grouping", "squall.executor.routing",
            "squall.executor.base", "squall.executor.collectors", "squall.executor.stats",
            "squall.executor.hdr", "squall.executor.bolt", "squall.executor.rotating", "squall.executor.spout",
            "squall.transport.codec", "squall.transport.ingress", "squall.transport.outbox",
            "squall.transport.transport", "squall.acker.acker", "squall.executor.acker")


class _Sources(importlib.abc.MetaPathFinder):
    """Finds ``squall.*`` modules as usual, but a compiled one as its ``.py`` beside it."""

    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not name.startswith("squall.") or path is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        origin = spec.origin if spec is not None else None
        if origin is None or not origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
            return None  # not compiled: the usual finders take it
        source = Path(origin).parent / f"{name.rpartition('.')[2]}.py"
        return importlib.util.spec_from_file_location(name, source) if source.exists() else None


def install() -> None:
    """Put the finder first, once."""
    if not any(isinstance(finder, _Sources) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Sources())


def compiled(module: ModuleType) -> bool:
    """Whether ``module`` runs compiled (an extension module) rather than interpreted."""
    return (module.__file__ or "").endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
