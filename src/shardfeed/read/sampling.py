"""A seeded random sample of a split's records, for tools that look at a few images (previews,
reports, the augmentation choice) rather than read the split."""

from __future__ import annotations

import random
from typing import Any

from shardfeed.format import manifest, schema, tfrecord
from shardfeed.format.example_proto import parse_example
from shardfeed.read.indexed import IndexedRecords
from shardfeed.read.pixels import with_dimensions


def sample_records(path: str | manifest.Manifest, split: str, count: int, seed: int) -> list[bytes]:
    """Up to `count` serialized records of a split picked at random (seeded), in pick order.

    Read by index for plain shards; gzip shards (no random access) are streamed once.
    """
    m = manifest.opened(path)
    total = m.split(split).num_records
    picked = random.Random(seed).sample(range(total), min(count, total))
    if m.compression != "gzip":
        records = IndexedRecords(m, split)
        return [records.record(i) for i in picked]
    wanted, found, number = set(picked), {}, 0
    for file in m.shard_paths(split):
        for data in tfrecord.read_records(file, compression="gzip"):
            if number in wanted:
                found[number] = data
            number += 1
    return [found[i] for i in picked]


def sample_examples(path: str | manifest.Manifest, split: str, count: int, seed: int) -> list[dict[str, Any]]:
    """`sample_records`, parsed and under our keys whatever keys the records were written with
    (`schema.canonical`), single values unwrapped, image dimensions read from the image header
    where the records do not carry them."""
    m = manifest.opened(path)
    out = []
    for record in sample_records(m, split, count, seed):
        features = with_dimensions(schema.canonical(parse_example(record), m.keys))
        out.append({k: v[0] if len(v) == 1 else v for k, v in features.items()})
    return out
