"""Record layer: Example bytes, TFRecord framing and index, read back by real TensorFlow."""

from __future__ import annotations

import io
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
