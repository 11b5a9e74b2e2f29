"""The first mistakes a new user makes, through the real CLI in its own process: each gets a
clear message and the right exit code, never a traceback, and no data is lost."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from shardfeed.format import folder_lock


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CPP", "SHARDFEED_QUIET"))}
    return subprocess.run(
        [sys.executable, "-m", "shardfeed", *args], capture_output=True, text=True, timeout=300, env=env
    )


@pytest.fixture(scope="module")
def world(digits_tree: Path, digits: tuple[np.ndarray, np.ndarray], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real folders a user has: images, a finished and an unfinished conversion, a flat cats/dogs
    folder, a ';' CSV, a Keras-style .npz (train/test) of two digit classes, a failed run."""
    root = tmp_path_factory.mktemp("world")
    shutil.copytree(digits_tree, root / "images")
    assert run_cli("convert", str(root / "images"), str(root / "done"), "--shards", "2", "-q").returncode == 0
    (root / "unfinished" / ".shardfeed").mkdir(parents=True)
    (root / "empty").mkdir()
    flat = root / "flat"
    flat.mkdir()
    for i, png in enumerate(sorted((root / "images").rglob("*.png"))[:12]):
        shutil.copy(png, flat / f"{'cat' if i % 2 else 'dog'}.{i}.png")
    with open(root / "list.csv", "w", newline="") as f:
        writer = csv.writer(f, delimiter=";")
        writer.writerow(["path", "label"])
        for png in sorted((root / "images").rglob("*.png"))[:20]:
            writer.writerow([os.path.relpath(png, root), png.parent.name])
    images, labels = digits
    pick = labels < 2
    x, y = images[pick][:300], labels[pick][:300]
    np.savez(root / "two.npz", x_train=x[:240], y_train=y[:240], x_test=x[240:], y_test=y[240:])
    assert run_cli("convert", str(root / "two.npz"), str(root / "two"), "--shards", "1", "-q").returncode == 0
    unlabeled = run_cli("convert", str(root / "images"), str(root / "unlabeled_out"), "--labels-from", "none", "-q")
    assert unlabeled.returncode == 0, unlabeled.stderr
    shutil.copytree(root / "done", root / "damaged")
    shard = root / "damaged" / "train-00000-of-00002"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    return root


# (command, expected message fragment, exit code); {w} is the world folder
CASES = [
    ("info {w}/images", "is a folder of images, not a converted folder (no manifest.json): convert it first", 1),
    ("info {w}/empty", "no manifest.json in '{w}/empty': it is not a converted folder; run `shardfeed convert", 1),
    ("verify {w}/unfinished", "holds an unfinished conversion (no manifest.json yet): re-run the same", 1),
    ("show {w}/images -o {w}/x.png", "is a folder of images", 1),
    ("bench {w}/images", "is a folder of images", 1),
    ("train {w}/images --out {w}/never", "is a folder of images", 1),
    ("convert {w}/images {w}/images/out", "is inside the source folder", 1),
    ("convert {w}/flat {w}/flat_out", "pass --labels-from filenames", 1),
    ("convert {w}/images {w}/neg --shards -3", "shards must be >= 1, got -3", 1),
    ("convert {w}/images {w}/neg --shards=train=-3", "shards for split 'train' must be >= 1, got -3", 1),
    ("train {w}/done --out {w}/zero --epochs 0", "epochs must be >= 1, got 0 (--epochs)", 1),
    ("train {w}/done --out {w}/big --batch-size 4096", "fewer than one batch of 4096: pass batch_size=", 1),
    ("convert {w}/images {w}/done --split train=0.8,validation=0.2 --shards 2", "nothing to do", 0),
    ("convert {w}/images {w}/done --shards 3", "(shards: 2 -> 3)", 1),
    ("convert {w}/list.csv {w}/csv_out --shards 1", "Wrote 20 of 20 images", 0),
    ("convert {w}/images {w}/crop --center-crop 48 --shards 1", "300 images were smaller than the centre crop", 0),
    ("convert {w}/images {w}/png --shards 1", "300 records are not JPEG (300 PNG)", 0),
    ("show {w}/unlabeled_out -o {w}/unlabeled.png", "", 0),  # only a 'test' split: shown without --split
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "fragment", "code"), CASES, ids=[c[0].split()[0] + str(i) for i, c in enumerate(CASES)]
)
def test_cli_says_what_is_wrong(world: Path, command: str, fragment: str, code: int) -> None:
    done = run_cli(*command.format(w=world).split())
    assert done.returncode == code, done.stderr
    said = done.stderr if code else done.stdout + done.stderr  # errors: stderr; convert's summary: stdout
    assert fragment.format(w=world) in said, said
    assert "Traceback" not in done.stderr


def test_an_unconverted_folder_fails_before_tensorflow_loads(world: Path) -> None:
    code = "from shardfeed.cli.main import main; import sys; r = main(['train', sys.argv[1], '--out', sys.argv[2]]); "
    code += "print(r, 'tensorflow' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code, str(world / "images"), str(world / "t")], capture_output=True, text=True
    )
    assert done.stdout.split() == ["1", "False"], done.stderr
    assert not (world / "t").exists()


@pytest.mark.slow
def test_a_failed_run_says_so_and_evaluate_and_predict_refuse_it(world: Path) -> None:
    run = world / "failed"
    done = run_cli("train", str(world / "damaged"), "--out", str(run), "--epochs", "1", "--image-size", "16")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "error: shard" in done.stderr and "is corrupt or truncated" in done.stderr
    assert len(done.stderr.splitlines()) <= 4, (
        done.stderr
    )  # augment, batch, precision and the error: not 28 lines of TF
    assert json.loads((run / "status.json").read_text())["status"] == "failed"
    for args in (["evaluate", str(run)], ["predict", str(run), str(world / "flat"), "-o", str(world / "p.csv")]):
        refused = run_cli(*args)
        assert refused.returncode == 1 and "this run did not finish (failed: shard" in refused.stderr


@pytest.mark.slow
def test_two_classes_from_npz_validate_on_test_quietly(world: Path) -> None:
    """.npz gives train/test: training validates on 'test', says so, prints none of TensorFlow's
    start-up noise; evaluate picks 'test'; top-k and predict columns stop at the class count."""
    run = world / "two_run"
    done = run_cli("train", str(world / "two"), "--out", str(run), "--epochs", "2", "--image-size", "16")
    assert done.returncode == 0, done.stderr
    assert "validating on the 'test' split" in done.stderr and "(inference mode)" in done.stderr
    assert "batches: 4 an epoch, the last of 48 images" in done.stderr  # 240 at batch 64: none left out
    for noise in ("oneDNN", "cpu_feature_guard", "absl", "UserWarning", "tf_record_dataset_op"):
        assert noise not in done.stderr, done.stderr
    metrics = json.loads((run / "metrics.json").read_text())
    assert "val_accuracy" in metrics and not any(k.startswith(("top", "val_top")) for k in metrics)
    evaluated = run_cli("evaluate", str(run))
    assert evaluated.returncode == 0 and "top" not in evaluated.stdout.split("\n")[0]
    assert "class" in evaluated.stdout and "images" in evaluated.stdout  # the per-class table has a header
    assert (run / "eval-test" / "metrics.json").exists()
    folder = world / "unlabeled"
    folder.mkdir()
    for i in range(3):
        Image.fromarray(np.full((16, 16), 40 * i, np.uint8)).save(folder / f"{i}.png")
    predicted = run_cli("predict", str(run), str(folder), "-o", str(world / "two.csv"))
    assert predicted.returncode == 0, predicted.stderr
    header = (world / "two.csv").read_text().splitlines()[0].split(",")
    assert header == ["file", "class", "probability", "class_2", "probability_2", "error"]


@pytest.mark.slow
def test_training_without_a_held_out_split_says_so(world: Path, tmp_path: Path) -> None:
    out = tmp_path / "all_train"
    assert run_cli("convert", str(world / "images"), str(out), "--split", "train=1", "-q").returncode == 0
    done = run_cli("train", str(out), "--out", str(tmp_path / "r"), "--epochs", "1", "--image-size", "16")
    assert (
        done.returncode == 0 and "has no held-out split (it has ['train']): training without validation" in done.stderr
    )


def test_info_into_a_closed_pipe_exits_quietly(world: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardfeed", "info", str(world / "done")], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # `| head` that has already exited
    err = proc.stderr.read().decode()
    assert proc.wait() == 0 and "Broken pipe" not in err and "Traceback" not in err


def test_a_second_conversion_into_the_same_folder_is_refused(world: Path, tmp_path: Path) -> None:
    out = tmp_path / "locked"
    with folder_lock.hold(str(out)):  # a conversion in progress (this process)
        done = run_cli("convert", str(world / "images"), str(out), "-q")
    assert done.returncode == 1
    assert f"another conversion (pid {os.getpid()}) is writing into" in done.stderr
    after = run_cli("convert", str(world / "images"), str(out), "-q")  # the lock is gone with its holder
    assert after.returncode == 0, after.stderr


def test_dropped_duplicates_are_counted_in_the_summary_and_info(world: Path, tmp_path: Path) -> None:
    src = tmp_path / "dups"
    shutil.copytree(world / "images", src)
    for i, png in enumerate(sorted(src.rglob("*.png"))[:5]):
        shutil.copy(png, png.parent / f"copy{i}.png")
    done = run_cli("convert", str(src), str(tmp_path / "o"), "--dedupe", "-q")
    assert done.returncode == 0 and "(5 duplicates dropped)" in done.stdout
    info = run_cli("info", str(tmp_path / "o"))
    assert "duplicates dropped: 5" in info.stdout
