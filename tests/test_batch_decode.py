"""`load`'s batch decode op (read/native/batch_decode.py): a batch's JPEGs decoded, resized and flipped
into the batch give TensorFlow's `decode_and_crop_jpeg` then the fused resize, value for value,
at every DCT ratio, chroma layout, channel count and DCT method; a JPEG libjpeg refuses takes
TensorFlow's ops (decoded, or failing, as before); `load` gives the same batches with and without."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from conftest import JPEG_HEADERS, crops, photos
from PIL import Image

from shardfeed import ConvertOptions, DecodeOptions, convert, load
from shardfeed.read.augment import Augment
from shardfeed.read.decode.image import Preprocess
from shardfeed.read.decode.mapped import batch_decodable, batch_decoder
from shardfeed.read.native import batch_decode, fused_resize
from shardfeed.read.options import FAST_DCT

pytestmark = pytest.mark.skipif(
    not JPEG_HEADERS and not batch_decode.available(), reason="no libjpeg headers (jpeglib.h) on this machine"
)


def _jpeg(image: np.ndarray, quality: int = 90, **save: object) -> bytes:
    out = io.BytesIO()
    Image.fromarray(image).save(out, "JPEG", quality=quality, **save)
    return out.getvalue()


def _tensorflows(data: bytes, window: list[int], ratio: int, flip: bool, options: Preprocess) -> np.ndarray:
    """The reference: `decode_and_crop_jpeg` of the (scaled) window, then the fused resize op."""
    import tensorflow as tf

    config = options.config
    image = tf.io.decode_and_crop_jpeg(
        data, window, channels=config.channels, ratio=ratio, dct_method=config.dct_method
    )
    resized = fused_resize.resize_flip(image, options.image_size, tf.constant(flip))
    assert resized is not None
    return resized.numpy()


def _batch(jpegs: list[bytes], rng: np.random.Generator) -> tuple[list[bytes], list[list[int]], list[int], list[bool]]:
    """Random windows (1-pixel to whole) at random DCT ratios, random flips, one a JPEG."""
    windows, ratios, flips = [], [], []
    for data in jpegs:
        width, height = Image.open(io.BytesIO(data)).size
        ratio = int(rng.choice([1, 2, 4, 8]))
        h, w = -(-height // ratio), -(-width // ratio)  # the scaled image's size
        wh, ww = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
        windows.append([int(rng.integers(0, h - wh + 1)), int(rng.integers(0, w - ww + 1)), wh, ww])
        ratios.append(ratio)
        flips.append(bool(rng.integers(0, 2)))
    return jpegs, windows, ratios, flips


@pytest.mark.slow
@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("dct_method", ["INTEGER_ACCURATE", "INTEGER_FAST", ""])
def test_the_op_equals_decode_and_crop_jpeg_then_the_fused_resize(channels: int, dct_method: str) -> None:
    """Real photos as 4:2:0, 4:4:4, progressive and grey JPEGs, 40 windows each: every value equal."""
    import tensorflow as tf

    rng = np.random.default_rng(channels)
    options = Preprocess((56, 72), None, DecodeOptions(channels=channels, dct_method=dct_method))
    jpegs = []
    for photo in photos().values():
        jpegs += [_jpeg(photo), _jpeg(photo, subsampling=0), _jpeg(photo, progressive=True), _jpeg(photo[..., 0])]
    checked = 0
    for _ in range(10):
        data, windows, ratios, flips = _batch(jpegs, rng)
        images, ok = batch_decode.decode_resize(
            tf.constant(data), tf.constant(windows, tf.int32), tf.constant(ratios), tf.constant(flips), options
        )
        assert bool(tf.reduce_all(ok)), "libjpeg refused a JPEG TensorFlow decodes"
        assert images.shape == (len(data), 56, 72, channels)
        for i in range(len(data)):
            expected = _tensorflows(data[i], windows[i], ratios[i], flips[i], options)
            np.testing.assert_array_equal(images[i].numpy(), expected, err_msg=f"{windows[i]} at 1/{ratios[i]}")
            checked += 1
    assert checked == 10 * 4 * len(photos())


def test_a_jpeg_libjpeg_refuses_takes_tensorflows_ops() -> None:
    """A CMYK JPEG (the op's libjpeg will not give RGB) among others: its ok is false, and the
    batch decoder gives TensorFlow's pixels for it; a truncated JPEG fails as TensorFlow's op does."""
    import tensorflow as tf

    photo = photos()["chelsea"]
    options = Preprocess((64, 64), Augment(), DecodeOptions())
    cmyk = io.BytesIO()
    Image.fromarray(photo).convert("CMYK").save(cmyk, "JPEG", quality=90)
    data = [_jpeg(photo), cmyk.getvalue(), _jpeg(photo[::-1])]
    windows, ratios, flips = [[10, 20, 150, 200]] * 3, [1, 1, 2], [False, True, True]
    windows[2] = [5, 5, 60, 80]
    args = (tf.constant(data), tf.constant(windows, tf.int32), tf.constant(ratios), tf.constant(flips))
    _, ok = batch_decode.decode_resize(*args, options)
    assert ok.numpy().tolist() == [True, False, True]
    images = batch_decoder(options)(*args).numpy()
    for i in range(3):
        np.testing.assert_array_equal(images[i], _tensorflows(data[i], windows[i], ratios[i], flips[i], options))

    truncated = data[0][: len(data[0]) // 5]  # the window's rows are past its end
    with pytest.raises(tf.errors.InvalidArgumentError):
        _tensorflows(truncated, windows[0], 1, False, options)
    with pytest.raises(tf.errors.InvalidArgumentError):
        batch_decoder(options)(tf.constant([data[0], truncated]), *(a[:2] for a in args[1:]))


@pytest.fixture(scope="module")
def jpeg_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A converted folder of JPEGs only (photo crops, one of them grey), 3 classes x 9."""
    root = tmp_path_factory.mktemp("jpegs")
    for c, (name, photo) in enumerate(list(photos().items())[:3]):
        (root / name).mkdir()
        for i, crop in enumerate(crops(photo, 9, seed=c)):
            (root / name / f"{i}.jpg").write_bytes(_jpeg(crop if i else crop[..., 1]))
    out = root.parent / "jpeg_shards"
    convert(str(root), str(out), ConvertOptions(split="train=1.0", shards=3), workers=1, progress=False)
    return out


@pytest.mark.slow
def test_load_gives_the_same_batches_by_batch_and_by_record(jpeg_shards: Path) -> None:
    """Training (random crops at every DCT ratio, flips) and evaluation, colour and grey, a
    small output and a large one: `load`'s batches equal, with the op and without."""
    from shardfeed.read.plan import resolve

    plan = resolve(str(jpeg_shards), split="train", read=None, training=True, seed=1, batch_size=4)
    assert batch_decodable(plan.schema, Preprocess((48, 40), Augment(), DecodeOptions()))
    assert not batch_decodable(plan.schema, Preprocess((48, 40), Augment(), DecodeOptions(batch_decode=False)))

    def batches(by_batch: bool, training: bool, channels: int, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        ds = load(
            str(jpeg_shards),
            training=training,
            batch_size=5,
            image_size=size,
            seed=3,
            decode=DecodeOptions(batch_decode=by_batch, channels=channels),
        )
        pairs = [(images.numpy(), labels.numpy()) for images, labels in ds]
        return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])

    for training in (True, False):
        for channels in (3, 1):
            for size in ((48, 40), (160, 224)):
                (a, labels_a), (b, labels_b) = (batches(by, training, channels, size) for by in (True, False))
                assert a.shape == (len(a), *size, channels) and len(a) >= 25
                np.testing.assert_array_equal(a, b)
                np.testing.assert_array_equal(labels_a, labels_b)


@pytest.mark.parametrize("dct_method", ["INTEGER_ACCURATE", "INTEGER_FAST", ""])
def test_grains_batch_decoder_gives_the_ops_values(dct_method: str) -> None:
    """`grain_dataset`'s ctypes call of the same loop (read/native/window_decode.py, built without
    TensorFlow) on the op's random windows, ratios and flips: every value the op's (which the
    test above holds to TensorFlow's); a CMYK JPEG among them is not ok, its image zeros."""
    import tensorflow as tf

    from shardfeed.read.native import window_decode

    rng = np.random.default_rng(7)
    options = Preprocess((56, 72), None, DecodeOptions(dct_method=dct_method))
    cmyk = io.BytesIO()
    Image.fromarray(photos()["chelsea"]).convert("CMYK").save(cmyk, "JPEG", quality=90)
    jpegs = [_jpeg(photo) for photo in photos().values()] + [_jpeg(p, subsampling=0) for p in photos().values()]
    # Windows on iMCU edges, upscaled (where decode_and_crop_jpeg's edge columns differ from
    # the whole decode's, and each output column reads them), then random ones.
    n = len(jpegs) + 1
    edges = ([*jpegs, cmyk.getvalue()], [[16, 32, 40, 48]] * n, [1, 2] * (n // 2) + [1] * (n % 2), [False] * n)
    for data, windows, ratios, flips in [edges, *(_batch([*jpegs, cmyk.getvalue()], rng) for _ in range(5))]:
        expected, ok = batch_decode.decode_resize(
            tf.constant(data), tf.constant(windows, tf.int32), tf.constant(ratios), tf.constant(flips), options
        )
        out = np.full((len(data), 56, 72, 3), 7, np.uint8)
        fast = dct_method in FAST_DCT
        got = window_decode.decode_resize(data, windows, ratios, np.array(flips, np.uint8), out, fast)
        assert got is not None and got.tolist() == ok.numpy().tolist() == [True] * len(jpegs) + [False]
        np.testing.assert_array_equal(out, expected.numpy())
        assert not out[-1].any()


def test_grains_resize_of_a_cut_gives_the_fused_resize_ops_values() -> None:
    """`window_decode.resize_into` of windows cut from a larger image (rows a wider image's
    apart), flipped or not, up and down: the fused resize op's values."""
    import tensorflow as tf

    from shardfeed.read.native import window_decode

    photo = photos()["astronaut"]
    rng = np.random.default_rng(3)
    for size in ((56, 72), (224, 224), (7, 300)):
        for _ in range(6):
            h, w = int(rng.integers(1, photo.shape[0])), int(rng.integers(1, photo.shape[1]))
            top, left = int(rng.integers(0, photo.shape[0] - h + 1)), int(rng.integers(0, photo.shape[1] - w + 1))
            cut, flip = photo[top : top + h, left : left + w], bool(rng.integers(0, 2))
            out = np.empty((*size, 3), np.uint8)
            assert window_decode.resize_into(cut, out, flip)
            expected = fused_resize.resize_flip(tf.constant(cut), size, tf.constant(flip))
            np.testing.assert_array_equal(out, expected.numpy(), err_msg=f"{cut.shape} -> {size}, flip {flip}")


def test_a_batch_of_large_jpegs_spread_over_threads_gives_the_same_values() -> None:
    """A batch of over 16 MB of JPEG (phone-sized photos), which the op spreads over TensorFlow's
    intra-op threads, record by record: every value TensorFlow's, each record in its own place."""
    import tensorflow as tf

    photo = np.asarray(Image.fromarray(photos()["astronaut"]).resize((3000, 2400), Image.Resampling.BICUBIC))
    big = [_jpeg(photo, quality=100), _jpeg(photo[::-1], quality=100), _jpeg(photo[:, ::-1], quality=100)]
    data = big * (-(-(17 << 20) // sum(len(b) for b in big)))  # at least 17 MB in all
    rng = np.random.default_rng(5)
    _, windows, ratios, flips = _batch(data, rng)
    options = Preprocess((64, 48), None, DecodeOptions())
    images, ok = batch_decode.decode_resize(
        tf.constant(data), tf.constant(windows, tf.int32), tf.constant(ratios), tf.constant(flips), options
    )
    assert sum(len(d) for d in data) > 16 << 20 and bool(tf.reduce_all(ok))
    for i in range(len(data)):
        expected = _tensorflows(data[i], windows[i], ratios[i], flips[i], options)
        np.testing.assert_array_equal(images[i].numpy(), expected, err_msg=f"record {i}: {windows[i]} at 1/{ratios[i]}")
