"""train: fit a Keras classifier on converted shards, with checkpoints, logs and resume.

Run folder layout:
    run.json                      settings, dataset, class names, preprocessing (read by evaluate/predict)
    checkpoints/last.keras        after every epoch (model + optimizer): what --resume continues from
    checkpoints/best.keras        best validation accuracy so far
    checkpoints/resume.json       with save_every: the (epoch, step) to resume at, and its snapshot
    log.csv                       one row per epoch (Keras CSVLogger)
    tensorboard/                  TensorBoard logs
    model.keras                   the final model, class names inside
    metrics.json                  final metrics, epochs, time, throughput
    curves.png                    loss and accuracy per epoch (train and validation)
    status.json                   running / finished / failed (with the error)
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import replace
from typing import Any

from shardfeed.errors import tensorflow_message
from shardfeed.format import manifest
from shardfeed.lazy import tensorflow
from shardfeed.read.dataset import load, steps_per_epoch
from shardfeed.read.options import ReadConfig
from shardfeed.training.augment_choice import choose_augment
from shardfeed.training.input_probe import PROBE_BATCHES, input_probe
from shardfeed.training.models import build_model, load_model
from shardfeed.training.resume import STATE_NAME, fit_resumable, read_resume_point
from shardfeed.training.run_config import AUTO, TrainConfig, TrainOptions, write_status
from shardfeed.training.run_report import plot_curves

log = logging.getLogger("shardfeed")
TOP_K = 5
INFERENCE_SAMPLE = 1024  # training images re-scored in inference mode at the end
DISAGREEMENT = 0.15  # training-mode vs inference-mode accuracy gap worth a warning


def train(
    data: str,
    out: str,
    options: TrainOptions | None = None,
    *,
    weights: str | None = None,
    resume: bool = False,
    verbose: int = 2,
) -> dict[str, Any]:
    """Trains a classifier on converted shards and writes a run folder (see the module docstring).

    Args:
        data: a converted folder.
        out: the run folder.
        options: model, epochs, batch size, augmentation, ... (`TrainOptions`; default: its defaults).
        weights: local weights to start from (see `build_model`).
        resume: continue from checkpoints/last.keras at the epoch after the last one logged (or,
            with save_every, at the exact step of the last snapshot).
        verbose: Keras' fit verbosity.

    Returns:
        The final metrics (also in metrics.json).
    """
    options = _resolved(data, options or TrainOptions())  # checks the data before TensorFlow loads
    config = _run_config(data, options)
    steps = _check_training_set(data, options)
    os.makedirs(os.path.join(out, "checkpoints"), exist_ok=True)
    initial_epoch, initial_step = _starting_point(out, resume=resume, save_every=options.save_every)
    with open(os.path.join(out, "run.json"), "w") as f:
        f.write(config.to_json())
    write_status(out, "running")
    try:
        metrics = _train(data, out, options, config, weights, resume, verbose, (initial_epoch, initial_step, steps))
    except BaseException as e:
        write_status(out, "interrupted" if isinstance(e, KeyboardInterrupt) else "failed", tensorflow_message(e))
        raise
    write_status(out, "finished")
    return metrics


def _train(
    data: str,
    out: str,
    options: TrainOptions,
    config: TrainConfig,
    weights: str | None,
    resume: bool,
    verbose: int,
    position: tuple[int, int, int],
) -> dict[str, Any]:
    """The fit itself, from (initial epoch, initial step, steps per epoch); writes the model and metrics."""
    tensorflow()  # a clear install hint if TensorFlow is missing
    import keras

    initial_epoch, initial_step, steps = position
    keras.utils.set_random_seed(options.seed)
    keras.mixed_precision.set_global_policy("mixed_float16" if options.mixed_precision else "float32")
    val_ds = config.eval_dataset(data, config.validation_split) if config.validation_split else None

    def build() -> Any:
        return _compiled(keras, config, options, weights, epochs_steps=options.epochs * steps)

    callbacks = _callbacks(keras, out, monitor="val_accuracy" if val_ds is not None else "accuracy", resume=resume)
    probe = input_probe(lambda: _train_dataset(data, options, initial_epoch), min(steps, PROBE_BATCHES))
    callbacks.append(probe)
    fit: dict[str, Any] = {"validation_data": val_ds, "callbacks": callbacks, "verbose": verbose}
    start = time.monotonic()
    net = _fit(build, data, out, options, fit, resume=resume, initial_epoch=initial_epoch, steps=steps)
    seconds = time.monotonic() - start - probe.seconds
    net.save(os.path.join(out, "model.keras"))
    trained = max((options.epochs - initial_epoch) * steps - initial_step, 0)  # steps
    metrics = {
        **_final_metrics(net),
        **_inference_check(net, config, data, options),
        "augment": options.augment,
        "validation_split": config.validation_split,
        "epochs": options.epochs,
        "initial_epoch": initial_epoch,
        "initial_step": initial_step,
        "seconds": seconds,
        "train_images_per_second": trained * options.batch_size / seconds if seconds and trained else 0.0,
        "steps_per_epoch": steps,
        "input_verdict": probe.verdict,
    }
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    plot_curves(out, os.path.join(out, "curves.png"))
    return metrics


def _resolved(data: str, options: TrainOptions) -> TrainOptions:
    """`options` with augment='auto' replaced by the preset the data calls for (and why, logged)."""
    if options.augment != AUTO:
        return options
    choice = choose_augment(data, options.train_split, seed=options.seed)
    log.info("augment: %s, chosen for %s (--augment to override)", choice.preset, choice.reason)
    return replace(options, augment=choice.preset)


def _inference_check(net: Any, config: TrainConfig, data: str, options: TrainOptions) -> dict[str, Any]:
    """Re-scores up to INFERENCE_SAMPLE training images in inference mode, and warns when that,
    the training-mode accuracy Keras printed, and the validation accuracy disagree.

    With BatchNorm the training-mode figure can be far above the model's (0.89 while fitting,
    0.20 in inference mode, seen on a short run); validation figures are always inference-mode.
    """
    batches = math.ceil(INFERENCE_SAMPLE / options.batch_size)
    scores = net.evaluate(config.eval_dataset(data, options.train_split).take(batches), verbose=0, return_dict=True)
    inference = float(scores["accuracy"])
    final = _final_metrics(net)
    for message in _disagreements(final.get("accuracy"), inference, final.get("val_accuracy")):
        log.warning("warning: %s (docs/training.md, 'Honest numbers')", message)
    return {"train_accuracy_inference": inference}


def _disagreements(fitted: float | None, inference: float, validation: float | None) -> list[str]:
    """What the three accuracies say when they are more than DISAGREEMENT apart."""
    messages = []
    if fitted is not None and fitted - inference > DISAGREEMENT:
        messages.append(
            f"training accuracy was {fitted:.3f} while fitting but the model scores {inference:.3f} on training "
            "images in inference mode: BatchNorm's moving statistics have not caught up with the weights (too few "
            "steps, or a learning rate too high); trust the validation figures, train longer"
        )
    elif fitted is not None and inference - fitted > DISAGREEMENT:
        messages.append(
            f"training accuracy was {fitted:.3f} while fitting (augmented images, dropout) and {inference:.3f} in "
            "inference mode: the augmentation is much harder than the task; if validation is low too, try a "
            "milder --augment"
        )
    if validation is not None and inference - validation > DISAGREEMENT:
        messages.append(
            f"the model scores {inference:.3f} on training images but {validation:.3f} on validation: it overfits "
            "(more data or augmentation, fewer epochs) or the splits differ"
        )
    return messages


def _fit(
    build: Any,
    data: str,
    out: str,
    options: TrainOptions,
    fit: dict[str, Any],
    *,
    resume: bool,
    initial_epoch: int,
    steps: int,
) -> Any:
    """Fits a new (or, with `resume`, the last checkpointed) model; with save_every, through
    `fit_resumable`, which snapshots mid-epoch and resumes at the exact step."""
    if options.save_every:
        return fit_resumable(
            build,
            data,
            os.path.join(out, "checkpoints"),
            epochs=options.epochs,
            batch_size=options.batch_size,
            seed=options.seed,
            split=options.train_split,
            save_every=options.save_every,
            image_size=options.image_size,
            augment=options.augmentation,
            decode=options.decode,
            **fit,
        )
    else:
        net = load_model(os.path.join(out, "checkpoints", "last.keras")) if resume else build()
        net.fit(
            _train_dataset(data, options, initial_epoch),
            epochs=options.epochs,
            initial_epoch=initial_epoch,
            steps_per_epoch=steps,
            **fit,
        )
    return net


def _run_config(data: str, options: TrainOptions) -> TrainConfig:
    """The run's record: options, the data's class names, and the validation split resolved."""
    m = manifest.read(data)
    if m.labels is None:
        raise ValueError(f"{data} holds unlabeled data (no classes to learn); convert a labelled source")
    m.split(options.train_split)  # exists, or a message listing those that do
    return TrainConfig.of(data, options, m.labels, _validation_split(m, options))


def _validation_split(m: manifest.Manifest, options: TrainOptions) -> str | None:
    """The split validated on: as named; with AUTO, the held-out split the data has (validation,
    val, test, ...), said when it is not 'validation' and when there is none.

    Raises:
        ManifestError: a named split that does not exist.
    """
    if options.validation_split is None:
        return None
    if options.validation_split != AUTO:
        m.split(options.validation_split)
        return options.validation_split
    names = tuple(n for n in manifest.HELD_OUT_SPLITS if n != options.train_split)
    split = m.held_out_split(names)
    if split is None:
        log.warning(
            "warning: %s has no held-out split (it has %s): training without validation; the accuracy at the "
            "end is measured on training images",
            m.path,
            m.split_names,
        )
    elif split != "validation":
        log.info("validating on the %r split", split)
    return split


def _check_training_set(data: str, options: TrainOptions) -> int:
    """Steps per epoch; warns when the dropped incomplete batch is a large share of each epoch.

    Raises:
        ValueError: the split holds less than one batch.
    """
    count = manifest.read(data).split(options.train_split).num_records
    if count < options.batch_size:
        raise ValueError(
            f"the {options.train_split!r} split has {count} images, fewer than one batch of {options.batch_size}: "
            f"pass batch_size={count} (--batch-size {count}) or less"
        )
    dropped = count % options.batch_size
    if dropped / count > 0.1:
        log.warning(
            "warning: each epoch leaves out %d of the %d training images (the incomplete last batch, a different "
            "one each epoch); a --batch-size that divides %d more evenly uses them all",
            dropped,
            count,
            count,
        )
    return steps_per_epoch(data, options.train_split, options.batch_size, training=True)


def _train_dataset(data: str, options: TrainOptions, initial_epoch: int) -> Any:
    """The repeating training stream; a global order continues the sequence of epoch orders."""
    read = ReadConfig(shuffle=options.shuffle, epoch=initial_epoch if options.shuffle == "global" else 0)
    return load(
        data,
        split=options.train_split,
        batch_size=options.batch_size,
        image_size=options.image_size,
        training=True,
        augment=options.augmentation,
        seed=options.seed,
        repeat=True,
        read=read,
        decode=options.decode,
        service=options.service,
    )


def _compiled(keras: Any, config: TrainConfig, options: TrainOptions, weights: str | None, epochs_steps: int) -> Any:
    """A new model for the run, compiled with its optimizer, loss and metrics."""
    net = build_model(options.model, config.class_names, config.image_size, channels=options.channels, weights=weights)
    metrics: list[Any] = ["accuracy"]
    if len(config.class_names) > TOP_K:  # with fewer classes top-5 is always 1.0: noise
        metrics.append(keras.metrics.SparseTopKCategoricalAccuracy(k=TOP_K, name=f"top{TOP_K}"))
    net.compile(
        # cosine decay to zero over the whole run: the last epochs settle instead of
        # jittering (digits demo: validation accuracy swung 0.87-0.96 at a constant rate)
        optimizer=keras.optimizers.Adam(keras.optimizers.schedules.CosineDecay(options.learning_rate, epochs_steps)),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=metrics,
    )
    return net


def _callbacks(keras: Any, out: str, *, monitor: str, resume: bool) -> list[Any]:
    """Checkpoints (last and best), the CSV log and TensorBoard."""
    return [
        keras.callbacks.ModelCheckpoint(os.path.join(out, "checkpoints", "last.keras")),
        keras.callbacks.ModelCheckpoint(
            os.path.join(out, "checkpoints", "best.keras"), monitor=monitor, mode="max", save_best_only=True
        ),
        keras.callbacks.CSVLogger(os.path.join(out, "log.csv"), append=resume),
        keras.callbacks.TensorBoard(os.path.join(out, "tensorboard")),
    ]


def _final_metrics(net: Any) -> dict[str, float]:
    """The last epoch's logged metrics (empty when no epoch ran)."""
    history = getattr(net, "history", None)
    return {k: float(v[-1]) for k, v in history.history.items()} if history and history.history else {}


def _starting_point(out: str, *, resume: bool, save_every: int | None) -> tuple[int, int]:
    """The (epoch, step) training starts at: (0, 0) fresh; with `resume`, the last snapshot's
    point (save_every runs) or the epoch after the last one logged.

    Raises:
        FileNotFoundError: `resume` without anything saved to resume from.
    """
    snapshots = os.path.join(out, "checkpoints")
    if resume and save_every:
        point = read_resume_point(snapshots)
        if point is None:
            raise FileNotFoundError(
                f"nothing to resume in {out!r}: no checkpoints/resume.json (written when training with save_every)"
            )
        return point.epoch, point.step
    if resume:
        if not os.path.exists(os.path.join(snapshots, "last.keras")):
            raise FileNotFoundError(f"nothing to resume in {out!r}: no checkpoints/last.keras")
        return _completed_epochs(out), 0
    if save_every and os.path.exists(os.path.join(snapshots, STATE_NAME)):
        os.remove(os.path.join(snapshots, STATE_NAME))  # a fresh run: fit_resumable must not pick up an old one
    return 0, 0


def _completed_epochs(out: str) -> int:
    """Epochs already logged in log.csv (the epoch to resume at)."""
    path = os.path.join(out, "log.csv")
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        rows = [line for line in f.read().splitlines()[1:] if line.strip()]
    return len(rows)
