"""Golden outputs: SHA-256 of every file a set of conversions writes, and of the batches `load` yields.

A refactor that promises "no change of behaviour" is checked by running this on the code before
and after and comparing the two JSON files:

    .venv/bin/python bench/golden.py --out /tmp/golden > before.json   # at the old commit
    .venv/bin/python bench/golden.py --out /tmp/golden > after.json    # at the new one
    diff before.json after.json                                         # nothing: same bytes

Conversions run through the CLI (whose flags are stable); reads through `shardfeed.load` with the
settings users type every day, plus global order, even splits and evaluation preprocessing. Each
annotated task (multi-label, segmentation, detection: the shapes corpora of bench/corpus.py) too:
its shards, `load`'s batches (augmented training, evaluation, letterboxed), `grain_dataset`'s
and `IndexedRecords`' targets, the twins a move of the task code must keep equal.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import build_corpus, build_segmentation_corpus, build_shapes_coco_corpus, build_tagged_corpus

CONVERSIONS = {
    "keep": [],
    "resize": ["--resize", "48", "--center-crop", "40", "--format", "jpeg", "--quality", "90"],
    "by_class": ["--by-class", "--shards", "2", "--seed", "3"],
    "gzip": ["--compression", "gzip", "--label-offset", "1", "--shards", "train=3,validation=1"],
    "dedupe": ["--dedupe", "--split", "train=0.7,validation=0.2,test=0.1", "--no-stratify"],
}


def digest_folder(folder: Path) -> dict[str, str]:
    """SHA-256 of every file below `folder`, by relative path."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def convert(source: Path, out: Path, flags: list[str]) -> dict[str, str]:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "shardfeed", "convert", str(source), str(out), "-q", "--workers", "2", *flags]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return digest_folder(out)


def load_digests(path: str) -> dict[str, str]:
    """Hashes of the first batches of several load settings."""
    import shardfeed

    cases: dict[str, dict[str, Any]] = {
        "train_seeded": {"seed": 0},
        "eval": {"split": "validation"},
        "float_gray": {"split": "validation", "dtype": "float32", "channels": 1, "crop_fraction": 1.0},
        "global": {"seed": 1, "shuffle": "global"},
        "global_resumed": {"seed": 1, "shuffle": "global", "epoch": 2, "start_step": 1},
        "even_pad": {"seed": 2, "even": "pad", "num_workers": 3, "worker_index": 1},
        "filenames": {"split": "validation", "with_filenames": True},
    }
    out = {}
    for name, options in cases.items():
        ds = _load(shardfeed, path, options)
        h = hashlib.sha256()
        for batch in ds.take(3):
            for part in batch if isinstance(batch, tuple) else (batch,):
                array = np.asarray(part)
                h.update(b"\0".join(array.tolist()) if array.dtype == object else array.tobytes())
        out[name] = h.hexdigest()
    return out


def _load(shardfeed: Any, path: str, options: dict[str, Any]) -> Any:
    """`load` through whichever signature this version has (flat keywords, or config objects)."""
    daily = {"split", "seed", "batch_size", "image_size", "training"}
    kwargs = {"batch_size": 16, "image_size": 64, **{k: v for k, v in options.items() if k in daily}}
    rest = {k: v for k, v in options.items() if k not in daily}
    if "read" not in inspect.signature(shardfeed.load).parameters:
        return shardfeed.load(path, **kwargs, **rest)
    decode_fields = {"dtype", "channels", "crop_fraction"}
    read_options = getattr(shardfeed, "ReadOptions", None) or shardfeed.ReadConfig  # the name before 0.2
    decode_options = getattr(shardfeed, "DecodeOptions", None) or shardfeed.DecodeConfig
    decode = decode_options(**{k: v for k, v in rest.items() if k in decode_fields})
    read = read_options(**{k: v for k, v in rest.items() if k not in decode_fields})
    return shardfeed.load(path, **kwargs, read=read, decode=decode)


TASK_CORPORA = {
    "multi_label": (lambda root: build_tagged_corpus(root, 48), ["--multi-label"]),
    "segmentation": (lambda root: build_segmentation_corpus(root, 48), []),
    "detection": (lambda root: build_shapes_coco_corpus(root, 48), []),
}
TASK_READS: dict[str, dict[str, Any]] = {
    "train": {"seed": 0, "training": True},
    "eval": {"split": "validation", "training": False},
    "letterbox": {"split": "validation", "training": False, "letterbox": True},
}


def _digest(batches: Any) -> str:
    """SHA-256 of every array of `batches` (tuples and dicts of arrays, in key order)."""
    h = hashlib.sha256()

    def add(part: Any) -> None:
        if isinstance(part, dict):
            for key in sorted(part):
                add(part[key])
        elif isinstance(part, tuple | list):
            for item in part:
                add(item)
        else:
            array = np.asarray(part)
            h.update(str((array.dtype, array.shape)).encode() + array.tobytes())

    for batch in batches:
        add(batch)
    return h.hexdigest()


def task_digests(work: Path) -> dict[str, Any]:
    """Each annotated task's shards, and the batches `load` and `grain_dataset` make of them."""
    import shardfeed

    out: dict[str, Any] = {}
    for task, (build, flags) in TASK_CORPORA.items():
        source = Path(build(str(work / f"{task}_source")))
        folder = work / task
        split = ["--split", "train=0.75,validation=0.25", "--no-report"]
        out[task] = {"shards": convert(source, folder, [*flags, *split])}
        for name, options in TASK_READS.items():
            decode = shardfeed.DecodeOptions(letterbox=options.get("letterbox", False))
            ds = shardfeed.load(
                str(folder),
                split=options.get("split", "train"),
                seed=options.get("seed"),
                training=options["training"],
                batch_size=8,
                image_size=(40, 56),  # not square: a letterbox pads, boxes and masks move into its frame
                decode=decode,
            )
            out[task][f"load_{name}"] = _digest(ds.take(3).as_numpy_iterator())
            try:
                grain = shardfeed.grain_dataset(
                    str(folder),
                    split=options.get("split", "train"),
                    seed=options.get("seed"),
                    training=options["training"],
                    batch_size=8,
                    image_size=(40, 56),
                    letterbox=options.get("letterbox", False),
                    num_threads=1,
                )
            except ImportError:
                continue
            out[task][f"grain_{name}"] = _digest(list(grain)[:3])
        records = shardfeed.IndexedRecords(str(folder), "train")
        out[task]["indexed"] = _digest(records[i] for i in range(8))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/shardfeed-golden", help="work folder")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    work = Path(args.out)
    photos = Path(build_corpus(str(work / "photos"), 240, classes=4))
    # an exact copy and a PNG, so dedupe and re-encoding have something to do
    first = sorted((photos / "class00").iterdir())[0]
    shutil.copy(first, photos / "class01" / "copy_of_first.jpg")
    Image.open(first).save(photos / "class02" / "as_png.png")
    result: dict[str, Any] = {}
    for name, flags in CONVERSIONS.items():
        result[name] = convert(photos, work / name, flags)
    result["load"] = load_digests(str(work / "keep"))
    result["tasks"] = task_digests(work)
    print(json.dumps(result, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
