"""Exact mid-epoch resume for Keras: the input position after K batches is known.

With `load(seed=S, read=ReadOptions(shuffle="global"))` the order of an epoch is a pure function of (S, epoch), so
a checkpoint only needs (epoch, records read) beside the model. `fit_resumable` saves them every
`save_every` steps and at each epoch's end (weights and optimizer state first, then an atomically
replaced `resume.json` naming them), and on restart continues from the last snapshot at exactly the
next batch: no record twice, none skipped, the same augmentation. Every epoch is batched on its
own (`load`), so this holds for any split size, the last partial batch of an epoch being dropped
in both runs alike. resume.json is small and readable:

    {"model": ".../resume-0001-0000040.weights.h5", "seed": 0, "epoch": 1, "step": 40,
     "records_consumed": 5120, "global_batch": 128, "num_workers": 2, "optimizer_variables": 9}

A snapshot is restored into the model `model()` builds (weights, then the optimizer's variables:
its step count, moments and place in a learning-rate schedule), never deserialized from its
config, so models with custom layers or classes need no Keras registration to resume.

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
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from shardfeed.deprecation import renamed
from shardfeed.errors import OptionError, RunFolderError
from shardfeed.format import fileio
from shardfeed.lazy import tensorflow
from shardfeed.read.augment import Augment
from shardfeed.read.options import IMAGE_SIZE, DecodeOptions, ReadOptions
from shardfeed.read.plan import resolve
from shardfeed.read.shardset import DataPath
from shardfeed.training.inputs import RunInputs
from shardfeed.training.run_folder import RunFolder

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
    optimizer_variables: int = -1  # -1: not recorded (older files)

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


@renamed(data="path")
def fit_resumable(
    model: Any | Callable[[], Any],
    path: DataPath,
    run_dir: str,
    *,
    epochs: int,
    batch_size: int,
    seed: int,
    split: str = "train",
    save_every: int = 100,
    image_size: int | tuple[int, int] = IMAGE_SIZE,
    augment: bool | Augment | None = None,
    decode: DecodeOptions | None = None,
    read: ReadOptions | None = None,
    callbacks: list[Any] | None = None,
    start: Callable[[Any], Any] | None = None,
    **fit_options: Any,
) -> Any:
    """`model.fit` on `load(path, seed=seed)` in global order that resumes exactly after a crash.

    Args:
        model: a compiled model, or a function building one; a resume restores the last snapshot
            into it (weights, optimizer state): custom classes need no registration.
        path: a converted folder (or its `Manifest`; old name `data=`).
        run_dir: where the resume point and model snapshots live.
        save_every: steps between snapshots (and at each epoch end).
        image_size: as for `load`.
        augment: as for `load`.
        decode: as for `load`.
        read: more read settings (workers, with_filenames, ...); always the global order, from
            where the run stands; each epoch's partial batch dropped unless drop_remainder=False.
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
    net, point = _starting_model(keras, model, run_dir, seed)
    epoch, consumed = (point.epoch, point.records) if point is not None else (0, 0)
    if start is not None and epoch < epochs:
        net = start(net)
    if point is not None:
        restore(net, point)
    inputs = RunInputs(path, batch_size, image_size, seed=seed, augment=augment, decode=decode)
    read = dataclasses.replace(read, shuffle="global", drop_remainder=read.drops_remainder(training=True))
    steps = inputs.steps_per_epoch(split, read=read)

    def stream(epoch: int, start_record: int, repeat: bool) -> Any:
        at = dataclasses.replace(read, epoch=epoch, start_record=start_record)
        return inputs.training(split, read=at, repeat=repeat)

    saver = _snapshot_callback(keras, run_dir, steps, save_every, seed, batch_size * workers, workers)
    extra = list(callbacks or [])
    if consumed and epoch < epochs:  # finish the interrupted epoch first, from the next batch on
        left = _steps_left(path, split, read, batch_size, consumed)
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


def _steps_left(data: DataPath, split: str, read: ReadOptions, batch_size: int, consumed: int) -> int:
    """Batches of this worker's share left in an epoch after all workers read `consumed` records."""
    total = resolve(data, split=split, read=read, batch_size=batch_size, training=True, counting=True).epoch_records
    left = read.share.records(total, consumed) / batch_size
    return math.floor(left) if read.drop_remainder else math.ceil(left)


def _starting_model(keras: Any, model: Any, run_dir: str, seed: int) -> tuple[Any, ResumePoint | None]:
    """The model to train (built if a function) and the resume point to restore into it, if any."""
    point = read_resume_point(run_dir)
    if point is not None and point.seed != seed:
        raise OptionError(
            f"{run_dir} was trained with seed {point.seed}; resuming with seed {seed} would change the "
            "order of the epoch it stopped in"
        )
    return (model() if callable(model) and not isinstance(model, keras.Model) else model), point


def restore(net: Any, point: ResumePoint) -> None:
    """Loads a snapshot into `net`: its weights, and its optimizer's state when `net` is compiled
    with an optimizer of the same variables (another fine-tuning phase starts a fresh one).

    Raises:
        RunFolderError: the snapshot does not fit the model (another architecture or class count).
    """
    optimizer, skip = getattr(net, "optimizer", None), []
    if optimizer is not None:
        if not optimizer.built:
            optimizer.build(net.trainable_variables)
        if point.optimizer_variables >= 0 and len(optimizer.variables) != point.optimizer_variables:
            skip = [optimizer]
    try:
        if skip and point.model.endswith(".weights.h5"):
            net.load_weights(point.model, objects_to_skip=skip)
        else:
            net.load_weights(point.model)
    except (ValueError, OSError, KeyError) as e:
        raise RunFolderError(
            f"snapshot {point.model} does not fit the model being resumed ({str(e).splitlines()[0][:200]}); "
            "resume with the same model-building code, or start a new run folder"
        ) from e


def _snapshot_callback(
    keras: Any, run_dir: str, steps: int, save_every: int, seed: int, global_batch: int, workers: int
) -> Any:
    class Snapshot(keras.callbacks.Callback):
        """Saves the weights and optimizer state, then the (epoch, step, records consumed) reached."""

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
            path = os.path.join(run_dir, f"resume-{epoch:04d}-{step:07d}.weights.h5")
            self.model.save_weights(path)
            optimizer = getattr(self.model, "optimizer", None)
            variables = len(optimizer.variables) if optimizer is not None else -1
            point = ResumePoint(path, epoch, step, seed, records, global_batch, workers, variables)
            fileio.write_text_atomic(os.path.join(run_dir, STATE_NAME), json.dumps(asdict(point), indent=1))
            for name in os.listdir(run_dir):  # older snapshots are no longer referenced
                stale = name.startswith("resume-") and name.endswith((".keras", ".h5"))
                if stale and os.path.join(run_dir, name) != path:
                    os.remove(os.path.join(run_dir, name))

    return Snapshot()


def starting_point(folder: RunFolder, *, resume: bool, save_every: int | None) -> tuple[int, int]:
    """The (epoch, step) a run in `folder` starts at: (0, 0) fresh; with `resume`, the last
    snapshot's point (save_every runs) or the epoch after the last one logged.

    Raises:
        RunFolderError: `resume` without anything saved to resume from.
    """
    snapshots = folder.checkpoints
    if resume and save_every:
        point = read_resume_point(snapshots)
        if point is None:
            raise RunFolderError(
                f"nothing to resume in {folder.path!r}: no checkpoints/resume.json (written when "
                "training with save_every)"
            )
        return point.epoch, point.step
    if resume:
        if not os.path.exists(folder.last_checkpoint):
            raise RunFolderError(f"nothing to resume in {folder.path!r}: no checkpoints/last.keras")
        return folder.completed_epochs(), 0
    if save_every:
        forget_resume_point(snapshots)  # a fresh run: fit_resumable must not pick up an old one
    return 0, 0
