"""load's JPEG path as one compiled op (read/decode_resize.py): its pixels are TensorFlow's
decode_and_crop_jpeg then the fused resize, value for value; `load` on an all-JPEG folder gives
the same batches with it and without; a JPEG libjpeg refuses takes TensorFlow's path."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from conftest import photos
from PIL import Image

from shardfeed import ConvertOptions, DecodeOptions, convert, load
from shardfeed.format.schema import Schema
from shardfeed.read import decode_resize, fused_resize
from shardfeed.read.augment import Augment
from shardfeed.read.decode import decode_one
from shardfeed.read.preprocess import Preprocess

HEADERS = Path("/usr/include/jpeglib.h").is_file() or Path("/usr/local/include/jpeglib.h").is_file()
needs_op = pytest.mark.skipif(
    not HEADERS and not decode_resize.available(), reason="no libjpeg headers (jpeglib.h) on this machine"
)


def _jpeg(image: np.ndarray, **save: object) -> bytes:
    out = io.BytesIO()
    Image.fromarray(image).save(out, "JPEG", quality=90, **save)
    return out.getvalue()


@needs_op
def test_the_op_equals_decode_and_crop_then_the_fused_resize() -> None:
    """Real photos as 4:2:0, 4:4:4, progressive and grey JPEGs; random windows at 1/1 to 1/8,
    RGB and grey output, both integer DCTs, random sizes, flipped and not: every value equals
    `decode_and_crop_jpeg` then the fused resize (itself TensorFlow's resize, bit for bit)."""
    import tensorflow as tf

    assert decode_resize.available(), "the op did not build on a machine with jpeglib.h"
    rng = np.random.default_rng(0)
    checked = 0
    for photo in photos().values():
        for data in (_jpeg(photo), _jpeg(photo, subsampling=0), _jpeg(photo, progressive=True), _jpeg(photo[..., 0])):
            for ratio in (1, 2, 4, 8):
                height, width = -(-photo.shape[0] // ratio), -(-photo.shape[1] // ratio)
                for channels in (3, 1):
                    for dct in ("INTEGER_ACCURATE", "INTEGER_FAST"):
                        h, w = int(rng.integers(1, height + 1)), int(rng.integers(1, width + 1))
                        window = [int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w]
                        size = (int(rng.integers(1, 300)), int(rng.integers(1, 300)))
                        flip = tf.constant(bool(rng.integers(2)))
                        crop = tf.io.decode_and_crop_jpeg(data, window, channels=channels, ratio=ratio, dct_method=dct)
                        expected = fused_resize.resize_flip(crop, size, flip).numpy()
                        one = decode_resize.decode_resize(
                            data, window, ratio, size, flip, channels=channels, fast_dct=dct == "INTEGER_FAST"
                        )
                        assert one is not None
                        image, ok = one
                        assert bool(ok), f"{window} 1/{ratio} {channels} {dct}"
                        np.testing.assert_array_equal(image.numpy(), expected, f"{window} 1/{ratio} {channels} {dct}")
                        checked += 1
    assert checked == 4 * 4 * 4 * 2 * 2


@pytest.fixture(scope="module")
def jpeg_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An all-JPEG folder (4 classes x 6 photo crops of 200-500 px): `load` takes the one-op path."""
    root = tmp_path_factory.mktemp("jpegs")
    rng = np.random.default_rng(1)
    for name, photo in photos().items():
        (root / name).mkdir()
        for i in range(6):
            h, w = int(rng.integers(200, min(photo.shape[0], 500))), int(rng.integers(200, min(photo.shape[1], 500)))
            y, x = int(rng.integers(0, photo.shape[0] - h + 1)), int(rng.integers(0, photo.shape[1] - w + 1))
            (root / name / f"{i}.jpg").write_bytes(_jpeg(np.ascontiguousarray(photo[y : y + h, x : x + w])))
    out = tmp_path_factory.mktemp("jpeg_shards") / "out"
    convert(str(root), str(out), ConvertOptions(shards=2), workers=1, progress=False)
    return out


@needs_op
@pytest.mark.parametrize("size", [(48, 40), (224, 224)])
def test_load_gives_the_same_batches_with_the_op_and_without(jpeg_shards: Path, size: tuple[int, int]) -> None:
    """Training (random crops, flips; at 48x40 the windows decode at 1/2 to 1/8) and evaluation,
    RGB and grey, both DCTs: the batches with the op equal TensorFlow's decode and resize ops'."""
    import tensorflow as tf

    def batches(fused: bool, training: bool, channels: int, dct: str) -> np.ndarray:
        ds = load(
            str(jpeg_shards),
            split="train",
            training=training,
            augment=Augment() if training else None,
            batch_size=8,
            image_size=size,
            seed=3,
            decode=DecodeOptions(fused_resize=fused, channels=channels, dct_method=dct),
        )
        graph = ds._as_serialized_graph().numpy()
        assert (b"ShardfeedDecodeResize" in graph) == fused, "the op should be in the pipeline exactly when fused"
        return np.concatenate([images.numpy() for images, _ in ds])

    assert tf.executing_eagerly()
    for training, channels, dct in [
        (True, 3, "INTEGER_ACCURATE"),
        (False, 3, "INTEGER_ACCURATE"),
        (True, 1, "INTEGER_FAST"),
    ]:
        np.testing.assert_array_equal(batches(True, training, channels, dct), batches(False, training, channels, dct))


@needs_op
def test_a_jpeg_libjpeg_refuses_takes_tensorflows_path() -> None:
    """A CMYK JPEG (libjpeg has no CMYK-to-RGB conversion; TensorFlow's decoder has its own) and
    a truncated one: the op says not ok with a zero image, and `decode_one` then gives exactly
    what TensorFlow's ops give (the CMYK image), or TensorFlow's own error (the truncated one)."""
    import tensorflow as tf

    photo = next(iter(photos().values()))
    cmyk = io.BytesIO()
    Image.fromarray(photo).convert("CMYK").save(cmyk, "JPEG", quality=90)
    truncated = _jpeg(photo)[:5000]
    for data in (cmyk.getvalue(), truncated):
        one = decode_resize.decode_resize(
            data, [0, 0, 64, 64], 1, (32, 32), tf.constant(False), channels=3, fast_dct=False
        )
        assert one is not None
        image, ok = one
        assert not bool(ok) and not image.numpy().any()

    schema = Schema(all_jpeg=True)
    seed = tf.constant([1, 2], tf.int64)

    def decoded(data: bytes, fused: bool) -> np.ndarray:
        options = Preprocess((32, 32), Augment(), DecodeOptions(fused_resize=fused))
        return decode_one(tf.constant(data), 0, 0, 3, seed, schema=schema, options=options).numpy()

    np.testing.assert_array_equal(decoded(cmyk.getvalue(), True), decoded(cmyk.getvalue(), False))
    with pytest.raises(tf.errors.InvalidArgumentError):
        decoded(truncated, True)
