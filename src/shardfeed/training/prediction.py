"""predict: class names and top-k probabilities for a folder of images (or unlabeled shards);
a multi-label run's label sets at its thresholds and every class's score; a segmentation run's
masks; a detection run's boxes (CSV and COCO's results JSON).

A folder of images is first converted (to a temporary folder, unlabeled) with the same checks as
`convert`, so odd images (CMYK, EXIF-rotated, PNG named .jpg...) are handled the same way and
unusable files get a row with the reason instead of stopping the run. Images then get exactly the
evaluation preprocessing the run was trained with.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from typing import Any

import numpy as np
from tqdm import tqdm

from shardfeed.deprecation import renamed
from shardfeed.format import layout, manifest
from shardfeed.format.image_limits import DEFAULT_MAX_PIXELS
from shardfeed.format.schema import DETECTION, MULTI_LABEL, SEGMENTATION
from shardfeed.read.indexed import IndexedRecords
from shardfeed.read.options import DecodeOptions, ReadOptions
from shardfeed.read.shardset import is_converted_folder
from shardfeed.tools.preview import keep_first
from shardfeed.training.detection_metrics import coco_results
from shardfeed.training.detector import box_rows, predicted_boxes
from shardfeed.training.inputs import RunInputs
from shardfeed.training.models import load_model, model_class_names, predicted
from shardfeed.training.run_folder import MODEL, RunFolder, RunRecord
from shardfeed.training.segmentation import draw_masks, predicted_masks
from shardfeed.write.convert import convert
from shardfeed.write.images import ImageOptions
from shardfeed.write.options import ConvertOptions
from shardfeed.write.sources import UnlabeledSource


@renamed(output_csv="output")
def predict(
    run_dir: str,
    source: str,
    output: str = "predictions.csv",
    *,
    top_k: int = 3,
    split: str | None = None,
    grid: str | None = None,
    grid_size: int = 16,
    batch_size: int | None = None,
    model_file: str = MODEL,
    workers: int | None = None,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
) -> list[dict[str, Any]]:
    """Predicts every image of `source` and writes one CSV row per input file.

    Columns: file, class, probability, then class_2/probability_2 ... up to top_k (at most the
    number of classes), and error
    (why a file could not be read; its other columns are empty). A multi-label run's rows
    are: file, labels (the classes scored at or above the run's thresholds, `;` between
    them), one `score:<class>` column per class, and error. A segmentation run's: file, mask
    (its PNG of class ids, the file's size, in the folder OUTPUT_masks beside the CSV: the image
    is letterboxed whole into the model and the mask cut back out), classes (those it shows).
    A detection run's: a row per box, file, class, score, xmin, ymin, xmax, ymax in the file's
    own pixels (the image read whole at the model's size, as it trained; the boxes scaled back;
    a file with no box gets a row with none), and
    the same boxes as COCO's results document, OUTPUT_coco.json.

    Args:
        run_dir: a training run folder.
        source: a folder of images, or a converted folder (its `split`, default its only/first one).
        output: the CSV file written (old name `output_csv=`).
        grid: also draw the first `grid_size` images with their predicted classes to this PNG.
        max_pixels: larger images get a row with the reason and are never decoded (None: no limit).
    """
    folder = RunFolder(run_dir)
    record = folder.read_record()
    net = load_model(folder.model_file(model_file))
    names = record.class_names if record.task == DETECTION else model_class_names(net)
    thresholds = folder.read_thresholds(names).values if record.task == MULTI_LABEL else None
    with tempfile.TemporaryDirectory(prefix="shardfeed-predict-") as tmp:
        data = source
        if not is_converted_folder(source):
            data = os.path.join(tmp, "shards")
            options = ConvertOptions(image=ImageOptions(max_pixels=max_pixels))
            convert(UnlabeledSource(source), data, options, workers=workers, progress=False)
        m = manifest.read(data)
        split = split or ("test" if "test" in m.split_names else m.split_names[0])
        if record.task == SEGMENTATION:
            return _masks(net, record, m, split, names, output, batch_size, grid, grid_size)
        if record.task == DETECTION:
            return _boxes(net, record, m, split, names, output, batch_size, grid, grid_size)
        ds = record.inputs(m).evaluation(split, batch_size=batch_size, read=ReadOptions(with_filenames=True))
        rows: list[dict[str, Any]] = []
        shown: list[tuple[str, Any, str]] = []  # the grid: the first files in the CSV's order (keep_first)
        bar = tqdm(total=m.split(split).num_records, unit="img", desc="predict", disable=None)
        for batch in ds:
            images, files = batch[0], batch[-1]
            probs = predicted(net, images)
            bar.update(len(probs))
            for i, p in enumerate(probs):
                file = files[i].numpy().decode()
                rows.append(_row(file, p, names, top_k) if thresholds is None else _tags(file, p, names, thresholds))
                if grid:
                    keep_first(shown, (file, images[i], _caption(rows[-1])), grid_size)
        bar.close()
        rows += [{"file": s["file"], "error": s["reason"]} for s in _skipped(data)]
    rows.sort(key=lambda r: r["file"])
    _write_csv(output, rows, _columns(names, min(top_k, len(names)), tagged=thresholds is not None))
    if grid:
        from shardfeed.read.pixels import to_rgb
        from shardfeed.tools.preview import Tile

        tiles = [
            Tile(file, caption, to_rgb(np.asarray(img))) for file, img, caption in sorted(shown, key=lambda t: t[0])
        ]
        _draw(tiles, grid, f"predictions of {os.path.basename(run_dir)}")
    return rows


def _draw(tiles: list[Any], grid: str, title: str) -> None:
    """`predict`'s grid: the tiles four to a row (fewer when there are fewer) under `title`."""
    from shardfeed.tools.preview import draw_grid

    cols = min(4, max(1, len(tiles)))
    draw_grid(tiles, max(1, -(-len(tiles) // cols)), cols, grid, title)


def _masks(
    net: Any,
    record: RunRecord,
    m: manifest.Manifest,
    split: str,
    names: list[str],
    output: str,
    batch_size: int | None,
    grid: str | None,
    grid_size: int,
) -> list[dict[str, Any]]:
    """`predict` for a segmentation run (training/segmentation.py): masks as PNGs in the folder
    OUTPUT_masks beside the CSV, whose rows name them."""
    decode = DecodeOptions(channels=record.channels, letterbox=True)
    inputs = RunInputs(m, record.batch_size, record.image_size, decode=decode)
    masks_dir = os.path.splitext(output)[0] + "_masks"
    limit = grid_size if grid else 0
    rows, shown = predicted_masks(net, inputs, IndexedRecords(m, split), split, names, masks_dir, batch_size, limit)
    rows += [{"file": s["file"], "error": s["reason"]} for s in _skipped(m.path)]
    rows.sort(key=lambda r: r["file"])
    _write_csv(output, rows, ["file", "mask", "classes", "error"])
    if grid:
        draw_masks(sorted(shown, key=lambda t: t[0]), names, grid)
    return rows


def _boxes(
    net: Any,
    record: RunRecord,
    m: manifest.Manifest,
    split: str,
    names: list[str],
    output: str,
    batch_size: int | None,
    grid: str | None,
    grid_size: int,
) -> list[dict[str, Any]]:
    """`predict` for a detection run (training/detector.py): a CSV row per box in the file's own
    pixels, and the same boxes as COCO's results document (OUTPUT_coco.json: image ids 1..n in
    the CSV's file order, category ids class id + 1, bbox [x, y, width, height])."""
    limit = grid_size if grid else 0
    placed, tiles = predicted_boxes(net, record.inputs(m), IndexedRecords(m, split), split, names, batch_size, limit)
    rows = [row for name, found in placed for row in box_rows(name, found, names)]
    rows += [{"file": s["file"], "error": s["reason"]} for s in _skipped(m.path)]
    rows.sort(key=lambda r: (r["file"], -r.get("score", 0.0)))
    _write_csv(output, rows, ["file", "class", "score", "xmin", "ymin", "xmax", "ymax", "error"])
    files = sorted({r["file"] for r in rows})  # image ids 1..n in the CSV's file order
    ids = {file: i for i, file in enumerate(files, start=1)}
    results = coco_results([found for _, found in placed], [ids[name] for name, _ in placed])
    for result in results:
        result["file_name"] = files[result["image_id"] - 1]
    with open(os.path.splitext(output)[0] + "_coco.json", "w") as f:
        json.dump(results, f)
    if grid:
        _draw(tiles, grid, f"detections of {os.path.basename(output)}")
    return rows


def _caption(row: dict[str, Any]) -> str:
    """A grid tile's caption: the file's name and its prediction."""
    said = (row["labels"] or "(none)") if "labels" in row else f"{row['class']} ({row['probability']:.2f})"
    return f"{_short(row['file'])}\n{said}"


def _short(file: str, width: int = 24) -> str:
    """A file name that fits under a grid tile: its end, where names differ."""
    return file if len(file) <= width else "..." + file[-(width - 3) :]


def _row(file: str, p: np.ndarray, names: list[str], top_k: int) -> dict[str, Any]:
    order = np.argsort(-p)[: min(top_k, len(names))]
    row: dict[str, Any] = {"file": file, "class": names[order[0]], "probability": float(p[order[0]])}
    for rank, index in enumerate(order[1:], start=2):
        row[f"class_{rank}"] = names[index]
        row[f"probability_{rank}"] = float(p[index])
    return row


def _tags(file: str, p: np.ndarray, names: list[str], thresholds: list[float]) -> dict[str, Any]:
    """A multi-label row: the classes at or above their thresholds, and every class's score."""
    chosen = [name for name, score, t in zip(names, p, thresholds, strict=True) if score >= t]
    return {"file": file, "labels": ";".join(chosen), **{f"score:{n}": float(v) for n, v in zip(names, p, strict=True)}}


def _skipped(data: str) -> list[dict[str, str]]:
    path = os.path.join(data, layout.REPORT)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(json.load(f)["skipped"])


def _columns(names: list[str], top_k: int, *, tagged: bool) -> list[str]:
    """The CSV's columns: the top-k classes, or (multi-label) the label set and each class's score."""
    if tagged:
        return ["file", "labels", *(f"score:{n}" for n in names), "error"]
    columns = ["file", "class", "probability"]
    for rank in range(2, top_k + 1):
        columns += [f"class_{rank}", f"probability_{rank}"]
    return [*columns, "error"]


def _write_csv(path: str, rows: list[dict[str, Any]], columns: list[str]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6f}" if isinstance(v, float) else v) for k, v in row.items()})
