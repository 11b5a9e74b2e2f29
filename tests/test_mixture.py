"""Mixing converted folders: exact proportions per epoch, labels reconciled by class name,
deterministic and exactly resumable."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import zygote
from conftest import crops, jpeg_bytes, photos

from shardfeed import ConvertOptions, Mixture, ReadOptions, convert, load, steps_per_epoch
from shardfeed.errors import OptionError


def _folder(root: Path, prefix: str, classes: dict[str, int]) -> str:
    for name, count in classes.items():
        (root / "src" / name).mkdir(parents=True)
        for i, crop in enumerate(crops(photos()[name], count, seed=count + len(prefix))):
            (root / "src" / name / f"{prefix}{i:03d}.jpg").write_bytes(jpeg_bytes(crop))
    out = root / "out"
    convert(str(root / "src"), str(out), ConvertOptions(split="train=1", shards=2), workers=1, progress=False)
    return str(out)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    main = _folder(tmp_path_factory.mktemp("main"), "a", {"astronaut": 20, "coffee": 20})
    curated = _folder(tmp_path_factory.mktemp("curated"), "b", {"coffee": 6, "rocket": 6})
    return main, curated


def _batches(mix: Mixture, read: ReadOptions | None = None, seed: int = 4) -> list[list[tuple[str, int]]]:
    read = read or ReadOptions()
    ds = load(
        mix,
        batch_size=8,
        image_size=16,
        seed=seed,
        augment=False,
        read=ReadOptions(**{**vars(read), "with_filenames": True}),
    )
    return [
        [(f.decode(), int(y)) for f, y in zip(files.numpy(), labels.numpy(), strict=True)] for _, labels, files in ds
    ]


def test_proportions_are_exact_per_epoch_and_within_a_chi_square_bound(folders: tuple[str, str]) -> None:
    from scipy.stats import chi2

    mix = Mixture(folders, weights=(0.75, 0.25), union_labels=True)
    # the epoch is the first source's 40 records plus round(0.25 / 0.75 * 40) = 13 of the second
    assert steps_per_epoch(mix, batch_size=8) == 53 // 8
    ds = load(
        mix,
        batch_size=8,
        image_size=16,
        seed=4,
        augment=False,
        read=ReadOptions(with_filenames=True, drop_remainder=False),
    )
    statistic, batches = 0.0, 0
    for _ in range(3):
        sources = [f.decode().rsplit("/", 1)[-1][0] for _, _, files in ds for f in files.numpy()]
        assert Counter(sources) == {"a": 40, "b": 13}
        for start in range(0, 48, 8):  # whole batches of 8: observed vs expected 6 / 2
            seen = Counter(sources[start : start + 8])
            expected = {"a": 8 * 40 / 53, "b": 8 * 13 / 53}
            statistic += sum((seen[k] - e) ** 2 / e for k, e in expected.items())
            batches += 1
    assert statistic < chi2.ppf(0.999, batches)  # one degree of freedom per batch (two sources)


def test_labels_are_reconciled_by_class_name(folders: tuple[str, str]) -> None:
    with pytest.raises(OptionError, match="union_labels=True"):
        load(Mixture(folders, weights=(1, 1)), seed=0)
    union = ["astronaut", "coffee", "rocket"]  # the first source's classes, then the new one
    for batch in _batches(Mixture(folders, weights=(1, 1), union_labels=True)):
        for key, label in batch:
            assert union[label] == key.split("/")[0]  # the class folder the image came from
    labels_b = Counter(
        label
        for batch in _batches(Mixture(folders, weights=(1, 1), union_labels=True))
        for n, label in batch
        if n.split("/")[1].startswith("b")
    )
    assert set(labels_b) <= {1, 2} and len(labels_b) == 2  # the curated set's coffee/rocket are 1/2, not 0/1


@pytest.mark.slow
def test_deterministic_and_exactly_resumable(folders: tuple[str, str]) -> None:
    mix = Mixture(folders, weights=(0.75, 0.25), union_labels=True)
    whole = [x for batch in _batches(mix) for x in batch]
    assert whole == [x for batch in _batches(mix) for x in batch]
    assert whole == [x for batch in _batches(mix, ReadOptions(shuffle="global")) for x in batch]  # no buffer
    assert whole != [x for batch in _batches(mix, seed=5) for x in batch]
    resumed = [x for batch in _batches(mix, ReadOptions(shuffle="global", start_record=16)) for x in batch]
    assert resumed == whole[16:]
    with pytest.raises(OptionError, match="a Mixture is a training stream"):
        load(mix, training=False)
    with pytest.raises(OptionError, match="do not apply to it"):
        load(mix, seed=0, read=ReadOptions(balance="class"))
    with pytest.raises(OptionError, match="weights must be one positive number per source"):
        Mixture(folders, weights=(1.0,))


def test_a_small_source_repeats_whole_orders() -> None:
    from shardfeed.read.order import mixture_order

    ids = np.concatenate([mixture_order([10, 3], [10, 7], seed=1, epoch=e) for e in range(3)])
    small = Counter(int(i) - 10 for i in ids if i >= 10)
    assert sorted(small.values()) == [7, 7, 7]  # 21 places over 3 epochs: each of the 3 records 7 times


@pytest.mark.slow
def test_train_on_two_folders(folders: tuple[str, str], tmp_path: Path) -> None:
    import json
    import sys

    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "shardfeed", "train", *folders, "--mix-weights", "0.75,0.25", "--out", str(out)]
    cmd += [
        "--model",
        "small_cnn",
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--image-size",
        "32",
        "--validation-split",
        "none",
    ]
    done = zygote.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((out / "run.json").read_text())
    assert record["class_names"] == ["astronaut", "coffee", "rocket"]
    assert record["mixture"]["weights"] == [0.75, 0.25] and len(record["mixture"]["sources"]) == 2
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps_per_epoch"] == -(-53 // 8)  # train uses every record: the last batch partial
    evaluated = zygote.run(  # the model knows 3 classes, the first folder 2: evaluated on them
        [sys.executable, "-m", "shardfeed", "evaluate", str(out), "--split", "train", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert json.loads(evaluated.stdout)["examples"] == 40


def test_records_without_class_names_are_relabelled(tmp_path: Path) -> None:
    """Adopted TF-slim folders carry no image/class/text: a source whose ids name other classes
    has its labels rewritten into the mixture's map as records are read."""
    import hashlib

    from test_adopt import CLASSES, _write, tfslim

    from shardfeed import adopt
    from shardfeed.format.example_proto import parse_example
    from shardfeed.read.mixture import MixedRecords, open_mixture

    a, _ = _write(tmp_path / "a", {"train-00000-of-00001": ("train", 2)}, tfslim)
    (a / "labels.txt").write_text("".join(f"{i}:{n}\n" for i, n in enumerate(CLASSES)))
    b, written_b = _write(tmp_path / "b", {"train-00000-of-00001": ("train", 1)}, tfslim)
    (b / "labels.txt").write_text("".join(f"{i}:{n}\n" for i, n in enumerate(CLASSES[::-1])))  # ids name others
    for folder in (a, b):
        adopt(str(folder), progress=False)
    mixed = open_mixture(Mixture((str(a), str(b)), weights=(1, 1)), "train")
    assert not mixed.by_text and mixed.label_maps[0] is None and mixed.label_maps[1] == {0: 3, 1: 2, 2: 1, 3: 0}
    records = MixedRecords(mixed, "train")
    stored_b = {digest: c for (digest, c) in written_b["train"]}
    relabelled = {}
    for i in range(int(records.bases[1]), len(records)):
        features = parse_example(records.record(i))
        relabelled[hashlib.sha256(features["image/encoded"][0]).hexdigest()] = features["image/class/label"][0]
    assert relabelled == {digest: 3 - c for digest, c in stored_b.items()}
