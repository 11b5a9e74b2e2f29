"""train: fit a Keras classifier (one class per image, or several) on converted shards, with
checkpoints, logs and resume; what it learns by task is training/tasks/.

One call of `train` is one `_TrainingRun`: it reads the manifest once, resolves the options
against the data, and holds the data, the run folder (training/run_folder.py, which names every
file in it), the inputs (training/inputs.py, the one place datasets are built) and Keras.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from shardfeed.deprecation import renamed
from shardfeed.errors import OptionError, SourceError, tensorflow_message
from shardfeed.format import manifest, storage
from shardfeed.lazy import tensorflow
from shardfeed.read.mixture import Mixture, open_mixture
from shardfeed.read.options import ReadOptions
from shardfeed.read.remote.feed import check_room
from shardfeed.tools.bottleneck import input_probe, probe_batches
from shardfeed.training.batchnorm import batches_for, precise_bn_callback
from shardfeed.training.devices import place, set_precision
from shardfeed.training.fine_tune import (
    WHOLE,
    Phase,
    in_phase,
    parameter_counts,
    phase_log_callback,
    schedule,
    set_phase,
)
from shardfeed.training.imbalance import balanced_class_weights
from shardfeed.training.inference_check import (
    final_metrics,
    inference_check,
    kept_weights,
    saved_model_validation,
)
from shardfeed.training.inputs import RunInputs
from shardfeed.training.model_choice import resolved
from shardfeed.training.models import load_model
from shardfeed.training.options import AUTO, TrainOptions
from shardfeed.training.resume import fit_resumable, starting_point
from shardfeed.training.run_folder import CURVES, LOG, MODEL, TENSORBOARD, RunFolder, RunRecord
from shardfeed.training.run_report import plot_curves
from shardfeed.training.tasks import Trained, build_model, objective_for

log = logging.getLogger("shardfeed")


@renamed(data="path", out="run_dir")
def train(
    path: str | Mixture,
    run_dir: str,
    options: TrainOptions | None = None,
    *,
    weights: str | None = None,
    resume: bool = False,
    verbose: int = 2,
) -> dict[str, Any]:
    """Trains a classifier on converted shards and writes a run folder (training/run_folder.py).

    Args:
        path: a converted folder, or a `Mixture` of them (trained on in its proportions, labels in
            its union label map; validated and evaluated on its first source's held-out split).
        run_dir: the run folder. (`data=` and `out=`, their old names, warn and still work.)
        options: model, epochs, batch size, augmentation, ... (`TrainOptions`; default: its defaults).
        weights: what the model starts from, when given: overrides `options.weights` ('imagenet',
            'none' or a local file; see `build_model`).
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
    options = options or TrainOptions()
    if weights is not None:
        options = replace(options, weights=weights)
    run = _TrainingRun(path, RunFolder(run_dir), options, resume=resume)
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

    def __init__(self, data: str | Mixture, folder: RunFolder, options: TrainOptions, *, resume: bool):
        self.mixture = data if isinstance(data, Mixture) else None
        self.data = data.paths[0] if isinstance(data, Mixture) else data  # validated and evaluated on
        self.folder, self.resume = folder, resume
        self.keras: Any = None  # imported by `fit`, not before (the checks above run without TensorFlow)
        self.manifest = manifest.read(self.data)
        self.objective = objective_for(self.manifest.header.task, self.data)
        if resume and options.image_size is None and folder.is_run():  # the size its checkpoints were made at
            options = replace(options, image_size=folder.read_record().image_size[0])
        self.options = self._resolved(options)  # checks the data before TensorFlow loads
        self.weights = self.options.weights_for(self.options.model)
        self.schedule = schedule(
            self.options.model,
            pretrained=self.weights is not None,
            epochs=self.options.total_epochs,
            learning_rate=self.options.learning_rate,
            head_epochs=self.options.head_epochs,
            fine_tune_from=self.options.fine_tune_from,
            fine_tune_learning_rate=self.options.fine_tune_learning_rate,
        )
        record = RunRecord.of(
            self.data, self.options, self._class_names(), self._validation_split(), self.objective.task
        )
        mixed = self.mixture.as_json() if self.mixture is not None else None
        self.record = replace(record, weights=self.weights or "none", phases=self.schedule.as_json(), mixture=mixed)
        o = self.options
        facts = self.manifest if self.mixture is None else None
        self.decode = self.objective.decode(o.decode, facts, [o.train_split, self.record.validation_split])
        self.inputs = RunInputs(
            self.manifest, o.batch, o.side, o.seed, o.augmentation, self.decode, train_data=self.mixture
        )
        self.steps = self._check_training_set()
        self.initial_epoch, self.initial_step = starting_point(
            folder, resume=resume, save_every=self.options.save_every
        )

    def _resolved(self, options: TrainOptions) -> TrainOptions:
        """`options` with the task's model, and what was left to the data (model='auto', no
        image size, augment='auto') chosen from it (training/model_choice.py)."""
        self.manifest.split(options.train_split)  # exists, or a message listing those that do
        if options.class_weight and not self.objective.class_weights:
            raise OptionError(
                f"class_weight weighs each image by its one class; {self.data} holds {self.objective.task} labels"
            )
        return resolved(replace(options, model=self.objective.model_for(options.model)), self.manifest)

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

    @property
    def train_read(self) -> ReadOptions:
        """How the training stream batches: every training image each epoch, the last batch partial
        (as Keras' image_dataset_from_directory and TFDS batch; dropping it lost 37 of 293 photos
        an epoch at batch 64). With several devices it is dropped: split across replicas it can
        leave one an empty slice, which BatchNorm cannot take (a different batch each epoch)."""
        return ReadOptions(drop_remainder=self.options.devices != 1)

    def _check_training_set(self) -> int:
        """Steps per epoch, and what each epoch reads, said once.

        Raises:
            OptionError: the split holds less than one batch.
        """
        split, batch_size = self.options.train_split, self.options.batch
        if storage.is_url(self.data):  # every split it reads, before the model is built
            check_room(self.train_read.shard_cache(), self.manifest, [split, self.record.validation_split])
        count = self.manifest.split(split).num_records
        if count < batch_size:
            raise OptionError(
                f"the {split!r} split has {count} images, fewer than one batch of {batch_size}: "
                f"pass batch_size={count} (--batch-size {count}) or less"
            )
        rest = count % batch_size
        if rest and self.train_read.drop_remainder:
            log.info(
                "batches: %d an epoch; with several devices each epoch leaves out %d of the %d training images "
                "(a different %d each epoch; a --batch-size that divides %d uses them all)",
                count // batch_size,
                rest,
                count,
                rest,
                count,
            )
        elif rest:
            batches = -(-count // batch_size)
            log.info(
                f"batches: {batches} an epoch, the last of {rest} images ({count} training images, batch "
                f"{batch_size}): every image each epoch"
            )
        return self.inputs.steps_per_epoch(split, read=self.train_read)

    def train_stream(self, epoch: int | None = None) -> Any:
        """The repeating training stream from `epoch` (default: where the run starts); a global
        order continues the sequence of epoch orders."""
        o = self.options
        ordered = o.global_order or self.mixture is not None  # a mixture reads its own seeded order
        epoch = self.initial_epoch if epoch is None else epoch
        read = replace(
            self.train_read,
            shuffle="global" if ordered else o.shuffle,
            balance=o.balance,
            epoch=epoch if ordered else 0,
        )
        return self.inputs.training(o.train_split, read=read, service=o.service)

    def fit(self, verbose: int) -> dict[str, Any]:
        """The fit itself; writes the model, metrics.json and curves.png, and returns the metrics."""
        tensorflow()  # a clear install hint if TensorFlow is missing
        import keras

        self.keras, o = keras, self.options
        keras.utils.set_random_seed(o.seed)
        if not self.resume:  # data the model cannot learn from: refused before fitting
            height, width = self.record.image_size
            self.objective.check_data(self.inputs, o.train_split, o.batch, (height, width))
        precision = set_precision(keras, o)
        placement = place(o.devices)
        described = placement.describe(o.batch)
        if described:
            log.info("%s", described)
        self.record = replace(self.record, device_names=list(placement.devices))
        self.folder.write_record(self.record)
        validation = self.record.validation_split
        val_ds = self.inputs.evaluation(validation) if validation else None
        trained = max((o.total_epochs - self.initial_epoch) * self.steps - self.initial_step, 0)  # steps to train
        probe = input_probe(self.train_stream, probe_batches(self.steps, trained), gpu_decode=o.decode_on == "gpu")
        metric = self.objective.metric
        callbacks = [*self._callbacks(monitor=f"val_{metric}" if val_ds is not None else metric), probe]
        split = o.train_split
        precise = precise_bn_callback(lambda n: self.inputs.evaluation(split).take(batches_for(n, o.batch)))
        if o.precise_bn:  # first: the validation and checkpoints after it see the recomputed statistics
            callbacks.insert(0, precise)
        start = time.monotonic()
        fit = {"validation_data": val_ds, "callbacks": callbacks, "verbose": verbose}
        if o.class_weight:
            fit["class_weight"] = balanced_class_weights(self.manifest, o.train_split)
        with placement.scope():  # the model is built, loaded and compiled under the strategy
            net = self._fit(fit)
        seconds = time.monotonic() - start - probe.seconds
        net.save(self.folder.file(MODEL))
        metrics = {
            **final_metrics(net),
            **saved_model_validation(net, val_ds, precise.images, metric),
            # a loss has no agreed gap between training and inference to warn at
            **(
                inference_check(net, self.inputs, o.train_split, o.batch, metric)
                if self.objective.mode == "max"
                else {}
            ),
            "augment": o.augment,
            "validation_split": validation,
            "epochs": o.total_epochs,
            "initial_epoch": self.initial_epoch,
            "initial_step": self.initial_step,
            "seconds": seconds,
            "train_images_per_second": trained * o.batch / seconds if seconds and trained else 0.0,
            "steps_per_epoch": self.steps,
            "input_verdict": probe.verdict,
            "imbalance_remedy": o.imbalance_remedy,
            "weights": self.record.weights,
            "phases": self.schedule.as_json(),
            "precision": precision,
            **placement.as_json(),
            "precise_bn_images": precise.images,  # 0 when off (never run) or settled
            **self.objective.results(
                Trained(
                    net, self.inputs, self.manifest, o.train_split, validation, self.record.class_names, self.folder
                )
            ),
        }
        metrics.update(kept_weights(self.folder, self.objective, metrics, validation))
        self.folder.write_metrics(metrics)
        plot_curves(self.folder.path, self.folder.file(CURVES))
        return metrics

    def _fit(self, fit: dict[str, Any]) -> Any:
        """Fits a new (or, with `resume`, the last checkpointed) model phase by phase (`fine_tune.py`);
        with save_every, through `fit_resumable`, which snapshots mid-epoch and resumes at the exact step."""
        net, phases = None, self.schedule.remaining(self.initial_epoch)
        for number, phase in enumerate(phases, start=len(self.schedule.phases) - len(phases) + 1):
            self.phase_log.phase = number
            if self.options.save_every:
                net = self._fit_resumable(phase, number, fit)
            else:
                if net is None:
                    net = load_model(self.folder.last_checkpoint) if self.resume else self._new_model()
                net = self.enter(net, phase, number, loaded=self.resume)
                start = max(phase.start, self.initial_epoch)
                stream = self.train_stream(start)
                net.fit(stream, epochs=phase.end, initial_epoch=start, steps_per_epoch=self.steps, **fit)
            self.csv_log.append = True  # the next phase's epochs go below this one's
        return net

    def _fit_resumable(self, phase: Phase, number: int, fit: dict[str, Any]) -> Any:
        """One phase through `fit_resumable`: it starts from the last snapshot when there is one
        (the previous phase's last epoch, or a mid-phase step) and `enter`s the phase."""
        o = self.options
        assert o.save_every is not None  # only called for save_every runs
        return fit_resumable(
            self._new_model,
            self.inputs.train_data if self.inputs.train_data is not None else self.manifest,
            self.folder.checkpoints,
            epochs=phase.end,
            batch_size=o.batch,
            seed=o.seed,
            split=o.train_split,
            save_every=o.save_every,
            image_size=o.side,
            augment=o.augmentation,
            decode=self.decode,
            read=replace(self.train_read, balance=o.balance),
            start=lambda net: self.enter(net, phase, number),
            **fit,
        )

    def _new_model(self) -> Any:
        """A new model for the run, from its starting weights (compiled by `enter`)."""
        o, names, size = self.options, self.record.class_names, self.record.image_size
        return build_model(o.model, names, size, channels=o.channels, weights=self.weights, task=self.objective.task)

    def enter(self, net: Any, phase: Phase, number: int, *, loaded: bool = False) -> Any:
        """`net` set up for `phase`: its trainable flags, and compiled with the phase's optimizer
        (a cosine decay to zero over the phase). A model `loaded` from its checkpoint already in
        the phase keeps its optimizer and its place in the decay; a new one is always compiled
        (KerasHub's detector comes compiled with its own defaults)."""
        keras, names = self.keras, self.record.class_names
        if not loaded or getattr(net, "optimizer", None) is None or not in_phase(net, phase):
            set_phase(net, phase)
            # cosine decay to zero over the phase: the last epochs settle instead of jittering
            # (digits demo: validation accuracy swung 0.87-0.96 at a constant rate)
            decay = keras.optimizers.schedules.CosineDecay(phase.learning_rate, (phase.end - phase.start) * self.steps)
            net.compile(optimizer=keras.optimizers.Adam(decay), **self.objective.compiled(keras, len(names)))
        if phase.name != WHOLE:  # from random weights there is nothing to say: every layer learns, as ever
            log.info("%s", phase.describe(number, len(self.schedule.phases), *parameter_counts(net)))
        return net

    def _callbacks(self, *, monitor: str) -> list[Any]:
        """The phase logger, checkpoints (last and best), the CSV log and TensorBoard."""
        keras, folder = self.keras, self.folder
        self.phase_log = phase_log_callback()
        self.csv_log = keras.callbacks.CSVLogger(folder.file(LOG), append=self.resume)
        return [
            self.phase_log,  # first: it adds the phase and learning rate to the logs the others write
            keras.callbacks.ModelCheckpoint(folder.last_checkpoint),
            keras.callbacks.ModelCheckpoint(
                folder.best_checkpoint, monitor=monitor, mode=self.objective.mode, save_best_only=True
            ),
            self.csv_log,
            keras.callbacks.TensorBoard(folder.file(TENSORBOARD)),
            self.phase_log.tidy,  # last of these: the progress line and History show metrics only
        ]
