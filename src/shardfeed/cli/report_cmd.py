"""`shardfeed report PATH [-o FILE]`: an HTML page about a converted folder or a training run."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from shardfeed.errors import OptionError
from shardfeed.format import fileio

log = logging.getLogger("shardfeed")


def register(sub: Any) -> None:
    p = sub.add_parser("report", help="write an HTML report of a converted folder or a training run")
    p.add_argument("path", help="converted folder, or a training run folder (with run.json)")
    p.add_argument("-o", "--output", help="default PATH/report.html (in the bucket, for a folder in one)")
    p.add_argument(
        "--data",
        help="a run: the converted folder to evaluate it on (default: the one it was trained on; give a "
        "bucket URL again with its credentials when the environment has none)",
    )
    p.add_argument(
        "--no-shuffle-check",
        action="store_true",
        help="skip the shuffle-quality figures for class-sorted (--by-class) folders (they run the pipeline)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from shardfeed.training.run_folder import RunFolder

    if RunFolder(args.path).is_run():
        from shardfeed.training.run_report import run_report

        output = run_report(args.path, args.output, path=args.data)
    else:
        if args.data:
            raise OptionError("--data is for a training run's report; PATH is a converted folder")
        output = write_dataset_report(args.path, args.output, shuffle_check=not args.no_shuffle_check)
    log.info("report: %s (%s KB)", output, f"{fileio.size_and_mtime(output)[0] / 1024:,.0f}")
    return 0


def write_dataset_report(path: str, output: str | None = None, *, shuffle_check: bool = False) -> str:
    """The dataset report; for a class-sorted folder (and `shuffle_check`) with the shuffle figures."""
    from shardfeed.format import manifest
    from shardfeed.tools.dataset_report import dataset_report

    m = manifest.read(path)
    extra = ""
    if shuffle_check and m.settings.get("by_class") and m.labels and "train" in m.split_names:
        extra = _shuffle_section(path)
    return dataset_report(path, output, extra=extra)


def _shuffle_section(path: str) -> str:
    from shardfeed.tools import html_page as h
    from shardfeed.tools.shuffle_quality import shuffle_report

    r = shuffle_report(path, split="train")
    rows = [
        [h.esc(name), f"{r['pipeline'][key]:.2f}", f"{r['ideal'][key]:.2f}"]
        for key, name in (
            ("classes_per_batch", "classes per batch"),
            ("label_entropy_bits", "label entropy (bits)"),
            ("longest_same_label_run", "longest same-label run"),
        )
    ]
    note = f"first {r['batches']} training batches of {r['batch_size']}, class-sorted shards (--by-class)"
    return h.section("Shuffle quality", f'<p class="note">{h.esc(note)}</p>', h.table(["", "pipeline", "ideal"], rows))
