"""show draws the right records with the right class names."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import zygote
from PIL import Image

from shardfeed import ConvertOptions, convert
from shardfeed.tools import show


@pytest.fixture(scope="module")
def converted(photo_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("show") / "out"
    convert(str(photo_tree), str(out), ConvertOptions(shards=2), workers=1, progress=False)
    return out


def test_grid_tiles_are_the_records_with_their_class_names(photo_tree: Path, converted: Path, tmp_path: Path) -> None:
    png = tmp_path / "grid.png"
    tiles = show(str(converted), str(png), rows=2, cols=3, seed=4)
    assert len(tiles) == 6 and len({t.key for t in tiles}) == 6
    for tile in tiles:
        assert tile.caption == tile.key.split("/")[0]  # class folder = class name
        original = np.asarray(Image.open(io.BytesIO((photo_tree / tile.key).read_bytes())).convert("RGB"))
        assert np.array_equal(tile.image, original)
    grid = Image.open(png)
    assert grid.size == (660, 480) and np.asarray(grid).std() > 10  # drawn, not blank
    assert [t.key for t in show(str(converted), None, rows=2, cols=3, seed=4)] == [t.key for t in tiles]


def test_augmented_grid_and_tensorboard(converted: Path, tmp_path: Path) -> None:
    tiles = show(
        str(converted),
        str(tmp_path / "aug.png"),
        rows=2,
        cols=2,
        augmented=True,
        image_size=48,
        tensorboard=str(tmp_path / "tb"),
    )
    assert len(tiles) == 4 and tiles[0].image.shape == (48, 48, 3)
    assert {t.caption for t in tiles} <= {"astronaut", "chelsea", "coffee", "rocket"}
    events = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 1000
    import tensorflow as tf

    tags = [v.tag for e in tf.compat.v1.train.summary_iterator(str(events[0])) for v in e.summary.value]
    assert tags == ["shardfeed/train"]
    with pytest.raises(ValueError, match="rows and cols must be >= 1"):
        show(str(converted), None, rows=0)


@pytest.mark.slow
def test_show_augmented_draws_what_train_would_use(converted: Path, tmp_path: Path) -> None:
    """A few dozen training photos: train --augment auto picks 'none', and so does show --augmented,
    which says so; --augment inception draws random crops, which change with the seed."""
    import subprocess
    import sys

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "shardfeed", "show", str(converted), "--augmented", "--image-size", "32", *args]
        return zygote.run(cmd, capture_output=True, text=True, timeout=300)

    done = cli("-o", str(tmp_path / "a.png"))
    assert done.returncode == 0, done.stderr
    assert "augment: none, chosen for" in done.stderr and "as train --augment auto" in done.stderr
    crops = [show(str(converted), None, rows=1, cols=4, seed=s, augmented=True, image_size=32) for s in (1, 2)]
    assert cli("-o", str(tmp_path / "b.png"), "--augment", "inception").returncode == 0
    assert not np.array_equal(crops[0][0].image, crops[1][0].image)
