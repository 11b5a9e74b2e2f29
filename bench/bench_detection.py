"""Detection benchmark: `load` on a converted detection folder against the pipelines Keras users
write, and COCO conversion against a class folder of the same images; every run in a fresh
process, rounds interleaved.

    .venv/bin/python bench/bench_detection.py [--images 2000] [--rounds 3] [--coco-sized]
        [--json bench/results/bench_detection.json]

Corpus: the benchmark's real-photo JPEGs (bench/corpus.py, 200-500 px; `--coco-sized`: 640 px on the
long side, as COCO's own), each with 1-4 solid squares pasted at seeded places that never overlap
(known boxes), written three ways: a Pascal VOC folder (XML, JPEGImages/), a COCO instances.json
over the same files, and a class-per-folder tree of them.

load (512 x 512, batch 16, training: random-resized crop + flip; tools/detection_pipelines.py):
  shardfeed         `load` on the VOC folder converted with `shardfeed convert` (16 shards)
  keras_hub_voc     KerasHub's RetinaNet guide's pipeline on the VOC folder (resize + pad, no
                    augmentation, as the guide)
  keras_layers_voc  the same with Keras' box-aware RandomCrop and RandomFlip
Whether each pipeline's boxes are right is checked too: the corpus's squares are solid colours,
so a box is right when the pixels inside it are its square's colour (`boxes_on_squares`).

convert: `convert instances.json` vs `convert` of the class folder (the same JPEGs, 16 shards).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from typing import Any

import numpy as np
from PIL import Image

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.bench_convert import cpu_timed, shardfeed_run
from bench.corpus import build_coco_sized_corpus, build_corpus
from bench.report import emit

COLOURS = {"red": (230, 20, 20), "green": (20, 200, 40), "blue": (20, 40, 230)}


def build_detection_corpus(root: str, count: int, coco_sized: bool = False) -> dict[str, str]:
    """The corpus with squares pasted, as VOC, COCO and class folders (re-used when present);
    `coco_sized`: cut from 640 px photos (`build_coco_sized_corpus`) instead of 200-500 px crops."""
    paths = {k: os.path.join(root, k) for k in ("voc", "classes")}
    paths["coco"] = os.path.join(paths["voc"], "instances.json")  # file_names relative to it: JPEGImages/...
    if os.path.exists(paths["coco"]):
        return paths
    plain = (build_coco_sized_corpus if coco_sized else build_corpus)(os.path.join(root, "plain"), count)
    rng = np.random.default_rng(0)
    os.makedirs(os.path.join(paths["voc"], "Annotations"), exist_ok=True)
    os.makedirs(os.path.join(paths["voc"], "JPEGImages"), exist_ok=True)
    names = list(COLOURS)
    images, annotations = [], []
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(plain) for f in fs)
    for number, path in enumerate(files, start=1):
        pixels = np.asarray(Image.open(path).convert("RGB")).copy()
        h, w = pixels.shape[:2]
        objects: list[tuple[str, int, int, int]] = []
        for _ in range(int(rng.integers(1, 5))):
            side = int(rng.integers(24, min(h, w) // 2))
            x, y = int(rng.integers(0, w - side)), int(rng.integers(0, h - side))
            name = names[int(rng.integers(0, len(names)))]
            if any(x < ox + os_ and ox < x + side and y < oy + os_ and oy < y + side for _, ox, oy, os_ in objects):
                continue  # squares never overlap: each box holds its own square's colour only
            pixels[y : y + side, x : x + side] = COLOURS[name]
            objects.append((name, x, y, side))
        file_name = f"{number:06d}.jpg"
        Image.fromarray(pixels).save(os.path.join(paths["voc"], "JPEGImages", file_name), quality=95)
        xml = "".join(
            f"<object><name>{n}</name><difficult>0</difficult><bndbox><xmin>{x + 1}</xmin><ymin>{y + 1}</ymin>"
            f"<xmax>{x + s}</xmax><ymax>{y + s}</ymax></bndbox></object>"
            for n, x, y, s in objects
        )
        with open(os.path.join(paths["voc"], "Annotations", f"{number:06d}.xml"), "w") as f:
            f.write(
                f"<annotation><filename>{file_name}</filename><size><width>{w}</width>"
                f"<height>{h}</height></size>{xml}</annotation>"
            )
        images.append({"id": number, "file_name": f"JPEGImages/{file_name}", "width": w, "height": h})
        annotations += [
            {
                "id": len(annotations) + i + 1,
                "image_id": number,
                "category_id": names.index(n) + 1,
                "bbox": [x, y, s, s],
                "area": s * s,
                "iscrowd": 0,
            }
            for i, (n, x, y, s) in enumerate(objects)
        ]
        folder = os.path.join(paths["classes"], f"class{number % 10}")
        os.makedirs(folder, exist_ok=True)
        os.link(os.path.join(paths["voc"], "JPEGImages", file_name), os.path.join(folder, file_name))
    categories = [{"id": i + 1, "name": n} for i, n in enumerate(names)]
    with open(paths["coco"], "w") as f:
        json.dump({"images": images, "annotations": annotations, "categories": categories}, f)
    return paths


def boxes_on_squares(images: np.ndarray, boxes: np.ndarray, labels: np.ndarray, yxyx: bool) -> tuple[int, int]:
    """(boxes checked, boxes whose inside is their square's colour) for one batch: a box's inner
    pixels (a pixel in from each edge) must be within 40 of the colour, on average."""
    colours = [COLOURS[n] for n in sorted(COLOURS)]
    checked = right = 0
    for image, image_boxes, image_labels in zip(images, boxes, labels, strict=True):
        for box, label in zip(image_boxes, image_labels, strict=True):
            if label < 0:
                continue
            y0, x0, y1, x1 = box if yxyx else (box[1], box[0], box[3], box[2])
            inner = image[int(np.ceil(y0)) + 1 : int(y1) - 1, int(np.ceil(x0)) + 1 : int(x1) - 1]
            if inner.size == 0:
                continue
            checked += 1
            right += int(np.abs(inner.astype(int) - colours[int(label)]).max(axis=-1).mean() < 40)
    return checked, right


def box_check(spec: Any, batches: int = 20) -> dict[str, Any]:
    """The share of a pipeline's boxes that lie on their squares, over its first batches."""
    from shardfeed.tools.pipelines import build

    checked = right = 0
    for images, targets in build(spec).take(batches):
        c, r = boxes_on_squares(
            images.numpy(), targets["boxes"].numpy(), targets["labels"].numpy(), yxyx=spec.kind != "shardfeed"
        )
        checked, right = checked + c, right + r
    return {"boxes_checked": checked, "boxes_on_their_squares": right, "share": round(right / max(checked, 1), 4)}


def loads(paths: dict[str, str], work: str, rounds: int) -> dict[str, Any]:
    from shardfeed import ConvertOptions, convert
    from shardfeed.tools.fresh_runs import compare, ratio
    from shardfeed.tools.pipelines import PipelineSpec as P

    shards = os.path.join(work, "voc_shards")
    if not os.path.exists(os.path.join(shards, "manifest.json")):
        convert(paths["voc"], shards, ConvertOptions(split="train=1", shards=16), progress=False)
    common = {"batch_size": 16, "image_size": (512, 512), "training": True}
    specs = {
        "shardfeed": P("shardfeed", shards, **common),
        "keras_hub_voc": P("keras_hub_voc", paths["voc"], **common),
        "keras_layers_voc": P("keras_layers_voc", paths["voc"], **common),
    }
    results = compare(specs, rounds=rounds, progress=lambda m: print(m, file=sys.stderr, flush=True))
    for name, r in results.items():
        r["vs_shardfeed"] = ratio(results["shardfeed"], r)  # > 1: shardfeed is faster
        r["boxes"] = box_check(specs[name])
    return results


def conversions(paths: dict[str, str], work: str, images: int, rounds: int) -> dict[str, Any]:
    out = os.path.join(work, "convert_out")
    runs = {
        "coco_json": lambda: shardfeed_run(paths["coco"], out, split="train=1", shards=16)["seconds"],
        "class_folder": lambda: shardfeed_run(paths["classes"], out, split="train=1", shards=16)["seconds"],
    }
    rates: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    for round_number in range(rounds):
        for name, run in runs.items():
            seconds, cpu_seconds = cpu_timed(run)
            rates[name].append(images / seconds)
            cpu[name].append(1000 * cpu_seconds / images)
            print(f"round {round_number + 1}/{rounds}: convert {name} {images / seconds:.0f} img/s", file=sys.stderr)
    out_rates = {
        k: {"best_img_s": max(v), "median_img_s": statistics.median(v), "cpu_ms_per_image": statistics.median(cpu[k])}
        for k, v in rates.items()
    }
    paired = statistics.median(a / b for a, b in zip(rates["coco_json"], rates["class_folder"], strict=True))
    return {"img_s": out_rates, "coco_vs_class_folder_paired": paired}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "shardfeed_bench_detection"))
    parser.add_argument("--only", choices=("load", "convert"))
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument(
        "--coco-sized", action="store_true", help="images the size of COCO's (640 px long side) instead of 200-500 px"
    )
    args = parser.parse_args()
    load_before = os.getloadavg()
    corpus = f"corpus{args.images}" + ("_coco_sized" if args.coco_sized else "")
    paths = build_detection_corpus(os.path.join(args.workdir, corpus), args.images, args.coco_sized)
    results: dict[str, Any] = {
        "images": args.images,
        "image_size": "640 px long side (COCO's)" if args.coco_sized else "200-500 px",
        "cores": os.cpu_count(),
        "rounds": args.rounds,
    }
    if args.only in (None, "load"):
        results["load"] = loads(paths, args.workdir, args.rounds)
    if args.only in (None, "convert"):
        results["convert"] = conversions(paths, args.workdir, args.images, args.rounds)
    results["load_average"] = {"before": load_before, "after": os.getloadavg()}
    emit({"bench": "detection", **results}, args.json)


if __name__ == "__main__":
    main()
