"""Squall's compiled hot path: the modules ``worker/squall/_pure.py`` lists in ``COMPILED``, built with
Cython in pure Python mode (each stays a plain Python module; a ``.pxd`` beside it gives the C types).

``SQUALL_PURE_PYTHON=1`` at build time builds none of them (and at run time ignores those built).
The build needs a C compiler and the Python headers; without them, install with
``SQUALL_PURE_PYTHON=1 pip install ...``. Everything else is in pyproject.toml.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from setuptools import setup


def compiled() -> list[str]:
    """``squall._pure.COMPILED``, read without importing squall (not installed while it builds)."""
    tree = ast.parse((Path(__file__).parent / "worker" / "squall" / "_pure.py").read_text())
    return next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                and any(getattr(target, "id", None) == "COMPILED" for target in node.targets))


def extensions() -> list:
    if os.environ.get("SQUALL_PURE_PYTHON") == "1":
        return []
    from Cython.Build import cythonize

    return cythonize([f"worker/{module.replace('.', '/')}.py" for module in compiled()], quiet=True,
                     compiler_directives={"language_level": 3,
                                          # annotations document the Python API; the .pxd files hold the C types
                                          "annotation_typing": False})


setup(ext_modules=extensions())
