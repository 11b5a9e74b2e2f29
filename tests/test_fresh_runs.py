"""The benchmark harness: pipeline specs cross a process boundary intact, every kind builds and
reads the data it names in its own process, and summaries/ratios say what they claim."""

from __future__ import annotations

from pathlib import Path

import pytest
import zygote

from shardfeed import ConvertOptions, ImageOptions, convert
from shardfeed.tools.fresh_runs import compare, measurement_command, measurement_result, ratio, run_fresh, summary
from shardfeed.tools.pipelines import KINDS, PipelineSpec

pytestmark = pytest.mark.slow  # training runs, fresh processes or servers: `make test`, not `make test-quick`


@pytest.fixture(scope="module")
def shards(photo_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The photo tree, every image stored as JPEG (the hand-written recipe reads JPEG only)."""
    out = tmp_path_factory.mktemp("fresh") / "out"
    options = ConvertOptions(split="train=1", shards=2, image=ImageOptions(image_format="jpeg"))
    convert(str(photo_tree), str(out), options, workers=1, progress=False)
    return out


def test_spec_round_trips_as_json_and_rejects_unknown_kinds() -> None:
    spec = PipelineSpec("shardfeed", "/data", image_size=(32, 48), read={"shuffle": "global"}, epochs=2)
    assert PipelineSpec.from_json(spec.to_json()) == spec
    with pytest.raises(ValueError, match="pipeline kind must be one of"):
        PipelineSpec("nope", "/data")


def test_summary_and_ratio() -> None:
    runs = [
        {"images_per_second": 100.0, "cpu_cores_used": 2.0, "images": 10},
        {"images_per_second": 300.0, "cpu_cores_used": 3.0, "images": 30},
        {"images_per_second": 200.0, "cpu_cores_used": 2.0, "images": 20},
    ]
    s = summary(runs)
    assert (s["best_images_per_second"], s["median_images_per_second"], s["images"]) == (300.0, 200.0, 20)
    assert s["cpu_ms_per_image"] == pytest.approx(10.0)  # per run 20, 10, 10 ms
    base = {"median_images_per_second": 100.0, "best_images_per_second": 150.0, "cpu_ms_per_image": 20.0}
    assert ratio(s, base) == {"median": 2.0, "best": 2.0, "cpu_per_image": 2.0}


def test_paired_ratio_is_the_median_of_per_round_ratios() -> None:
    """Round by round (drift cancels): ours is 1.1x, 1.1x and 0.5x the baseline -> 1.1x, where the
    medians alone (200 vs 300) would say 0.67x."""
    ours = summary([{"images_per_second": r, "cpu_cores_used": 1.0} for r in (110.0, 330.0, 200.0)])
    base = summary([{"images_per_second": r, "cpu_cores_used": 1.0} for r in (100.0, 300.0, 400.0)])
    got = ratio(ours, base)
    assert got["paired"] == pytest.approx(1.1)
    assert got["median"] == pytest.approx(200.0 / 300.0)


def _saved_to_disk(photo_tree: Path, out: Path) -> Path:
    """photo_tree as `datasets` writes it with save_to_disk (what hf_tf_dataset reads)."""
    datasets = pytest.importorskip("datasets")
    files = sorted(photo_tree.rglob("*.*"))
    classes = sorted(p.name for p in photo_tree.iterdir())
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=classes)})
    rows = {
        "image": [{"bytes": f.read_bytes(), "path": None} for f in files],
        "label": [classes.index(f.parent.name) for f in files],
    }
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows, features=features)}).save_to_disk(str(out))
    return out


def _voc(photo_tree: Path, out: Path) -> Path:
    """The photo tree's first 8 JPEGs as a Pascal VOC folder, a square pasted on each (the
    detection baselines' input)."""
    from PIL import Image

    (out / "Annotations").mkdir(parents=True)
    (out / "JPEGImages").mkdir()
    for i, path in enumerate(sorted(photo_tree.rglob("*.jpg"))[:8]):
        image = Image.open(path).convert("RGB")
        image.paste((255, 0, 0), (4, 4, 20, 20))
        image.save(out / "JPEGImages" / f"{i}.jpg")
        (out / "Annotations" / f"{i}.xml").write_text(
            f"<annotation><filename>{i}.jpg</filename><object><name>red</name>"
            "<bndbox><xmin>5</xmin><ymin>5</ymin><xmax>20</xmax><ymax>20</ymax></bndbox></object></annotation>"
        )
    return out


def test_every_kind_reads_its_data_in_a_fresh_process(shards: Path, photo_tree: Path, tmp_path: Path) -> None:
    from bench.bench_peers import tfds_copy

    saved = _saved_to_disk(photo_tree, tmp_path / "saved")
    voc = _voc(photo_tree, tmp_path / "voc")
    for kind in KINDS:
        images = 44  # photo_tree: 4 classes x (10 JPEG + 1 PNG)
        folder = (
            photo_tree if kind in ("keras_folder", "decode_ceiling") else saved if kind == "hf_tf_dataset" else shards
        )
        if kind in ("keras_hub_voc", "keras_layers_voc"):
            folder, images = voc, 8
        if kind == "tfds_expert":  # a TFDS dataset of the tree's JPEGs, as bench/bench_peers.py writes it
            folder, images = Path(tfds_copy(str(photo_tree), tmp_path / "tfds")), 40
        spec = PipelineSpec(kind, str(folder), batch_size=4, image_size=(32, 32), training=False, warmup_batches=0)
        # run_fresh's command, forked with TensorFlow imported (test_compare runs run_fresh itself)
        done = zygote.run(measurement_command(spec), capture_output=True, text=True, timeout=300)
        result = measurement_result(spec, done)
        assert result["images"] == images, (kind, result)
        assert result["images_per_second"] > 0 and result["cpu_cores_used"] >= 0  # 10 ms CPU ticks: 0 on tiny runs


def test_compare_interleaves_and_names_failures(shards: Path) -> None:
    spec = PipelineSpec("raw_read", str(shards), warmup_batches=0)
    seen: list[str] = []
    results = compare({"a": spec, "b": spec}, rounds=2, progress=seen.append)
    assert seen == ["round 1/2: a", "round 1/2: b", "round 2/2: a", "round 2/2: b"]
    assert len(results["a"]["runs"]) == 2 and results["a"]["images"] == 44
    with pytest.raises(RuntimeError, match=r"measuring shardfeed on .*missing"):
        run_fresh(PipelineSpec("shardfeed", str(shards / "missing")), timeout=300)
