"""The fine-tuning schedule: which layers train in which epochs, at what learning rate.

Starting from pre-trained weights (ImageNet, or a local file), `train` follows the recipe of the
TensorFlow transfer-learning tutorial and Keras' fine-tuning guide:

- phase 1, *head*: the backbone frozen (its BatchNorm layers in inference mode), only the new
  classifier head learns, at `learning_rate`;
- phase 2, *fine-tune*: the top of the backbone (from `Backbone.fine_tune_from` up) learns too,
  at `learning_rate x Backbone.fine_tune_rate`, BatchNorm still frozen (unfrozen, its statistics
  from a few thousand images would wreck the pre-trained features).

From random weights there is one phase, *all*: every layer learns from the start. A phase is a
state of the model (its trainable flags, saved in model.keras) plus a freshly compiled optimizer
with a cosine decay over the phase's steps, so a resumed run sees from the checkpoint which phase
it stopped in (`enter`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from shardfeed.errors import OptionError
from shardfeed.training.backbones import BACKBONES

ALL = "all"
HEAD, FINE_TUNE, WHOLE = "head", "fine-tune", "all"


@dataclass(frozen=True)
class Phase:
    """Epochs [start, end) of a run trained in one state of the model.

    unfreeze_from: None (backbone frozen), 'all' (every layer learns) or the name prefix of the
    first backbone layer that learns (BatchNorm layers stay frozen).
    """

    name: str
    start: int
    end: int
    learning_rate: float
    unfreeze_from: str | None

    def describe(self, number: int, count: int, trainable: int, total: int) -> str:
        """One log line: which phase, its epochs (1-based, as Keras prints them), what learns."""
        what = {
            HEAD: "backbone frozen (BatchNorm in inference mode), training the head",
            FINE_TUNE: f"fine-tuning the backbone from {self.unfreeze_from!r} up (BatchNorm stays frozen)",
            WHOLE: "every layer learns",
        }[self.name]
        return (
            f"phase {number} of {count}, {self.name} (epochs {self.start + 1}-{self.end}): {what}; "
            f"{trainable:,} of {total:,} parameters trainable, learning rate {self.learning_rate:g}"
        )


@dataclass(frozen=True)
class Schedule:
    """A run's phases, in order, covering epochs [0, epochs)."""

    phases: tuple[Phase, ...]

    def remaining(self, epoch: int) -> list[Phase]:
        """The phases still to train when the run starts (or resumes) at `epoch`."""
        return [p for p in self.phases if p.end > epoch]

    def as_json(self) -> list[dict[str, Any]]:
        """The phases as metrics.json and run.json list them."""
        return [asdict(p) for p in self.phases]


def schedule(
    model: str,
    *,
    pretrained: bool,
    epochs: int,
    learning_rate: float,
    head_epochs: int | None = None,
    fine_tune_from: str | None = None,
    fine_tune_learning_rate: float | None = None,
) -> Schedule:
    """The phases of a run (see the module docstring); None or 'auto' settings take the backbone's
    defaults: half the epochs on the head (at least one), its `fine_tune_from` and `fine_tune_rate`.

    Raises:
        OptionError: a frozen-backbone phase asked for where there is no pre-trained backbone to
            freeze, or more head epochs than epochs.
    """
    if model not in BACKBONES or not pretrained:
        if head_epochs:
            why = "small_cnn has no backbone" if model not in BACKBONES else "the backbone starts from random weights"
            raise OptionError(
                f"head_epochs={head_epochs} (--head-epochs) freezes a pre-trained backbone, but {why}; "
                "pass --weights imagenet or a weights file, or leave --head-epochs out"
            )
        return Schedule((Phase(WHOLE, 0, epochs, learning_rate, ALL),))
    spec = BACKBONES[model]
    head = max(1, epochs // 2) if head_epochs is None else head_epochs
    if head > epochs:
        raise OptionError(f"head_epochs={head} is more than epochs={epochs} (--head-epochs, --epochs)")
    start_from = spec.fine_tune_from if fine_tune_from in (None, "auto") else fine_tune_from
    rate = fine_tune_learning_rate or learning_rate * spec.fine_tune_rate
    phases = [Phase(HEAD, 0, head, learning_rate, None)] if head else []
    if head < epochs:
        phases.append(Phase(FINE_TUNE, head, epochs, rate, start_from))
    return Schedule(tuple(phases))


def backbone_of(net: Any) -> Any | None:
    """The keras.applications model inside a model built by `build_model` (None: small_cnn, the
    small U-Net, the small-ResNet detector): nested in a classifier or in a U-Net's encoder; in
    a KerasHub detector, in its image encoder (so its FPN and heads are not taken for it)."""
    import keras

    encoder = getattr(getattr(net, "backbone", None), "image_encoder", None)
    return next((layer for layer in (encoder or net).layers if isinstance(layer, keras.Model)), None)


def trainable_flags(net: Any, phase: Phase) -> dict[str, bool]:
    """{backbone layer name: trainable} in `phase` (empty for a model without a backbone).

    Raises:
        OptionError: no backbone layer's name starts with the phase's `unfreeze_from`.
    """
    import keras

    backbone = backbone_of(net)
    if backbone is None:
        return {}
    layers = backbone.layers
    if phase.unfreeze_from is None:
        first = len(layers)
    elif phase.unfreeze_from == ALL:
        first = 0
    else:
        first = next((i for i, layer in enumerate(layers) if layer.name.startswith(phase.unfreeze_from)), -1)
        if first < 0:
            raise OptionError(
                f"no layer of {backbone.name} is named {phase.unfreeze_from!r}... (--fine-tune-from); its stages "
                f"start with e.g. {_stage_names(layers)}"
            )
    frozen_bn = phase.name == FINE_TUNE
    return {
        layer.name: i >= first and not (frozen_bn and isinstance(layer, keras.layers.BatchNormalization))
        for i, layer in enumerate(layers)
    }


def _stage_names(layers: list[Any]) -> list[str]:
    names = [layer.name for layer in layers]
    return names[len(names) // 2 :: max(1, len(names) // 12)][:6]


def in_phase(net: Any, phase: Phase) -> bool:
    """Whether the model's trainable flags are those of `phase` (a resumed model keeps its own)."""
    backbone = backbone_of(net)
    if backbone is None:
        return True
    flags = trainable_flags(net, phase)
    if not backbone.trainable:
        return not any(flags.values())
    # layers without weights (the input) do not keep their flag through model.keras, nor need it
    return all(layer.trainable == flags[layer.name] for layer in backbone.layers if layer.weights)


def set_phase(net: Any, phase: Phase) -> None:
    """Sets the backbone's trainable flags for `phase` (compile afterwards for it to take effect)."""
    backbone = backbone_of(net)
    if backbone is None:
        return
    flags = trainable_flags(net, phase)
    backbone.trainable = any(flags.values())  # Keras sets the flag of every layer inside, too
    if backbone.trainable:
        for layer in backbone.layers:
            layer.trainable = flags[layer.name]


def parameter_counts(net: Any) -> tuple[int, int]:
    """(trainable, total) parameters of a model as it stands."""
    trainable = sum(int(v.numpy().size) for v in net.trainable_weights)
    return trainable, int(net.count_params())


BOOKKEEPING = ("phase", "learning_rate")  # in log.csv and TensorBoard, not metrics


def phase_log_callback() -> Any:
    """A Keras callback adding `phase` (its number, 1-based, set by the trainer; numeric, as Keras'
    CSV logger and TensorBoard take only numbers) and the epoch's last `learning_rate` to each
    epoch's logs, so that log.csv and TensorBoard show them. Place it before the loggers, and its
    `tidy` after them: that takes both out again, so the progress line and History, which Keras
    puts last, show only metrics ('phase: 1.0000' read as one)."""
    import keras

    class Tidy(keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            for key in BOOKKEEPING:
                (logs or {}).pop(key, None)

    class PhaseLog(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.phase = 1
            self.tidy = Tidy()

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            if logs is not None:
                logs["phase"] = self.phase
                rate = self.model.optimizer.learning_rate
                logs["learning_rate"] = float(keras.ops.convert_to_numpy(rate))

    return PhaseLog()
