"""Conversion on Apache Beam: one Beam element per shard, written with the local runner's code.

The driver plans as usual and writes each pending shard's items to a plan file in the work folder
(`.shardfeed/plans/<shard>.json`), so the pipeline graph carries only shard names, whatever the
dataset size. Each worker reads its plan, encodes the items with `records.encode_items` and writes
the shard with `shards.write_shard` (partial manifest included); the driver then merges the
partial manifests exactly as the local runner does. Same inputs and seed: byte-identical output.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from typing import Any

from shardfeed import fileio, shards
from shardfeed.images import ImageOptions
from shardfeed.lazy import apache_beam
from shardfeed.records import EncodedRecord, SkippedItem, encode_items
from shardfeed.sources import Discovery, Item

CHUNK_SIZE = 32


def write_shards(
    plans: list[Any],
    output_dir: str,
    work_dir: str,
    discovery: Discovery,
    options: Any,
    beam_options: str | list[str] | None,
) -> None:
    """Runs the Beam pipeline that writes `plans` (a list of convert.ShardPlan)."""
    beam = apache_beam()
    from apache_beam.options.pipeline_options import PipelineOptions

    if not plans:
        return
    flags = shlex.split(beam_options) if isinstance(beam_options, str) else list(beam_options or [])
    plan_dir = fileio.join(work_dir, "plans")
    fileio.makedirs(plan_dir)
    for plan in plans:
        rows = [[i.key, i.label, i.split, i.size, list(i.array_key) if i.array_key else None] for i in plan.items]
        fileio.write_text_atomic(fileio.join(plan_dir, plan.file + ".json"), json.dumps(rows))
    writer = _ShardWriter(
        output_dir,
        work_dir,
        discovery.base,
        discovery.class_names,
        options.image,
        options.label_offset,
        options.compression,
    )
    with beam.Pipeline(options=PipelineOptions(flags)) as pipeline:
        _ = (
            pipeline
            | "Shards" >> beam.Create([(plan.split, plan.file) for plan in plans])
            | "Spread" >> beam.Reshuffle()
            | "EncodeAndWrite" >> beam.Map(writer)
        )


class _ShardWriter:
    """The per-shard work, as a picklable callable for Beam."""

    def __init__(
        self,
        output_dir: str,
        work_dir: str,
        base: str,
        class_names: list[str] | None,
        image: ImageOptions,
        label_offset: int,
        compression: str | None,
    ) -> None:
        self.output_dir, self.work_dir, self.base = output_dir, work_dir, base
        self.class_names, self.image, self.label_offset = class_names, image, label_offset
        self.compression = compression

    def __call__(self, task: tuple[str, str]) -> str:
        split, file = task
        rows = json.loads(fileio.read_bytes(fileio.join(self.work_dir, "plans", file + ".json")))
        items = [Item(k, label, s, size, tuple(a) if a else None) for k, label, s, size, a in rows]
        shards.write_shard(
            self.output_dir,
            self.work_dir,
            split,
            file,
            self._encoded(items),
            class_names=self.class_names,
            compression=self.compression,
        )
        return file

    def _encoded(self, items: list[Item]) -> Iterator[EncodedRecord | SkippedItem]:
        for start in range(0, len(items), CHUNK_SIZE):
            yield from encode_items(
                items[start : start + CHUNK_SIZE], self.base, self.class_names, self.image, self.label_offset
            )
