"""A Hugging Face dataset, two ways: `datasets`' own TensorFlow path against `shardfeed.load` after
converting it, and converting it from Parquet against converting the same images as a folder.

    .venv/bin/python bench/bench_hub.py [--images 4000] [--rounds 3] [--only convert] [--json FILE]

The images: real-photo JPEGs (bench/corpus.py), written by the `datasets` library as a
DatasetDict (`Image` and `ClassLabel` features, image bytes) with `save_to_disk`, and as
Hub-layout Parquet (`to_parquet`). Training reads at 224 px, batch 64, one epoch of the train
split after 2 warm-up batches, each pipeline in a fresh process, rounds interleaved:
`hf_tf_dataset` (load_from_disk + a decode/random-crop/flip transform + to_tf_dataset, as the
`datasets` docs do it) and `shardfeed` (`load` on the converted folder, augmentation on). Then
`shardfeed convert` of the Parquet folder (image pages uncompressed, as `datasets` writes them: read
in place), of the same Parquet snappy-compressed in row groups of 100 (older files, pyarrow's
default: staged), of the save_to_disk folder (Arrow: read in place), of the image folder, and of the
same images as
WebDataset tars (4 uncompressed tars, `NNNNNN.jpg` + `NNNNNN.cls`: read in place) and gzipped
(`.tar.gz`: staged as files), fresh processes, interleaved, the staging included.
`--only convert` skips the reads.
"""

from __future__ import annotations

import argparse
import io
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


def _snappy_parquet(hub: str, work: Path) -> str:
    """The Hub Parquet rewritten as older `datasets` versions and pyarrow's defaults write it:
    snappy-compressed pages, row groups of 100 images (staged, not read in place)."""
    import pyarrow.parquet as pq

    out = work / "hub-snappy"
    shutil.rmtree(out, ignore_errors=True)
    (out / "data").mkdir(parents=True)
    name = "data/train-00000-of-00001.parquet"
    pq.write_table(pq.read_table(f"{hub}/{name}"), out / name, compression="snappy", row_group_size=100)
    return str(out)


def _tars(folder: str, work: Path, gzipped: bool) -> str:
    """The image folder as 4 WebDataset tars (sorted order, class ids in .cls members)."""
    import tarfile

    classes = sorted(p.name for p in Path(folder).iterdir())
    files = sorted(Path(folder).rglob("*.jpg"))
    out = work / ("webdataset-gz" if gzipped else "webdataset")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for t in range(4):
        name = out / (f"train-{t:06d}.tar" + (".gz" if gzipped else ""))
        with tarfile.open(name, "w:gz" if gzipped else "w") as archive:
            for i in range(t, len(files), 4):
                archive.add(files[i], f"{i:06d}.jpg")
                label = str(classes.index(files[i].parent.name)).encode()
                info = tarfile.TarInfo(f"{i:06d}.cls")
                info.size = len(label)
                archive.addfile(info, io.BytesIO(label))
    return str(out)


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
    parser.add_argument("--only", choices=("convert",))
    parser.add_argument("--json")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    folder = build_corpus(str(work / "images"), args.images)
    saved, hub = _hub_copies(folder, work)
    reads = {} if args.only == "convert" else _reads(saved, work, args.rounds)
    sources = {"parquet": hub, "arrow": saved, "folder": folder, "webdataset": _tars(folder, work, False)}
    sources["parquet-snappy"] = _snappy_parquet(hub, work)
    sources["webdataset-gz"] = _tars(folder, work, True)
    converts: dict[str, list[float]] = {name: [] for name in sources}
    for r in range(args.rounds):
        for name, source in list(sources.items())[:: 1 if r % 2 == 0 else -1]:
            print(f"round {r}: convert the {name}", file=sys.stderr, flush=True)
            converts[name].append(_convert(source, work / f"out-{name}"))
    walls = {name: {"best": min(w), "median": statistics.median(w), "runs": w} for name, w in converts.items()}
    for name in sources:
        walls[name]["folder_over_it"] = walls["folder"]["median"] / walls[name]["median"]
    emit(
        {
            "bench": "hub",
            "images": args.images,
            "rounds": args.rounds,
            "load_average": os.getloadavg(),
            "reads": reads,
            "convert_wall_s": walls,
        },
        args.json,
    )


def _reads(saved: str, work: Path, rounds: int) -> dict[str, Any]:
    """`datasets`' TensorFlow path against `load` on the converted folder, rounds interleaved."""
    converted = work / "converted"
    _convert(saved, converted)
    specs = {
        "hf_tf_dataset": PipelineSpec("hf_tf_dataset", saved),
        "shardfeed": PipelineSpec("shardfeed", str(converted), read={"drop_remainder": True}),
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in specs}
    for r in range(rounds):
        for name, spec in specs.items() if r % 2 == 0 else reversed(specs.items()):
            print(f"round {r}: {name}", file=sys.stderr, flush=True)
            runs[name].append(run_fresh(spec))
    reads = {name: summary(rs) for name, rs in runs.items()}
    reads["shardfeed"]["vs_hf_tf_dataset"] = ratio(reads["shardfeed"], reads["hf_tf_dataset"])
    return reads


if __name__ == "__main__":
    main()
