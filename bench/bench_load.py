"""Load benchmark: shardfeed.load vs the baselines the load issue names, in one run, 224x224 output.

    .venv/bin/python bench/bench_load.py [--images 3000] [--repeats 3] [--json out.json]

Same corpus as bench_convert (real-photo JPEGs, 200-500 px), converted once as kept bytes and once
with --resize 256. Every pipeline uses the same per-image decode/augment functions
(shardfeed.read.decode.decode_one), so only the reading and batching differ:
  ceiling   the JPEG bytes already in memory, decoded + augmented by tf.data (map AUTOTUNE)
  recipe    the cats-vs-dogs reader: list_files + interleave + parse_single_example per record +
            decode_jpeg of the whole image, then the same random-resized crop + flip + resize,
            shuffle of decoded images + batch, on the same shards
  keras     tf.keras.utils.image_dataset_from_directory on the original folder (full decode + resize)
  libjpeg   simplejpeg full decodes in a loop on one core, times the cores (the physical limit)
  parse     records read and parsed, no decode (records/s)
Each figure is the best of --repeats passes over the corpus (images/s after 2 warm-up batches).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.corpus import build_corpus
from bench.report import emit

SIZE = (224, 224)
BATCH = 64


def recipe(shards: str):  # type: ignore[no-untyped-def]
    import tensorflow as tf

    from shardfeed.read.augment import Augment, photometric, random_crop_window

    spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
    }

    def parse(record, seed):  # type: ignore[no-untyped-def]
        f = tf.io.parse_single_example(record, spec)
        image = tf.io.decode_jpeg(f["image/encoded"], channels=3)  # the recipe decodes the whole image
        window = random_crop_window(tf.shape(image), seed, Augment())
        image = tf.image.crop_to_bounding_box(image, window[0], window[1], window[2], window[3])
        image = tf.image.resize(image, SIZE)
        image = photometric(image, tf.random.experimental.stateless_fold_in(seed, 1), Augment())
        return tf.cast(tf.round(image), tf.uint8), f["image/class/label"]

    files = tf.data.Dataset.list_files(os.path.join(shards, "train-*"))
    ds = files.interleave(tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    ds = tf.data.Dataset.zip((ds, tf.data.Dataset.random(seed=0).batch(2)))
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False).shuffle(1024)
    return ds.batch(BATCH, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def libjpeg_limit(files: list[str]) -> float:
    import simplejpeg

    blobs = [Path(f).read_bytes() for f in files]
    start = time.perf_counter()
    for b in blobs:
        simplejpeg.decode_jpeg(b)
    return len(blobs) / (time.perf_counter() - start) * (os.cpu_count() or 1)


def parse_rate(shards: str) -> float:
    import tensorflow as tf

    from shardfeed.format.schema import LABEL, Schema
    from shardfeed.read import shardset
    from shardfeed.read.decode import feature_spec

    spec = feature_spec(Schema())
    ds = shardset.checked_records(
        shardset.from_manifest(shards, "train"), shuffle_files=True, seed=None, deterministic=False, skip_corrupt=False
    )
    ds = (
        ds.batch(256)
        .map(lambda s: tf.io.parse_example(s, spec)[LABEL], num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )
    n, start = 0, time.perf_counter()
    for _ in range(3):
        for labels in ds:
            n += int(labels.shape[0])
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "shardfeed_bench"))
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()

    from shardfeed import ConvertOptions, ImageOptions, convert, load
    from shardfeed.tools.benchmark import decode_ceiling, image_files, keras_folder, measure

    src = build_corpus(os.path.join(args.workdir, f"corpus{args.images}"), args.images)
    keep, small = os.path.join(args.workdir, "load_keep"), os.path.join(args.workdir, "load_256")
    for out, image in ((keep, ImageOptions()), (small, ImageOptions(resize=256))):
        shutil.rmtree(out, ignore_errors=True)
        convert(src, out, ConvertOptions(split="train=1", shards=16, image=image), progress=False)

    def best(fn) -> float:  # type: ignore[no-untyped-def]
        return max(fn() for _ in range(args.repeats))

    def ours(path: str, **kw: object) -> float:
        return measure(load(path, split="train", batch_size=BATCH, image_size=SIZE, **kw)).images_per_second

    r: dict[str, object] = {"images": args.images, "cores": os.cpu_count(), "batch": BATCH, "size": list(SIZE)}
    r["shardfeed_train_img_s"] = best(lambda: ours(keep))
    r["shardfeed_train_resized256_img_s"] = best(lambda: ours(small))
    r["shardfeed_eval_img_s"] = best(lambda: ours(keep, training=False))
    r["shardfeed_eval_resized256_img_s"] = best(lambda: ours(small, training=False))
    r["ceiling_train_img_s"] = best(
        lambda: decode_ceiling(src, image_size=SIZE, batch_size=BATCH, training=True).images_per_second
    )
    r["recipe_train_img_s"] = best(lambda: measure(recipe(keep)).images_per_second)
    r["keras_folder_img_s"] = best(lambda: keras_folder(src, image_size=SIZE, batch_size=BATCH).images_per_second)
    r["libjpeg_limit_img_s"] = best(lambda: libjpeg_limit(image_files(src)))
    r["parse_records_s"] = best(lambda: parse_rate(keep))
    t, kf = float(r["shardfeed_train_img_s"]), float(r["keras_folder_img_s"])  # type: ignore[arg-type]
    r["ratios"] = {
        "train_vs_ceiling": t / float(r["ceiling_train_img_s"]),  # type: ignore[arg-type]
        "train_vs_recipe": t / float(r["recipe_train_img_s"]),  # type: ignore[arg-type]
        "train_vs_keras_folder": t / kf,
        "train_resized256_vs_keras_folder": float(r["shardfeed_train_resized256_img_s"]) / kf,  # type: ignore[arg-type]
        "eval_vs_keras_folder": float(r["shardfeed_eval_img_s"]) / kf,  # type: ignore[arg-type]
        "eval_resized256_vs_keras_folder": float(r["shardfeed_eval_resized256_img_s"]) / kf,  # type: ignore[arg-type]
        "train_vs_libjpeg_limit": t / float(r["libjpeg_limit_img_s"]),  # type: ignore[arg-type]
    }
    emit(r, args.json)


if __name__ == "__main__":
    main()
