"""`shardfeed bench PATH`: throughput of the load pipeline (and baselines with --compare-folder)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from shardfeed.cli.options import add_record_key_flags, from_args
from shardfeed.errors import OptionError
from shardfeed.read.options import BATCH_SIZE, IMAGE_SIZE, SHUFFLES, DecodeOptions, ReadOptions
from shardfeed.tools.benchmark import BREAKDOWN, bench, breakdown


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="measure load-pipeline throughput")
    p.add_argument("path", nargs="+", help="converted folder, or TFRecord files/globs another program wrote")
    p.add_argument("--split", default="train")
    p.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    p.add_argument("--image-size", type=int, default=IMAGE_SIZE)
    p.add_argument("--epochs", type=int, default=1, help="passes to time")
    p.add_argument(
        "--eval", dest="training", action="store_false", default=None, help="evaluation preprocessing (no augmentation)"
    )
    p.add_argument("--no-augment", dest="augment", action="store_false", default=None, help="no augmentation")
    p.add_argument("--shuffle", choices=SHUFFLES, default="buffer", help="training shuffle to measure (see `load`)")
    p.add_argument(
        "--compare-folder",
        metavar="SRC",
        help="also measure image_dataset_from_directory on SRC and the in-memory decode ceiling, and print ratios",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="with --compare-folder: runs of each pipeline, each in a fresh process, interleaved (default 3)",
    )
    p.add_argument(
        "--model",
        metavar="RUN_DIR_OR_MODEL",
        help="also time this model's training step on one in-memory batch and say whether input is the bottleneck "
        "(on a GPU host with DALI installed, the GPU decode path is measured beside load)",
    )
    p.add_argument(
        "--decode-on",
        choices=["cpu", "gpu"],
        default="cpu",
        help="measure TensorFlow's CPU decode (default) or NVIDIA DALI's nvJPEG on the GPU (`make dali`)",
    )
    p.add_argument("--service", help="read through a tf.data service dispatcher, grpc://HOST:PORT (shardfeed serve)")
    p.add_argument(
        "--breakdown",
        action="store_true",
        help="where load's CPU per training image goes: reading, parsing, the decode limit, load's per-record "
        "decode and what the pipeline adds, each stage in fresh processes (--rounds of each)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    add_record_key_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.breakdown:
        return _breakdown(args)
    net = _model(args.model) if args.model else None
    image_size = tuple(net.input_shape[1:3]) if net is not None else args.image_size
    read = from_args(ReadOptions, args, shuffle=args.shuffle)
    decode = DecodeOptions(decoder="dali") if args.decode_on == "gpu" else None
    result = bench(
        args.path[0] if len(args.path) == 1 else args.path,
        split=args.split,
        batch_size=args.batch_size,
        image_size=image_size,
        training=args.training,
        epochs=args.epochs,
        compare_folder=args.compare_folder,
        augment=args.augment,
        read=read,
        decode=decode,
        service=args.service,
        rounds=args.rounds,
        model=net,
        progress=_progress,  # a line as each measurement starts, on stderr (the result is stdout)
    )
    if net is not None:
        result["model"]["source"] = args.model
    print(json.dumps(result, indent=2) if args.json else format_bench(result))
    return 0


def _breakdown(args: argparse.Namespace) -> int:
    """`bench --breakdown`: the stages of BREAKDOWN and the CPU per image each part costs."""
    if len(args.path) != 1 or args.model or args.compare_folder or args.service or args.decode_on != "cpu":
        raise OptionError(
            "--breakdown takes one converted folder, without --model, --compare-folder, --service or --decode-on gpu"
        )
    result = breakdown(
        args.path[0],
        split=args.split,
        batch_size=args.batch_size,
        image_size=args.image_size,
        augment=args.augment,
        rounds=args.rounds,
        progress=_progress,
    )
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for kind, what in BREAKDOWN.items():
        t = result["stages"][kind]
        print(f"{kind:<15} {t['median_images_per_second']:7.0f} img/s  CPU {t['cpu_ms_per_image']:.3f} ms/img  {what}")
    print("CPU ms per image: " + ", ".join(f"{k} {v:.3f}" for k, v in result["cpu_ms_per_image"].items()))
    print(f"load's CPU per image is {result['load_over_decode_limit']:.2f}x the decode limit's")
    return 0


def _model(run_or_file: str) -> Any:
    """The model of a run folder (its model.keras) or a .keras file."""
    from shardfeed.training.models import load_model
    from shardfeed.training.run_folder import RunFolder

    return load_model(RunFolder(run_or_file).model_file() if os.path.isdir(run_or_file) else run_or_file)


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def format_bench(result: dict[str, Any]) -> str:
    def line(name: str, t: dict[str, Any]) -> str:
        if "median_images_per_second" in t:
            runs = len(t["runs"])
            return (
                f"{name:<28} median {t['median_images_per_second']:6.0f} img/s  best {t['best_images_per_second']:6.0f}"
                f"  CPU {t['cpu_ms_per_image']:.2f} ms/img  ({runs} fresh process{'es' if runs > 1 else ''})"
            )
        return (
            f"{name:<28} {t['images_per_second']:8.0f} img/s  {t['batches_per_second']:6.1f} batches/s  "
            f"warm-up {t['warmup_seconds']:.1f}s  CPU {t['cpu_cores_used']:.1f} cores"
        )

    lines = [line("shardfeed.load", result["shardfeed"])]
    names = {"dali": "load, DALI decode", "keras_folder": "image_dataset_from_directory"}
    for key, name in {**names, "decode_ceiling": "in-memory decode"}.items():
        if key in result:
            lines.append(line(name, result[key]))
    for key, ratio in result.get("ratios", {}).items():
        paired = f", {ratio['paired']:.2f}x paired round by round" if "paired" in ratio else ""
        lines.append(f"ratio {key}: {ratio['median']:.2f}x by median{paired}")
    if "verdict" in result:
        lines.append(f"model training step (one batch in memory) {result['model']['images_per_second']:8.0f} img/s")
        lines.append(result["verdict"])
    if "gpu_decode" in result:
        lines.append(result["gpu_decode"])
    return "\n".join(lines)
