"""Keras classifiers for `train`, taking uint8 images (normalisation happens inside the model).

The class names travel inside the saved `.keras` file, in a `ClassNames` output layer, so a
model file alone is enough to predict named classes.
"""

from __future__ import annotations

from typing import Any

from shardfeed.errors import OptionError
from shardfeed.lazy import tensorflow

MODELS = ("small_cnn", "mobilenet_v2", "resnet50")


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


_CLASS_NAMES: Any = None


def class_names_layer() -> Any:
    """The registered `ClassNames` layer class (registered once, on first use)."""
    global _CLASS_NAMES
    if _CLASS_NAMES is None:
        _CLASS_NAMES = _class_names_layer()
    return _CLASS_NAMES


def build_model(
    name: str, class_names: list[str], image_size: tuple[int, int], *, channels: int = 3, weights: str | None = None
) -> Any:
    """A classifier: uint8 [H, W, C] in, class probabilities out (float32, also under mixed precision).

    Args:
        name: 'small_cnn' (the cats-vs-dogs recipe's CNN), 'mobilenet_v2' or 'resnet50'
            (keras.applications, random init: no weights are downloaded).
        weights: a local weights file: for the applications, backbone weights without the top
            (e.g. *_notop.h5); for small_cnn, a full model weights file.

    Raises:
        ValueError: unknown model name.
    """
    keras = _keras()
    if name not in MODELS:
        raise OptionError(f"model must be one of {list(MODELS)}, got {name!r}")
    inputs = keras.Input((*image_size, channels), dtype="uint8", name="image")
    if name == "small_cnn":
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
        x = keras.layers.Dropout(0.3)(x)
    else:
        x = keras.layers.Rescaling(1 / 127.5, offset=-1.0)(inputs)
        app = keras.applications.MobileNetV2 if name == "mobilenet_v2" else keras.applications.ResNet50
        backbone = app(include_top=False, weights=weights, input_shape=(*image_size, 3), pooling="avg")
        if channels == 1:
            x = keras.layers.Concatenate()([x, x, x])
        x = backbone(x)
    x = keras.layers.Dense(len(class_names), name="logits")(x)
    x = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(x)
    outputs = class_names_layer()(class_names, name="class_names", dtype="float32")(x)
    model = keras.Model(inputs, outputs, name=name)
    if weights and name == "small_cnn":
        model.load_weights(weights)
    return model


def model_class_names(model: Any) -> list[str]:
    """The class names stored in a model built by `build_model`."""
    return list(model.get_layer("class_names").class_names)


def load_model(path: str) -> Any:
    """Loads a `.keras` model saved by `train` (our custom layer registered first)."""
    keras = _keras()
    class_names_layer()
    return keras.saving.load_model(path)
