"""Exact mid-epoch resume for Keras: the input position after K batches is known.

With `load(seed=S, read=ReadOptions(shuffle="global"))` the order of an epoch is a pure function of (S, epoch), so
a checkpoint only needs (epoch, step) beside the model. `fit_resumable` saves both every
`save_every` steps (model file first, then an atomically replaced `resume.json` naming it), and on
restart continues at exactly the next batch: no record twice, none skipped.

    model = shardfeed.training.fit_resumable(build_model, "data/flowers", "runs/a", epochs=10,
                                             batch_size=64, seed=0, save_every=200, image_size=224)
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from shardfeed.errors import OptionError
from shardfeed.lazy import tensorflow
from shardfeed.read.augment import Augment
from shardfeed.read.options import DecodeOptions, ReadOptions
from shardfeed.read.shardset import DataPath
from shardfeed.training.inputs import RunInputs
from shardfeed.training.models import load_model

STATE_NAME = "resume.json"


@dataclass(frozen=True)
class ResumePoint:
    """Where an interrupted run stands: the model file and the next (epoch, step) to train."""

    model: str
    epoch: int
    step: int
    seed: int


def forget_resume_point(run_dir: str) -> None:
    """Removes a run's resume point, so that a fresh run does not continue an old one."""
    if os.path.exists(os.path.join(run_dir, STATE_NAME)):
        os.remove(os.path.join(run_dir, STATE_NAME))


def read_resume_point(run_dir: str) -> ResumePoint | None:
    """The last saved resume point of a run, or None for a fresh start."""
    path = os.path.join(run_dir, STATE_NAME)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return ResumePoint(**json.load(f))


def fit_resumable(
    model: Any | Callable[[], Any],
    data: DataPath,
    run_dir: str,
    *,
    epochs: int,
    batch_size: int,
    seed: int,
    split: str = "train",
    save_every: int = 100,
    image_size: int | tuple[int, int] = 224,
    augment: bool | Augment | None = None,
    decode: DecodeOptions | None = None,
    read: ReadOptions | None = None,
    callbacks: list[Any] | None = None,
    **fit_options: Any,
) -> Any:
    """`model.fit` on `load(data, seed=seed)` in global order that resumes exactly after a crash.

    Args:
        model: a compiled model, or a function building one (called only on a fresh start).
        data: a converted folder (or its `Manifest`).
        run_dir: where the resume point and model snapshots live.
        save_every: steps between snapshots (and at each epoch end).
        image_size, augment, decode: as for `load`.
        read: more read settings (workers, with_filenames, ...); the order is always the global
            one, whole batches only, starting where the run stands.
        fit_options: more `model.fit` arguments (validation_data, verbose, ...).

    Returns:
        The trained model.
    """
    tensorflow()
    import keras

    os.makedirs(run_dir, exist_ok=True)
    net, epoch, step = _starting_model(keras, model, run_dir, seed)
    inputs = RunInputs(data, batch_size, image_size, seed=seed, augment=augment, decode=decode)
    steps = inputs.steps_per_epoch(split)

    def stream(epoch: int, step: int, repeat: bool) -> Any:
        at = dataclasses.replace(
            read or ReadOptions(), shuffle="global", drop_remainder=True, epoch=epoch, start_step=step
        )
        return inputs.training(split, read=at, repeat=repeat)

    saver = _snapshot_callback(keras, run_dir, steps, save_every, seed)
    extra = list(callbacks or [])
    if step and epoch < epochs:  # finish the interrupted epoch first, from the next batch on
        saver.offset = step
        net.fit(
            stream(epoch, step, repeat=False),
            epochs=epoch + 1,
            initial_epoch=epoch,
            steps_per_epoch=steps - step,
            callbacks=[saver, *extra],
            **fit_options,
        )
        epoch, saver.offset = epoch + 1, 0
    if epoch < epochs:
        net.fit(
            stream(epoch, 0, repeat=True),
            epochs=epochs,
            initial_epoch=epoch,
            steps_per_epoch=steps,
            callbacks=[saver, *extra],
            **fit_options,
        )
    return net


def _starting_model(keras: Any, model: Any, run_dir: str, seed: int) -> tuple[Any, int, int]:
    """(model, epoch, step) to continue from: the last snapshot, or `model` (built if a function)."""
    point = read_resume_point(run_dir)
    if point is None:
        return (model() if callable(model) and not isinstance(model, keras.Model) else model), 0, 0
    if point.seed != seed:
        raise OptionError(
            f"{run_dir} was trained with seed {point.seed}; resuming with seed {seed} would change the "
            "order of the epoch it stopped in"
        )
    return load_model(point.model), point.epoch, point.step


def _snapshot_callback(keras: Any, run_dir: str, steps: int, save_every: int, seed: int) -> Any:
    class Snapshot(keras.callbacks.Callback):
        """Saves the model and the (epoch, step) it has reached, in that order."""

        def __init__(self) -> None:
            super().__init__()
            self.offset = 0
            self.epoch = 0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = epoch

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            done = self.offset + batch + 1
            if done % save_every and done != steps:
                return
            epoch, step = (self.epoch + 1, 0) if done == steps else (self.epoch, done)
            path = os.path.join(run_dir, f"resume-{epoch:04d}-{step:07d}.keras")
            self.model.save(path)
            tmp = os.path.join(run_dir, STATE_NAME + ".incomplete")
            with open(tmp, "w") as f:
                json.dump(asdict(ResumePoint(path, epoch, step, seed)), f)
            os.replace(tmp, os.path.join(run_dir, STATE_NAME))
            for name in os.listdir(run_dir):  # older snapshots are no longer referenced
                if name.startswith("resume-") and name.endswith(".keras") and os.path.join(run_dir, name) != path:
                    os.remove(os.path.join(run_dir, name))

    return Snapshot()
