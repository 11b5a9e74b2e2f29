"""The input that kills a worker process, found and reported instead of ending the conversion.

Decoders and annotation libraries are native code: an input they crash on (a segmentation fault in
pycocotools' rasteriser on a NaN polygon was one, before masks.py checked polygons) kills the worker
process that reads it, and the pool then fails every task in flight (`BrokenProcessPool`) without
saying which task, let alone which input, the dead worker held. The local runner then hands the
shards that were in flight to `isolated_results`: their items are encoded a chunk at a time, each
chunk in a process of its own; a chunk whose process dies is encoded again an item at a time, and
an item whose process dies is reported (`SkippedItem`: "the worker process encoding it died
(SIGSEGV)"), never written and never lost. Every other item's record is what a pool worker makes
(the same function on the same items), so the shards' bytes do not depend on the crash.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator, Sequence

from shardfeed.parallel import CHUNK_SIZE, in_child
from shardfeed.write.encode import EncodedRecord, EncodingSpec, SkippedItem, encode_items
from shardfeed.write.items import Item

log = logging.getLogger(__name__)


def isolated_results(items: Sequence[Item], spec: EncodingSpec) -> Iterator[EncodedRecord | SkippedItem]:
    """The results of encoding `items`, in order, each chunk in a process of its own; an item
    whose process dies is a `SkippedItem` saying how it died."""
    for start in range(0, len(items), CHUNK_SIZE):
        chunk = list(items[start : start + CHUNK_SIZE])
        results, died = in_child(encode_items, chunk, spec)
        if died is None:
            yield from results
            continue
        for item in chunk:  # the chunk's process died: which item killed it
            alone, died = in_child(encode_items, [item], spec)
            if died is None:
                yield from alone
            else:
                log.warning("the process encoding %s died (%s): reported, not converted", item.key, _how(died))
                yield SkippedItem(item.key, f"the worker process encoding it died ({_how(died)}): not converted")


def _how(exit_code: int | None) -> str:
    """How a process ended, in words: 'SIGSEGV' for one a signal killed, else its exit code."""
    if exit_code is not None and exit_code < 0:
        try:
            return signal.Signals(-exit_code).name
        except ValueError:
            return f"signal {-exit_code}"
    return f"exit code {exit_code}"
