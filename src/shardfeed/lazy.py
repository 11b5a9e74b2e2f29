"""Lazy imports of heavy optional dependencies, failing with an install hint."""

from __future__ import annotations

import importlib
from typing import Any


class MissingDependencyError(ImportError):
    """An optional dependency is not installed; the message says how to install it."""


def _import(module: str, hint: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingDependencyError(f"{module} is required for this feature: {hint}") from e


def tensorflow() -> Any:
    """The `tensorflow` module."""
    return _import(
        "tensorflow",
        "pip install 'shardfeed[cpu]' (CPU) or 'shardfeed[gpu]' (NVIDIA GPU, CUDA build)",
    )


def apache_beam() -> Any:
    """The `apache_beam` module."""
    return _import("apache_beam", "pip install 'shardfeed[beam]'")
