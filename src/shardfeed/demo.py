"""`make demo`: the main job on built-in sample data, end to end."""

from __future__ import annotations

import logging
import os
import shutil
import sys

from shardfeed.convert import convert
from shardfeed.samples import write_digits_folders
from shardfeed.sources import UnlabeledSource

log = logging.getLogger("shardfeed.demo")


def run(workdir: str = "demo_out") -> int:
    """Builds real digit images on disk, converts them to shards, and prints what was written."""
    shutil.rmtree(workdir, ignore_errors=True)
    labeled, unlabeled = write_digits_folders(os.path.join(workdir, "images"))
    log.info("Sample data: scikit-learn digits as PNG files in %s (+ unlabeled %s)", labeled, unlabeled)
    shards = os.path.join(workdir, "shards")
    result = convert(labeled, shards, split="train=0.8,validation=0.2", shards=4, seed=0)
    log.info(result.summary())
    test = convert(UnlabeledSource(unlabeled), os.path.join(workdir, "unlabeled_shards"), progress=False)
    log.info(test.summary())
    log.info("Manifest: %s", os.path.join(shards, "manifest.json"))
    return 0


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    return run()


if __name__ == "__main__":
    raise SystemExit(main())
