"""A training run's settings: `TrainOptions` (what a user asks for) and `TrainConfig` (run.json).

`TrainConfig` is what evaluate and predict read back, so they preprocess exactly as training
evaluated: its `eval_dataset` is the one evaluation pipeline.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

from shardfeed.read.augment import Augment
from shardfeed.read.dataset import load
from shardfeed.read.options import SHUFFLES, DecodeConfig, ReadConfig
from shardfeed.training.models import MODELS

AUGMENT_PRESETS = {
    "inception": Augment(),
    # no flip: a mirrored digit or letter is another class (or none); photos take 'inception'
    "light": Augment(crop=False, flip=False, translate=0.0625),
    "none": None,
}
AUTO = "auto"


@dataclass(frozen=True)
class TrainOptions:
    """How `train` trains.

    Attributes:
        model: one of MODELS (see `build_model`).
        epochs, batch_size, learning_rate: the usual; the learning rate decays to zero (cosine).
        image_size: the square input size in pixels.
        seed: seeds weights, shuffling and augmentation.
        augment: 'auto' (chosen from the data's image sizes and count: `choose_augment`),
            'inception' (random-resized crop + flip), 'light' (shifts of up to 1/16 of the size,
            no flip), 'none'.
        crop_fraction: evaluation centre crop (see `DecodeConfig`).
        channels: 3 or 1.
        mixed_precision: float16 compute (on GPUs with tensor cores); outputs stay float32.
        train_split: the split trained on.
        validation_split: evaluated after each epoch: 'auto' (validation, else val/valid/test/eval/dev,
            whichever the data has; none, said, if it has none), a split name, or None to skip.
        shuffle: 'buffer' or 'global' (a seeded permutation of the whole split each epoch; a
            resumed run continues the same sequence of epoch orders). See `ReadConfig`.
        save_every: with shuffle='global', also snapshot every this many steps, so that a resumed
            run continues mid-epoch at exactly the next batch (`fit_resumable`).
        service: read the training data through a tf.data service dispatcher, "grpc://HOST:PORT"
            (`shardfeed serve`): decoding and augmentation run on its workers.
    """

    model: str = "small_cnn"
    epochs: int = 10
    batch_size: int = 64
    image_size: int = 224
    learning_rate: float = 1e-3
    seed: int = 0
    augment: str = AUTO
    crop_fraction: float = DecodeConfig.crop_fraction
    channels: int = 3
    mixed_precision: bool = False
    train_split: str = "train"
    validation_split: str | None = AUTO
    shuffle: str = "buffer"
    save_every: int | None = None
    service: str | None = None

    def __post_init__(self) -> None:
        if self.augment not in (AUTO, *AUGMENT_PRESETS):
            raise ValueError(f"augment must be one of {[AUTO, *AUGMENT_PRESETS]}, got {self.augment!r}")
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {list(MODELS)}, got {self.model!r}")
        if self.shuffle not in SHUFFLES:
            raise ValueError(f"shuffle must be one of {list(SHUFFLES)}, got {self.shuffle!r}")
        if self.save_every is not None and (self.shuffle != "global" or self.save_every < 1):
            raise ValueError(
                f"save_every={self.save_every} needs shuffle='global' and at least 1 step: only a global order "
                "can be resumed at an exact step"
            )
        for name in ("epochs", "batch_size", "image_size"):
            if getattr(self, name) < 1:
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)} ({flag})")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate} (--learning-rate)")
        DecodeConfig(channels=self.channels, crop_fraction=self.crop_fraction)  # validates both

    @property
    def decode(self) -> DecodeConfig:
        return DecodeConfig(channels=self.channels, crop_fraction=self.crop_fraction)

    @property
    def augmentation(self) -> Augment | bool:
        """`load`'s augment argument for this preset (False: none).

        Raises:
            ValueError: the preset is still 'auto' (resolve it with `choose_augment` first).
        """
        if self.augment == AUTO:
            raise ValueError("augment='auto' must be resolved against the data first (choose_augment)")
        return AUGMENT_PRESETS[self.augment] or False


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

    @classmethod
    def of(cls, data: str, options: TrainOptions, class_names: list[str], validation_split: str | None) -> TrainConfig:
        """The record of a run on `data` with `options` (validation split as resolved)."""
        fields = asdict(options)
        del fields["save_every"]  # how the run was checkpointed, not what it trained
        del fields["service"]  # where the input pipeline ran, likewise
        fields.update(
            data=os.path.abspath(data),
            image_size=(options.image_size, options.image_size),
            validation_split=validation_split,
            class_names=class_names,
        )
        return cls(**fields)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def eval_dataset(self, data: str, split: str, batch_size: int | None = None, read: ReadConfig | None = None) -> Any:
        """`data[split]` with this run's evaluation preprocessing (shared by evaluate and predict)."""
        return load(
            data,
            split=split,
            batch_size=batch_size or self.batch_size,
            image_size=self.image_size,
            training=False,
            read=read,
            decode=DecodeConfig(channels=self.channels, crop_fraction=self.crop_fraction),
        )


STATUS_NAME = "status.json"


def write_status(run_dir: str, status: str, error: str | None = None) -> None:
    """Records whether a run is 'running', 'finished' or 'failed' (with the error), in status.json."""
    with open(os.path.join(run_dir, STATUS_NAME), "w") as f:
        json.dump({"status": status, "error": error}, f, indent=2)


def model_path(run_dir: str, model_file: str = "model.keras") -> str:
    """The model file of a run, checked to exist.

    Raises:
        FileNotFoundError: the run did not finish (says whether it failed, and why) or the file is missing.
    """
    path = os.path.join(run_dir, model_file)
    if os.path.exists(path):
        return path
    status_file = os.path.join(run_dir, STATUS_NAME)
    status = {"status": "unknown", "error": None}
    if os.path.exists(status_file):
        with open(status_file) as f:
            status = json.load(f)
    if status["status"] in ("running", "failed", "unknown") and model_file == "model.keras":
        why = f": {status['error']}" if status.get("error") else ""
        raise FileNotFoundError(
            f"{run_dir!r}: this run did not finish ({status['status']}{why}); train again, or continue it with "
            "`shardfeed train ... --resume`"
        )
    raise FileNotFoundError(f"no {model_file} in {run_dir!r}")


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
