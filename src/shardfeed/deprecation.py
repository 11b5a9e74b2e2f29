"""Old public names that still work, with a warning that says the new one.

A parameter renamed for one vocabulary across the API (the converted folder is `path`, a run
folder `run_dir`, an output folder `output_dir`, an output file `output`) keeps its old keyword
for a while: passing it warns (`DeprecationWarning`, pointing at the caller's line) and passes
the value on under the new name.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, cast

from shardfeed.errors import OptionError

F = TypeVar("F", bound=Callable[..., Any])


def renamed(**old_to_new: str) -> Callable[[F], F]:
    """A decorator: each keyword `old` given to the function arrives as `new`, with a warning.

    Raises (when called):
        OptionError: both the old and the new name given.
    """

    def wrap(function: F) -> F:
        @functools.wraps(function)
        def accepting_old_names(*args: Any, **kwargs: Any) -> Any:
            for old, new in old_to_new.items():
                if old not in kwargs:
                    continue
                if new in kwargs:
                    raise OptionError(f"{function.__name__}: {old}= is the old name of {new}=; pass only {new}=")
                warnings.warn(
                    f"{function.__qualname__}({old}=...) is deprecated; use {new}=", DeprecationWarning, stacklevel=2
                )
                kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return cast(F, accepting_old_names)

    return wrap


class RenamedAttribute:
    """An attribute's old name on a class (`data = RenamedAttribute("path")`): reading it warns
    (`DeprecationWarning`, at the caller's line) and gives the new attribute's value."""

    def __init__(self, new: str) -> None:
        self.new = new
        self.old = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.old = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        what = type(instance).__name__
        warnings.warn(f"{what}.{self.old} is deprecated; use {what}.{self.new}", DeprecationWarning, stacklevel=2)
        return getattr(instance, self.new)
