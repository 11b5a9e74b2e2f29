"""The CLI in a real subprocess: exit codes, messages, and the API it wraps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from shardfeed.cli.main import main


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardfeed", *args], capture_output=True, text=True, timeout=300)


def test_convert_command(photo_tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    done = run_cli("convert", str(photo_tree), str(out), "--split", "train=0.75,val=0.25", "--shards", "2", "-q")
    assert done.returncode == 0, done.stderr
    assert "Wrote 44 of 44 images" in done.stdout and "val: 11 records in 2 shards" in done.stdout  # the result
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["settings"]["split"] == {"train": 0.75, "val": 0.25}
    again = run_cli("convert", str(photo_tree), str(out), "--split", "train=0.75,val=0.25", "--shards", "2", "-q")
    assert again.returncode == 0 and "nothing to do" in again.stdout


def test_csv_numpy_flags_map_onto_the_api(digits: tuple, tmp_path: Path) -> None:
    import numpy as np

    images, labels = digits
    np.save(tmp_path / "x.npy", images[:30])
    np.save(tmp_path / "y.npy", labels[:30])
    out = tmp_path / "o"
    assert main(["convert", str(tmp_path / "x.npy"), str(out), "--labels-file", str(tmp_path / "y.npy"),
                 "--array-encoding", "raw", "--class-names", ",".join("abcdefghij"), "-q"]) == 0  # fmt: skip
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["labels"][:2] == ["a", "b"] and manifest["settings"]["image"]["array_encoding"] == "raw"


def test_errors_exit_1_with_a_message_and_usage_errors_exit_2(photo_tree: Path, tmp_path: Path) -> None:
    bad = run_cli("convert", str(tmp_path / "missing"), str(tmp_path / "o"))
    assert bad.returncode == 1 and "does not exist or is not a folder" in bad.stderr
    assert "Traceback" not in bad.stderr
    usage = run_cli("convert", str(photo_tree))
    assert usage.returncode == 2 and "usage:" in usage.stderr
    bad_split = run_cli("convert", str(photo_tree), str(tmp_path / "o"), "--split", "train=0.5")
    assert bad_split.returncode == 1 and "add up to 0.5" in bad_split.stderr
    version = run_cli("--version")
    assert version.returncode == 0 and version.stdout.startswith("shardfeed ")
