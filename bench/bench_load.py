"""Load benchmark: shardfeed.load against the baselines a user would try, every run in a fresh process.

    .venv/bin/python bench/bench_load.py [--images 4000] [--large 300] [--rounds 3] \
        [--json bench/results/bench_load.json]

Pipelines (shardfeed.tools.pipelines; 224x224 uint8, batch 64), each measured `--rounds` times,
one fresh process per run, rounds interleaved (A B C ..., A B C ...): best and median images/s
and CPU ms per image.

  photos    real-photo JPEGs (200-500 px, bench/corpus.py), 16 shards kept as bytes and again
            with --resize 256: load (training, evaluation), the plain per-record tf.data
            pipeline on the same shards, the in-memory decode ceiling,
            image_dataset_from_directory; parsing only (40 passes a run) vs raw TFRecordDataset
            reading, and vs the raw reader followed by the same parsing.
  large     phone-sized JPEGs (2,000-4,032 px, 3-12 MP): load with and without DCT scaling,
            the ceiling and Keras.
  sizes     the large photos stored with --resize 256 / 320 / 384 and as kept bytes: what
            training reads per second from each.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.corpus import build_corpus, build_large_corpus
from bench.report import emit


def convert_once(src: str, out: str, resize: int | None) -> str:
    from shardfeed import ConvertOptions, ImageOptions, convert

    if not os.path.exists(os.path.join(out, "manifest.json")):
        shutil.rmtree(out, ignore_errors=True)
        image = ImageOptions(resize=resize) if resize else ImageOptions()
        convert(src, out, ConvertOptions(split="train=1", shards=16, image=image), progress=False)
    return out


def measured(specs: dict[str, Any], rounds: int, *baselines: str) -> dict[str, Any]:
    """The specs' summaries, each with its ratios (median, paired, best) to every baseline."""
    from shardfeed.tools.fresh_runs import compare, ratio

    results = compare(specs, rounds=rounds, progress=lambda m: print(m, file=sys.stderr, flush=True))
    for baseline in baselines:
        for r in results.values():
            r["vs_" + baseline] = ratio(r, results[baseline])
    return results


def photos(work: str, images: int, rounds: int) -> dict[str, Any]:
    from shardfeed.tools.pipelines import PipelineSpec as P

    src = build_corpus(os.path.join(work, f"corpus{images}"), images)
    keep = convert_once(src, os.path.join(work, f"keep{images}"), None)
    small = convert_once(src, os.path.join(work, f"r256_{images}"), 256)
    train = {
        "shardfeed": P("shardfeed", keep),
        "shardfeed_resize256_shards": P("shardfeed", small),
        "plain_tfdata": P("plain_tfdata", keep),
        "decode_ceiling": P("decode_ceiling", src),
        "keras_folder": P("keras_folder", src),
    }
    evaluation = {
        "shardfeed": P("shardfeed", keep, training=False),
        "shardfeed_resize256_shards": P("shardfeed", small, training=False),
        "plain_tfdata": P("plain_tfdata", keep, training=False),
        "decode_ceiling": P("decode_ceiling", src, training=False),
        "keras_folder": P("keras_folder", src, training=False),
    }
    parsing = {kind: P(kind, keep, epochs=40) for kind in ("parse", "raw_parse", "raw_read")}
    return {
        "training": measured(train, rounds, "shardfeed"),
        "evaluation": measured(evaluation, rounds, "shardfeed"),
        "parsing_records": measured(parsing, rounds, "raw_read", "raw_parse"),
    }


def large(work: str, images: int, rounds: int) -> dict[str, Any]:
    from shardfeed.tools.pipelines import PipelineSpec as P

    src = build_large_corpus(os.path.join(work, f"large{images}"), images)
    keep = convert_once(src, os.path.join(work, f"large_keep{images}"), None)
    epochs = max(1, 600 // images)
    specs = {
        "shardfeed": P("shardfeed", keep, epochs=epochs),
        "shardfeed_no_dct_scaling": P("shardfeed", keep, epochs=epochs, decode={"dct_scaling": False}),
        "decode_ceiling": P("decode_ceiling", src, epochs=epochs),
        "keras_folder": P("keras_folder", src, epochs=epochs),
    }
    evaluation = {name: P(**{**vars(s), "training": False}) for name, s in specs.items()}
    sizes = {
        f"resize{size}" if size else "keep": P(
            "shardfeed",
            convert_once(src, os.path.join(work, f"large_r{size}_{images}"), size) if size else keep,
            epochs=epochs,
        )
        for size in (256, 320, 384, None)
    }
    return {
        "training": measured(specs, rounds, "shardfeed"),
        "evaluation": measured(evaluation, rounds, "shardfeed"),
        "shard_sizes": measured(sizes, rounds, "keep"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=4000)
    parser.add_argument("--large", type=int, default=300, help="phone-sized photos for the large and sizes parts")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--part", choices=("all", "photos", "large"), default="all")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "shardfeed_bench"))
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    results: dict[str, Any] = {"bench": "load", "rounds": args.rounds, "cores": os.cpu_count()}
    if args.part in ("all", "photos"):
        results["photos"] = {"images": args.images, **photos(args.workdir, args.images, args.rounds)}
    if args.part in ("all", "large"):
        results["large"] = {"images": args.large, **large(args.workdir, args.large, args.rounds)}
    emit(results, args.json)


if __name__ == "__main__":
    main()
