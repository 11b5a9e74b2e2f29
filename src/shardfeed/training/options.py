"""How `train` trains: `TrainOptions` (what a user asks for) and the augmentation presets."""

from __future__ import annotations

from dataclasses import dataclass

from shardfeed.errors import OptionError
from shardfeed.read.augment import Augment
from shardfeed.read.options import BATCH_SIZE, IMAGE_SIZE, SHUFFLES, DecodeOptions
from shardfeed.training.backbones import BACKBONES, IMAGENET
from shardfeed.training.devices import check_spec as check_devices
from shardfeed.training.models import MODELS

AUGMENT_PRESETS = {
    "inception": Augment(),
    # no flip: a mirrored digit or letter is another class (or none); photos take 'inception'
    # shifts of up to 1/16 of the side and turns of up to 10 degrees, as MNIST-style recipes do:
    # the 10 degrees moved the digits demo from 0.9912/0.9912/0.9971 to 0.9941 for every seed
    # (docs/training.md, "The baseline")
    "light": Augment(crop=False, flip=False, translate=0.0625, rotate=10.0),
    "flip": Augment(crop=False),  # horizontal flips alone: detection's default (boxes stay whole)
    "none": None,
}
AUTO = "auto"
EPOCHS = 10  # what `train` trains for when no number is asked for
DETECTION_EPOCHS = 60  # the same for boxes: the detector from random weights (docs/benchmarks/training.md)
DETECTION_BATCH_SIZE = 16  # the detector's batch when none is asked for (`BATCH_SIZE` for the other tasks)


PRECISIONS = ("auto", "mixed", "float32")


@dataclass(frozen=True)
class TrainOptions:
    """How `train` trains.

    Attributes:
        model: one of MODELS (see `build_model`).
        epochs, batch_size, learning_rate: the usual; the learning rate decays to zero (cosine).
            epochs None: the task's default, `EPOCHS`, but `DETECTION_EPOCHS` for boxes (a
            detector from random weights needs them: training/model_choice.py); batch_size
            None likewise: `BATCH_SIZE`, but `DETECTION_BATCH_SIZE` for boxes (the optimizer
            steps a detector learns from in a CPU's minutes).
        image_size: the square input size in pixels; None: the task's default, 224 (`IMAGE_SIZE`),
            but for segmentation masks the training images' own size, at most 224
            (`model_choice.choose_image_size`): upsampling a mask adds pixels, not detail.
        seed: seeds weights, shuffling and augmentation.
        augment: 'auto' (chosen from the data's image sizes and count: `choose_augment`),
            'inception' (random-resized crop + flip), 'light' (shifts of up to 1/16 of the size
            and turns of up to 10 degrees, no flip), 'flip' (horizontal flips alone), 'none'.
        crop_fraction: evaluation centre crop (see `DecodeOptions`).
        channels: 3 or 1.
        mixed_precision: force float16 compute (the former switch; the same as precision='mixed').
        precision: 'auto' (float16 compute with float32 logits when a GPU is present, else
            float32; the choice is printed), 'mixed' or 'float32'.
        train_split: the split trained on.
        validation_split: evaluated after each epoch: 'auto' (validation, else val/valid/test/eval/dev,
            whichever the data has; none, said, if it has none), a split name, or None to skip.
        shuffle: 'buffer' or 'global' (a seeded permutation of the whole split each epoch; a
            resumed run continues the same sequence of epoch orders). See `ReadOptions`.
        save_every: with shuffle='global', also snapshot every this many steps, so that a resumed
            run continues mid-epoch at exactly the next batch (`fit_resumable`).
        service: read the training data through a tf.data service dispatcher, "grpc://HOST:PORT"
            (`shardfeed serve`): decoding and augmentation run on its workers.
        balance: 'class': each epoch reads every class equally often (`ReadOptions(balance=...)`,
            in the global order); small classes repeat.
        class_weight: 'balanced': Keras class weights n / (K x n_c) from the manifest's counts.
            The two standard remedies for imbalance; one or the other.
        weights: what the model starts from: 'auto' (ImageNet's for a keras.applications backbone,
            as keras.applications itself defaults to; random for small_cnn), 'imagenet', 'none'
            (random) or a local file (backbone weights without the top, or the whole model's).
        head_epochs: from pre-trained weights, the epochs of phase 1 (backbone frozen, only the
            head learns); None: half the epochs, at least 1; 0: fine-tune from the first epoch.
            See training/fine_tune.py.
        fine_tune_from: the name prefix of the first backbone layer phase 2 unfreezes: 'auto'
            (the backbone's last stage, `Backbone.fine_tune_from`), 'all', or a layer name.
        fine_tune_learning_rate: phase 2's starting rate; None: learning_rate x the backbone's
            `fine_tune_rate` (1/10, or 1/100 for EfficientNetV2 and ConvNeXt).
        decode_on: 'cpu' (TensorFlow's decoder, the default) or 'gpu' (NVIDIA DALI's nvJPEG,
            read/dali.py; `make dali` installs it) for training and evaluation.
        precise_bn: recompute BatchNorm's moving statistics from up to 1,024 training images
            before each validation and at the end (training/batchnorm.py), so the inference-mode
            model is as good as its weights even after a few dozen steps; False: Keras' moving
            averages as they are.
        devices: 1 (default), a number, or 'all': train on that many of the host's GPUs with
            tf.distribute.MirroredStrategy, each batch of batch_size split across them
            (training/devices.py).
    """

    model: str = "small_cnn"
    epochs: int | None = None
    batch_size: int | None = None
    image_size: int | None = None
    learning_rate: float = 1e-3
    seed: int = 0
    augment: str = AUTO
    crop_fraction: float = DecodeOptions.crop_fraction
    channels: int = 3
    mixed_precision: bool = False
    precision: str = "auto"
    train_split: str = "train"
    validation_split: str | None = AUTO
    shuffle: str = "buffer"
    save_every: int | None = None
    service: str | None = None
    balance: str | None = None
    class_weight: str | None = None
    weights: str = AUTO
    head_epochs: int | None = None
    fine_tune_from: str = AUTO
    fine_tune_learning_rate: float | None = None
    decode_on: str = "cpu"
    precise_bn: bool = True
    devices: int | str = 1

    def __post_init__(self) -> None:
        check_devices(self.devices)
        if self.decode_on not in ("cpu", "gpu"):
            raise OptionError(f"decode_on must be 'cpu' or 'gpu', got {self.decode_on!r} (--decode-on)")
        if self.precision not in PRECISIONS:
            raise OptionError(f"precision must be one of {list(PRECISIONS)}, got {self.precision!r} (--precision)")
        if self.mixed_precision and self.precision == "float32":
            raise OptionError("mixed_precision=True and precision='float32' contradict each other; pass one")
        if self.balance not in (None, "class"):
            raise OptionError(f"balance must be None or 'class', got {self.balance!r} (--balance)")
        if self.class_weight not in (None, "balanced"):
            raise OptionError(f"class_weight must be None or 'balanced', got {self.class_weight!r} (--class-weight)")
        if self.balance and self.class_weight:
            raise OptionError(
                "balance='class' and class_weight='balanced' both correct the same imbalance (applied together "
                "they over-correct it); pick one"
            )
        if self.augment not in (AUTO, *AUGMENT_PRESETS):
            raise OptionError(f"augment must be one of {[AUTO, *AUGMENT_PRESETS]}, got {self.augment!r}")
        if self.model not in (AUTO, *MODELS):
            raise OptionError(f"model must be one of {[AUTO, *MODELS]}, got {self.model!r}")
        if self.head_epochs is not None and not 0 <= self.head_epochs <= self.total_epochs:
            raise OptionError(
                f"head_epochs must be between 0 and epochs={self.total_epochs}, got {self.head_epochs} (--head-epochs)"
            )
        if self.fine_tune_learning_rate is not None and not self.fine_tune_learning_rate > 0:
            raise OptionError(
                f"fine_tune_learning_rate must be > 0, got {self.fine_tune_learning_rate} (--fine-tune-learning-rate)"
            )
        if self.shuffle not in SHUFFLES:
            raise OptionError(f"shuffle must be one of {list(SHUFFLES)}, got {self.shuffle!r}")
        if self.save_every is not None and (not self.global_order or self.save_every < 1):
            raise OptionError(
                f"save_every={self.save_every} needs shuffle='global' and at least 1 step: only a global order "
                "can be resumed at an exact step"
            )
        for name in ("epochs", "batch_size", "image_size"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                flag = "--" + name.replace("_", "-")
                raise OptionError(f"{name} must be >= 1, got {getattr(self, name)} ({flag})")
        if not self.learning_rate > 0:
            raise OptionError(f"learning_rate must be > 0, got {self.learning_rate} (--learning-rate)")
        _ = self.decode  # validates channels and crop_fraction

    @property
    def side(self) -> int:
        """The input's side: `image_size`, which `train` resolves before it reads it (224 where
        it is left to the task and not resolved yet)."""
        return IMAGE_SIZE if self.image_size is None else self.image_size

    @property
    def batch(self) -> int:
        """The batch size: `batch_size`, which `train` resolves before it reads it (`BATCH_SIZE`
        where it is left to the task and not resolved yet)."""
        return BATCH_SIZE if self.batch_size is None else self.batch_size

    @property
    def total_epochs(self) -> int:
        """The epochs to train: `epochs`, which `train` resolves before it reads it (`EPOCHS`
        where it is left to the task and not resolved yet)."""
        return EPOCHS if self.epochs is None else self.epochs

    def weights_for(self, model: str) -> str | None:
        """The weights `model` starts from: None (random), 'imagenet' or a file ('auto' resolved)."""
        if self.weights == AUTO:
            return IMAGENET if model in BACKBONES else None
        return None if self.weights == "none" else self.weights

    def compute_precision(self, gpu: bool) -> str:
        """'mixed' or 'float32': what this run computes in on a machine with (or without) a GPU."""
        if self.mixed_precision or self.precision == "mixed":
            return "mixed"
        if self.precision == "float32":
            return "float32"
        return "mixed" if gpu else "float32"

    @property
    def imbalance_remedy(self) -> str | None:
        """What corrects class imbalance in this run, in words (for the summary and report)."""
        if self.balance:
            return "class-balanced sampling (--balance class: every class the same records per epoch)"
        if self.class_weight:
            return "class weights (--class-weight balanced: n / (classes x class count), from the manifest)"
        return None

    @property
    def global_order(self) -> bool:
        """Training reads the seeded global order (asked for, or needed by balanced sampling)."""
        return self.shuffle == "global" or self.balance is not None

    @property
    def decode(self) -> DecodeOptions:
        """How the run's images are decoded (the same for training and evaluation)."""
        decoder = "dali" if self.decode_on == "gpu" else "tf"
        return DecodeOptions(channels=self.channels, crop_fraction=self.crop_fraction, decoder=decoder)

    @property
    def augmentation(self) -> Augment | bool:
        """`load`'s augment argument for this preset (False: none).

        Raises:
            OptionError: the preset is still 'auto' (resolve it with `choose_augment` first).
        """
        if self.augment == AUTO:
            raise OptionError("augment='auto' must be resolved against the data first (choose_augment)")
        return AUGMENT_PRESETS[self.augment] or False
