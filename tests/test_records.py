"""Record layer: Example bytes, TFRecord framing and index, read back by real TensorFlow."""

from __future__ import annotations

import gzip
import io
import struct
from pathlib import Path

import pytest

from shardfeed.format import tfrecord
from shardfeed.format.example_proto import parse_example, serialize_example


def test_example_bytes_parse_with_tensorflow() -> None:
    import tensorflow as tf

    data = serialize_example(
        {
            "image/encoded": b"\x00\xff",
            "image/class/text": "cat",
            "image/class/label": 3,
            "score": 0.5,
            "ids": [1, 2, 3],
        }
    )
    parsed = tf.io.parse_single_example(
        data,
        {
            "image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/text": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64),
            "score": tf.io.FixedLenFeature([], tf.float32),
            "ids": tf.io.FixedLenFeature([3], tf.int64),
        },
    )
    assert parsed["image/encoded"].numpy() == b"\x00\xff"
    assert parsed["image/class/text"].numpy() == b"cat"
    assert int(parsed["image/class/label"]) == 3 and float(parsed["score"]) == 0.5
    assert list(parsed["ids"].numpy()) == [1, 2, 3]
    # our parser agrees, and TF's own Example message serializes to the same bytes
    assert parse_example(data)["ids"] == [1, 2, 3]
    assert tf.train.Example.FromString(data).SerializeToString(deterministic=True) == data


def test_framing_matches_tensorflow_writer(tmp_path: Path) -> None:
    import tensorflow as tf

    payloads = [b"", b"hello", bytes(range(256)) * 40]
    with tf.io.TFRecordWriter(str(tmp_path / "tf.rec")) as writer:
        for p in payloads:
            writer.write(p)
    assert (tmp_path / "tf.rec").read_bytes() == b"".join(tfrecord.frame(p) for p in payloads)
    assert list(tfrecord.read_records(str(tmp_path / "tf.rec"))) == payloads


def test_index_offsets_point_at_records() -> None:
    payloads = [b"a" * 5, b"b" * 300, b"c"]
    blob = b"".join(tfrecord.frame(p) for p in payloads)
    pairs = tfrecord.parse_index(tfrecord.format_index([len(p) for p in payloads]))
    assert pairs[-1][0] + pairs[-1][1] == len(blob)
    for (offset, size), payload in zip(pairs, payloads, strict=True):
        assert next(tfrecord.iter_records(io.BytesIO(blob[offset : offset + size])))[1] == payload


def test_corruption_and_truncation_name_the_record() -> None:
    blob = bytearray(tfrecord.frame(b"x" * 100) + tfrecord.frame(b"y" * 100))
    blob[120 + 16 + 30] ^= 0xFF  # inside the second record's data
    with pytest.raises(tfrecord.CorruptRecordError, match=r"demo: record 1 at byte 116: data checksum mismatch"):
        list(tfrecord.iter_records(io.BytesIO(bytes(blob)), name="demo"))
    with pytest.raises(tfrecord.CorruptRecordError, match=r"record 1 .* \(truncated shard\)"):
        list(tfrecord.iter_records(io.BytesIO(bytes(blob[:150])), name="demo"))
    with pytest.raises(ValueError, match=r"not a valid tf\.train\.Example"):
        parse_example(b"\xff\xff\xff")


def _edited(records: list[bytes], record: int, length: int) -> bytes:
    """The framed records with record `record`'s length field claiming `length` (its CRC valid)."""
    framed = [bytearray(tfrecord.frame(r)) for r in records]
    header = struct.pack("<Q", length)
    framed[record][:12] = header + struct.pack("<I", tfrecord.masked_crc(header))
    return b"".join(framed)


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_a_length_past_the_end_of_the_file_is_found_from_the_headers(tmp_path: Path, compression: str | None) -> None:
    """framing_problem names the first record whose length runs past the file (TensorFlow's
    reader allocates what it says), and passes a sound file and one cut inside a record's data
    (within the file: the CRC checks find that)."""
    records = [b"a" * 100, b"b" * 50, b"c" * 70]
    cases = {
        "sound": b"".join(tfrecord.frame(r) for r in records),
        "claims 2^40": _edited(records, 1, 1 << 40),
        "claims 1 byte past": _edited(records, 2, 70 + 1),
    }
    found = {}
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(gzip.compress(data) if compression else data)
        problem = tfrecord.framing_problem(str(path), path.stat().st_size, compression)
        found[name] = None if problem is None else (problem.record, problem.message)
    assert found["sound"] is None
    assert found["claims 2^40"] == (
        1,
        "record 1 at byte 116 claims 1,099,511,627,776 bytes, more than the 136 the file holds after it "
        "(an edited or damaged shard)",
    )
    assert found["claims 1 byte past"] == (
        2,
        "record 2 at byte 182 claims 71 bytes, more than the 70 the file holds after it (an edited or damaged shard)",
    )


def test_a_record_claiming_more_than_the_stream_holds_is_read_only_as_far_as_it_goes() -> None:
    """iter_records asks the stream for a record's bytes in pieces: a length of 2^40 is the
    stream's end (a CorruptRecordError), never a 1 TB allocation (a MemoryError in verify)."""
    blob = _edited([b"x" * 100, b"y" * 100], 1, 1 << 40)
    with pytest.raises(tfrecord.CorruptRecordError, match=r"record 1 at byte 116: file ends inside the record"):
        list(tfrecord.iter_records(io.BytesIO(blob), name="demo"))
