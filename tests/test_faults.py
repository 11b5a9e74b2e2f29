"""Faults that used to hang: a shard deleted before or while a dataset is read ends in an error
naming it, in real processes with a timeout (issue 29, item 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import copy_tree

# Builds the dataset, then deletes one shard (after the plan was made: the file vanishes mid-run),
# then reads it to the end.
READER = """
import os, sys
from shardfeed import ReadOptions, load
from shardfeed.errors import tensorflow_message
folder, shuffle, skip = sys.argv[1], sys.argv[2], sys.argv[3] == "skip"
read = ReadOptions(shuffle=shuffle, skip_corrupt=skip) if shuffle == "buffer" else ReadOptions(shuffle=shuffle)
ds = load(folder, batch_size=8, image_size=16, seed=0, read=read, training=sys.argv[4] == "train")
os.remove(os.path.join(folder, "train-00001-of-00002"))
try:
    print("images", sum(int(b[0].shape[0]) for b in ds))
except Exception as e:
    print("error", tensorflow_message(e))
"""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize(("shuffle", "mode"), [("buffer", "train"), ("buffer", "eval"), ("global", "train")])
def test_a_shard_vanishing_mid_run_fails_naming_it(tmp_path: Path, digits_tree: Path, shuffle: str, mode: str) -> None:
    data = tmp_path / "data"
    assert _run("-m", "shardfeed", "convert", str(digits_tree), str(data), "--shards", "2", "-q").returncode == 0
    done = _run("-c", READER, str(data), shuffle, "no", mode)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("error") and "train-00001-of-00002" in done.stdout, done.stdout
    if shuffle == "buffer":
        assert "is missing" in done.stdout


def test_skip_corrupt_reads_the_rest_and_says_so(tmp_path: Path, digits_tree: Path) -> None:
    data = tmp_path / "data"
    assert _run("-m", "shardfeed", "convert", str(digits_tree), str(data), "--shards", "2", "-q").returncode == 0
    done = _run("-c", READER, str(data), "buffer", "skip", "eval")
    assert done.stdout.startswith("images") and int(done.stdout.split()[1]) > 0, done.stdout + done.stderr[-1000:]
    assert "skipped" in done.stderr and "train-00001-of-00002" in done.stderr


def test_a_shard_missing_before_load_is_refused_at_once(tmp_path: Path, digits_tree: Path) -> None:
    """load refuses before building anything; the CLI says it in one line (train, bench)."""
    data = tmp_path / "data"
    assert _run("-m", "shardfeed", "convert", str(digits_tree), str(data), "--shards", "2", "-q").returncode == 0
    (data / "train-00001-of-00002").unlink()
    for command in (["train", str(data), "--out", str(tmp_path / "run"), "--epochs", "1"], ["bench", str(data)]):
        done = _run("-m", "shardfeed", *command)
        assert done.returncode == 1, done.stderr[-2000:]
        assert "Traceback" not in done.stderr
        assert "1 of 2 shard files are missing" in done.stderr and "train-00001-of-00002" in done.stderr


# Runs `shardfeed convert ARGS` and prints its exit code and the peak resident memory (KiB) of
# the conversion's processes (RUSAGE_CHILDREN: the largest of them, pool workers included). The
# data segment is capped so that a regression fails this test instead of the machine.
PEAK_RSS = """
import resource, subprocess, sys
cap = 6 << 30
done = subprocess.run(
    [sys.executable, "-m", "shardfeed", "convert", *sys.argv[1:]],
    preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_DATA, (cap, cap)),
    capture_output=True, text=True,
)
sys.stderr.write(done.stderr)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def _peak_rss(source: Path, out: Path) -> tuple[int, int, str]:
    done = _run("-c", PEAK_RSS, str(source), str(out), "--workers", "2", "-q")
    code, peak = done.stdout.split()
    return int(code), int(peak), done.stderr


def test_hostile_inputs_are_reported_and_memory_stays_bounded(
    tmp_path: Path, photo_tree: Path, hostile: dict[str, bytes]
) -> None:
    """Image bombs, a FIFO, a device, a folder-link loop and a non-UTF-8 name among real photos:
    the conversion finishes, reports each with its reason, and peaks within 1.5x of the photos alone."""
    plain, mixed = copy_tree(photo_tree, tmp_path / "plain"), copy_tree(photo_tree, tmp_path / "mixed")
    for name, data in hostile.items():
        (mixed / "coffee" / name).write_bytes(data)
    os.mkfifo(mixed / "coffee" / "pipe.jpg")
    (mixed / "coffee" / "zero.jpg").symlink_to("/dev/zero")
    (mixed / "rocket" / "loop").symlink_to(mixed)
    os.close(os.open(os.fsencode(mixed / "rocket") + b"/caf\xe9.jpg", os.O_CREAT | os.O_WRONLY))
    code, plain_peak, err = _peak_rss(plain, tmp_path / "plain_out")
    assert code == 0, err[-2000:]
    code, mixed_peak, err = _peak_rss(mixed, tmp_path / "mixed_out")
    assert code == 0, err[-2000:]
    report = json.loads((tmp_path / "mixed_out" / "report.json").read_text())
    reasons = {row["file"]: row["reason"] for row in report["skipped"]}
    for name in hostile:
        assert f"coffee/{name}" in reasons, sorted(reasons)
        if "ztxt" not in name:
            assert reasons[f"coffee/{name}"].startswith("image too large: " + name.split("_")[2].split(".")[0])
    assert reasons["coffee/pipe.jpg"].startswith("not a regular file: a FIFO")
    assert reasons["coffee/zero.jpg"].startswith("not a regular file: a character device")
    assert reasons["rocket/loop"].startswith("folder link loops back")
    assert reasons["rocket/caf\\xe9.jpg"].startswith("file name is not valid UTF-8")
    assert mixed_peak <= 1.5 * plain_peak, (mixed_peak, plain_peak)
