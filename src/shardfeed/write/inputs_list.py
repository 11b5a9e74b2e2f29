"""The inputs list of each generation of a conversion: index/inputs-gNNNN.json.gz, one row per
record written: [key, source SHA-256, split, size, mtime_ns, perceptual hash, annotations digest].
`--append` reads every generation's list to know what was converted, whether its bytes (or its
annotations: objects, labels, mask) changed since, and to group new images with converted ones
into near-duplicate groups."""

from __future__ import annotations

import gzip
import json
from typing import Any

from shardfeed.format import fileio, layout
from shardfeed.write import merge, perceptual_hash, shards

# key -> (source sha256, split, listed size and mtime_ns (None: not recorded), perceptual hash,
# annotations digest (None: one class id, or not recorded))
Known = dict[str, tuple[str, str, tuple[int, int] | None, str | None, str | None]]


def write_inputs(output_dir: str, work_dir: str, results: list[shards.ShardResult], generation: int) -> Known:
    """index/inputs-gNNNN.json.gz: [key, source SHA-256, split, size, mtime_ns, perceptual hash]
    of every record written (size and mtime as listed, 0 where unknown, as for array items; the
    hash None where none was made). Returns them as `read_inputs` reads them back."""
    rows = [
        [key, digest, r.split, *listed[:3], *[a for a in listed[3:] if a is not None]]  # no digest: rows of 6
        for r in results
        for key, digest, *listed in merge.read_part(work_dir, r).records
    ]
    data = gzip.compress(json.dumps(sorted(rows)).encode(), mtime=0)
    fileio.write_bytes_atomic(fileio.join(output_dir, layout.inputs_file(generation)), data)
    return _known(rows)


def read_known(output_dir: str, history: list[dict[str, Any]]) -> tuple[Known, str | None]:
    """Every generation's inputs (`history`: the manifest's generations, oldest first), with
    perceptual hashes only from the generations that made this version's (`perceptual_hash.NAME`;
    another version's bits mean other things); and the first other hash seen, if any (a history
    entry that names none predates the name: an earlier version's, or no hashes)."""
    known: Known = {}
    other = None
    for g, entry in enumerate(history):
        name = entry.get("hash", perceptual_hash.UNNAMED)
        known.update(read_inputs(output_dir, g, hashes=name == perceptual_hash.NAME))
        other = other or (name if name not in (None, perceptual_hash.NAME) else None)
    return known, other


def read_inputs(output_dir: str, generation: int, *, hashes: bool = True) -> Known:
    """A generation's inputs, as written by `write_inputs` (rows of 3 before sizes and times were
    recorded); hashes=False leaves their perceptual hashes out (another version's)."""
    path = fileio.join(output_dir, layout.inputs_file(generation))
    return _known(json.loads(gzip.decompress(fileio.read_bytes(path))), hashes)


def _known(rows: list[list[Any]], hashes: bool = True) -> Known:
    """Inputs-list rows as key -> (sha256, split, listed, perceptual hash, annotations digest);
    rows of 3 predate the listing, rows of 5 the hash, rows of 6 the digest."""
    return {
        row[0]: (
            row[1],
            row[2],
            (row[3], row[4]) if len(row) >= 5 else None,
            row[5] if len(row) >= 6 and hashes else None,
            row[6] if len(row) >= 7 else None,
        )
        for row in rows
    }
