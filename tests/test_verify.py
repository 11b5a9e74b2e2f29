"""verify catches real damage made to real converted data, and locates it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shardfeed import ConvertOptions, convert
from shardfeed.format import tfrecord
from shardfeed.format.example_proto import parse_example, serialize_example
from shardfeed.tools import verify


@pytest.fixture(scope="module")
def clean(photo_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("verify") / "out"
    convert(str(photo_tree), str(out), ConvertOptions(shards=2), workers=1, progress=False)
    return out


def _copy(clean: Path, tmp_path: Path) -> Path:
    return shutil.copytree(clean, tmp_path / "copy")


def test_clean_conversion_verifies(clean: Path) -> None:
    report = verify(str(clean), workers=2, progress=False)
    assert report.ok, report.summary()
    assert (report.shards, report.records, report.images_decoded) == (4, 44, 44)
    done = subprocess.run(
        [sys.executable, "-m", "shardfeed", "verify", str(clean), "-q"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "OK" in done.stdout


def test_flipped_byte_is_located(clean: Path, tmp_path: Path) -> None:
    out = _copy(clean, tmp_path)
    shard = out / "train-00001-of-00002"
    offsets = tfrecord.parse_index((out / "index" / "train-00001-of-00002.idx").read_text())
    data = bytearray(shard.read_bytes())
    data[offsets[3][0] + 12 + 100] ^= 0x01  # inside record 3's data
    shard.write_bytes(bytes(data))
    report = verify(str(out), workers=1, progress=False)
    messages = [str(p) for p in report.problems]
    assert any(m.startswith("train-00001-of-00002 record 3: record 3 at byte") and "checksum" in m for m in messages), (
        messages
    )
    assert any("SHA-256 differs" in m for m in messages)
    done = subprocess.run([sys.executable, "-m", "shardfeed", "verify", str(out), "-q"], capture_output=True)
    assert done.returncode == 1


def test_damaged_image_with_valid_framing_is_caught(clean: Path, tmp_path: Path) -> None:
    """A record rewritten with good CRCs but a broken image: only decoding and the hash see it."""
    out = _copy(clean, tmp_path)
    shard = out / "validation-00000-of-00002"
    records = list(tfrecord.read_records(str(shard)))
    features = {k: v[0] for k, v in parse_example(records[1]).items()}
    features["image/encoded"] = features["image/encoded"][:2000]
    records[1] = serialize_example(features)
    shard.write_bytes(b"".join(tfrecord.frame(r) for r in records))
    messages = [str(p) for p in verify(str(out), workers=1, progress=False).problems]
    assert any(m.startswith("validation-00000-of-00002 record 1: image does not decode") for m in messages), messages
    assert any("record 1: image bytes do not match image/key/sha256" in m for m in messages)
    assert any("does not match the records" in m for m in messages)  # the index no longer fits


def test_truncated_missing_and_miscounted_shards(clean: Path, tmp_path: Path) -> None:
    out = _copy(clean, tmp_path)
    shard = out / "train-00000-of-00002"
    shard.write_bytes(shard.read_bytes()[:-500])
    (out / "train-00001-of-00002").unlink()
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["splits"]["validation"]["shards"][0]["num_records"] += 1
    (out / "manifest.json").write_text(json.dumps(manifest))
    (out / "validation-00001-of-00002.incomplete").write_bytes(b"partial")
    messages = [str(p) for p in verify(str(out), workers=2, progress=False).problems]
    assert any(m.startswith("train-00000-of-00002 record") and "truncated shard" in m for m in messages), messages
    assert "train-00001-of-00002: shard file is missing" in messages
    assert any(m.startswith("validation-00000-of-00002: ") and "records read, the manifest says" in m for m in messages)
    assert any("stray temporary file 'validation-00001-of-00002.incomplete'" in m for m in messages)
    assert any("class counts" in m for m in messages)


def test_gzip_shards_are_verified_as_a_stream(photo_tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "gz"
    convert(str(photo_tree), str(out), ConvertOptions(compression="gzip", shards=1), workers=1, progress=False)
    report = verify(str(out), workers=1, progress=False)
    assert report.ok and report.images_decoded == 44, report.summary()
    shard = out / "train-00000-of-00001"  # no suffix: the manifest records the compression
    shard.write_bytes(shard.read_bytes()[:-300])
    messages = [str(p) for p in verify(str(out), workers=1, progress=False).problems]
    assert any(m.startswith(f"{shard.name}: file has") for m in messages), messages
    assert any(m.startswith(f"{shard.name} record") for m in messages), messages
