"""The Beam runner (on Beam's local runner) writes exactly what the local runner writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import shard_bytes
from test_coco import coco  # noqa: F401 (fixtures: a COCO file and a VOC folder, as their tests build them)
from test_voc_yolo import voc  # noqa: F401

from shardfeed import ConvertOptions, convert


@pytest.mark.slow
def test_beam_output_is_byte_identical_to_local(odd_tree: Path, tmp_path: Path) -> None:
    options = ConvertOptions(split="train=0.6,validation=0.4", shards=2, seed=3)
    local = convert(str(odd_tree), str(tmp_path / "local"), options, workers=2, progress=False)
    beam = convert(
        str(odd_tree),
        str(tmp_path / "beam"),
        options,
        runner="beam",
        beam_options="--direct_num_workers=2 --direct_running_mode=multi_threading",
        progress=False,
    )
    assert beam.manifest.data == local.manifest.data
    assert shard_bytes(tmp_path / "beam") == shard_bytes(tmp_path / "local")
    assert "dataset_info.json" in shard_bytes(tmp_path / "beam")  # the TFDS metadata too
    assert (tmp_path / "beam" / "report.json").read_bytes() == (tmp_path / "local" / "report.json").read_bytes()
    assert not (tmp_path / "beam" / ".shardfeed").exists()


def test_beam_reads_tar_members_in_place_as_the_local_runner_does(photo_tree: Path, tmp_path: Path) -> None:
    """A WebDataset tar's images travel to Beam's workers as spans of the tar (no staging)."""
    import io
    import tarfile

    classes = sorted(p.name for p in photo_tree.iterdir())
    with tarfile.open(tmp_path / "data.tar", "w") as archive:
        for i, photo in enumerate(sorted(photo_tree.rglob("*.*"))):
            for name, data in (
                (f"{i:04d}{photo.suffix}", photo.read_bytes()),
                (f"{i:04d}.cls", b"%d" % classes.index(photo.parent.name)),
            ):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    options = ConvertOptions(shards=2, seed=3)
    local = convert(str(tmp_path / "data.tar"), str(tmp_path / "local"), options, workers=2, progress=False)
    convert(
        str(tmp_path / "data.tar"),
        str(tmp_path / "beam"),
        options,
        runner="beam",
        beam_options="--direct_num_workers=2 --direct_running_mode=multi_threading",
        progress=False,
    )
    assert local.manifest.data["source"]["kind"] == "webdataset"
    from shardfeed.tools import info

    assert info(str(tmp_path / "local"))["records"] == len(list(photo_tree.rglob("*.*")))
    assert shard_bytes(tmp_path / "beam") == shard_bytes(tmp_path / "local")


@pytest.mark.slow
def test_beam_via_cli_says_what_the_local_runner_says_and_rerun_is_a_no_op(photo_tree: Path, tmp_path: Path) -> None:
    """Offline and quiet: no Prism download attempt, none of Beam's import or runner notes; the
    same lines as the local runner (but the seconds and the folder name)."""
    import re

    out, local = tmp_path / "o", tmp_path / "l"
    cmd = [sys.executable, "-m", "shardfeed", "convert", str(photo_tree), str(out), "--runner", "beam", "-q"]
    first = subprocess.run(cmd, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert "Wrote 44 of 44 images" in first.stdout
    for noise in ("Prism", "Downloading", "apitools", "Converting string literal", "DirectRunner"):
        assert noise not in first.stderr, first.stderr
    by_local = subprocess.run([*cmd[:5], str(local), "-q"], capture_output=True, text=True)

    def same(text: str, folder: Path) -> str:
        return re.sub(r"in [0-9.]+s", "in Ns", text.replace(str(folder), "OUT"))

    assert same(first.stdout + first.stderr, out) == same(by_local.stdout + by_local.stderr, local)
    again = subprocess.run(cmd, capture_output=True, text=True)
    assert "nothing to do" in again.stdout


def test_the_local_runner_is_named_so_beam_tries_no_download() -> None:
    from shardfeed.write.beam_runner import local_runner_flags

    assert local_runner_flags([]) == ["--runner=FnApiRunner"]
    assert local_runner_flags(["--runner=DirectRunner", "--direct_num_workers=2"]) == [
        "--direct_num_workers=2",
        "--runner=FnApiRunner",
    ]
    assert local_runner_flags(["--runner=DataflowRunner"]) == ["--runner=DataflowRunner"]


def test_importing_shardfeed_imports_neither_beam_nor_tensorflow() -> None:
    code = "import sys, shardfeed; print('apache_beam' in sys.modules, 'tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_without_beam_the_runner_fails_with_an_install_hint(photo_tree: Path, tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['apache_beam'] = None\n"  # what Python does when it is not installed
        "from shardfeed.cli.main import main\n"
        f"raise SystemExit(main(['convert', {str(photo_tree)!r}, {str(tmp_path / 'o')!r}, '--runner', 'beam']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 1
    assert "apache_beam is required for this feature: pip install 'shardfeed[beam]'" in done.stderr


@pytest.mark.parametrize("layout", ["coco", "voc", "segmentation"])
def test_annotated_layouts_on_beam_are_byte_identical_to_local(
    layout: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Objects (boxes, classes, crowd flags, VOC's difficult/truncated), semantic masks and the
    skipped annotations travel in the plan files to Beam's workers: the shards, manifest and
    report.json are the local runner's, byte for byte."""
    from test_segmentation import segmentation_folder

    from shardfeed.write.sources import CocoSource

    if layout == "coco":
        annotations = request.getfixturevalue("coco")
        source: str | CocoSource = CocoSource(str(annotations), str(annotations.parent / "images"))
    else:
        source = str(segmentation_folder(tmp_path) if layout == "segmentation" else request.getfixturevalue(layout))
    options = ConvertOptions(split="train=0.5,validation=0.5", shards=2, seed=1)
    local = convert(source, str(tmp_path / "local"), options, workers=2, progress=False)
    beam = convert(
        source,
        str(tmp_path / "beam"),
        options,
        runner="beam",
        beam_options="--direct_num_workers=2 --direct_running_mode=multi_threading",
        progress=False,
    )
    assert local.manifest.header.task == ("segmentation" if layout == "segmentation" else "detection")
    assert beam.manifest.data == local.manifest.data
    assert shard_bytes(tmp_path / "beam") == shard_bytes(tmp_path / "local")
    assert (tmp_path / "beam" / "report.json").read_bytes() == (tmp_path / "local" / "report.json").read_bytes()
