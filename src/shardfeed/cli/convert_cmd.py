"""`shardfeed convert SRC OUT`: write a dataset as sharded TFRecords with a manifest."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from shardfeed.cli.options import add_pixel_limit_flag, from_args, image_fields
from shardfeed.errors import OptionError
from shardfeed.format import layout
from shardfeed.format.schema import PRESETS
from shardfeed.write.convert import convert
from shardfeed.write.images import ARRAY_ENCODINGS, CHECKS, IMAGE_FORMATS, ImageOptions
from shardfeed.write.options import LABEL_CONFLICT_RULES, ConvertOptions
from shardfeed.write.sources import resolve_source
from shardfeed.write.sources.coco_root import looks_like_coco_root

log = logging.getLogger("shardfeed")

DEDUPE_KINDS = ("exact", "near")  # a bare --dedupe is the first (cli/main.py `joined_flag_values`)


def near_radius(text: str) -> int | str:
    """`--near-radius`: a bit count or 'off'."""
    if text.strip().lower() == "off":
        return "off"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of bits (0..7) or 'off', got {text!r}") from None


def register(sub: Any) -> None:
    p = sub.add_parser(
        "convert",
        help="write a dataset as sharded TFRecords",
        description="Write an image dataset as sharded TFRecords with a manifest.",
    )
    p.add_argument(
        "source",
        help="class-per-folder tree, CSV/TSV list, .npz/.npy arrays, Hugging Face Parquet or save_to_disk "
        "folder, or WebDataset tars (a .tar, a folder of them, or a {000000..000009} pattern)",
    )
    p.add_argument("output", help="output folder (local path, or a bucket URL: s3://, gs://, az://)")
    _input_flags(p.add_argument_group("input"))
    _split_flags(p.add_argument_group("splits and shards"))
    _duplicate_flags(p.add_argument_group("duplicates and label conflicts"))
    _image_flags(p.add_argument_group("images"))
    _run_flags(p.add_argument_group("run"))
    p.set_defaults(run=run, interrupted="run the same command again to resume: finished shards are kept")


def _input_flags(g: Any) -> None:
    """How the source is read (the source object's options)."""
    g.add_argument(
        "--dry-run",
        action="store_true",
        help="print the recognised layout, classes, images per split, objects and skipped files; write nothing",
    )
    g.add_argument(
        "--labels-from",
        choices=["folders", "filenames", "none"],
        default="folders",
        help="for a folder: class per sub-folder (default), label in the file name, or unlabeled",
    )
    g.add_argument(
        "--label-pattern",
        help="regex with one group taking the label from a file name "
        "(default: text before the first dot, as in cat.123.jpg)",
    )
    g.add_argument("--path-column", default="path", help="CSV: column with image paths (default: path)")
    g.add_argument(
        "--label-column",
        help="CSV: column with labels (default: label); Parquet/Arrow: the label column (default: the ClassLabel "
        "feature, else a column named label, class, ...; none: unlabeled)",
    )
    g.add_argument("--image-column", help="Parquet/Arrow: the image column (default: the Image feature, or 'image')")
    g.add_argument(
        "--outside-files",
        "--outside-images",
        dest="outside_files",
        action="store_true",
        default=None,
        help="also read files the data places outside the dataset's folder: images Parquet/Arrow rows name by "
        "absolute path, '../' or URL, and the images, VOC XMLs, YOLO label files and masks that links lead out "
        "to (off: a dataset from elsewhere could name any file or server; --outside-images: the old name)",
    )
    g.add_argument(
        "--image-ext",
        help="WebDataset: the image member's extensions, first present wins (default: jpg;png;jpeg;webp)",
    )
    g.add_argument("--label-ext", help="WebDataset: the label member's extension, an integer id as text (default: cls)")
    g.add_argument("--label-field", help="WebDataset: take the label from this field of each sample's .json instead")
    g.add_argument("--split-column", help="CSV: column with split names (default: 'split' if present)")
    g.add_argument(
        "--multi-label",
        action="store_true",
        help="CSV: the label column holds several class names per image (multi-label records: image/class/label "
        "a list of ids; load gives k-hot [B, K])",
    )
    g.add_argument("--label-separator", help="CSV --multi-label: between the names of one cell (default ';')")
    g.add_argument("--labels-file", help="NumPy: labels .npy for an images .npy")
    g.add_argument("--images-key", help="NumPy .npz: name of the images array")
    g.add_argument(
        "--images", help="COCO annotations (.json): the folder its file_names are in (default: the .json's folder)"
    )
    g.add_argument(
        "--masks",
        action="store_true",
        help="COCO annotations: also store each object's polygons or RLE as its instance mask (image/object/mask; "
        "needs pycocotools: pip install 'shardfeed[coco]')",
    )
    g.add_argument("--labels-key", help="NumPy .npz: name of the labels array")
    g.add_argument(
        "--class-names",
        help="NumPy, WebDataset: class names for labels 0..K-1, comma-separated or a file with one per line",
    )


def _split_flags(g: Any) -> None:
    """ConvertOptions: splits, order and shards."""
    g.add_argument("--split", help="fractions, e.g. train=0.8,validation=0.2 (default; test=1 when unlabeled)")
    g.add_argument(
        "--custom-split-names",
        action="store_true",
        default=None,
        help="allow --split names that look like misspellings of train/validation/test/... (refused otherwise)",
    )
    g.add_argument(
        "--no-stratify",
        dest="stratify",
        action="store_false",
        default=None,
        help="split without keeping class proportions",
    )
    g.add_argument("--seed", type=int, help="seeds split assignment and record order (default 0)")
    g.add_argument("--shards", help="shards per split: N, or train=16,validation=4")
    g.add_argument("--shard-size", help="target shard size, e.g. 128MB (default: mean shard <= 200 MB)")
    g.add_argument("--by-class", action="store_true", help="one shard set per class")
    g.add_argument(
        "--name-template",
        help=f"shard names, default '{layout.SHARD_TEMPLATE}'; TF-slim readers find "
        "'flowers_{split}_{shard:05d}-of-{num_shards:05d}.tfrecord' (docs/interop.md)",
    )
    g.add_argument(
        "--schema",
        choices=sorted(PRESETS),
        help="write the layout other readers expect: inception (labels 1..K, JPEG), tfds (image/label keys), "
        "recipe (image/class keys, .tfrec, JPEG); see docs/interop.md",
    )
    g.add_argument("--compression", choices=["gzip"], help="compress shards")
    g.add_argument(
        "--label-offset",
        type=int,
        help="the first class id written (default: 1 for detection, 0 left for the background as Model Garden and "
        "the OD API read them; 0 otherwise, as Keras and TFDS do; 1 for Inception's readers). shardfeed's readers "
        "subtract it",
    )
    g.add_argument(
        "--split-rule",
        choices=["stratified", "hash"],
        help="stratified (default): exact split sizes, class proportions kept; hash: each image's split from its "
        "key alone, so it keeps its split when the dataset grows (needed by --append)",
    )
    g.add_argument(
        "--append",
        action="store_true",
        default=None,
        help="add the source's new images to a finished conversion as a new generation of shards (old shards "
        "untouched; converted with --split-rule hash or from a pre-split source)",
    )
    g.add_argument(
        "--checksum",
        action="store_true",
        default=None,
        help="with --append: re-read every converted image to find changed bytes, not only those whose size or "
        "modification time changed",
    )


def _duplicate_flags(g: Any) -> None:
    """Copies, near-copies and the same image under two labels: what is dropped or kept apart."""
    g.add_argument(
        "--dedupe",
        nargs="?",
        const=DEDUPE_KINDS[0],
        choices=DEDUPE_KINDS,
        help="drop duplicate images, keeping the first of each set: exact (the default) byte-for-byte copies; "
        "near: also near-copies (re-encoded, resized, slightly cropped; see --near-radius)",
    )
    g.add_argument(
        "--label-conflicts",
        choices=LABEL_CONFLICT_RULES,
        help="the same image under different labels (exact or near copies): keep every copy, reported (the "
        "default); drop every copy; first: keep the first file's copy and label, drop the others",
    )
    g.add_argument(
        "--split-groups",
        choices=["near"],
        help="near: put every image of a near-duplicate group in one split, so validation holds no near-copy of "
        "a training image (split sizes and class counts kept by swapping ungrouped images; hashes every image "
        "before the split)",
    )
    g.add_argument(
        "--near-radius",
        type=near_radius,
        metavar="BITS",
        help="report images whose perceptual hashes differ in at most this many of 64 bits as near-duplicates "
        "(report.json, with leaks across splits); 0..7, default 6; 'off' to not look",
    )


def _image_flags(g: Any) -> None:
    """ImageOptions: checks and write-time transforms."""
    g.add_argument("--resize", type=int, help="resize so the shorter side is this many pixels")
    g.add_argument("--max-size", type=int, help="shrink so the longer side is at most this")
    g.add_argument("--center-crop", type=int, help="centre square crop of this size (after resize)")
    g.add_argument(
        "--format",
        dest="image_format",
        choices=IMAGE_FORMATS,
        help="keep source bytes (default) or re-encode all",
    )
    g.add_argument("--quality", type=int, help=f"JPEG quality when re-encoding (default {ImageOptions.quality})")
    g.add_argument(
        "--check",
        choices=CHECKS,
        help="decode every image to prove it reads (default) or check headers only (faster)",
    )
    g.add_argument(
        "--array-encoding",
        choices=ARRAY_ENCODINGS,
        help="NumPy images: PNG (default) or raw bytes",
    )
    add_pixel_limit_flag(g)


def _run_flags(g: Any) -> None:
    """How the conversion runs (never what it writes)."""
    g.add_argument("--workers", type=int, help="encoding processes (default: all cores)")
    g.add_argument("--strict", action="store_true", help="fail on the first unusable input")
    g.add_argument("--overwrite", action="store_true", help="replace a conversion with other settings")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    g.add_argument("--no-report", action="store_true", help="do not write OUT/report.html (`shardfeed report`)")
    g.add_argument(
        "--runner",
        choices=["local", "beam", "dask"],
        default="local",
        help="local process pool (default), an Apache Beam pipeline (pip install 'shardfeed[beam]'), or that "
        "pipeline on a Dask cluster (--dask-address; pip install 'shardfeed[dask]')",
    )
    g.add_argument(
        "--dask-address",
        metavar="tcp://HOST:PORT",
        help="with --runner dask: the Dask scheduler (`dask scheduler`); its workers must reach SOURCE and OUT",
    )
    g.add_argument(
        "--beam-options",
        help='Beam pipeline flags, e.g. "--runner=DataflowRunner --project=P '
        '--region=R --temp_location=gs://B/tmp" (default: local DirectRunner)',
    )


def _beam_options(args: argparse.Namespace) -> str | None:
    """--beam-options, with --dask-address as Beam's DaskRunner option."""
    if args.dask_address and args.runner != "dask":
        raise OptionError("--dask-address applies with --runner dask")
    dask = f"--dask_client_address={args.dask_address}" if args.dask_address else ""
    return " ".join(filter(None, [args.beam_options, dask])) or None


def _source_options(args: argparse.Namespace) -> dict[str, Any]:
    lower = args.source.lower()
    if lower.endswith((".csv", ".tsv")):
        csv_options = {
            "path_column": args.path_column,
            "label_column": args.label_column or "label",
            "split_column": args.split_column,
        }
        if args.multi_label:
            csv_options |= {"multi_label": True, "label_separator": args.label_separator or ";"}
        elif args.label_separator:
            raise OptionError("--label-separator applies with --multi-label")
        return csv_options
    if lower.endswith((".npz", ".npy")):
        names = args.class_names.split(",") if args.class_names else None
        return {
            "labels_path": args.labels_file,
            "images_key": args.images_key,
            "labels_key": args.labels_key,
            "class_names": names,
        }
    if lower.endswith(".json"):
        return {"container_options": {"images": args.images, "masks": args.masks, "outside_files": args.outside_files}}
    if args.images:
        raise OptionError("--images applies to COCO annotations (a .json source); a COCO root finds its own")
    if args.masks and not looks_like_coco_root(args.source):
        raise OptionError("--masks applies to COCO annotations (a .json source, or a COCO root folder)")
    names_given = args.class_names
    if names_given and not os.path.exists(names_given):
        names_given = names_given.split(",")
    label_column = args.label_column
    return {
        "container_options": {
            "image_column": args.image_column,
            "outside_files": args.outside_files,
            "label_column": "" if label_column == "none" else label_column,
            "image_exts": args.image_ext,
            "label_ext": args.label_ext,
            "label_field": args.label_field,
            "class_names": names_given,
            "masks": args.masks,
        }
    }


def run(args: argparse.Namespace) -> int:
    source = resolve_source(
        args.source,
        labels_from=args.labels_from,
        label_pattern=args.label_pattern,
        **_source_options(args),
    )
    if args.dry_run:
        from shardfeed.write.sources.layouts import recognise
        from shardfeed.write.survey import survey

        seen = recognise(args.source) if args.labels_from == "folders" else None
        print(survey(source, seen).summary(), flush=True)
        return 0
    near = {"near_radius": None} if args.near_radius == "off" else {}
    options = from_args(ConvertOptions, args, image=from_args(ImageOptions, args, **image_fields(args)), **near)
    result = convert(
        source,
        args.output,
        options,
        strict=args.strict,
        workers=args.workers,
        overwrite=args.overwrite,
        runner=args.runner,
        beam_options=_beam_options(args),
        progress=not args.quiet,
    )
    print(result.summary(), flush=True)  # the command's result: stdout (progress and logs: stderr)
    if not args.no_report:
        from shardfeed.cli.report_cmd import write_dataset_report

        print(f"  report: {write_dataset_report(args.output)}")
    return 0
