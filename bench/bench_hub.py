"""A Hugging Face dataset, two ways: `datasets`' own TensorFlow path against `shardfeed.load` after
converting it, and converting it from Parquet against converting the same images as a folder.

    .venv/bin/python bench/bench_hub.py [--images 4000] [--rounds 3] [--json bench/results/bench_hub.json]

The images: real-photo JPEGs (bench/corpus.py), written by the `datasets` library as a
DatasetDict (`Image` and `ClassLabel` features, image bytes) with `save_to_disk`, and as
Hub-layout Parquet (`to_parquet`). Training reads at 224 px, batch 64, one epoch of the train
split after 2 warm-up batches, each pipeline in a fresh process, rounds interleaved:
`hf_tf_dataset` (load_from_disk + a decode/random-crop/flip transform + to_tf_dataset, as the
`datasets` docs do it) and `shardfeed` (`load` on the converted folder, augmentation on). Then
`shardfeed convert` of the Parquet folder and of the image folder (fresh processes,
interleaved; the staging of the Parquet images included).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.corpus import build_corpus
from bench.report import emit
from shardfeed.tools.fresh_runs import ratio, run_fresh, summary
from shardfeed.tools.pipelines import PipelineSpec


def _hub_copies(folder: str, work: Path) -> tuple[str, str]:
    """The image folder as a save_to_disk DatasetDict and as Hub-layout Parquet (train only)."""
    import datasets

    classes = sorted(p.name for p in Path(folder).iterdir())
    files = sorted(Path(folder).rglob("*.jpg"))
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=classes)})
    table = datasets.Dataset.from_dict(
        {
            "image": [{"bytes": f.read_bytes(), "path": None} for f in files],
            "label": [classes.index(f.parent.name) for f in files],
        },
        features=features,
    )
    saved, hub = work / "saved", work / "hub"
    shutil.rmtree(saved, ignore_errors=True)
    shutil.rmtree(hub, ignore_errors=True)
    datasets.DatasetDict({"train": table}).save_to_disk(str(saved))
    (hub / "data").mkdir(parents=True)
    table.to_parquet(str(hub / "data" / "train-00000-of-00001.parquet"))
    return str(saved), str(hub)


def _convert(source: str, out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "shardfeed", "convert", source, str(out), "--shards", "16", "-q", "--no-report"]
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "XDG_CACHE_HOME": str(out) + ".cache"})
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", default="/tmp/bench_hub")
    parser.add_argument("--json")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    folder = build_corpus(str(work / "images"), args.images)
    saved, hub = _hub_copies(folder, work)
    converted = work / "converted"
    _convert(saved, converted)
    specs = {
        "hf_tf_dataset": PipelineSpec("hf_tf_dataset", saved),
        "shardfeed": PipelineSpec("shardfeed", str(converted), read={"drop_remainder": True}),
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in specs}
    for r in range(args.rounds):
        for name, spec in specs.items() if r % 2 == 0 else reversed(specs.items()):
            print(f"round {r}: {name}", file=sys.stderr, flush=True)
            runs[name].append(run_fresh(spec))
    reads = {name: summary(rs) for name, rs in runs.items()}
    reads["shardfeed"]["vs_hf_tf_dataset"] = ratio(reads["shardfeed"], reads["hf_tf_dataset"])
    converts: dict[str, list[float]] = {"parquet": [], "folder": []}
    for r in range(args.rounds):
        for name, source in (
            (("parquet", hub), ("folder", folder)) if r % 2 == 0 else (("folder", folder), ("parquet", hub))
        ):
            print(f"round {r}: convert the {name}", file=sys.stderr, flush=True)
            converts[name].append(_convert(source, work / f"out-{name}"))
    emit(
        {
            "bench": "hub",
            "images": args.images,
            "rounds": args.rounds,
            "reads": reads,
            "convert_wall_s": {
                name: {"best": min(w), "median": statistics.median(w), "runs": w} for name, w in converts.items()
            },
        },
        args.json,
    )


if __name__ == "__main__":
    main()
