"""Option objects from parsed flags: a flag whose `dest` is a field's name sets that field.

Flags default to None, so an option the user did not give keeps its dataclass default: defaults
live in the option classes only, and adding an option is one field plus one flag.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def from_args(cls: type[T], args: argparse.Namespace, **fixed: Any) -> T:
    """`cls(...)` with every field that `args` sets (not None), plus `fixed` values."""
    given = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if f.name not in fixed and getattr(args, f.name, None) is not None
    }
    return cls(**given, **fixed)
