"""bench reports parseable, plausible throughput figures (never asserted against a wall clock)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import zygote

from shardfeed import ConvertOptions, convert

pytestmark = pytest.mark.slow  # training runs, fresh processes or servers: `make test`, not `make test-quick`


def test_bench_json_with_compare_folder(photo_tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    convert(str(photo_tree), str(out), ConvertOptions(split="train=1", shards=2), workers=1, progress=False)
    done = zygote.run(
        [
            sys.executable,
            "-m",
            "shardfeed",
            "bench",
            str(out),
            "--batch-size",
            "4",
            "--image-size",
            "32",
            "--compare-folder",
            str(photo_tree),
            "--rounds",
            "1",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(done.stdout)
    ours = data["shardfeed"]
    assert ours["images"] == 4 * ours["batches"] and ours["batches"] == 9  # 44 // 4 = 11 batches, 2 warm-up
    assert ours["images_per_second"] > 0 and ours["batches_per_second"] > 0 and ours["warmup_seconds"] > 0
    assert 0 < ours["cpu_cores_used"] < 64
    assert data["keras_folder"]["images"] > 0 and data["decode_ceiling"]["images"] > 0
    assert set(data["ratios"]) == {"vs_keras_folder", "vs_decode_ceiling"}
    for r in data["ratios"].values():  # one round: the paired ratio is that round's ratio
        assert r["paired"] == pytest.approx(r["median"]) and r["median"] > 0
    text = zygote.run(
        [sys.executable, "-m", "shardfeed", "bench", str(out), "--batch-size", "4", "--image-size", "32", "--eval"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "shardfeed.load" in text and "img/s" in text


def test_bench_measures_global_shuffle_over_epochs(photo_tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    convert(str(photo_tree), str(out), ConvertOptions(split="train=1", shards=2), workers=1, progress=False)
    args = ["bench", str(out), "--batch-size", "4", "--image-size", "32", "--shuffle", "global", "--epochs", "2"]
    done = zygote.run([sys.executable, "-m", "shardfeed", *args, "--json"], capture_output=True, text=True, check=True)
    data = json.loads(done.stdout)
    assert data["settings"]["shuffle"] == "global" and data["shardfeed"]["batches"] == 2 * 11 - 2


def test_bench_with_a_model_says_which_side_limits_training(digits_tree: Path, tmp_path: Path) -> None:
    from shardfeed.training import build_model

    out = tmp_path / "out"
    convert(str(digits_tree), str(out), ConvertOptions(shards=2), workers=1, progress=False)
    model_file = tmp_path / "m.keras"
    build_model("small_cnn", [str(i) for i in range(10)], (24, 24)).save(model_file)
    done = zygote.run(
        [sys.executable, "-m", "shardfeed", "bench", str(out), "--model", str(model_file), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["settings"]["image_size"] == [24, 24]  # taken from the model's input
    assert result["model"]["images_per_second"] > 0
    assert result["verdict"].split(":")[0] in ("input-bound", "model-bound", "balanced")
    # it says what it is doing while it does it, also when stderr is not a terminal (a CI log)
    assert "timing load: 1 epoch(s) of the 'train' split" in done.stderr
    assert "timing the model's training step" in done.stderr


def test_python_bench_returns_the_verdict_too(digit_shards: Path) -> None:
    """The verdict is the Python API's answer, not something only the CLI computes."""
    import shardfeed
    from shardfeed.training import build_model

    net = build_model("small_cnn", [str(i) for i in range(10)], (16, 16))
    result = shardfeed.tools.bench(str(digit_shards), batch_size=16, image_size=16, model=net)
    assert result["model"]["images_per_second"] > 0
    assert result["verdict"].split(":")[0] in ("input-bound", "model-bound", "balanced")


def test_bench_times_a_grayscale_model_on_grayscale_batches(digit_shards: Path) -> None:
    """The model's batch is decoded with the bench's own DecodeOptions (it was decoded with the
    defaults, three channels, which a one-channel model refuses)."""
    import shardfeed
    from shardfeed.read.options import DecodeOptions
    from shardfeed.training import build_model

    net = build_model("small_cnn", [str(i) for i in range(10)], (16, 16), channels=1)
    result = shardfeed.tools.bench(
        str(digit_shards), batch_size=16, image_size=16, model=net, decode=DecodeOptions(channels=1)
    )
    assert result["model"]["images_per_second"] > 0 and result["feeds"]["shardfeed"]["of_model"] > 0


def test_too_few_batches_to_time_is_a_clear_error() -> None:
    """A dataset smaller than one training batch used to end `bench` in a StopIteration traceback."""
    import tensorflow as tf

    from shardfeed.errors import SourceError
    from shardfeed.tools.timing import measure

    with pytest.raises(SourceError, match="yields only 1 batches, too few to time"):
        measure(tf.data.Dataset.range(1).batch(1))


def test_breakdown_measures_each_stage_in_its_own_process(photo_tree: Path, tmp_path: Path) -> None:
    """`bench --breakdown`: every stage measured (fresh processes), and the parts are the stages'
    differences; no figure is held against a clock."""
    out = tmp_path / "out"
    convert(str(photo_tree), str(out), ConvertOptions(split="train=1", shards=2), workers=1, progress=False)
    args = ["--breakdown", "--rounds", "1", "--batch-size", "4", "--image-size", "32", "--json"]
    done = zygote.run(
        [sys.executable, "-m", "shardfeed", "bench", str(out), *args], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    stages, parts = result["stages"], result["cpu_ms_per_image"]
    assert set(stages) == {"raw_read", "parse", "memory_decode", "memory_records", "shardfeed"}
    assert all(s["cpu_ms_per_image"] > 0 and len(s["runs"]) == 1 for s in stages.values())
    assert parts["load"] == stages["shardfeed"]["cpu_ms_per_image"]
    assert parts["pipeline_over_per_record"] == pytest.approx(
        stages["shardfeed"]["cpu_ms_per_image"] - stages["memory_records"]["cpu_ms_per_image"]
    )
    assert result["load_over_decode_limit"] == pytest.approx(
        stages["shardfeed"]["cpu_ms_per_image"] / stages["memory_decode"]["cpu_ms_per_image"]
    )
    refused = zygote.run(
        [sys.executable, "-m", "shardfeed", "bench", str(out), "--breakdown", "--compare-folder", str(photo_tree)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode == 1 and "--breakdown takes one converted folder" in refused.stderr
