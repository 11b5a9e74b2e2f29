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
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from typing import Any

from shardfeed import manifest
from shardfeed.augment import Augment
from shardfeed.dataset import load, steps_per_epoch
from shardfeed.lazy import tensorflow
from shardfeed.models import MODELS, build_model, load_model
from shardfeed.resume import STATE_NAME, fit_resumable, read_resume_point

AUGMENT_PRESETS = {"inception": Augment(), "light": Augment(area_range=(0.64, 1.0), flip=False), "none": None}


@dataclass(frozen=True)
class TrainConfig:
    """What a run was trained with; saved as run.json and read back by evaluate/predict."""

    data: str
    model: str
    epochs: int
    batch_size: int
    image_size: tuple[int, int]
    learning_rate: float
    seed: int
    augment: str
    crop_fraction: float
    channels: int
    mixed_precision: bool
    train_split: str
    validation_split: str | None
    class_names: list[str]
    shuffle: str = "buffer"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def eval_dataset(self, data: str, split: str, batch_size: int | None = None, **load_options: Any) -> Any:
        """`data[split]` with this run's evaluation preprocessing (shared by evaluate and predict)."""
        return load(
            data,
            split=split,
            batch_size=batch_size or self.batch_size,
            image_size=self.image_size,
            training=False,
            channels=self.channels,
            crop_fraction=self.crop_fraction,
            **load_options,
        )


def read_config(run_dir: str) -> TrainConfig:
    """The settings of a training run.

    Raises:
        FileNotFoundError: `run_dir` is not a training run folder.
    """
    path = os.path.join(run_dir, "run.json")
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{run_dir!r} is not a shardfeed training run (no run.json); pass the --out folder of `shardfeed train`"
        )
    with open(path) as f:
        data = json.load(f)
    data["image_size"] = tuple(data["image_size"])
    return TrainConfig(**data)


def train(
    data: str,
    out: str,
    *,
    model: str = "small_cnn",
    epochs: int = 10,
    batch_size: int = 64,
    image_size: int = 224,
    learning_rate: float = 1e-3,
    seed: int = 0,
    augment: str = "inception",
    crop_fraction: float = 0.875,
    channels: int = 3,
    mixed_precision: bool = False,
    weights: str | None = None,
    resume: bool = False,
    train_split: str = "train",
    validation_split: str | None = "validation",
    shuffle: str = "buffer",
    save_every: int | None = None,
    verbose: int = 2,
) -> dict[str, Any]:
    """Trains a classifier on converted shards and writes a run folder (see the module docstring).

    Args:
        data: a converted folder.
        out: the run folder.
        model: one of MODELS, or see `build_model`.
        augment: 'inception' (random-resized crop + flip), 'light' (mild crop, no flip), 'none'.
        mixed_precision: float16 compute (on GPUs with tensor cores); outputs stay float32.
        weights: local weights to start from (see `build_model`).
        resume: continue from checkpoints/last.keras at the epoch after the last one logged.
        validation_split: evaluated after each epoch (None to skip; skipped if the data has none).
        shuffle: 'buffer' or 'global' (a seeded permutation of the whole split each epoch; a
            resumed run continues the same sequence of epoch orders). See `load`.
        save_every: with shuffle='global', also snapshot every this many steps, so that
            `resume` continues mid-epoch at exactly the next batch (`shardfeed.fit_resumable`).

    Returns:
        The final metrics (also in metrics.json).
    """
    import keras

    if augment not in AUGMENT_PRESETS:
        raise ValueError(f"augment must be one of {list(AUGMENT_PRESETS)}, got {augment!r}")
    if model not in MODELS:
        raise ValueError(f"model must be one of {list(MODELS)}, got {model!r}")
    m = manifest.read(data)
    if m.labels is None:
        raise ValueError(f"{data} holds unlabeled data (no classes to learn); convert a labelled source")
    class_names: list[str] = m.labels
    if validation_split not in m.split_names:
        validation_split = None
    config = TrainConfig(
        os.path.abspath(data),
        model,
        epochs,
        batch_size,
        (image_size, image_size),
        learning_rate,
        seed,
        augment,
        crop_fraction,
        channels,
        mixed_precision,
        train_split,
        validation_split,
        class_names,
        shuffle,
    )
    if save_every is not None and (shuffle != "global" or save_every < 1):
        raise ValueError(
            f"save_every={save_every} needs shuffle='global' and at least 1 step: only a global order "
            "can be resumed at an exact step"
        )
    snapshots = os.path.join(out, "checkpoints")
    os.makedirs(snapshots, exist_ok=True)
    last = os.path.join(snapshots, "last.keras")
    initial_epoch, initial_step = _starting_point(out, resume=resume, save_every=save_every)
    with open(os.path.join(out, "run.json"), "w") as f:
        f.write(config.to_json())
    tensorflow()  # a clear install hint if TensorFlow is missing
    keras.utils.set_random_seed(seed)
    keras.mixed_precision.set_global_policy("mixed_float16" if mixed_precision else "float32")

    options: dict[str, Any] = {
        "image_size": image_size,
        "training": True,
        "augment": AUGMENT_PRESETS[augment] or False,
        "channels": channels,
        "crop_fraction": crop_fraction,
    }
    steps = steps_per_epoch(data, train_split, batch_size)
    val_ds = None
    if validation_split:
        val_ds = config.eval_dataset(data, validation_split)  # exactly what evaluate/predict use

    def build() -> Any:
        net = build_model(model, class_names, (image_size, image_size), channels=channels, weights=weights)
        top_k = min(5, len(class_names))
        net.compile(
            # cosine decay to zero over the whole run: the last epochs settle instead of
            # jittering (digits demo: validation accuracy swung 0.87-0.96 at a constant rate)
            optimizer=keras.optimizers.Adam(keras.optimizers.schedules.CosineDecay(learning_rate, epochs * steps)),
            loss=keras.losses.SparseCategoricalCrossentropy(),
            metrics=["accuracy", keras.metrics.SparseTopKCategoricalAccuracy(k=top_k, name=f"top{top_k}")],
        )
        return net

    monitor = "val_accuracy" if val_ds is not None else "accuracy"
    callbacks = [
        keras.callbacks.ModelCheckpoint(last),
        keras.callbacks.ModelCheckpoint(
            os.path.join(out, "checkpoints", "best.keras"), monitor=monitor, mode="max", save_best_only=True
        ),
        keras.callbacks.CSVLogger(os.path.join(out, "log.csv"), append=resume),
        keras.callbacks.TensorBoard(os.path.join(out, "tensorboard")),
    ]
    start = time.monotonic()
    if save_every:
        net = fit_resumable(
            build,
            data,
            snapshots,
            epochs=epochs,
            batch_size=batch_size,
            seed=seed,
            split=train_split,
            save_every=save_every,
            load_options=options,
            callbacks=callbacks,
            validation_data=val_ds,
            verbose=verbose,
        )
        history = getattr(net, "history", None)
    else:
        net = load_model(last) if resume else build()
        train_ds = load(
            data,
            split=train_split,
            batch_size=batch_size,
            seed=seed,
            repeat=True,
            shuffle=shuffle,
            epoch=initial_epoch if shuffle == "global" else 0,  # continue the sequence of epoch orders
            **options,
        )
        history = net.fit(
            train_ds,
            epochs=epochs,
            initial_epoch=initial_epoch,
            steps_per_epoch=steps,
            validation_data=val_ds,
            callbacks=callbacks,
            verbose=verbose,
        )
    seconds = time.monotonic() - start
    net.save(os.path.join(out, "model.keras"))
    final = {k: float(v[-1]) for k, v in history.history.items()} if history and history.history else {}
    trained = max((epochs - initial_epoch) * steps - initial_step, 0)  # steps
    metrics = {
        **final,
        "epochs": epochs,
        "initial_epoch": initial_epoch,
        "initial_step": initial_step,
        "seconds": seconds,
        "train_images_per_second": trained * batch_size / seconds if seconds and trained else 0.0,
        "steps_per_epoch": steps,
    }
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    return metrics


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
