"""The keras.applications backbones `train` builds on: which it offers (`BACKBONES`), the input
range each one's weights expect (its preprocessing, kept inside the model), where their ImageNet
weights come from (Keras' cache, else a download: `imagenet_source`), and the backbone itself,
pooled for a classifier or as feature maps for a segmenter or detector (training/encoders.py).
"""

from __future__ import annotations

import functools
import os
import re
import socket
from dataclasses import dataclass
from typing import Any

from shardfeed import lazy
from shardfeed.errors import OptionError


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

IMAGENET = "imagenet"
DOWNLOAD_TIMEOUT = 20.0  # seconds a weights download may stall before it counts as no network
WEIGHTS_HOST = ("storage.googleapis.com", 443)  # where keras.applications downloads ImageNet weights from
REACH_TIMEOUT = 3.0  # seconds to connect to it before it counts as unreachable
_CAFFE_MEANS = (103.939, 116.779, 123.68)  # BGR, what keras.applications.resnet50.preprocess_input subtracts


@functools.cache
def caffe_layer() -> Any:
    """The registered `CaffePreprocess` layer class (registered once, on first use)."""
    keras = lazy.keras()

    @keras.saving.register_keras_serializable(package="shardfeed", name="CaffePreprocess")
    class CaffePreprocess(keras.layers.Layer):  # type: ignore[name-defined]
        """RGB 0..255 to BGR minus the ImageNet channel means (ResNet50's 'caffe' weights)."""

        def call(self, inputs: Any) -> Any:
            x = keras.ops.cast(inputs, self.compute_dtype)[..., ::-1]
            return x - keras.ops.convert_to_tensor(_CAFFE_MEANS, dtype=self.compute_dtype)

    return CaffePreprocess


def preprocessed(inputs: Any, name: str, channels: int) -> Any:
    """`inputs` (uint8 0..255, `channels` 1 or 3) as `name`'s ImageNet weights expect them: grey
    repeated to RGB, then scaled to [-1, 1] ('tf'), made BGR minus the ImageNet means ('caffe'),
    or handed over as 0..255 floats for the application's own layers ('builtin')."""
    keras = lazy.keras()
    spec = BACKBONES[name]
    x = keras.layers.Concatenate()([inputs, inputs, inputs]) if channels == 1 else inputs
    if spec.preprocessing == "tf":
        return keras.layers.Rescaling(1 / 127.5, offset=-1.0)(x)
    if spec.preprocessing == "caffe":
        return caffe_layer()()(x)
    return keras.layers.Rescaling(1.0)(x)  # a float copy of 0..255; the backbone scales it itself


def application(
    name: str, image_size: tuple[int, int], weights: str | None, *, pooling: str | None = "avg"
) -> tuple[Any, str | None]:
    """The keras.applications model `name` without its top, taking `preprocessed` RGB at
    `image_size`: pooled ('avg', a classifier's) or its last feature map (None); from `weights`
    (None: random, 'imagenet', or a file of its own weights). Also the weights file to load into
    the whole model once it is built, when `weights` is a file that does not fit the backbone.

    Raises:
        OptionError: ImageNet weights that cannot be had (`imagenet_application`).
    """
    keras = lazy.keras()
    spec = BACKBONES[name]
    kwargs: dict[str, Any] = {"include_top": False, "input_shape": (*image_size, 3), "pooling": pooling}
    if spec.preprocessing == "builtin":
        kwargs["include_preprocessing"] = True
    app = getattr(keras.applications, spec.application)
    if weights == IMAGENET:
        return imagenet_application(app, kwargs, name), None
    backbone = app(weights=None, **kwargs)
    if weights is None:
        return backbone, None
    try:
        backbone.load_weights(weights)
    except Exception:  # not backbone weights: perhaps the whole model's (tried once it is built)
        return backbone, weights
    return backbone, None


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


def imagenet_application(app: Any, kwargs: dict[str, Any], name: str) -> Any:
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
        reason = first_line(e).rsplit(": ", 1)[-1] if url else first_line(e)
        raise OptionError(
            f"ImageNet weights for {name} could not be had ({reason}): Keras wanted {wanted}; put that file "
            f"in {keras_cache()} (Keras' cache, read without a network), or pass --weights FILE with a local copy; "
            "or leave --model auto to pick a model that learns from random weights (what it picks offline); "
            f"{name} from random weights (--weights none) needs far more images"
        ) from None
    finally:
        socket.setdefaulttimeout(before)


def first_line(error: BaseException) -> str:
    """The first line of an error's message (at most 300 characters), or its type's name."""
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__
