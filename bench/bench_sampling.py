"""What class-balanced reading and mixing cost, against load(shuffle="global") of one folder.

    .venv/bin/python bench/bench_sampling.py [--images 3000] [--rounds 5] [--json bench/results/bench_sampling.json]

All read by index in a seeded order (224x224 uint8, batch 64, training augmentation):
  global     one folder, shuffle="global" (the baseline);
  balanced   the same folder, balance="class": also reads every record's label once (kept in
             index/train.labels.npy) and builds each epoch's balanced order;
  mixed      Mixture([folder, second], weights=(0.75, 0.25)), the second folder a corpus of other
             photos whose classes are numbered in reverse, so every record taken from it has its
             label rewritten (the costly case).
Each run in a fresh process, rounds interleaved: best and median images/s, CPU ms per image, and
the ratios to `global` (target >= 0.95). The first label pass is timed on its own.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.bench_load import convert_once, measured
from bench.corpus import build_corpus
from bench.report import emit


def _reversed_classes(work: str, images: int) -> str:
    """A second converted corpus whose class names sort the other way round (z9_, z8_, ...), so
    the mixture's label map renumbers all of its records."""
    from shardfeed import ConvertOptions, convert

    out = os.path.join(work, f"mix_second{images}")
    if not os.path.exists(os.path.join(out, "manifest.json")):
        src = build_corpus(os.path.join(work, f"mix_corpus{images}"), images, seed=1)
        renamed = os.path.join(work, f"mix_renamed{images}")
        if not os.path.exists(renamed):
            os.makedirs(renamed)
            names = sorted(os.listdir(src))
            for i, name in enumerate(names):  # class_0 -> z9_class_0, ...: reversed sort order
                os.symlink(os.path.join(src, name), os.path.join(renamed, f"z{len(names) - 1 - i}_{name}"))
        convert(renamed, out, ConvertOptions(split="train=1", shards=8), progress=False)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "shardfeed_bench"))
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    from shardfeed import read_manifest
    from shardfeed.read.record_labels import record_labels
    from shardfeed.tools.pipelines import PipelineSpec as P

    os.makedirs(args.workdir, exist_ok=True)
    src = build_corpus(os.path.join(args.workdir, f"corpus{args.images}"), args.images)
    data = convert_once(src, os.path.join(args.workdir, f"keep{args.images}"), None)
    cached = os.path.join(data, "index", "train.labels.npy")
    if os.path.exists(cached):
        os.remove(cached)
    start = time.perf_counter()
    labels = record_labels(read_manifest(data), "train")
    first_pass = time.perf_counter() - start
    second = _reversed_classes(args.workdir, args.images // 3)
    specs = {
        "global": P("shardfeed", data, read={"shuffle": "global"}),
        "balanced": P("shardfeed", data, read={"balance": "class"}),
        "mixed": P("shardfeed", data, mix_with=[second], mix_weights=[0.75, 0.25]),
    }
    results: dict[str, Any] = {
        "bench": "sampling",
        "rounds": args.rounds,
        "cores": os.cpu_count(),
        "images": args.images,
        "label_pass": {"records": len(labels), "seconds": first_pass, "us_per_record": first_pass / len(labels) * 1e6},
        "load": measured(specs, args.rounds, "global"),
    }
    emit(results, args.json)


if __name__ == "__main__":
    main()
