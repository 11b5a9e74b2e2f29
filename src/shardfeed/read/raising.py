"""Errors raised inside a pipeline reach a Python caller as shardfeed's own exceptions.

tf.data runs our Python (`numpy_function`: a bucket read) and our checks (`tf.debugging.Assert`:
a corrupt or missing shard) inside its graph, so they arrive at `for batch in ds` as TensorFlow's
`UnknownError` or `InvalidArgumentError`, our message buried in a traceback. The dataset `load`
returns iterates through `_Iterator`, which raises the shardfeed exception it was instead
(`errors.from_tensorflow`: a `StorageError`, a `CorruptRecordError`, ...), chained to
TensorFlow's, so `except shardfeed.ShardfeedError` catches it and the message is one line. It is
TensorFlow's error class too (a subclass of both), so code that catches
`tf.errors.InvalidArgumentError` or `tf.errors.OpError` around a loop still catches it.

`load` gives a real `tf.data.Dataset` (Keras, tf.distribute and every transformation take it as
ever): only its class is swapped for a subclass whose `__iter__` adds the translation. Keras'
`fit` and a dataset made from it by a further transformation iterate without it; the CLI prints
the same one line there.
"""

from __future__ import annotations

from typing import Any

from shardfeed.errors import from_tensorflow

_SUBCLASSES: dict[type, Any] = {}
_BOTH: dict[tuple[type, type], Any] = {}


def raising(ds: Any) -> Any:
    """`ds` itself, iterating with shardfeed's exceptions (see the module docstring)."""
    base = type(ds)
    if base not in _SUBCLASSES:
        _SUBCLASSES[base] = type(base.__name__, (base,), {"__iter__": _iter, "__module__": base.__module__})
    ds.__class__ = _SUBCLASSES[base]
    return ds


def _iter(self: Any) -> _Iterator:
    base: Any = type(self).__mro__[1]
    return _Iterator(base.__iter__(self))


class _Iterator:
    """TensorFlow's iterator, raising the shardfeed error a failed `next` carries."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __iter__(self) -> _Iterator:
        return self

    def __next__(self) -> Any:
        try:
            return next(self._inner)
        except StopIteration:
            raise
        except Exception as e:
            ours = from_tensorflow(e) if type(e).__module__.startswith("tensorflow") else None
            if ours is None:
                raise
            raise _as_both(ours, e) from e

    def get_next(self) -> Any:
        return self.__next__()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _as_both(ours: Exception, theirs: Exception) -> Exception:
    """`ours` as an instance of its class and of TensorFlow's error class at once, with our
    message and TensorFlow's op fields (what its handlers read)."""
    kinds = (type(ours), type(theirs))
    if kinds not in _BOTH:
        namespace = {"__module__": kinds[0].__module__, "twin_of_tensorflows": True}  # errors.from_tensorflow skips it
        _BOTH[kinds] = type(kinds[0].__name__, kinds, namespace)
    error = _BOTH[kinds].__new__(_BOTH[kinds])
    error.args = ours.args
    fields: dict[str, Any] = {"_node_def": None, "_op": None, "_message": str(ours), "_experimental_payloads": {}}
    vars(error).update(fields, _error_code=getattr(theirs, "error_code", None))
    return error
