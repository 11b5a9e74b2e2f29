"""A seeded random sample of a split's records, for tools that look at a few images (previews,
reports, the augmentation choice) rather than read the split."""

from __future__ import annotations

import random

from shardfeed.format import manifest, tfrecord
from shardfeed.read.indexed import IndexedRecords


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
