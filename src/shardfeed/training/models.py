"""The Keras models `train` builds, taking uint8 images (normalisation happens inside the model):
classifiers (on a small CNN or a keras.applications backbone: training/backbones.py), U-Nets
(small, or on a backbone: training/encoders.py) and the detector (training/detector.py).

The class names travel inside the saved `.keras` file, in a `ClassNames` output layer, so a
model file alone is enough to predict named classes.
"""

from __future__ import annotations

import functools
import zipfile
from typing import Any

import numpy as np

from shardfeed import lazy
from shardfeed.errors import OptionError
from shardfeed.training.backbones import BACKBONES, IMAGENET, application, caffe_layer, first_line, preprocessed
from shardfeed.training.detector import DETECTOR, build_detector, detector_class
from shardfeed.training.encoders import pyramid_encoder, pyramid_encoder_class, unet_probabilities

SEGMENTER = "small_unet"  # what a segmentation run trains (training/tasks/segmentation.py)
MODELS = ("small_cnn", *BACKBONES, SEGMENTER, DETECTOR)


@functools.cache
def class_names_layer() -> Any:
    """The registered `ClassNames` layer class (registered once, on first use)."""
    keras = lazy.keras()

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


@functools.cache
def pixel_crossentropy() -> Any:
    """The registered `PixelCrossentropy` loss class (registered once, on first use): what a
    segmentation run on Keras' torch backend is compiled with."""
    keras = lazy.keras()

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


def classifier(
    name: str,
    class_names: list[str],
    image_size: tuple[int, int],
    *,
    channels: int = 3,
    weights: str | None = None,
    activation: str = "softmax",
) -> Any:
    """A classifier: uint8 [H, W, C] in, class probabilities out (float32, also under mixed
    precision): one distribution over the classes (softmax), or with activation='sigmoid' one
    probability per class (multi-label).

    Args:
        name: 'small_cnn' (the cats-vs-dogs recipe's CNN) or a keras.applications backbone
            (`BACKBONES`), with its own preprocessing inside the model.
        weights: None (random initialisation), 'imagenet' or a local file (`build_model`).

    Raises:
        OptionError: small_cnn asked for ImageNet weights; weights that do not fit the model.
    """
    keras = lazy.keras()
    inputs = keras.Input((*image_size, channels), dtype="uint8", name="image")
    if name == "small_cnn":
        if weights == IMAGENET:
            raise OptionError("small_cnn has no ImageNet weights; pick a keras.applications --model for them")
        x, whole_model_file = small_cnn(keras, inputs), weights
    else:
        backbone, whole_model_file = application(name, image_size, weights)
        x = backbone(preprocessed(inputs, name, channels))
    x = keras.layers.Dense(len(class_names), name="logits")(x)
    x = keras.layers.Activation(activation, dtype="float32", name="probabilities")(x)
    outputs = class_names_layer()(class_names, name="class_names", dtype="float32")(x)
    model = keras.Model(inputs, outputs, name=name)
    return with_whole_weights(model, whole_model_file, name, class_names, image_size, channels)


def unet(
    name: str, class_names: list[str], image_size: tuple[int, int], *, channels: int = 3, weights: str | None = None
) -> Any:
    """A segmenter: uint8 [H, W, C] in, class probabilities per pixel out, [H, W, K]: the small
    U-Net (`SEGMENTER`) or a U-Net on a keras.applications backbone's encoder
    (training/encoders.py).

    Raises:
        OptionError: sides the U-Net cannot take; weights that cannot be had or do not fit.
    """
    keras = lazy.keras()
    inputs = keras.Input((*image_size, channels), dtype="uint8", name="image")
    if name == SEGMENTER:
        if image_size[0] % 8 or image_size[1] % 8:
            raise OptionError(f"{SEGMENTER} takes sides that are multiples of 8 (its 3 poolings), got {image_size}")
        return _small_unet(keras, inputs, class_names, weights)
    x, whole_model_file = unet_probabilities(inputs, name, image_size, channels, weights, len(class_names))
    outputs = class_names_layer()(class_names, name="class_names", dtype="float32")(x)
    model = keras.Model(inputs, outputs, name=f"{name}_unet")
    return with_whole_weights(model, whole_model_file, name, class_names, image_size, channels)


def detector(
    name: str, class_names: list[str], image_size: tuple[int, int], *, channels: int = 3, weights: str | None = None
) -> Any:
    """A detector (training/detector.py), not compiled: KerasHub's RetinaNet (`DETECTOR`) on its
    own small ResNet, or on a keras.applications backbone's pyramid (training/encoders.py)."""
    if name == DETECTOR:
        return build_detector(class_names, image_size, weights=weights)
    encoder, whole_model_file = pyramid_encoder(name, image_size, channels, weights)
    net = build_detector(class_names, image_size, image_encoder=encoder)
    return with_whole_weights(net, whole_model_file, f"{name} detector", class_names, image_size, channels)


def with_whole_weights(
    model: Any, file: str | None, what: str, class_names: list[str], image_size: tuple[int, int], channels: int
) -> Any:
    """`model` with the weights of `file` loaded into it (a whole model's weights), when given.

    Raises:
        OptionError: the file does not fit the model (Keras' reason, first line).
    """
    if file:
        try:
            model.load_weights(file)
        except Exception as e:  # Keras raises ValueError/KeyError/OSError, naming the layer and shapes
            raise OptionError(
                f"weights file {file} does not fit the {what} model for {len(class_names)} classes at "
                f"{image_size[0]}x{image_size[1]}x{channels}: {first_line(e)}"
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
    """Two 3x3 convolutions, each with BatchNorm (momentum 0.9, as `small_cnn`) and ReLU."""
    for _ in range(2):
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization(momentum=0.9)(x)
        x = keras.layers.Activation("relu")(x)
    return x


SMALL_CNN_WIDTHS = (32, 64, 128, 256)  # one stage each: 3x3 convolution, BatchNorm, ReLU, 2x2 pooling


def small_cnn(keras: Any, inputs: Any) -> Any:
    """Four stages of `SMALL_CNN_WIDTHS`, global average pooling and dropout. The fourth stage
    (256 filters, added 2026-11-29) sees the whole of a 32-px image: with three, the digits demo
    scored at scikit-learn's SVC (0.9853-0.9912 over five seeds, missing 9s written like 3s and 5s);
    with four, above it for every seed (docs/training.md, "The baseline")."""
    x = keras.layers.Rescaling(1 / 255.0)(inputs)  # casts the uint8 input too
    for filters in SMALL_CNN_WIDTHS:
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        # momentum 0.9, not Keras' 0.99: with 0.99 a few hundred steps leave ~4% of the initial
        # variance (1.0) in the moving average, which swamped real variances of ~0.01 and put
        # inference-mode accuracy at chance on the digits demo while training accuracy was 0.96.
        x = keras.layers.BatchNormalization(momentum=0.9)(x)
        x = keras.layers.Activation("relu")(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.layers.Dropout(0.3)(x)


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
    keras = lazy.keras()
    class_names_layer()
    caffe_layer()
    pixel_crossentropy()
    if _made_by_keras_hub(path):
        detector_class()  # imports KerasHub and registers the detector
        pyramid_encoder_class()  # a detector on a keras.applications backbone
    return keras.saving.load_model(path)


def _made_by_keras_hub(path: str) -> bool:
    """Whether the `.keras` file at `path` holds a KerasHub model (its config names the module)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return b'"keras_hub' in archive.read("config.json")
    except (OSError, KeyError, zipfile.BadZipFile):
        return False  # Keras' own loader says what is wrong with the file
