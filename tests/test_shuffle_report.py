"""The shuffle report shows a local shuffle of class-sorted shards as poor and a global one as good."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import zygote

from shardfeed import ConvertOptions, convert
from shardfeed.tools.shuffle_quality import batch_stats, ideal_stats


def test_batch_stats_on_known_batches() -> None:
    stats = batch_stats([[0, 0, 0, 0], [1, 1, 2, 3]])
    assert stats == {"classes_per_batch": 2.0, "label_entropy_bits": 0.75, "longest_same_label_run": 4.0}
    ideal = ideal_stats({"a": 50, "b": 50}, batch_size=8, batches=10)
    assert 1.9 < ideal["classes_per_batch"] <= 2.0


@pytest.mark.slow
def test_report_flags_local_shuffle_of_sorted_shards(digits_tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "sorted"
    convert(
        str(digits_tree), str(out), ConvertOptions(split="train=1", by_class=True, shards=1), workers=1, progress=False
    )
    base = [
        sys.executable,
        "-m",
        "shardfeed",
        "info",
        str(out),
        "--shuffle-report",
        "--batch-size",
        "16",
        "--batches",
        "10",
        "--json",
    ]
    local = json.loads(zygote.run([*base, "--shuffle-buffer", "16"], capture_output=True, text=True, check=True).stdout)
    assert local["pipeline"]["classes_per_batch"] < 0.6 * local["ideal"]["classes_per_batch"]
    assert local["pipeline"]["longest_same_label_run"] > 3 * local["ideal"]["longest_same_label_run"]
    globally = json.loads(zygote.run([*base, "--shuffle", "global"], capture_output=True, text=True, check=True).stdout)
    assert globally["mix_ratio"] > 0.85
    text = zygote.run([*base[:-1], "--shuffle-buffer", "16"], capture_output=True, text=True, check=True).stdout
    assert "POOR" in text and "classes per batch" in text
