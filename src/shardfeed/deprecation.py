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
