"""Keras classifiers for `train`, taking uint8 images (normalisation happens inside the model).

The class names travel inside the saved `.keras` file, in a `ClassNames` output layer, so a
model file alone is enough to predict named classes.
"""

from __future__ import annotations

import os
import re
import socket
import zipfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardfeed.errors import OptionError
from shardfeed.lazy import tensorflow
from shardfeed.training.detector import DETECTOR, build_detector, detector_class


@dataclass(frozen=True)
class Backbone:
    """A keras.applications backbone: its constructor, the input range its weights expect, the
    size its ImageNet weights were trained at, and its fine-tuning defaults (training/fine_tune.py).
    The preprocessing lives inside the model, so a saved model.keras needs nothing else to predict.

    preprocessing: 'tf' (pixels scaled to [-1, 1]), 'caffe' (RGB to BGR, ImageNet channel means
    subtracted), 'builtin' (the application's own layers; it takes 0..255).
    fine_tune_from: the name prefix of the first layer phase 2 unfreezes: the last stage (stride
    32) of each network, or for MobileNetV2 the TF transfer-learning tutorial's layer 100 (block 11).
    fine_tune_rate: phase 2's learning rate as a share of phase 1's: 1/10 as in the TF tutorial;
    1/100 for EfficientNetV2 and ConvNeXt, whose fine-tuning recipes (Keras' EfficientNet example,
    the ConvNeXt paper's 5e-5 after 4e-3 pre-training) go much lower.
    """

    application: str
    preprocessing: str
    input_size: int
    fine_tune_from: str
    fine_tune_rate: float = 0.1
    weights_token: str = ""  # in the name of the ImageNet weights file Keras caches (any input size)


BACKBONES = {
    "mobilenet_v2": Backbone("MobileNetV2", "tf", 224, "block_11_", weights_token="mobilenet_v2_"),
    "mobilenet_v3_small": Backbone("MobileNetV3Small", "builtin", 224, "expanded_conv_8_", 0.1, "mobilenet_v3_small"),
    "mobilenet_v3_large": Backbone("MobileNetV3Large", "builtin", 224, "expanded_conv_12_", 0.1, "mobilenet_v3_large"),
    "resnet50": Backbone("ResNet50", "caffe", 224, "conv5_", weights_token="resnet50_weights"),
    "resnet50_v2": Backbone("ResNet50V2", "tf", 224, "conv5_", weights_token="resnet50v2_weights"),
    "efficientnet_v2_b0": Backbone("EfficientNetV2B0", "builtin", 224, "block6a_", 0.01, "efficientnetv2-b0"),
    "efficientnet_v2_s": Backbone("EfficientNetV2S", "builtin", 384, "block6a_", 0.01, "efficientnetv2-s"),
    "convnext_tiny": Backbone(
        "ConvNeXtTiny", "builtin", 224, "convnext_tiny_downsampling_block_2", 0.01, "convnext_tiny"
    ),
}
SEGMENTER = "small_unet"  # what a segmentation run trains (training/objectives.py)
MODELS = ("small_cnn", *BACKBONES, SEGMENTER, DETECTOR)
IMAGENET = "imagenet"
DOWNLOAD_TIMEOUT = 20.0  # seconds a weights download may stall before it counts as no network
WEIGHTS_HOST = ("storage.googleapis.com", 443)  # where keras.applications downloads ImageNet weights from
REACH_TIMEOUT = 3.0  # seconds to connect to it before it counts as unreachable
_CAFFE_MEANS = (103.939, 116.779, 123.68)  # BGR, what keras.applications.resnet50.preprocess_input subtracts


def _keras() -> Any:
    tensorflow()
    import keras

    return keras


def _class_names_layer() -> Any:
    keras = _keras()

    @keras.saving.register_keras_serializable(package="shardfeed", name="ClassNames")
    class ClassNames(keras.layers.Layer):  # type: ignore[name-defined]
        """Identity on the class probabilities; carries the class names in its config."""

        def __init__(self, class_names: list[str], **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.class_names = list(class_names)

        def call(self, inputs: Any) -> Any:
            return inputs

        def get_config(self) -> dict[str, Any]:
            return {**super().get_config(), "class_names": self.class_names}

    return ClassNames


def _caffe_layer() -> Any:
    keras = _keras()

    @keras.saving.register_keras_serializable(package="shardfeed", name="CaffePreprocess")
    class CaffePreprocess(keras.layers.Layer):  # type: ignore[name-defined]
        """RGB 0..255 to BGR minus the ImageNet channel means (ResNet50's 'caffe' weights)."""

        def call(self, inputs: Any) -> Any:
            x = keras.ops.cast(inputs, self.compute_dtype)[..., ::-1]
            return x - keras.ops.convert_to_tensor(_CAFFE_MEANS, dtype=self.compute_dtype)

    return CaffePreprocess


def _pixel_crossentropy() -> Any:
    keras = _keras()

    @keras.saving.register_keras_serializable(package="shardfeed", name="PixelCrossentropy")
    class PixelCrossentropy(keras.losses.SparseCategoricalCrossentropy):  # type: ignore[name-defined]
        """Sparse categorical cross-entropy of [B, H, W] class ids and [B, H, W, K] scores, computed
        on them flattened to [pixels] and [pixels, K]: the same loss and the same mean over the
        pixels not ignored. PyTorch's 2-D `nll_loss` fails in its backward pass on the
        [B, K, H, W] view Keras' torch backend makes of the scores ("grad_input must be
        contiguous": pytorch/pytorch#175084, Keras 3.15.1, torch 2.13)."""

        def call(self, y_true: Any, y_pred: Any) -> Any:
            classes = keras.ops.shape(y_pred)[-1]
            return super().call(keras.ops.reshape(y_true, (-1,)), keras.ops.reshape(y_pred, (-1, classes)))

    return PixelCrossentropy


_LAYERS: dict[str, Any] = {}  # the registered classes, by name


def class_names_layer() -> Any:
    """The registered `ClassNames` layer class (registered once, on first use)."""
    if "class_names" not in _LAYERS:
        _LAYERS["class_names"] = _class_names_layer()
    return _LAYERS["class_names"]


def caffe_layer() -> Any:
    """The registered `CaffePreprocess` layer class (registered once, on first use)."""
    if "caffe" not in _LAYERS:
        _LAYERS["caffe"] = _caffe_layer()
    return _LAYERS["caffe"]


def pixel_crossentropy() -> Any:
    """The registered `PixelCrossentropy` loss class (registered once, on first use): what a
    segmentation run on Keras' torch backend is compiled with."""
    if "pixel_crossentropy" not in _LAYERS:
        _LAYERS["pixel_crossentropy"] = _pixel_crossentropy()
    return _LAYERS["pixel_crossentropy"]


def build_model(
    name: str,
    class_names: list[str],
    image_size: tuple[int, int],
    *,
    channels: int = 3,
    weights: str | None = None,
    activation: str = "softmax",
) -> Any:
    """A classifier: uint8 [H, W, C] in, class probabilities out (float32, also under mixed precision):
    one distribution over the classes (softmax), or with activation='sigmoid' one probability
    per class (multi-label).

    Args:
        name: 'small_cnn' (the cats-vs-dogs recipe's CNN) or a keras.applications backbone
            (`BACKBONES`), with its own preprocessing inside the model; 'small_unet' makes a
            segmenter instead: class probabilities per pixel, [H, W, K]; 'retinanet' KerasHub's
            detector (training/detector.py; not compiled: it compiles with its own losses).
        weights: None or 'none' (random initialisation), 'imagenet' (Keras downloads and caches
            them; without a network: an OptionError naming the file and where to put it), or a
            local file: backbone weights without the top (e.g. *_notop.h5) or the whole model's.

    Raises:
        OptionError: unknown model name; weights that cannot be had or do not fit the model.
    """
    keras = _keras()
    if name not in MODELS:
        raise OptionError(f"model must be one of {list(MODELS)}, got {name!r}")
    weights = None if weights in (None, "none") else weights
    if name == DETECTOR:
        return build_detector(class_names, image_size, weights=weights)
    inputs = keras.Input((*image_size, channels), dtype="uint8", name="image")
    if name == SEGMENTER:
        if image_size[0] % 8 or image_size[1] % 8:
            raise OptionError(f"{SEGMENTER} takes sides that are multiples of 8 (its 3 poolings), got {image_size}")
        return _small_unet(keras, inputs, class_names, weights)
    whole_model_file = None
    if name == "small_cnn":
        if weights == IMAGENET:
            raise OptionError("small_cnn has no ImageNet weights; pick a keras.applications --model for them")
        x, whole_model_file = _small_cnn(keras, inputs), weights
    else:
        x, whole_model_file = _with_backbone(keras, inputs, name, image_size, channels, weights)
    x = keras.layers.Dense(len(class_names), name="logits")(x)
    x = keras.layers.Activation(activation, dtype="float32", name="probabilities")(x)
    outputs = class_names_layer()(class_names, name="class_names", dtype="float32")(x)
    model = keras.Model(inputs, outputs, name=name)
    if whole_model_file:
        try:
            model.load_weights(whole_model_file)
        except Exception as e:  # Keras raises ValueError/KeyError/OSError, naming the layer and shapes
            raise OptionError(
                f"weights file {whole_model_file} does not fit the {name} model for {len(class_names)} classes at "
                f"{image_size[0]}x{image_size[1]}x{channels}: {_first_line(e)}"
            ) from None
    return model


def _small_unet(keras: Any, inputs: Any, class_names: list[str], weights: str | None) -> Any:
    """A small U-Net (Ronneberger et al. 2015, three levels, 32-128 filters): per-pixel class
    probabilities [H, W, K] at the input's size, learnable from random weights on CPU. Sides
    that are multiples of 8 keep the skips aligned (`train` checks the image size)."""
    if weights == IMAGENET:
        raise OptionError(f"{SEGMENTER} has no ImageNet weights; it learns from random weights")
    x = keras.layers.Rescaling(1 / 255.0)(inputs)
    skips = []
    for filters in (32, 64, 128):
        x = _conv_block(keras, x, filters)
        skips.append(x)
        x = keras.layers.MaxPooling2D()(x)
    x = _conv_block(keras, x, 256)
    for filters, skip in zip((128, 64, 32), reversed(skips), strict=True):
        x = keras.layers.Conv2DTranspose(filters, 2, strides=2, padding="same")(x)
        x = _conv_block(keras, keras.layers.Concatenate()([x, skip]), filters)
    x = keras.layers.Conv2D(len(class_names), 1, name="logits")(x)
    x = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(x)
    outputs = class_names_layer()(class_names, name="class_names", dtype="float32")(x)
    model = keras.Model(inputs, outputs, name=SEGMENTER)
    if weights:
        model.load_weights(weights)
    return model


def _conv_block(keras: Any, x: Any, filters: int) -> Any:
    """Two 3x3 convolutions, each with BatchNorm (momentum 0.9, as `_small_cnn`) and ReLU."""
    for _ in range(2):
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization(momentum=0.9)(x)
        x = keras.layers.Activation("relu")(x)
    return x


def _small_cnn(keras: Any, inputs: Any) -> Any:
    x = keras.layers.Rescaling(1 / 255.0)(inputs)  # casts the uint8 input too
    for filters in (32, 64, 128):
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        # momentum 0.9, not Keras' 0.99: with 0.99 a few hundred steps leave ~4% of the initial
        # variance (1.0) in the moving average, which swamped real variances of ~0.01 and put
        # inference-mode accuracy at chance on the digits demo while training accuracy was 0.96.
        x = keras.layers.BatchNormalization(momentum=0.9)(x)
        x = keras.layers.Activation("relu")(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.layers.Dropout(0.3)(x)


def _with_backbone(
    keras: Any, inputs: Any, name: str, image_size: tuple[int, int], channels: int, weights: str | None
) -> tuple[Any, str | None]:
    """The backbone's pooled features of `inputs`, its preprocessing in front; and the weights
    file to load into the whole model when `weights` is not the backbone's own."""
    spec = BACKBONES[name]
    x = keras.layers.Concatenate()([inputs, inputs, inputs]) if channels == 1 else inputs
    if spec.preprocessing == "tf":
        x = keras.layers.Rescaling(1 / 127.5, offset=-1.0)(x)
    elif spec.preprocessing == "caffe":
        x = caffe_layer()()(x)
    else:
        x = keras.layers.Rescaling(1.0)(x)  # a float copy of 0..255; the backbone scales it itself
    kwargs: dict[str, Any] = {"include_top": False, "input_shape": (*image_size, 3), "pooling": "avg"}
    if spec.preprocessing == "builtin":
        kwargs["include_preprocessing"] = True
    app = getattr(keras.applications, spec.application)
    if weights == IMAGENET:
        return _imagenet(app, kwargs, name)(x), None
    backbone = app(weights=None, **kwargs)
    if weights is None:
        return backbone(x), None
    try:
        backbone.load_weights(weights)
    except Exception:  # not backbone weights: perhaps the whole model's (tried once it is built)
        return backbone(x), weights
    return backbone(x), None


def keras_cache() -> str:
    """The folder Keras keeps downloaded weights in (and reads without a network)."""
    return os.path.join(os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras"), "models")


def imagenet_source(name: str) -> str | None:
    """Where `name`'s ImageNet weights would come from: 'cache' (a file in Keras' cache),
    'network' (the download host answers), or None (neither: offline, nothing cached). Asks no
    TensorFlow, so `--model auto` decides before it loads."""
    token = BACKBONES[name].weights_token
    folder = keras_cache()
    if token and os.path.isdir(folder) and any(token in f and "top" in f for f in os.listdir(folder)):
        return "cache"
    try:
        socket.create_connection(WEIGHTS_HOST, timeout=REACH_TIMEOUT).close()
    except OSError:
        return None
    return "network"


def _imagenet(app: Any, kwargs: dict[str, Any], name: str) -> Any:
    """The backbone with ImageNet weights (from the Keras cache, else downloaded into it).

    Raises:
        OptionError: they cannot be downloaded (no network): the file Keras wanted, where to put
            it, and the other choices.
    """
    before = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT)  # a blocked network fails in seconds, not minutes
    try:
        return app(weights=IMAGENET, **kwargs)
    except Exception as e:  # Keras' get_file raises a bare Exception("URL fetch failure on URL: ...")
        text = str(e)
        url = re.search(r"https?://\S+?\.h5", text)
        wanted = f"{url.group(0).rsplit('/', 1)[-1]} (from {url.group(0)})" if url else "its ImageNet weights file"
        reason = _first_line(e).rsplit(": ", 1)[-1] if url else _first_line(e)
        raise OptionError(
            f"ImageNet weights for {name} could not be had ({reason}): Keras wanted {wanted}; put that file "
            f"in {keras_cache()} (Keras' cache, read without a network), or pass --weights FILE with a local copy; "
            "or train --model small_cnn, which learns from random weights on small data (what --model auto "
            f"picks offline); {name} from random weights (--weights none) needs far more images"
        ) from None
    finally:
        socket.setdefaulttimeout(before)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__


def model_class_names(model: Any) -> list[str]:
    """The class names stored in a model built by `build_model`."""
    return list(model.get_layer("class_names").class_names)


def predicted(net: Any, images: Any) -> np.ndarray:
    """`net.predict_on_batch` on a batch that tf.data made: handed over as a NumPy array, which
    every Keras backend takes (JAX's refuses TensorFlow tensors), and returned as one, a row an
    image. A model built under `train --devices N` (MirroredStrategy) gives each of its N
    replicas the whole batch and returns their outputs one after the other (Keras 3.15.1 on
    TensorFlow): the first replica's rows are the batch's."""
    batch = np.asarray(images)
    return np.asarray(net.predict_on_batch(batch))[: len(batch)]


def scored(net: Any, ds: Any) -> tuple[np.ndarray, np.ndarray]:
    """The model's outputs over a dataset of (images, labels) batches, and the labels: [N, K], [N, ...]."""
    outputs, labels = [], []
    for images, y in ds:
        outputs.append(predicted(net, images))
        labels.append(np.asarray(y))
    return np.concatenate(outputs), np.concatenate(labels)


def load_model(path: str) -> Any:
    """Loads a `.keras` model saved by `train` (our custom layers registered first; KerasHub
    imported first for a detector, which registers its classes)."""
    keras = _keras()
    class_names_layer()
    caffe_layer()
    pixel_crossentropy()
    if _made_by_keras_hub(path):
        detector_class()  # imports KerasHub and registers the detector
    return keras.saving.load_model(path)


def _made_by_keras_hub(path: str) -> bool:
    """Whether the `.keras` file at `path` holds a KerasHub model (its config names the module)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return b'"keras_hub' in archive.read("config.json")
    except (OSError, KeyError, zipfile.BadZipFile):
        return False  # Keras' own loader says what is wrong with the file
