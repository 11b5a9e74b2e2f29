"""Exact mid-epoch resume for Keras: the input position after K batches is known.

With `load(seed=S, read=ReadOptions(shuffle="global"))` the order of an epoch is a pure function of (S, epoch), so
a checkpoint only needs (epoch, records read) beside the model. `fit_resumable` saves them every
`save_every` steps (model file first, then an atomically replaced `resume.json` naming it), and on
restart continues at exactly the next batch: no record twice, none skipped. resume.json is small
and readable:

    {"model": ".../resume-0001-0000040.keras", "seed": 0, "epoch": 1, "step": 40,
     "records_consumed": 5120, "global_batch": 128, "num_workers": 2}

`records_consumed` counts what all workers read together (N workers read a prefix of the epoch's
order: `WorkerShare.positions`), so a run saved with N workers resumes with M: each of the M
reads every M-th of the records left (`ReadOptions(start_record=...)`). Buffer-shuffled reading
cannot do this, and `ReadOptions` says so.

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
from shardfeed.format import fileio
from shardfeed.lazy import tensorflow
from shardfeed.read.augment import Augment
from shardfeed.read.options import DecodeOptions, ReadOptions
from shardfeed.read.plan import resolve
from shardfeed.read.shardset import DataPath
from shardfeed.training.inputs import RunInputs
from shardfeed.training.models import load_model

STATE_NAME = "resume.json"


@dataclass(frozen=True)
class ResumePoint:
    """Where an interrupted run stands: the model file, the next (epoch, step) to train, and the
    records of that epoch all workers have read (0 in files from before it was recorded: then
    step x global batch)."""

    model: str
    epoch: int
    step: int
    seed: int
    records_consumed: int = 0
    global_batch: int = 0
    num_workers: int = 1

    @property
    def records(self) -> int:
        """Records of `epoch` read by all workers together."""
        return self.records_consumed or self.step * self.global_batch


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
    start: Callable[[Any], Any] | None = None,
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
        start: applied to the model training starts with, new or resumed, before it trains (and
            returning it): e.g. setting the trainable layers and compiling for a fine-tuning phase.
        fit_options: more `model.fit` arguments (validation_data, verbose, ...).

    Returns:
        The trained model.
    """
    tensorflow()
    import keras

    os.makedirs(run_dir, exist_ok=True)
    read = read or ReadOptions()
    workers = read.num_workers
    net, epoch, consumed = _starting_model(keras, model, run_dir, seed)
    if start is not None and epoch < epochs:
        net = start(net)
    inputs = RunInputs(data, batch_size, image_size, seed=seed, augment=augment, decode=decode)
    steps = inputs.steps_per_epoch(split)

    def stream(epoch: int, start_record: int, repeat: bool) -> Any:
        at = dataclasses.replace(read, shuffle="global", drop_remainder=True, epoch=epoch, start_record=start_record)
        return inputs.training(split, read=at, repeat=repeat)

    saver = _snapshot_callback(keras, run_dir, steps, save_every, seed, batch_size * workers, workers)
    extra = list(callbacks or [])
    if consumed and epoch < epochs:  # finish the interrupted epoch first, from the next batch on
        total = resolve(data, split=split, read=read, batch_size=batch_size, training=True, counting=True).epoch_records
        left = read.share.records(total, consumed) // batch_size
        saver.offset, saver.base_records = steps - left, consumed
        net.fit(
            stream(epoch, consumed, repeat=False),
            epochs=epoch + 1,
            initial_epoch=epoch,
            steps_per_epoch=left,
            callbacks=[saver, *extra],
            **fit_options,
        )
        epoch, saver.offset, saver.base_records = epoch + 1, 0, 0
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
    """(model, epoch, records of it consumed) to continue from: the last snapshot, or `model`
    (built if a function)."""
    point = read_resume_point(run_dir)
    if point is None:
        return (model() if callable(model) and not isinstance(model, keras.Model) else model), 0, 0
    if point.seed != seed:
        raise OptionError(
            f"{run_dir} was trained with seed {point.seed}; resuming with seed {seed} would change the "
            "order of the epoch it stopped in"
        )
    return load_model(point.model), point.epoch, point.records


def _snapshot_callback(
    keras: Any, run_dir: str, steps: int, save_every: int, seed: int, global_batch: int, workers: int
) -> Any:
    class Snapshot(keras.callbacks.Callback):
        """Saves the model and the (epoch, step, records consumed) it has reached, in that order."""

        def __init__(self) -> None:
            super().__init__()
            self.offset = 0  # steps of the epoch done before this fit (a resumed epoch)
            self.base_records = 0  # records of the epoch all workers read before this fit
            self.epoch = 0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = epoch

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            done = self.offset + batch + 1
            if done % save_every and done != steps:
                return
            epoch, step = (self.epoch + 1, 0) if done == steps else (self.epoch, done)
            records = 0 if step == 0 else self.base_records + (done - self.offset) * global_batch
            path = os.path.join(run_dir, f"resume-{epoch:04d}-{step:07d}.keras")
            self.model.save(path)
            point = ResumePoint(path, epoch, step, seed, records, global_batch, workers)
            fileio.write_text_atomic(os.path.join(run_dir, STATE_NAME), json.dumps(asdict(point), indent=1))
            for name in os.listdir(run_dir):  # older snapshots are no longer referenced
                if name.startswith("resume-") and name.endswith(".keras") and os.path.join(run_dir, name) != path:
                    os.remove(os.path.join(run_dir, name))

    return Snapshot()
