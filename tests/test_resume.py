"""Exact mid-epoch resume: a real training process killed with SIGKILL during fit, then restarted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zygote

from shardfeed import ConvertOptions, IndexedRecords, convert
from shardfeed.training import read_resume_point

pytestmark = pytest.mark.slow  # training runs, fresh processes or servers: `make test`, not `make test-quick`

LOGGED_MODEL = """
import os, sys, time
import keras, shardfeed, shardfeed.training
data, run_dir, log = sys.argv[1], sys.argv[2], sys.argv[3]

@keras.saving.register_keras_serializable(package="test")
class Logged(keras.Model):
    '''Logs the file names of every batch it trains on (eagerly), slowly enough to be killed.'''
    def train_step(self, data):
        x, y, files = data
        with open(log, "a") as f:
            f.write(",".join(v.decode() for v in files.numpy()) + "\\n")
        time.sleep(float(os.environ.get("STEP_SECONDS", "0.15")))
        return super().train_step((x, y))

def build():
    inputs = keras.Input((16, 16, 3), dtype="uint8")
    x = keras.layers.Rescaling(1 / 255.0)(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = Logged(inputs, keras.layers.Dense(4, activation="softmax")(x))
    model.compile("adam", "sparse_categorical_crossentropy", run_eagerly=True)
    return model
"""


FINGERPRINTED = """
import os, signal, sys
import keras, numpy as np, shardfeed, shardfeed.training
data, run_dir, log, workers, index, kind, batch = sys.argv[1:8]
kill_at = int(os.environ.get("KILL_AT", "-1"))

class Fingerprinted(keras.Model):  # deliberately not registered with Keras: resume must not need it
    # logs each batch it trains on (file names, pixel sum); SIGKILLs its own process at step KILL_AT
    steps = 0
    def train_step(self, data):
        x, y, files = data
        if Fingerprinted.steps == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        Fingerprinted.steps += 1
        pixels = int(np.sum(x.numpy(), dtype=np.int64))
        with open(log, "a") as f:
            f.write(",".join(v.decode() for v in files.numpy()) + " " + str(pixels) + "\\n")
        return super().train_step((x, y))

def build():
    inputs = keras.Input((16, 16, 3), dtype="uint8")
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.Rescaling(1 / 255.0)(inputs))
    model = Fingerprinted(inputs, keras.layers.Dense(16, activation="softmax")(x))
    model.compile("adam", "sparse_categorical_crossentropy", run_eagerly=True)
    return model

read = shardfeed.ReadOptions(with_filenames=True, num_workers=int(workers), worker_index=int(index),
                             balance="class" if kind == "balance" else None)
source = shardfeed.Mixture(data.split("+"), weights=(0.75, 0.25), union_labels=True) if "+" in data else data
shardfeed.training.fit_resumable(build, source, run_dir, epochs=3, batch_size=int(batch), seed=7, save_every=3,
                                 image_size=16, read=read, verbose=0)
"""


@pytest.fixture(scope="module")
def all_train(photo_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The 44 photos, all in 'train' (a split of 44: a multiple of 4, not of 5)."""
    data = tmp_path_factory.mktemp("resume") / "data"
    convert(str(photo_tree), str(data), ConvertOptions(split="train=1", shards=3), workers=1, progress=False)
    return str(data)


def _fingerprints(
    data: str,
    run_dir: Path,
    log: Path,
    workers: int,
    index: int,
    kind: str,
    batch: int,
    kill_at: int | None,
    script: str = FINGERPRINTED,
) -> list[str]:
    """Runs the fingerprinting trainer (`script`) to its end, or until it kills itself at step
    `kill_at`; returns the batches it trained on."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    if kill_at is not None:
        env["KILL_AT"] = str(kill_at)
    argv = [data, str(run_dir), str(log), str(workers), str(index), kind, str(batch)]
    done = zygote.run([sys.executable, "-c", script, *argv], env=env, capture_output=True, text=True, timeout=300)
    expected = -signal.SIGKILL if kill_at is not None else 0
    assert done.returncode == expected, done.stderr[-3000:]
    lines = log.read_text().splitlines()
    log.unlink()
    return lines


@pytest.mark.parametrize(
    ("kind", "batch", "workers", "kill_points"),
    [
        ("global", 4, 1, (10,)),  # 44 records, 11 steps an epoch: the split is a multiple of the batch
        ("global", 5, 1, (6, 10, 15)),  # 8 steps (4 records dropped): after a snapshot, mid-epoch, last batch
        ("global", 5, 2, (5,)),  # 22 records a worker, 4 steps (2 dropped), each worker killed mid-epoch
        ("balance", 5, 1, (11,)),  # class-balanced epochs
        ("mixture", 5, 1, (13,)),  # 44 + 15 mixed records: 11 steps (4 dropped)
    ],
)
def test_killed_and_resumed_runs_train_on_the_uninterrupted_runs_batches(
    all_train: str, digit_shards: Path, tmp_path: Path, kind: str, batch: int, workers: int, kill_points: tuple[int]
) -> None:
    """A run SIGKILLed at step k and restarted trains on exactly the batches (records and
    augmented pixels) of an uninterrupted run, whatever the split size modulo the batch: the
    batches up to its last snapshot, then the resumed run's."""
    data = f"{all_train}+{digit_shards}" if kind == "mixture" else all_train
    for index in range(workers):
        ref = _fingerprints(data, tmp_path / f"ref-{index}", tmp_path / "log", workers, index, kind, batch, None)
        steps = len(ref) // 3
        assert len(ref) == 3 * steps and steps == {"global": 44 // workers, "balance": 44, "mixture": 59}[kind] // batch
        for epoch in range(3):  # no record twice within an epoch, unless balance repeats a class
            names = [n for line in ref[epoch * steps : (epoch + 1) * steps] for n in line.split()[0].split(",")]
            assert kind == "balance" or len(set(names)) == len(names)
        for kill_at in kill_points:
            run_dir = tmp_path / f"run-{index}-{kill_at}"
            first = _fingerprints(data, run_dir, tmp_path / "log", workers, index, kind, batch, kill_at)
            assert len(first) == kill_at
            point = read_resume_point(str(run_dir))
            assert point is not None
            resumed_from = point.epoch * steps + point.step
            assert kill_at - 3 <= resumed_from <= kill_at, (point, kill_at)
            second = _fingerprints(data, run_dir, tmp_path / "log", workers, index, kind, batch, None)
            assert first[:resumed_from] + second == ref, (kind, batch, workers, index, kill_at)


def test_global_stream_is_each_epochs_order_in_whole_batches(all_train: str) -> None:
    """load(repeat=True) in global order: epoch e's batches are the first steps_per_epoch x batch
    records of epoch e's order, whatever the remainder (none completed from the next epoch)."""
    from shardfeed import ReadOptions, load, steps_per_epoch

    steps = steps_per_epoch(all_train, batch_size=5)
    assert steps == 8
    read = ReadOptions(shuffle="global", with_filenames=True)
    ds = load(all_train, batch_size=5, image_size=8, seed=3, repeat=True, read=read)
    got = [[f.decode() for f in files.numpy()] for _, _, files in ds.take(3 * steps)]
    records = IndexedRecords(all_train, "train")
    names = [records.example(i)["image/filename"].decode() for i in range(len(records))]
    for epoch in range(3):
        order = [names[i] for i in records.order(seed=3, epoch=epoch)]
        assert got[epoch * steps : (epoch + 1) * steps] == [order[s : s + 5] for s in range(0, 40, 5)]


def test_buffer_stream_reads_every_record_once_per_epoch(all_train: str) -> None:
    """load(repeat=True) with the default buffer shuffle: each epoch's steps_per_epoch batches hold
    distinct records, and the next epoch starts on a fresh pass."""
    from shardfeed import ReadOptions, load

    ds = load(all_train, batch_size=5, image_size=8, seed=3, repeat=True, read=ReadOptions(with_filenames=True))
    got = [[f.decode() for f in files.numpy()] for _, _, files in ds.take(3 * 8)]
    for epoch in range(3):
        names = [n for batch in got[epoch * 8 : (epoch + 1) * 8] for n in batch]
        assert len(set(names)) == 40


@pytest.mark.parametrize(
    ("before", "after", "steps", "batch"), [(2, 3, 5, 2), (4, 1, 3, 3), (3, 2, 1, 5), (1, 4, 7, 2)]
)
def test_positions_left_after_n_workers_are_shared_by_m(before: int, after: int, steps: int, batch: int) -> None:
    """N workers that each read `steps` batches read a prefix of the epoch's order; M workers
    started at that prefix (start_record) read the rest: every position once (but the 'drop'
    remainder of fewer than M positions at the very end)."""
    from shardfeed.read.order import WorkerShare

    n = 103
    read_before = [WorkerShare(before, i, "drop").positions(n)[: steps * batch] for i in range(before)]
    consumed = before * steps * batch
    read_after = [WorkerShare(after, i, "drop").positions(n, consumed) for i in range(after)]
    seen = sorted(int(p) for part in read_before + read_after for p in part)
    assert seen == list(range(n - (n - consumed) % after))


ELASTIC = (
    LOGGED_MODEL
    + """
workers, index = int(sys.argv[4]), int(sys.argv[5])
read = shardfeed.ReadOptions(with_filenames=True, num_workers=workers, worker_index=index)
shardfeed.training.fit_resumable(build, data, run_dir, epochs=1, batch_size=2, seed=5, save_every=5,
                                 image_size=16, read=read, verbose=0)
"""
)


def test_two_workers_killed_mid_epoch_resume_as_three(photo_tree: Path, tmp_path: Path) -> None:
    """Two input workers (2 records a step each) are SIGKILLed after the step-5 snapshot; three
    workers resume from its resume.json: the epoch's 44 records are each trained on once."""
    import json
    import shutil

    data = tmp_path / "data"
    convert(str(photo_tree), str(data), ConvertOptions(split="train=1", shards=3), workers=1, progress=False)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", STEP_SECONDS="0.3")  # slow enough to stop both before step 10

    def start(workers: int, index: int, run_dir: Path) -> zygote.Forked:
        log = tmp_path / f"log-{workers}-{index}"
        cmd = [sys.executable, "-c", ELASTIC, str(data), str(run_dir), str(log), str(workers), str(index)]
        return zygote.popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def lines(workers: int, index: int) -> list[str]:
        log = tmp_path / f"log-{workers}-{index}"
        return log.read_text().splitlines() if log.exists() else []

    first = [start(2, i, tmp_path / f"run-{i}") for i in range(2)]
    deadline = time.monotonic() + 240
    state = tmp_path / "run-0" / "resume.json"
    while not (state.exists() and all(len(lines(2, i)) >= 6 for i in range(2))):
        assert time.monotonic() < deadline, "the first workers did not get to step 6"
        for proc in first:
            if proc.poll() is not None:
                pytest.fail(f"a worker ended before it was killed: {proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
        time.sleep(0.02)
    for proc in first:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    saved = json.loads(state.read_text())
    assert saved["epoch"] == 0 and saved["step"] == 5 and saved["num_workers"] == 2, saved
    assert saved["records_consumed"] == 20 and saved["global_batch"] == 4  # a document a person can read
    before = [batch for i in range(2) for batch in lines(2, i)[: saved["step"]]]
    for i in range(3):  # each new worker starts from the saved point
        shutil.copytree(tmp_path / "run-0", tmp_path / f"resumed-{i}")
    second = [start(3, i, tmp_path / f"resumed-{i}") for i in range(3)]
    for proc in second:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
    after = [batch for i in range(3) for batch in lines(3, i)]
    assert [len(lines(3, i)) for i in range(3)] == [4, 4, 4]  # (44 - 20) / 3 workers / 2 per batch
    names = [name for batch in before + after for name in batch.split(",")]
    records = IndexedRecords(str(data), "train")
    assert sorted(names) == sorted(records.example(i)["image/filename"].decode() for i in range(len(records)))
