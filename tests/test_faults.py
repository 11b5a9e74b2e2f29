"""Faults that used to hang: a shard deleted before or while a dataset is read ends in an error
naming it, in real processes with a timeout (issue 29, item 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


# Every command on a damaged copy of a converted folder, in-process in one child process (one
# TensorFlow start-up for the whole matrix): exit code and the end of what it printed, or
# "traceback" when an exception escaped the CLI.
COMMANDS = """
import contextlib, io, json, logging, sys, traceback
from shardfeed.cli.main import main

def commands(folder, work):
    return {
        "info": ["info", folder],
        "verify": ["verify", folder, "-q", "--workers", "1"],
        "show": ["show", folder, "-o", work + "/grid.png"],
        "report": ["report", folder, "-o", work + "/report.html", "--no-shuffle-check"],
        "bench": ["bench", folder, "--epochs", "1", "--rounds", "1", "--image-size", "16"],
        "train": ["train", folder, "--out", work + "/run", "--epochs", "1", "--image-size", "16"],
    }

out = {}
for folder in sys.argv[1:]:
    out[folder] = {}
    for name, argv in commands(folder + "/data", folder).items():
        logging.getLogger().handlers.clear()
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
            try:
                code = main(argv)
            except SystemExit as e:
                code = e.code
            except BaseException:
                code = "traceback"
                traceback.print_exc(file=err)
        out[folder][name] = [code, err.getvalue()[-1500:]]
print(json.dumps(out))
"""


def _edit_manifest(folder: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    path = folder / "manifest.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _first_shard(data: dict[str, Any]) -> dict[str, Any]:
    return data["splits"]["train"]["shards"][0]


def _count_raised(data: dict[str, Any]) -> None:
    """One shard's count raised by 4, and the split's totals with it: the manifest agrees with
    itself, not with the shard."""
    _first_shard(data)["num_records"] += 4
    data["splits"]["train"]["num_records"] += 4
    first_class = next(iter(data["splits"]["train"]["class_counts"]))
    data["splits"]["train"]["class_counts"][first_class] += 4


def _bytes_changed(data: dict[str, Any]) -> None:
    _first_shard(data)["num_bytes"] += 10
    data["splits"]["train"]["num_bytes"] += 10


SIZE = "bytes, the manifest says"
# damage -> (how to make it, {command: what its one-line error must say}); commands not listed
# may succeed (they do not read the damaged part) but must not end in a traceback.
DAMAGE: dict[str, tuple[Callable[[Path], None], dict[str, str]]] = {
    "split total edited": (
        lambda f: _edit_manifest(f, lambda d: d["splits"]["train"].__setitem__("num_records", 5)),
        dict.fromkeys(["info", "verify", "show", "report", "bench", "train"], "splits.train.num_records is 5"),
    ),
    "class counts edited": (
        lambda f: _edit_manifest(f, lambda d: d["splits"]["validation"]["class_counts"].__setitem__("0", 999)),
        dict.fromkeys(["info", "verify", "show", "report", "bench", "train"], "splits.validation.class_counts"),
    ),
    "shard count raised": (
        lambda f: _edit_manifest(f, _count_raised),
        {"info": "lists", "verify": "records read, the manifest says", "show": "lists", "report": "lists"}
        | dict.fromkeys(["bench", "train"], "is corrupt or truncated"),
    ),
    "shard bytes edited": (
        lambda f: _edit_manifest(f, _bytes_changed),
        dict.fromkeys(["info", "show", "report", "bench", "train"], SIZE) | {"verify": "file has"},
    ),
    "shard truncated": (
        lambda f: (f / "train-00000-of-00003").write_bytes((f / "train-00000-of-00003").read_bytes()[:5000]),
        dict.fromkeys(["info", "show", "report", "bench", "train"], SIZE) | {"verify": "truncated"},
    ),
    "shard emptied": (
        lambda f: (f / "train-00000-of-00003").write_bytes(b""),
        dict.fromkeys(["info", "show", "report", "bench", "train"], SIZE) | {"verify": "file has 0 bytes"},
    ),
    "shard deleted": (
        lambda f: (f / "train-00000-of-00003").unlink(),
        dict.fromkeys(["info", "show", "report", "bench", "train"], "shard files are missing")
        | {"verify": "shard file is missing"},
    ),
    "index line removed": (
        lambda f: (f / "index" / "train-00000-of-00003.idx").write_text(
            "".join((f / "index" / "train-00000-of-00003.idx").read_text().splitlines(keepends=True)[:-1])
        ),
        dict.fromkeys(["info", "show", "report"], "lists") | {"verify": "does not match the records"},
    ),
    "index file deleted": (
        lambda f: (f / "index" / "train-00000-of-00003.idx").unlink(),
        dict.fromkeys(["info", "show", "report"], "cannot be read") | {"verify": "is missing"},
    ),
    "manifest cut short": (
        lambda f: (f / "manifest.json").write_text((f / "manifest.json").read_text()[:300]),
        dict.fromkeys(["info", "verify", "show", "report", "bench", "train"], "is not valid JSON"),
    ),
    "unknown version": (
        lambda f: _edit_manifest(f, lambda d: d.__setitem__("version", 99)),
        dict.fromkeys(["info", "verify", "show", "report", "bench", "train"], "manifest version 99"),
    ),
    "splits removed": (
        lambda f: _edit_manifest(f, lambda d: d.pop("splits")),
        dict.fromkeys(["info", "verify", "show", "report", "bench", "train"], "field 'splits' is missing"),
    ),
}


@pytest.fixture(scope="module")
def damaged_results(digit_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every damage made to its own copy of a converted folder, then every command run on each
    (one child process for the whole matrix: one TensorFlow start-up)."""
    work = {damage: tmp_path_factory.mktemp("damaged") for damage in DAMAGE}
    for damage, (make, _) in DAMAGE.items():
        make(copy_tree(digit_shards, work[damage] / "data"))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, "-c", COMMANDS, *map(str, work.values())], capture_output=True, text=True, timeout=900, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    return {damage: results[str(work[damage])] for damage in DAMAGE}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_every_command_on_a_damaged_folder_says_what_is_wrong(damaged_results: dict[str, Any], damage: str) -> None:
    """Damage kind x command: one line naming the problem (exit 1) or a normal run; never a
    traceback, never a wrong answer printed as OK."""
    expected = DAMAGE[damage][1]
    for command, (code, err) in damaged_results[damage].items():
        assert code in (0, 1) and "Traceback" not in err, (command, code, err)
        if command in expected:
            assert code == 1 and expected[command] in err, (command, code, err)
