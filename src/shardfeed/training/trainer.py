"""train: fit a Keras classifier on converted shards, with checkpoints, logs and resume.

One call of `train` is one `_TrainingRun`: it reads the manifest once, resolves the options
against the data, and holds the data, the run folder (training/run_folder.py, which names every
file in it), the inputs (training/inputs.py, the one place datasets are built) and Keras.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import replace
from typing import Any

from shardfeed.errors import OptionError, RunFolderError, SourceError, tensorflow_message
from shardfeed.format import manifest
from shardfeed.lazy import tensorflow
from shardfeed.read.mixture import Mixture, open_mixture
from shardfeed.read.options import ReadOptions
from shardfeed.tools.bottleneck import PROBE_BATCHES, input_probe
from shardfeed.training.augment_choice import choose_augment
from shardfeed.training.imbalance import IMBALANCE_RATIO, balanced_class_weights, imbalance_ratio, per_class_recall
from shardfeed.training.inputs import RunInputs
from shardfeed.training.models import build_model, load_model
from shardfeed.training.options import AUTO, TrainOptions
from shardfeed.training.resume import fit_resumable, forget_resume_point, read_resume_point
from shardfeed.training.run_folder import CURVES, LOG, MODEL, TENSORBOARD, RunFolder, RunRecord
from shardfeed.training.run_report import plot_curves

log = logging.getLogger("shardfeed")
TOP_K = 5
INFERENCE_SAMPLE = 1024  # training images re-scored in inference mode at the end
DISAGREEMENT = 0.15  # training-mode vs inference-mode accuracy gap worth a warning


def train(
    data: str | Mixture,
    out: str,
    options: TrainOptions | None = None,
    *,
    weights: str | None = None,
    resume: bool = False,
    verbose: int = 2,
) -> dict[str, Any]:
    """Trains a classifier on converted shards and writes a run folder (training/run_folder.py).

    Args:
        data: a converted folder, or a `Mixture` of them (trained on in its proportions, labels in
            its union label map; validated and evaluated on its first source's held-out split).
        out: the run folder.
        options: model, epochs, batch size, augmentation, ... (`TrainOptions`; default: its defaults).
        weights: local weights to start from (see `build_model`).
        resume: continue from checkpoints/last.keras at the epoch after the last one logged (or,
            with save_every, at the exact step of the last snapshot).
        verbose: Keras' fit verbosity.

    Returns:
        The final metrics (also in metrics.json).

    Raises:
        OptionError, SourceError, ManifestError: options or data that cannot be trained on
            (checked before TensorFlow loads).
        RunFolderError: `resume` with nothing to resume from.
    """
    run = _TrainingRun(data, RunFolder(out), options or TrainOptions(), weights=weights, resume=resume)
    run.folder.write_record(run.record)
    run.folder.write_status("running")
    try:
        metrics = run.fit(verbose)
    except BaseException as e:
        run.folder.write_status("interrupted" if isinstance(e, KeyboardInterrupt) else "failed", tensorflow_message(e))
        raise
    run.folder.write_status("finished")
    return metrics


class _TrainingRun:
    """One training run: the data (its manifest read once), the run folder, the options resolved
    against the data, the inputs, and where training starts."""

    def __init__(
        self, data: str | Mixture, folder: RunFolder, options: TrainOptions, *, weights: str | None, resume: bool
    ):
        self.mixture = data if isinstance(data, Mixture) else None
        self.data = _first_source(data)
        self.folder, self.weights, self.resume = folder, weights, resume
        self.keras: Any = None  # imported by `fit`, not before (the checks above run without TensorFlow)
        self.manifest = manifest.read(self.data)
        self.options = self._resolved(options)  # checks the data before TensorFlow loads
        self.record = RunRecord.of(self.data, self.options, self._class_names(), self._validation_split())
        if self.mixture is not None:
            self.record = replace(self.record, mixture=_described(self.mixture))
        o = self.options
        self.inputs = RunInputs(
            self.manifest, o.batch_size, o.image_size, o.seed, o.augmentation, o.decode, train_data=self.mixture
        )
        self.steps = self._check_training_set()
        self.initial_epoch, self.initial_step = self._starting_point()

    def _resolved(self, options: TrainOptions) -> TrainOptions:
        """`options` with augment='auto' replaced by the preset the data calls for (and why, logged)."""
        self.manifest.split(options.train_split)  # exists, or a message listing those that do
        if options.augment != AUTO:
            return options
        choice = choose_augment(self.manifest, options.train_split, seed=options.seed)
        log.info("augment: %s, chosen for %s (--augment to override)", choice.preset, choice.reason)
        return replace(options, augment=choice.preset)

    def _class_names(self) -> list[str]:
        if self.manifest.labels is None:
            raise SourceError(f"{self.data} holds unlabeled data (no classes to learn); convert a labelled source")
        if self.mixture is not None:
            names = open_mixture(self.mixture, self.options.train_split).class_names
            if names != self.manifest.labels:
                log.info("classes: the union of the mixed folders' classes, %d: %s", len(names), names)
            return names
        return self.manifest.labels

    def _validation_split(self) -> str | None:
        """The split validated on: as named; with AUTO, the held-out split the data has (validation,
        val, test, ...), said when it is not 'validation' and when there is none.

        Raises:
            ManifestError: a named split that does not exist.
        """
        m, options = self.manifest, self.options
        if options.validation_split is None:
            return None
        if options.validation_split != AUTO:
            m.split(options.validation_split)
            return options.validation_split
        names = tuple(n for n in manifest.HELD_OUT_SPLITS if n != options.train_split)
        split = m.held_out_split(names)
        if split is None:
            log.warning(
                "warning: %s has no held-out split (it has %s): training without validation; the accuracy at "
                "the end is measured on training images",
                m.path,
                m.split_names,
            )
        elif split != "validation":
            log.info("validating on the %r split", split)
        return split

    def _check_training_set(self) -> int:
        """Steps per epoch; warns when the dropped incomplete batch is a large share of each epoch.

        Raises:
            OptionError: the split holds less than one batch.
        """
        split, batch_size = self.options.train_split, self.options.batch_size
        count = self.manifest.split(split).num_records
        if count < batch_size:
            raise OptionError(
                f"the {split!r} split has {count} images, fewer than one batch of {batch_size}: "
                f"pass batch_size={count} (--batch-size {count}) or less"
            )
        dropped = count % batch_size
        if dropped / count > 0.1:
            log.warning(
                "warning: each epoch leaves out %d of the %d training images (the incomplete last batch, a "
                "different one each epoch); a --batch-size that divides %d more evenly uses them all",
                dropped,
                count,
                count,
            )
        return self.inputs.steps_per_epoch(split)

    def _starting_point(self) -> tuple[int, int]:
        """The (epoch, step) training starts at: (0, 0) fresh; with `resume`, the last snapshot's
        point (save_every runs) or the epoch after the last one logged.

        Raises:
            RunFolderError: `resume` without anything saved to resume from.
        """
        snapshots, save_every = self.folder.checkpoints, self.options.save_every
        if self.resume and save_every:
            point = read_resume_point(snapshots)
            if point is None:
                raise RunFolderError(
                    f"nothing to resume in {self.folder.path!r}: no checkpoints/resume.json (written when "
                    "training with save_every)"
                )
            return point.epoch, point.step
        if self.resume:
            if not os.path.exists(self.folder.last_checkpoint):
                raise RunFolderError(f"nothing to resume in {self.folder.path!r}: no checkpoints/last.keras")
            return self.folder.completed_epochs(), 0
        if save_every:
            forget_resume_point(snapshots)  # a fresh run: fit_resumable must not pick up an old one
        return 0, 0

    def train_stream(self) -> Any:
        """The repeating training stream; a global order continues the sequence of epoch orders."""
        o = self.options
        ordered = o.global_order or self.mixture is not None  # a mixture reads its own seeded order
        read = ReadOptions(
            shuffle="global" if ordered else o.shuffle,
            balance=o.balance,
            epoch=self.initial_epoch if ordered else 0,
        )
        return self.inputs.training(o.train_split, read=read, service=o.service)

    def fit(self, verbose: int) -> dict[str, Any]:
        """The fit itself; writes the model, metrics.json and curves.png, and returns the metrics."""
        tensorflow()  # a clear install hint if TensorFlow is missing
        import keras

        self.keras, o = keras, self.options
        keras.utils.set_random_seed(o.seed)
        precision = self._precision(keras)
        validation = self.record.validation_split
        val_ds = self.inputs.evaluation(validation) if validation else None
        probe = input_probe(self.train_stream, min(self.steps, PROBE_BATCHES))
        callbacks = [*self._callbacks(monitor="val_accuracy" if val_ds is not None else "accuracy"), probe]
        start = time.monotonic()
        fit = {"validation_data": val_ds, "callbacks": callbacks, "verbose": verbose}
        if o.class_weight:
            fit["class_weight"] = balanced_class_weights(self.manifest, o.train_split)
        net = self._fit(fit)
        seconds = time.monotonic() - start - probe.seconds
        net.save(self.folder.file(MODEL))
        trained = max((o.epochs - self.initial_epoch) * self.steps - self.initial_step, 0)  # steps
        metrics = {
            **_final_metrics(net),
            **self._inference_check(net),
            "augment": o.augment,
            "validation_split": validation,
            "epochs": o.epochs,
            "initial_epoch": self.initial_epoch,
            "initial_step": self.initial_step,
            "seconds": seconds,
            "train_images_per_second": trained * o.batch_size / seconds if seconds and trained else 0.0,
            "steps_per_epoch": self.steps,
            "input_verdict": probe.verdict,
            "imbalance_remedy": o.imbalance_remedy,
            "precision": precision,
            **self._per_class_recall(net, val_ds),
        }
        self.folder.write_metrics(metrics)
        plot_curves(self.folder.path, self.folder.file(CURVES))
        return metrics

    def _precision(self, keras: Any) -> str:
        """Sets Keras' dtype policy for the run and says which it is and why."""
        gpu = bool(tensorflow().config.list_physical_devices("GPU"))
        precision = self.options.compute_precision(gpu)
        keras.mixed_precision.set_global_policy("mixed_float16" if precision == "mixed" else "float32")
        if precision == "mixed":
            why = "a GPU is present" if gpu and self.options.precision == "auto" else "asked for"
            log.info("precision: mixed_float16 (%s; logits stay float32; --precision float32 turns it off)", why)
        else:
            why = "no GPU" if not gpu and self.options.precision == "auto" else "asked for"
            log.info("precision: float32 (%s)", why)
        return precision

    def _per_class_recall(self, net: Any, val_ds: Any) -> dict[str, Any]:
        """Per-class validation recall when the training classes are imbalanced (`imbalance.py`)."""
        counts = self.manifest.split(self.options.train_split).class_counts
        ratio = imbalance_ratio(counts)
        if val_ds is None or ratio <= IMBALANCE_RATIO:
            return {}
        return {"imbalance_ratio": ratio, "per_class_recall": per_class_recall(net, val_ds, self.record.class_names)}

    def _fit(self, fit: dict[str, Any]) -> Any:
        """Fits a new (or, with `resume`, the last checkpointed) model; with save_every, through
        `fit_resumable`, which snapshots mid-epoch and resumes at the exact step."""
        o = self.options
        if o.save_every:
            return fit_resumable(
                self.build,
                self.inputs.train_data if self.inputs.train_data is not None else self.manifest,
                self.folder.checkpoints,
                epochs=o.epochs,
                batch_size=o.batch_size,
                seed=o.seed,
                split=o.train_split,
                save_every=o.save_every,
                image_size=o.image_size,
                augment=o.augmentation,
                decode=o.decode,
                read=ReadOptions(balance=o.balance),
                **fit,
            )
        net = load_model(self.folder.last_checkpoint) if self.resume else self.build()
        net.fit(
            self.train_stream(),
            epochs=o.epochs,
            initial_epoch=self.initial_epoch,
            steps_per_epoch=self.steps,
            **fit,
        )
        return net

    def build(self) -> Any:
        """A new model for the run, compiled with its optimizer, loss and metrics."""
        keras, o, names = self.keras, self.options, self.record.class_names
        net = build_model(o.model, names, self.record.image_size, channels=o.channels, weights=self.weights)
        metrics: list[Any] = ["accuracy"]
        if len(names) > TOP_K:  # with fewer classes top-5 is always 1.0: noise
            metrics.append(keras.metrics.SparseTopKCategoricalAccuracy(k=TOP_K, name=f"top{TOP_K}"))
        # cosine decay to zero over the whole run: the last epochs settle instead of
        # jittering (digits demo: validation accuracy swung 0.87-0.96 at a constant rate)
        schedule = keras.optimizers.schedules.CosineDecay(o.learning_rate, o.epochs * self.steps)
        net.compile(
            optimizer=keras.optimizers.Adam(schedule),
            loss=keras.losses.SparseCategoricalCrossentropy(),
            metrics=metrics,
        )
        return net

    def _callbacks(self, *, monitor: str) -> list[Any]:
        """Checkpoints (last and best), the CSV log and TensorBoard."""
        keras, folder = self.keras, self.folder
        return [
            keras.callbacks.ModelCheckpoint(folder.last_checkpoint),
            keras.callbacks.ModelCheckpoint(folder.best_checkpoint, monitor=monitor, mode="max", save_best_only=True),
            keras.callbacks.CSVLogger(folder.file(LOG), append=self.resume),
            keras.callbacks.TensorBoard(folder.file(TENSORBOARD)),
        ]

    def _inference_check(self, net: Any) -> dict[str, Any]:
        """Re-scores up to INFERENCE_SAMPLE training images in inference mode, and warns when that,
        the training-mode accuracy Keras printed, and the validation accuracy disagree.

        With BatchNorm the training-mode figure can be far above the model's (0.89 while fitting,
        0.20 in inference mode, seen on a short run); validation figures are always inference-mode.
        """
        batches = math.ceil(INFERENCE_SAMPLE / self.options.batch_size)
        sample = self.inputs.evaluation(self.options.train_split).take(batches)
        inference = float(net.evaluate(sample, verbose=0, return_dict=True)["accuracy"])
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


def _final_metrics(net: Any) -> dict[str, float]:
    """The last epoch's logged metrics (empty when no epoch ran)."""
    history = getattr(net, "history", None)
    return {k: float(v[-1]) for k, v in history.history.items()} if history and history.history else {}


def _first_source(data: str | Mixture) -> str:
    """The folder a run validates and evaluates on: `data`, or a mixture's first source."""
    if not isinstance(data, Mixture):
        return data
    first = data.sources[0]
    return first if isinstance(first, str) else first.path


def _described(mix: Mixture) -> dict[str, Any]:
    """A mixture as run.json records it."""
    sources = [s if isinstance(s, str) else s.path for s in mix.sources]
    return {"sources": [os.path.abspath(s) for s in sources], "weights": list(mix.weights)}
