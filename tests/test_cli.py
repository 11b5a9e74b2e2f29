"""The CLI in a real subprocess: exit codes, messages, and the API it wraps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.slow
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


def test_a_bug_keeps_its_traceback_and_says_it_is_one(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """Only what a user can fix (ShardfeedError, OSError) is one line: an unexpected ValueError
    from inside a library is a bug, raised with its traceback after a line saying so."""
    from shardfeed.cli import info_cmd
    from shardfeed.cli.main import BUG_LINE

    def broken(args: object) -> int:
        return int("not a number")  # a ValueError no user input explains

    monkeypatch.setattr(info_cmd, "run", broken)
    with pytest.raises(ValueError, match="invalid literal"):
        main(["info", str(tmp_path)])
    assert BUG_LINE in caplog.text
    monkeypatch.undo()
    caplog.clear()
    assert main(["info", str(tmp_path / "missing")]) == 1  # a user's mistake: one line, exit 1
    assert BUG_LINE not in caplog.text and "error:" in caplog.text
