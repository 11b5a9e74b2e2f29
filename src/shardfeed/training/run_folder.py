"""A training run's folder: every file name in it, the run record (run.json) and the run's status.

run.json                      RunRecord: settings, dataset, class names (read by evaluate/predict)
checkpoints/last.keras        after every epoch (model + optimizer): what --resume continues from
checkpoints/best.keras        best validation accuracy so far
checkpoints/resume.json       with save_every: the (epoch, step) to resume at, and its snapshot
log.csv                       one row per epoch (Keras CSVLogger)
tensorboard/                  TensorBoard logs
model.keras                   the final model, class names inside
metrics.json                  final metrics, epochs, time, throughput
thresholds.json               multi-label: each class's threshold, chosen on validation (evaluate, predict)
curves.png                    loss and accuracy per epoch (train and validation)
status.json                   running / finished / failed / interrupted (with the error)
eval-<split>/                 evaluate's metrics.json and confusion_matrix.png (multi-label: average_precision.png;
                              segmentation: masks.png)
report.html                   `shardfeed report RUN_DIR`
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import asdict, dataclass
from typing import Any

from shardfeed.deprecation import RenamedAttribute
from shardfeed.errors import RunFolderError
from shardfeed.format import fileio, storage
from shardfeed.format.schema import CLASSIFICATION
from shardfeed.read.options import DecodeOptions
from shardfeed.read.shardset import DataPath
from shardfeed.redaction import without_userinfo
from shardfeed.training.inputs import RunInputs
from shardfeed.training.multi_label import Thresholds
from shardfeed.training.options import TrainOptions

RUN_RECORD = "run.json"
STATUS = "status.json"
MODEL = "model.keras"
METRICS = "metrics.json"
LOG = "log.csv"
CURVES = "curves.png"
CHECKPOINTS = "checkpoints"
TENSORBOARD = "tensorboard"
REPORT = "report.html"
CONFUSION = "confusion_matrix.png"
AVERAGE_PRECISION = "average_precision.png"
MASKS_GRID = "masks.png"
THRESHOLDS = "thresholds.json"


@dataclass(frozen=True)
class RunRecord:
    """What a run was trained with; saved as run.json and read back by evaluate/predict, so they
    preprocess exactly as training evaluated (`inputs`). `path` is the converted folder it
    trained on (run.json's "path"; "data" in runs written before 2026-12, and `data` its old name)."""

    path: str
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
    balance: str | None = None  # imbalance remedies (absent in run.json files written before them)
    class_weight: str | None = None
    mixture: dict[str, Any] | None = None  # {sources, weights} when trained on a Mixture (path: its first)
    precision: str = "auto"
    weights: str = "none"  # what the model started from, resolved ('auto' is never recorded)
    head_epochs: int | None = None  # the fine-tuning settings as asked; `phases` as resolved
    fine_tune_from: str = "auto"
    fine_tune_learning_rate: float | None = None
    phases: list[dict[str, Any]] | None = None
    decode_on: str = "cpu"
    precise_bn: bool = False  # BatchNorm statistics recomputed at the end (absent in older run.json files)
    devices: int | str = 1  # as asked (--devices); device_names: those it trained on
    device_names: list[str] | None = None
    task: str = CLASSIFICATION  # what it learned (training/tasks/); absent in older run.json files

    data = RenamedAttribute("path")

    @classmethod
    def of(
        cls,
        path: str,
        options: TrainOptions,
        class_names: list[str],
        validation_split: str | None,
        task: str = CLASSIFICATION,
    ) -> RunRecord:
        """The record of a run on `path` with `options` (validation split as resolved)."""
        fields = asdict(options)
        del fields["save_every"]  # how the run was checkpointed, not what it trained
        del fields["service"]  # where the input pipeline ran, likewise
        fields.update(
            path=fileio.absolute(path),
            image_size=(options.side, options.side),
            validation_split=validation_split,
            class_names=class_names,
            task=task,
        )
        return cls(**fields)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def inputs(self, path: DataPath | None = None) -> RunInputs:
        """The run's evaluation preprocessing on `path` (default: the folder it was trained on)."""
        decode = DecodeOptions(channels=self.channels, crop_fraction=self.crop_fraction)
        return RunInputs(path or self.path, self.batch_size, self.image_size, decode=decode)


@dataclass(frozen=True)
class RunFolder:
    """The folder of one training run (`train`'s out): the only place its file names are spelled."""

    path: str

    def file(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    @property
    def checkpoints(self) -> str:
        return self.file(CHECKPOINTS)

    @property
    def last_checkpoint(self) -> str:
        return self.file(CHECKPOINTS, "last.keras")

    @property
    def best_checkpoint(self) -> str:
        return self.file(CHECKPOINTS, "best.keras")

    def eval_dir(self, split: str) -> str:
        return self.file(f"eval-{split}")

    def is_run(self) -> bool:
        """Whether this is a training run folder (it has run.json)."""
        return os.path.exists(self.file(RUN_RECORD))

    def write_record(self, record: RunRecord) -> None:
        os.makedirs(self.checkpoints, exist_ok=True)
        with open(self.file(RUN_RECORD), "w") as f:  # the data's URL kept usable, its credentials not kept
            f.write(without_userinfo(record.to_json()))

    def read_record(self) -> RunRecord:
        """The settings the run was trained with.

        Raises:
            RunFolderError: not a training run folder.
        """
        if not self.is_run():
            raise RunFolderError(
                f"{self.path!r} is not a shardfeed training run (no {RUN_RECORD}); pass the --out folder of "
                "`shardfeed train`"
            )
        with open(self.file(RUN_RECORD)) as f:
            fields = json.loads(without_userinfo(f.read()))  # runs written before kept 's3://***@bucket'
        fields["image_size"] = tuple(fields["image_size"])
        if "data" in fields:  # its name in runs written before 2026-12
            fields["path"] = fields.pop("data")
        return RunRecord(**fields)

    def write_status(self, status: str, error: str | None = None) -> None:
        """Records whether the run is 'running', 'finished', 'interrupted' or 'failed' (with the error)."""
        with open(self.file(STATUS), "w") as f:
            f.write(storage.redact(json.dumps({"status": status, "error": error}, indent=2)))

    def read_status(self) -> dict[str, Any]:
        """{'status': ..., 'error': ...}; status 'unknown' when the run never wrote one."""
        if not os.path.exists(self.file(STATUS)):
            return {"status": "unknown", "error": None}
        with open(self.file(STATUS)) as f:
            return dict(json.load(f))

    def model_file(self, name: str = MODEL) -> str:
        """A model file of the run (default the final model.keras), checked to exist.

        Raises:
            RunFolderError: the run did not finish (says whether it failed, and why) or the file is missing.
        """
        path = self.file(name)
        if os.path.exists(path):
            return path
        status = self.read_status()
        if status["status"] in ("running", "failed", "unknown") and name == MODEL:
            why = f": {status['error']}" if status.get("error") else ""
            raise RunFolderError(
                f"{self.path!r}: this run did not finish ({status['status']}{why}); train again, or continue it "
                "with `shardfeed train ... --resume`"
            )
        raise RunFolderError(f"no {name} in {self.path!r}")

    def write_metrics(self, metrics: dict[str, Any], folder: str | None = None) -> None:
        """metrics.json in the run folder (or in `folder`, e.g. an eval-<split> folder)."""
        with open(os.path.join(folder or self.path, METRICS), "w") as f:
            f.write(storage.redact(json.dumps(metrics, indent=2)))

    def write_thresholds(self, thresholds: Thresholds) -> None:
        with open(self.file(THRESHOLDS), "w") as f:
            f.write(json.dumps(asdict(thresholds), indent=2))

    def read_thresholds(self, names: list[str]) -> Thresholds:
        """The run's thresholds for the model's classes `names` (the default where the run
        wrote none, or for other classes)."""
        if not os.path.exists(self.file(THRESHOLDS)):
            return Thresholds.default(names)
        with open(self.file(THRESHOLDS)) as f:
            chosen = Thresholds(**json.load(f))
        return chosen if chosen.class_names == names else Thresholds.default(names)

    def read_metrics(self) -> dict[str, Any]:
        """The final metrics (empty before the run finished)."""
        if not os.path.exists(self.file(METRICS)):
            return {}
        with open(self.file(METRICS)) as f:
            return dict(json.load(f))

    def best_epoch(self, monitor: str, mode: str) -> tuple[int, float] | None:
        """The epoch (1-based) with the best `monitor` in log.csv (the first of equals) and its
        value; mode 'max' or 'min'. None when no epoch logged it (no validation split)."""
        if not os.path.exists(self.file(LOG)):
            return None
        with open(self.file(LOG), newline="") as f:
            rows = [row for row in csv.DictReader(f) if row.get(monitor) not in (None, "")]
        if not rows:
            return None
        values = [float(row[monitor]) for row in rows]
        pick = values.index(max(values) if mode == "max" else min(values))
        return int(rows[pick]["epoch"]) + 1, values[pick]

    def completed_epochs(self) -> int:
        """Epochs already logged in log.csv (the epoch to resume at)."""
        if not os.path.exists(self.file(LOG)):
            return 0
        with open(self.file(LOG)) as f:
            return len([line for line in f.read().splitlines()[1:] if line.strip()])
