"""keras.applications backbones as the encoder of a segmenter or a detector: what a segmentation or
detection run trains when it has a backbone (`--model mobilenet_v2`, or `--model auto` where its
ImageNet weights can be had: training/model_choice.py), so masks and boxes start from ImageNet's
features as classes do.

feature maps  the backbone's last layer at each stride 2, 4, 8, 16, 32 (`stride_layers`): for
              MobileNetV2 the TensorFlow segmentation tutorial's block_1/3/6/13_expand_relu, for
              ResNet50 its stage outputs conv2-5_blockN_out
segmenter     the tutorial's U-Net (`unet_probabilities`): the stride-32 map upsampled by 2 four
              times (transposed 3x3 convolutions of 512, 256, 128, 64 filters, BatchNorm, ReLU),
              each time joined with the backbone's map at that stride, then one transposed
              convolution to the input's size and the classes, softmax per pixel
detector      KerasHub's RetinaNet (training/detector.py) on the stride 8, 16, 32 maps as P3-P5
              (`pyramid_encoder`: a registered KerasHub `FeaturePyramidBackbone`, so the detector
              saves and loads as KerasHub's own)

The preprocessing the weights expect is inside the model (training/backbones.py), so both take
`load`'s uint8 images as they are.
"""

from __future__ import annotations

import functools
from typing import Any

from shardfeed import lazy
from shardfeed.errors import OptionError
from shardfeed.training.backbones import application, preprocessed

STRIDES = (2, 4, 8, 16, 32)  # the feature maps a U-Net joins; the detector reads the last three
PYRAMID = {3: 8, 4: 16, 5: 32}  # the FPN level each detector map is (level n: stride 2**n)
DECODER_FILTERS = (512, 256, 128, 64)  # the tutorial's up-stack, from stride 16 to stride 2
MULTIPLE = STRIDES[-1]  # the input's sides are multiples of the coarsest stride


def stride_layers(app: Any, image_size: tuple[int, int]) -> dict[int, str]:
    """{stride: the name of `app`'s last layer whose output is the input at 1/stride} for STRIDES:
    the end of each stage, just before the next one halves the map.

    Raises:
        OptionError: sides that are not multiples of MULTIPLE, or a stride no layer reaches.
    """
    height, width = image_size
    if height % MULTIPLE or width % MULTIPLE:
        raise OptionError(f"{app.name} as an encoder takes sides that are multiples of {MULTIPLE}, got {image_size}")
    found: dict[int, str] = {}
    for layer in app.layers:
        try:
            shape = layer.output.shape
        except (AttributeError, ValueError):  # no output of its own (several calls, or none)
            continue
        for stride in STRIDES:
            if len(shape) == 4 and tuple(shape[1:3]) == (height // stride, width // stride):
                found[stride] = layer.name
    missing = [s for s in STRIDES if s not in found]
    if missing:
        raise OptionError(f"{app.name} has no feature map at stride {missing} of a {height}x{width} input")
    return found


def _features(app: Any, image_size: tuple[int, int], strides: tuple[int, ...]) -> Any:
    """`app` as a model of its feature maps at `strides` (its own layers and weights, under its
    own name, so fine-tuning finds its layers: training/fine_tune.py)."""
    keras = lazy.keras()
    names = stride_layers(app, image_size)
    return keras.Model(app.inputs, [app.get_layer(names[s]).output for s in strides], name=app.name)


def unet_probabilities(
    inputs: Any, name: str, image_size: tuple[int, int], channels: int, weights: str | None, classes: int
) -> tuple[Any, str | None]:
    """Per-pixel class probabilities [H, W, classes] of `inputs` (uint8) by the U-Net on backbone
    `name` (module docstring), float32 also under mixed precision; and the weights file to load
    into the whole model once built (`backbones.application`)."""
    keras = lazy.keras()
    app, whole_model_file = application(name, image_size, weights, pooling=None)
    *skips, x = _features(app, image_size, STRIDES)(preprocessed(inputs, name, channels))
    for filters, skip in zip(DECODER_FILTERS, reversed(skips), strict=True):
        x = keras.layers.Conv2DTranspose(filters, 3, strides=2, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization(momentum=0.9)(x)  # 0.9: few steps (models._small_cnn)
        x = keras.layers.Activation("relu")(x)
        x = keras.layers.Concatenate()([x, skip])
    x = keras.layers.Conv2DTranspose(classes, 3, strides=2, padding="same", name="logits")(x)
    return keras.layers.Activation("softmax", dtype="float32", name="probabilities")(x), whole_model_file


def pyramid_encoder(
    name: str, image_size: tuple[int, int], channels: int, weights: str | None
) -> tuple[Any, str | None]:
    """The detector's image encoder on backbone `name` (module docstring), from `weights`; and
    the weights file to load into the whole detector once built (`backbones.application`)."""
    app, whole_model_file = application(name, image_size, weights, pooling=None)
    return pyramid_encoder_class()(name, (*image_size, channels), app=app), whole_model_file


@functools.cache
def pyramid_encoder_class() -> type:
    """The registered `PyramidEncoder` class (KerasHub imported and the class registered on first
    use; `models.load_model` calls it before loading a detector)."""
    keras, hub = lazy.keras(), lazy.keras_hub()

    @keras.saving.register_keras_serializable(package="shardfeed", name="PyramidEncoder")
    class PyramidEncoder(hub.models.FeaturePyramidBackbone):  # type: ignore[name-defined]
        """A keras.applications backbone as a KerasHub feature-pyramid backbone: uint8 images in
        (preprocessed inside), its stride 8, 16, 32 maps as `pyramid_outputs` P3-P5. On `app`
        when given (the backbone built with its weights: `pyramid_encoder`), else on a new one
        from random weights (as a saved model loads: the file has its own weights)."""

        def __init__(self, backbone: str, image_shape: tuple[int, int, int], app: Any = None, **kwargs: Any) -> None:
            size = (int(image_shape[0]), int(image_shape[1]))
            app = app if app is not None else application(backbone, size, None, pooling=None)[0]
            features = _features(app, size, tuple(PYRAMID.values()))
            inputs = keras.Input(tuple(image_shape), name="images")
            maps = features(preprocessed(inputs, backbone, int(image_shape[2])))
            super().__init__(inputs=inputs, outputs=maps[-1], **kwargs)
            self.backbone_name = backbone
            self.image_shape = tuple(image_shape)
            self.pyramid_outputs = {f"P{level}": m for level, m in zip(PYRAMID, maps, strict=True)}

        def get_config(self) -> dict[str, Any]:
            return {**super().get_config(), "backbone": self.backbone_name, "image_shape": list(self.image_shape)}

    return PyramidEncoder
