"""Which devices `train` trains on: one (the default), or several of this host's through
`tf.distribute.MirroredStrategy`; and the precision it computes in there.

With several devices the model's variables are mirrored on each, every step splits the global
batch (`--batch-size`) into one slice per replica (Keras distributes the dataset `load` returns:
`strategy.experimental_distribute_dataset`), and gradients are summed across replicas, so the
run trains on the same batches as a one-device run of the same global batch. The devices are
the visible GPUs; a host without GPUs has one CPU device unless more logical ones were
configured (`tf.config.set_logical_device_configuration`, as the tests do), which are then used.

Training drops each epoch's last partial batch with several devices (trainer.train_read): split
across replicas it can leave one an empty slice, whose batch statistics are NaN. Evaluation
keeps every record; an empty slice is harmless there on GPUs, but TensorFlow's oneDNN CPU
kernels reject it, so logical CPU devices need TF_ENABLE_ONEDNN_OPTS=0 (tests/test_devices.py).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from shardfeed.errors import OptionError
from shardfeed.lazy import tensorflow

log = logging.getLogger("shardfeed")

ALL = "all"


def check_spec(spec: int | str) -> None:
    """`devices` as `TrainOptions` takes it: a positive count or 'all'.

    Raises:
        OptionError: anything else.
    """
    if spec == ALL:
        return
    if not isinstance(spec, int) or isinstance(spec, bool) or spec < 1:
        raise OptionError(f"devices must be a positive number or 'all', got {spec!r} (--devices)")


def parse(text: str) -> int | str:
    """`--devices` on the command line: 'all' or a count."""
    if text.strip().lower() == ALL:
        return ALL
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of devices or 'all', got {text!r}") from None


@dataclass(frozen=True)
class Placement:
    """The devices a run trains on, and the strategy that spans them (None for one device)."""

    devices: tuple[str, ...]
    strategy: Any = None

    @property
    def replicas(self) -> int:
        return len(self.devices)

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Where the model must be built, loaded and compiled."""
        if self.strategy is None:
            yield
        else:
            with self.strategy.scope():
                yield

    def describe(self, batch_size: int) -> str | None:
        """One line for the log (None for the one default device: nothing to say)."""
        if self.strategy is None:
            return None
        per, rest = divmod(batch_size, self.replicas)
        split = f"{self.replicas} x {per}" if not rest else f"{self.replicas} slices of {per}-{per + 1}"
        return f"devices: {', '.join(self.devices)} (MirroredStrategy; each batch of {batch_size} split {split})"

    def as_json(self) -> dict[str, Any]:
        return {"devices": list(self.devices), "strategy": "MirroredStrategy" if self.strategy else None}


def gpu_present(keras: Any) -> bool:
    """Whether Keras' backend (tensorflow, jax or torch: KERAS_BACKEND) sees a GPU, asked of that
    backend: TensorFlow's device list says nothing of what JAX or PyTorch will compute on."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return any(d.platform == "gpu" for d in jax.devices())
    if backend == "torch":
        import torch

        return bool(torch.cuda.is_available())
    return bool(tensorflow().config.list_physical_devices("GPU"))


def set_precision(keras: Any, options: Any) -> str:
    """Sets Keras' dtype policy for a run (`TrainOptions.compute_precision` on this host), says
    which it is and why, and returns 'mixed' or 'float32'."""
    gpu = gpu_present(keras)
    precision = options.compute_precision(gpu)
    keras.mixed_precision.set_global_policy("mixed_float16" if precision == "mixed" else "float32")
    if precision == "mixed":
        why = "a GPU is present" if gpu and options.precision == "auto" else "asked for"
        log.info("precision: mixed_float16 (%s; logits stay float32; --precision float32 turns it off)", why)
    else:
        why = (
            f"no GPU for Keras' {keras.backend.backend()} backend"
            if not gpu and options.precision == "auto"
            else "asked for"
        )
        log.info("precision: float32 (%s)", why)
    return str(precision)


def place(spec: int | str) -> Placement:
    """The devices `spec` asks for on this host: 1 (the default device), N or 'all'.

    Raises:
        OptionError: more devices than this host has (naming those it has).
    """
    check_spec(spec)
    tf = tensorflow()
    gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
    candidates = gpus or [d.name for d in tf.config.list_logical_devices("CPU")]
    count = len(candidates) if spec == ALL else int(spec)
    if count > len(candidates):
        kind = "GPU" if gpus else "CPU (no GPU is visible)"
        raise OptionError(
            f"--devices {spec} asks for {count} devices but this host has {len(candidates)} {kind}: "
            f"{', '.join(candidates)}; pass --devices {len(candidates)} or all"
        )
    if count == 1:
        return Placement((candidates[0],))
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    if backend != "tensorflow":
        raise OptionError(
            f"--devices {spec} spreads batches with TensorFlow's MirroredStrategy, which Keras' {backend} backend "
            "does not run; train on one device, or with KERAS_BACKEND=tensorflow"
        )
    chosen = tuple(candidates[:count])
    return Placement(chosen, tf.distribute.MirroredStrategy(devices=list(chosen)))
