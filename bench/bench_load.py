"""Load benchmark: shardfeed.load vs the baselines the load issue names, in one run, 224x224 output.

    .venv/bin/python bench/bench_load.py [--images 3000] [--epochs 2] [--json out.json]

Baselines (same corpus as bench_convert: real-photo JPEGs, 200-500 px):
  ceiling   the same JPEG bytes already in memory, decoded + same augmentation by tf.data (AUTOTUNE)
  recipe    the cats-vs-dogs reader: list_files + interleave + parse_single_example + shuffle of
            decoded images + batch, same augmentation, on the same shards
  keras     tf.keras.utils.image_dataset_from_directory on the original folder
  libjpeg   simplejpeg full decodes in a loop on one core, times the cores (the physical limit)
  parse     records read and parsed, no decode (records/s)
Also measures shardfeed design variants (decode strategy, IDCT method) so the fastest is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.corpus import build_corpus

SIZE = 224
BATCH = 64


def rate(ds, epochs: int) -> float:  # type: ignore[no-untyped-def]
    """Images/s over `epochs` full passes after one warm-up batch."""
    iterator = iter(ds)
    first = next(iterator)
    images = 0
    start = time.perf_counter()
    for batch in iterator:
        images += int((batch[0] if isinstance(batch, tuple) else batch).shape[0])
    for _ in range(epochs - 1):
        for batch in ds:
            images += int((batch[0] if isinstance(batch, tuple) else batch).shape[0])
    del first
    return images / (time.perf_counter() - start)


def inception_train(tf, data, seed):  # type: ignore[no-untyped-def]
    """The training augmentation every pipeline gets: random-resized crop (fused decode) + flip."""
    from shardfeed.augment import Augment, random_crop_window

    window = random_crop_window(tf.image.extract_jpeg_shape(data), seed, Augment())
    image = tf.io.decode_and_crop_jpeg(data, window, channels=3, dct_method="INTEGER_FAST")
    image = tf.image.resize(image, (SIZE, SIZE), antialias=True)
    image = tf.image.stateless_random_flip_left_right(image, seed)
    return tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)


def ceiling(tf, files: list[str], epochs: int) -> float:  # type: ignore[no-untyped-def]
    blobs = [Path(f).read_bytes() for f in files]
    seeds = tf.data.Dataset.random(seed=0).batch(2)
    ds = tf.data.Dataset.zip((tf.data.Dataset.from_tensor_slices(blobs), seeds))
    ds = ds.map(lambda d, s: inception_train(tf, d, s), num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    return rate(ds.batch(BATCH, drop_remainder=True).prefetch(tf.data.AUTOTUNE), epochs)


def recipe(tf, shards: str, epochs: int) -> float:  # type: ignore[no-untyped-def]
    spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
    }

    def parse(record, seed):  # type: ignore[no-untyped-def]
        f = tf.io.parse_single_example(record, spec)
        return inception_train(tf, f["image/encoded"], seed), f["image/class/label"]

    files = tf.data.Dataset.list_files(os.path.join(shards, "train-*"))
    ds = files.interleave(tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    ds = tf.data.Dataset.zip((ds, tf.data.Dataset.random(seed=0).batch(2)))
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False).shuffle(1024)
    return rate(ds.batch(BATCH, drop_remainder=True).prefetch(tf.data.AUTOTUNE), epochs)


def keras_folder(tf, src: str, epochs: int) -> float:  # type: ignore[no-untyped-def]
    ds = tf.keras.utils.image_dataset_from_directory(src, image_size=(SIZE, SIZE), batch_size=BATCH, verbose=False)
    return rate(ds.prefetch(tf.data.AUTOTUNE), epochs)


def libjpeg_limit(files: list[str]) -> float:
    import simplejpeg

    blobs = [Path(f).read_bytes() for f in files]
    start = time.perf_counter()
    for b in blobs:
        simplejpeg.decode_jpeg(b)
    return len(blobs) / (time.perf_counter() - start) * (os.cpu_count() or 1)


def parse_only(tf, shards: str, epochs: int) -> float:  # type: ignore[no-untyped-def]
    from shardfeed import reader
    from shardfeed.decode import Schema, feature_spec

    spec = feature_spec(Schema())
    ds = reader.read_records(
        reader.from_manifest(shards, "train"), shuffle_files=True, seed=None, deterministic=False, skip_corrupt=False
    )
    ds = (
        ds.batch(256)
        .map(lambda s: tf.io.parse_example(s, spec)["image/class/label"], num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )
    n, start = 0, time.perf_counter()
    for _ in range(epochs * 3):
        for labels in ds:
            n += int(labels.shape[0])
    return n / (time.perf_counter() - start)


def unbatched_variant(tf, shards: str, epochs: int, training: bool) -> float:  # type: ignore[no-untyped-def]
    """Design variant: parse in batches, unbatch, decode per record with AUTOTUNE, batch again."""
    from shardfeed import reader
    from shardfeed.augment import Augment
    from shardfeed.decode import DecodeOptions, Schema, decode_one, feature_spec

    schema, spec = Schema(), feature_spec(Schema())
    options = DecodeOptions((SIZE, SIZE), 3, "uint8", Augment() if training else None, 0.875, "INTEGER_FAST")
    ds = reader.read_records(
        reader.from_manifest(shards, "train"),
        shuffle_files=training,
        seed=None,
        deterministic=False,
        skip_corrupt=False,
    )
    if training:
        ds = ds.shuffle(4096)
    ds = tf.data.Dataset.zip((ds, tf.data.Dataset.random().batch(2))).batch(256)
    ds = ds.map(lambda s, seeds: (tf.io.parse_example(s, spec), seeds), num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    ds = ds.map(
        lambda f, seed: (
            decode_one(
                f["image/encoded"],
                f["image/height"],
                f["image/width"],
                f["image/channels"],
                seed,
                schema=schema,
                options=options,
            ),
            f["image/class/label"],
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=False,
    )
    return rate(ds.batch(BATCH, drop_remainder=True).prefetch(tf.data.AUTOTUNE), epochs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "shardfeed_bench"))
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    import tensorflow as tf

    from shardfeed import convert, load

    src = build_corpus(os.path.join(args.workdir, f"corpus{args.images}"), args.images)
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs)
    keep, small = os.path.join(args.workdir, "load_keep"), os.path.join(args.workdir, "load_256")
    for out, opts in ((keep, {}), (small, {"resize": 256})):
        shutil.rmtree(out, ignore_errors=True)
        convert(src, out, split="train=1", shards=16, progress=False, **opts)
    e = args.epochs

    def ours(path: str, **kw: object) -> float:
        return rate(load(path, split="train", batch_size=BATCH, image_size=SIZE, **kw), e)

    r: dict[str, object] = {"images": args.images, "cores": os.cpu_count(), "batch": BATCH, "size": SIZE}
    r["shardfeed_train_img_s"] = ours(keep)
    r["shardfeed_train_resized256_img_s"] = ours(small)
    r["shardfeed_eval_img_s"] = ours(keep, training=False)
    r["shardfeed_eval_resized256_img_s"] = ours(small, training=False)
    r["ceiling_img_s"] = ceiling(tf, files, e)
    r["recipe_img_s"] = recipe(tf, keep, e)
    r["keras_folder_img_s"] = keras_folder(tf, src, e)
    r["libjpeg_limit_img_s"] = libjpeg_limit(files)
    r["parse_records_s"] = parse_only(tf, keep, e)
    r["variant_unbatched_train_img_s"] = unbatched_variant(tf, keep, e, True)
    r["variant_unbatched_eval_img_s"] = unbatched_variant(tf, keep, e, False)
    r["variant_dct_accurate_train_img_s"] = ours(keep, dct_method="INTEGER_ACCURATE")
    t = r["shardfeed_train_img_s"]
    r["ratios"] = {
        "train_vs_ceiling": t / r["ceiling_img_s"],  # type: ignore[operator]
        "train_vs_recipe": t / r["recipe_img_s"],  # type: ignore[operator]
        "train_vs_keras_folder": t / r["keras_folder_img_s"],  # type: ignore[operator]
        "train_resized256_vs_keras_folder": r["shardfeed_train_resized256_img_s"] / r["keras_folder_img_s"],  # type: ignore[operator]
        "eval_vs_keras_folder": r["shardfeed_eval_img_s"] / r["keras_folder_img_s"],  # type: ignore[operator]
        "eval_resized256_vs_keras_folder": r["shardfeed_eval_resized256_img_s"] / r["keras_folder_img_s"],  # type: ignore[operator]
        "train_vs_libjpeg_limit": t / r["libjpeg_limit_img_s"],  # type: ignore[operator]
    }
    text = json.dumps(r, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
