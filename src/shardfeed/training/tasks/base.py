"""The `Objective`: what a run learns on one task's records and how it is judged, asked by `train`,
`evaluate`, `predict` and `report` instead of comparing task names. Each task's subclass is a
module of this package (classification, multi_label, segmentation, detection); `OBJECTIVES`
(tasks/__init__.py) is their registry, as format/tasks.py's `TASKS` is the data's.

An objective says: the model it trains for a `--model` (`model_for`, `build`), how the images are
read (`decode`), the loss and metrics (`compiled`), the one metric checkpoints and end checks read
(`metric`, `mode`), its defaults where they differ (epochs, batch size, augmentation, image size:
training/model_choice.py and augment_choice.py ask), a check of the data before fitting, the
figures it adds to metrics.json (`results`), and its `evaluate`, `predict` and report sections.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from shardfeed.errors import OptionError
from shardfeed.format.manifest import Manifest
from shardfeed.read.options import DecodeOptions
from shardfeed.training.backbones import BACKBONES
from shardfeed.training.detector import DETECTOR
from shardfeed.training.inputs import RunInputs
from shardfeed.training.models import SEGMENTER, model_class_names
from shardfeed.training.options import AUTO, BATCH_SIZE, EPOCHS
from shardfeed.training.run_folder import RunFolder, RunRecord

WORST = 16  # the images a report shows as the worst judged
LEARNS = {SEGMENTER: "segmentation masks", DETECTOR: "detection boxes"}  # the dense models, and what they learn


class Objective:
    """One task's model, loss, metrics and scores (module docstring); the class attributes are
    its facts, the methods its behaviour (the base's: what a classifier does, or nothing)."""

    task: ClassVar[str]
    activation: ClassVar[str] = "softmax"  # the head's: "softmax", "sigmoid" ("" for KerasHub's detector)
    metric: ClassVar[str]  # the logged metric that says how good the model is ("loss" for the detector)
    own_model: ClassVar[str | None] = None  # the model that learns masks or boxes ('small_cnn' means it)
    what: ClassVar[str] = "classes"  # what it learns, in a reason's words ("masks", "boxes")
    size_multiple: ClassVar[int | None] = None  # its own model's sides are multiples of this
    epochs: ClassVar[int] = EPOCHS  # when none are asked for
    batch_size: ClassVar[int] = BATCH_SIZE
    defaults_why: ClassVar[str] = ""  # why epochs or batch size differ from the others' (said in the log)
    class_weights: ClassVar[bool] = False  # whether `class_weight` (one class an image) applies

    @property
    def mode(self) -> str:
        """Whether `metric` is better higher ("max") or lower ("min": the loss)."""
        return "min" if self.metric == "loss" else "max"

    def model_for(self, asked: str) -> str:
        """The model this task trains when `asked` is asked for: a classifier's is what is asked;
        masks and boxes are learned by their own model (`own_model`; 'small_cnn', the default,
        means it), each on a keras.applications backbone when one is named; 'auto' is left to
        `model_choice.choose_model`.

        Raises:
            OptionError: a classifier asked for masks or boxes, or a dense model for another task.
        """
        own = self.own_model
        if own is None:
            if asked in LEARNS:
                raise OptionError(f"{asked} learns {LEARNS[asked]}; this data holds {self.task} labels")
            return asked
        if asked in (AUTO, *BACKBONES):
            return asked
        if asked not in ("small_cnn", own):
            raise OptionError(
                f"{LEARNS[own]} are learned by {own}, not {asked!r} (--model {own}, or a backbone for its encoder: "
                f"{', '.join(BACKBONES)})"
            )
        return own

    def build(self, ask: ModelAsk) -> Any:
        """A new model `name` for this task (training/models.py builds it)."""
        raise NotImplementedError

    def decode(self, decode: DecodeOptions, facts: Manifest | None, splits: Sequence[str | None]) -> DecodeOptions:
        """How the run's images are read (`facts`: the folder's manifest; None: a mixture)."""
        return decode

    def compiled(self, keras: Any, classes: int) -> dict[str, Any]:
        """What `compile` takes beside the optimizer: the loss and the metrics."""
        raise NotImplementedError

    def augment(self, count: int, tiny_set: int) -> tuple[str, str] | None:
        """The augmentation preset and its reason this task always takes for `count` training
        images (None: chosen by the images, training/augment_choice.py)."""
        return None

    def check_data(self, inputs: RunInputs, split: str, batch_size: int, image_size: tuple[int, int]) -> None:
        """Refuses training data the model cannot learn from, before fitting (nothing to check)."""

    def results(self, run: Trained) -> dict[str, Any]:
        """What this task adds to metrics.json at the end of `train`, from the trained `run.net`."""
        return {}

    def class_names(self, record: RunRecord, net: Any) -> list[str]:
        """The classes the run's model `net` names (its `ClassNames` layer)."""
        return model_class_names(net)

    def evaluate(self, net: Any, ds: Any, names: list[str], folder: RunFolder, run: Evaluation) -> dict[str, Any]:
        """`evaluate`'s figures for `net` over the batches `ds`, its pictures written to `run.out`."""
        raise NotImplementedError

    def predict(self, net: Any, folder: RunFolder, record: RunRecord, names: list[str], ask: Prediction) -> list[dict]:
        """`predict`'s rows for `ask.manifest[ask.split]`, written to `ask.output` (a CSV)."""
        raise NotImplementedError

    def per_class(self, result: dict[str, Any], split: str) -> str:
        """The report's per-class section (HTML) of an `evaluate` result."""
        raise NotImplementedError

    def worst(self, folder: RunFolder, inputs: RunInputs, split: str, names: list[str]) -> str:
        """The report's section (HTML) of the held-out images the model got most wrong ('': none)."""
        return ""


@dataclass(frozen=True)
class ModelAsk:
    """What `build_model` asks an objective for: the model's name, its classes, its input and
    its starting weights (None: random), and a classifier head's activation where not the task's."""

    name: str
    class_names: list[str]
    image_size: tuple[int, int]
    channels: int = 3
    weights: str | None = None
    activation: str | None = None


@dataclass(frozen=True)
class Trained:
    """What `Objective.results` gets of a run that has finished fitting."""

    net: Any
    inputs: RunInputs
    manifest: Manifest
    train_split: str
    validation: str | None
    class_names: list[str]
    folder: RunFolder


@dataclass(frozen=True)
class Evaluation:
    """What `evaluate` asks of a split: its name, its record count, where pictures go, top-k."""

    split: str
    total: int
    out: str
    top_k: int


@dataclass(frozen=True)
class Prediction:
    """What `predict` asks: the converted folder and split, the CSV written, and its options."""

    manifest: Manifest
    split: str
    output: str
    top_k: int
    batch_size: int | None
    grid: str | None
    grid_size: int
