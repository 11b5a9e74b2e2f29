"""A read resolved once: which records this worker reads, through which pipeline, and how many.

`load` and `steps_per_epoch` both start by resolving a `ReadPlan` from the same arguments, so
the count one gives and the batches the other yields cannot disagree: the split is opened once
(shards, schema, manifest), the worker's share is validated in one type (`WorkerShare`), the
pipeline is chosen, and every rule on whether an option applies to this data, seed or service is
checked here, before anything is counted or read. The option objects check what they can tell by
themselves (read/options.py).
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from dataclasses import dataclass
from typing import Any

from shardfeed.errors import OptionError
from shardfeed.format import fileio
from shardfeed.format.schema import (
    FILENAME,
    ForeignKeys,
    Schema,
)
from shardfeed.format.tasks import task_of
from shardfeed.read import foreign, shardset
from shardfeed.read.mixture import MixedSplit, Mixture, open_mixture
from shardfeed.read.options import BATCH_SIZE, DecodeOptions, ReadOptions, ServiceOptions
from shardfeed.read.order import WorkerShare
from shardfeed.read.shardset import DataPath, ShardSet


@dataclass(frozen=True)
class ReadPlan:
    """Everything `load` needs to build its pipeline, resolved and checked.

    Attributes:
        split: the split read.
        read: the read options as given.
        shards: all shards of the split (the manifest inside for a converted folder).
        schema: how records are parsed (with the file-name feature when asked for).
        share: this input pipeline's part of the split.
        training: shuffle, augment, drop the last partial batch.
        seed: the user's seed (None: not reproducible).
        base_seed: the seed, or a random one: the index pipeline's global order and the first
            half of its records' augmentation seed pairs.
        batch_size: per input pipeline (with an input context: the per-replica batch).
        repeat: one iteration repeats forever.
        service: where the pipeline runs, when on a tf.data service.
    """

    split: str
    read: ReadOptions
    shards: ShardSet
    schema: Schema
    share: WorkerShare
    training: bool
    seed: int | None
    base_seed: int
    batch_size: int
    repeat: bool = False
    service: ServiceOptions | None = None
    mixture: MixedSplit | None = None

    @property
    def by_index(self) -> bool:
        """Records are read through the index files (global order, even splits, a mixture)."""
        return self.read.by_index or self.mixture is not None

    @property
    def epoch_records(self) -> int:
        """Records of one epoch of the whole split (all workers): a mixture's mixed epoch."""
        return self.mixture.epoch_length if self.mixture is not None else self.shards.num_records

    @property
    def deterministic(self) -> bool:
        return self.read.keeps_order(training=self.training, seed=self.seed)

    @property
    def drop_remainder(self) -> bool:
        return self.read.drops_remainder(training=self.training)

    @property
    def worker_shards(self) -> ShardSet:
        """The whole shards this worker reads (the shard pipeline)."""
        return self.shards.for_worker(self.share) if self.share.is_part else self.shards

    def records_per_pass(self) -> int:
        """Records this worker reads in one full epoch (before any filter or skipped corrupt record)."""
        if self.by_index:
            return self.share.records(self.epoch_records)  # the count, not the positions array
        return self.worker_shards.num_records

    def batches_per_pass(self) -> int:
        """Batches of one full epoch: what `steps_per_epoch` answers."""
        batches = self.records_per_pass() / self.batch_size
        return math.floor(batches) if self.drop_remainder else math.ceil(batches)

    @property
    def known_length(self) -> bool:
        """Whether one iteration yields exactly `batches_per_pass()` batches: one pass, not
        repeated, not resumed mid-epoch, nothing dropped at read time, not split across service
        workers."""
        read = self.read
        return not (
            self.repeat or self.service or read.filter_fn or read.skip_corrupt or read.start_step or read.start_record
        )


def resolve(
    path: DataPath,
    *,
    split: str = "train",
    read: ReadOptions | None = None,
    training: bool | None = None,
    seed: int | None = None,
    batch_size: int = BATCH_SIZE,
    repeat: bool = False,
    input_context: Any = None,
    service: str | ServiceOptions | None = None,
    decode: DecodeOptions | None = None,
    counting: bool = False,
) -> ReadPlan:
    """The plan for reading `path` with these arguments (`load`'s, see there); `counting` for
    `steps_per_epoch`, which has no seed to check.

    Raises:
        OptionError: an option that does not apply to this data, seed or service; a bad batch size.
        ManifestError, SourceError: no such split; foreign files that match nothing.
    """
    read = read or ReadOptions()
    service = ServiceOptions.of(service)
    _check_batch_size(batch_size)
    _check_applies(path, read, decode or DecodeOptions(), seed=seed, service=service, counting=counting)
    share = read.share
    if input_context is not None:
        if share.is_part:
            raise OptionError(
                "worker identity given twice: input_context and ReadOptions(num_workers, worker_index); "
                "pass one (input_context under a tf.distribute strategy)"
            )
        share = WorkerShare(input_context.num_input_pipelines, input_context.input_pipeline_id, read.even)
        batch_size = input_context.get_per_replica_batch_size(batch_size)
    mixed = open_mixture(path, split) if isinstance(path, Mixture) else None
    if mixed is not None:
        shards, schema = _mixed_shards(mixed, split)
    else:
        keys = read.foreign or ForeignKeys()
        shards, schema = shardset.open_split(
            path, split, image_key=keys.image_key, label_key=keys.label_key, compression=read.compression
        )
    schema = _task_schema(shards, schema, read)
    if read.with_filenames:
        schema = dataclasses.replace(schema, filename_key=FILENAME)
    if read.foreign is not None and read.foreign.label_offset is not None:
        schema = dataclasses.replace(schema, label_offset=read.foreign.label_offset)
    elif shards.label_range is not None and shards.label_range[0] >= 1 and not counting:
        warnings.warn(foreign.one_based_warning(shards.files, shards.label_range), UserWarning, stacklevel=3)
    plan = ReadPlan(
        split=split,
        read=read,
        shards=shards,
        schema=schema,
        share=share,
        training=(split == "train") if training is None else training,
        seed=seed,
        base_seed=seed if seed is not None else int.from_bytes(os.urandom(4), "little"),
        batch_size=batch_size,
        repeat=repeat,
        service=service,
        mixture=mixed,
    )
    _check_start_step(plan)
    _check_yields_batches(plan)
    if not read.skip_corrupt:
        shards.check_files()
    return plan


def _check_applies(
    path: DataPath,
    read: ReadOptions,
    decode: DecodeOptions,
    *,
    seed: int | None,
    service: ServiceOptions | None,
    counting: bool,
) -> None:
    """The rules on whether the options apply to this data, seed and service (checked before
    anything is opened or counted)."""
    if (read.epoch or read.start_step or read.start_record) and seed is None and not counting:
        raise OptionError(
            "epoch, start_step and start_record need a seed: the order must be the one the interrupted run saw"
        )
    if isinstance(path, Mixture):
        if read.balance or read.even or read.shuffle == "buffer":
            raise OptionError(
                "a Mixture reads its own seeded order (by index): balance=, even= and shuffle='buffer' do not "
                "apply to it"
            )
        if service is not None:
            raise OptionError("a Mixture reads by index in Python, which tf.data service workers cannot run")
        return
    if read.by_index and not shardset.is_converted_folder(path):
        raise OptionError(
            "shuffle='global', even splits and balance='class' read through the index files of a converted "
            f"folder; {path!r} has no manifest.json (`shardfeed adopt` writes one for other people's TFRecords)"
        )
    if counting and read.filter_fn is not None:
        raise OptionError(
            "filter_fn drops records while reading, so the batches of an epoch are not known in advance; "
            "count them by iterating the dataset once, or filter at convert time"
        )
    if service is not None:
        _check_service(read, decode)
    _check_bucket(path, decode)


def _task_schema(shards: ShardSet, schema: Schema, read: ReadOptions) -> Schema:
    """The schema for what the records hold beside the image: a segmentation folder's masks
    are read instead of a class id, a multi-label folder's ids as k-hot vectors.

    Raises:
        OptionError: balance='class' on a folder without a class per image (detection: its
            objects' classes, for repeat-factor sampling).
    """
    m = shards.manifest
    if m is None:
        return schema
    spec = task_of(m.header.task)
    if spec.one_label:
        return schema
    if read.balance and spec.balance is None:
        raise OptionError(
            f"balance='class' samples by each image's one class (or a detection image's objects); {m.path} holds "
            f"{spec.name} records"
        )
    label_key = schema.label_key if spec.target == "ids" else None  # a mask or objects instead of a label
    return dataclasses.replace(schema, task=spec, num_classes=len(m.labels or []), label_key=label_key)


def _check_bucket(path: DataPath, decode: DecodeOptions) -> None:
    """Shards in a bucket are read through a verified cache (this host's, or the service workers'
    mirrors), from a manifest."""
    paths = [path] if isinstance(path, str) else list(path) if isinstance(path, (list, tuple)) else []
    if not any(isinstance(p, str) and fileio.is_bucket(p) for p in paths):
        return
    if not shardset.is_converted_folder(path):
        raise OptionError(
            f"{paths[0]!r}: TFRecords in a bucket are read through a local cache that checks each shard against a "
            "manifest, and these have none; write one with `shardfeed adopt`, then load that folder"
        )
    if decode.decoder == "dali":
        raise OptionError("decoder='dali' reads shard files itself and cannot read a bucket; use decoder='tf'")


def _check_service(read: ReadOptions, decode: DecodeOptions) -> None:
    """Refuses what cannot be serialised to the service's workers, saying what to use instead."""
    if read.by_index:
        raise OptionError(
            "shuffle='global' and even splits read records by index in Python (IndexedRecords), which the "
            "service's workers cannot run; use shuffle='buffer' (the default) with service="
        )
    for name, value in (("filter_fn", read.filter_fn), ("map_fn", decode.map_fn)):
        if value is not None:
            raise OptionError(
                f"{name}= is a Python callable of this process and is not sent to the service's workers; "
                "apply it to the batches load returns instead (ds.map/ds.filter), or drop service="
            )
    if read.cache:
        raise OptionError("cache= would cache on each worker separately; drop cache= when reading through a service")


def _mixed_shards(mixed: MixedSplit, split: str) -> tuple[ShardSet, Schema]:
    """Every source's shards as one set (so one stat checks them all), and the first source's
    schema: labels arrive in the mixture's label map, stored with the first source's offset."""
    parts = [shardset.from_manifest(m, split) for m in mixed.manifests]
    files = [f for p in parts for f in p.files]
    counts = [c for p in parts for c in p.counts]
    sizes = [s for p in parts for s in p.sizes or []]
    sha256s = [s for p in parts for s in p.sha256s or []]
    shards = ShardSet(files, counts, None, mixed.manifests[0], sizes, sha256s=sha256s)
    _, first = shardset.open_split(mixed.manifests[0], split)
    if mixed.by_text:
        first = dataclasses.replace(first, label_names=tuple(mixed.class_names), label_offset=0)
    return shards, first


def _check_start_step(plan: ReadPlan) -> None:
    """A resume point inside this worker's epoch; balance only where it means something."""
    skip, records = plan.read.start_step * plan.batch_size, plan.records_per_pass()
    if skip > records:
        raise OptionError(f"start_step skips {skip} records but this worker has {records} per epoch")
    if plan.read.start_record > plan.epoch_records:
        raise OptionError(
            f"start_record {plan.read.start_record} is past the {plan.epoch_records} records of an epoch of "
            f"split {plan.split!r}"
        )
    if plan.mixture is not None and not plan.training:
        raise OptionError("a Mixture is a training stream; evaluate each source on its own (load(folder, ...))")
    if plan.read.balance and not plan.training:
        raise OptionError("balance='class' is a training sampler; evaluation reads every record once")
    if plan.read.balance and plan.shards.manifest is not None and plan.shards.manifest.labels is None:
        raise OptionError(f"balance='class' needs labels; {plan.shards.manifest.path} holds unlabeled images")


def _check_yields_batches(plan: ReadPlan) -> None:
    """A split with records must give this worker at least one batch: a worker's share smaller
    than a batch whose remainder is dropped yielded nothing at all, and `steps_per_epoch` 0."""
    if plan.epoch_records == 0 or plan.batches_per_pass() > 0:
        return
    records = plan.records_per_pass()
    share = plan.share
    whose = f"worker {share.index} of {share.count} (even={share.even!r}) gets" if share.is_part else "there are"
    raise OptionError(
        f"split {plan.split!r}: {whose} {records} of its {plan.epoch_records} records, fewer than one batch of "
        f"{plan.batch_size} with the remainder dropped: no batch at all; lower batch_size (or the number of workers), "
        "or keep the remainder (drop_remainder=False)"
    )


def _check_batch_size(batch_size: int) -> None:
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise OptionError(f"batch_size must be a positive integer, got {batch_size!r}")
