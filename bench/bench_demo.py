"""`make demo` over several training seeds: whether the main job clears its gate by a margin.

    .venv/bin/python bench/bench_demo.py [--seeds 0,1,2,3,4] [--work DIR]
                                         [--json bench/results/bench_demo.json]

Each seed is `python -m shardfeed.training.demo --seed N` in a fresh process (the split is the
same for every seed, so scikit-learn's SVC() baseline is one figure); its result.json gives the
validation accuracy of the model as saved (the last epoch's weights), the SVC's, and whether the
demo passed (>= 0.99 and >= the SVC). Reported: each seed, the mean, the lowest, and the number
of validation images the lowest seed is above 0.99 by.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.report import emit

VALIDATION_IMAGES = 339  # the demo's validation split (20% of 1,697 digits)


def run_seed(seed: int, work: str) -> dict[str, Any]:
    """One demo run in a fresh process; its result.json plus the exit code and wall time."""
    folder = os.path.join(work, f"seed-{seed}")
    start = time.monotonic()
    command = [sys.executable, "-m", "shardfeed.training.demo", "--seed", str(seed), "--workdir", folder]
    code = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False).returncode
    with open(os.path.join(folder, "result.json")) as f:
        result = dict(json.load(f))
    return {**result, "exit_code": code, "wall_seconds": round(time.monotonic() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--work", default="/tmp/bench_demo")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    runs = [run_seed(int(seed), args.work) for seed in args.seeds.split(",")]
    accuracies = [r["validation_accuracy"] for r in runs]
    lowest = min(accuracies)
    emit(
        {
            "runs": runs,
            "mean_accuracy": statistics.mean(accuracies),
            "lowest_accuracy": lowest,
            "svc_accuracy": runs[0]["svc_accuracy"],
            "all_passed": all(r["passed"] for r in runs),
            "lowest_margin_images": round(lowest * VALIDATION_IMAGES) - math.ceil(0.99 * VALIDATION_IMAGES),
            "load_average": os.getloadavg(),
        },
        args.json,
    )


if __name__ == "__main__":
    main()
