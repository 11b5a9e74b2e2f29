"""Lazy imports of heavy optional dependencies, failing with an install hint."""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

from shardfeed.errors import MissingDependencyError


def _import(module: str, hint: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingDependencyError(f"{module} is required for this feature: {hint}") from e


_COCO_HINT = "pip install 'shardfeed[coco]' (pycocotools)"


def coco_mask() -> Any:
    """pycocotools' mask API: COCO's polygons and RLE as instance masks (`convert --masks`)."""
    return _import("pycocotools.mask", _COCO_HINT)


def coco_eval() -> Any:
    """pycocotools' COCO and COCOeval (as attributes): COCO's detection scores (`evaluate`)."""
    import types

    coco, cocoeval = _import("pycocotools.coco", _COCO_HINT), _import("pycocotools.cocoeval", _COCO_HINT)
    return types.SimpleNamespace(COCO=coco.COCO, COCOeval=cocoeval.COCOeval)


_GRAIN_HINT = "pip install 'shardfeed[grain]' (Grain, and OpenCV's resize)"


def grain() -> Any:
    """Grain: `grain_dataset`'s pipeline (threads or worker processes)."""
    return _import("grain", _GRAIN_HINT)


def opencv() -> Any:
    """OpenCV (`cv2`): `grain_dataset`'s bilinear resize and flip, written into the batch."""
    return _import("cv2", _GRAIN_HINT)


KERAS_HUB_HINT = (
    "pip install 'shardfeed[detection]', or without the tensorflow-text its wheel asks for (its detectors do "
    "not use it): pip install regex tokenizers && pip install --no-deps keras-hub"
)


def keras_hub() -> Any:
    """KerasHub: the detector `train` fits on boxes (training/detector.py)."""
    return _import("keras_hub", KERAS_HUB_HINT)


QUIET_ENV = "SHARDFEED_QUIET_TF"  # set (by the CLI) to import TensorFlow without its start-up lines


def tensorflow() -> Any:
    """The `tensorflow` module.

    With SHARDFEED_QUIET_TF=1 the first import runs with stderr closed at the file-descriptor
    level: TensorFlow's C++ start-up lines (oneDNN, CPU features, absl's pre-init notice) are
    written before TF_CPP_MIN_LOG_LEVEL is read, so nothing else silences them.
    """
    hint = "pip install 'shardfeed[cpu]' (CPU) or 'shardfeed[gpu]' (NVIDIA GPU, CUDA build)"
    if not _released_at_exit:
        _release_iterators_at_exit()
    if "tensorflow" in sys.modules or os.environ.get(QUIET_ENV) != "1":
        return _import("tensorflow", hint)
    with _stderr_closed():
        return _import("tensorflow", hint)


def keras() -> Any:
    """Keras, with TensorFlow imported first (`tensorflow`): the models here are fed by tf.data
    whatever Keras' backend."""
    tensorflow()
    import keras as module

    return module


_released_at_exit = False


def _release_iterators_at_exit() -> None:
    global _released_at_exit
    _released_at_exit = True
    atexit.register(release_iterators)


def release_iterators() -> None:
    """Frees, at interpreter exit, the tf.data iterators an uncaught exception kept alive.

    Python keeps the last uncaught exception's traceback (`sys.last_traceback`) until it
    finalises, and with it the frame that was iterating, whose value stack holds the failed
    iterator. Destroying that iterator waits for its threads; one of them may be about to call a
    `numpy_function` (our pipelines read through several), which needs the GIL, and during
    finalisation no other thread gets the GIL again: the process hung forever (5 runs in 6 of a
    plain tf.data pipeline whose numpy_function raised; TensorFlow 2.21, Python 3.11). Run as an
    atexit handler, before finalisation, it lets the iterator go while those threads can still
    finish: 6 runs in 6 then exit.
    """
    for name in ("last_exc", "last_type", "last_value", "last_traceback"):
        if getattr(sys, name, None) is not None:
            setattr(sys, name, None)
    gc.collect()


@contextlib.contextmanager
def _stderr_closed() -> Iterator[None]:
    """File descriptor 2 pointed at /dev/null for the block (C and Python writers alike)."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def apache_beam() -> Any:
    """The `apache_beam` module. Beam's own chatter (its import-time notes on missing GCP client
    libraries, runner choice, type-hint conversions) is logged at WARNING and below through the
    'apache_beam' logger: it is kept to errors unless the root logger is at DEBUG (`-v`)."""
    hint = "pip install 'shardfeed[beam]'"
    root = logging.getLogger()
    if root.getEffectiveLevel() <= logging.DEBUG or "apache_beam" in sys.modules:
        return _import("apache_beam", hint)
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    level = root.level
    root.setLevel(logging.ERROR)  # some of Beam's import-time notes go to the root logger
    try:
        return _import("apache_beam", hint)
    finally:
        root.setLevel(level)


def dask_distributed() -> Any:
    """The `distributed` module (Dask's cluster client), for the Dask runner."""
    return _import("distributed", "pip install 'shardfeed[dask]'")


def quiet_tensorflow() -> None:
    """TensorFlow's start-up and op log lines, Keras' advisory warnings: off unless --verbose.

    Set before TensorFlow is imported (the commands import it lazily), so the C++ logger reads it.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault(QUIET_ENV, "1")
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    logging.getLogger("jax").setLevel(logging.WARNING)  # "Unable to initialize backend 'tpu'…" (INFO)
    warnings.filterwarnings("ignore", message=r".*`shuffle=True` was passed.*")
    warnings.filterwarnings("ignore", category=UserWarning, module=r"keras\..*")
