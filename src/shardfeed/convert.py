"""Convert a source into sharded TFRecords: plan, encode in parallel, write, resume, merge.

Output folder layout:
    <split>-00000-of-00008 ...   shards (names from the template)
    index/<shard>.idx            DALI-style record index of each shard
    manifest.json                written last; its presence means the conversion is complete
    labels.txt, report.json      label map; every skipped/converted/duplicate input with a reason
    .shardfeed/                  work folder of an unfinished conversion (state + partial manifests)
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import multiprocessing
import os
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from tqdm import tqdm

from shardfeed import fileio, manifest, sharding, shards, splits
from shardfeed.images import ImageOptions
from shardfeed.records import EncodedRecord, SkippedItem, encode_items, hash_items
from shardfeed.sources import Discovery, Item, Source, SourceError, resolve_source
from shardfeed.version import __version__

log = logging.getLogger(__name__)
WORK_DIR = ".shardfeed"
STATE_NAME = "state.json"
CHUNK_SIZE = 32  # items per worker task: big enough to amortise IPC, small enough to balance
COMPRESSIONS = (None, "gzip")
RUNNERS = ("local", "beam")


class ConvertError(RuntimeError):
    """The conversion cannot go ahead or failed; the message says why and what to do."""


@dataclass(frozen=True)
class ConvertOptions:
    """Everything that decides the bytes written (and so goes into the manifest).

    Attributes:
        split: 'train=0.8,validation=0.2' style fractions (default that; 'test=1' for unlabeled
            data; must stay None for a source that is already split).
        stratify: split each class in the same proportions (default True).
        seed: seeds the split assignment and the record order (default 0).
        shards: shards per split: an int for every split, or 'train=16,validation=4'.
        shard_size: target bytes per shard ('128MB'); default: mean shard <= 200 MB.
        by_class: write one shard set per class instead of mixing classes.
        name_template: shard file names; default '{split}-{shard:05d}-of-{num_shards:05d}'.
        compression: None or 'gzip'.
        label_offset: added to class ids (1 for readers that reserve 0 for background).
        dedupe: drop exact duplicate images (the later key in sorted order is dropped).
        image: image checks and write-time transforms.
    """

    split: str | Mapping[str, float] | None = None
    stratify: bool = True
    seed: int = 0
    shards: int | str | Mapping[str, int] | None = None
    shard_size: int | str | None = None
    by_class: bool = False
    name_template: str | None = None
    compression: str | None = None
    label_offset: int = 0
    dedupe: bool = False
    image: ImageOptions = field(default_factory=ImageOptions)

    def __post_init__(self) -> None:
        if self.split is not None:
            splits.parse_split_spec(self.split)
        if self.shards is not None and self.shard_size is not None:
            raise ValueError("pass shards or shard_size, not both")
        sharding.parse_shard_counts(self.shards if not isinstance(self.shards, Mapping) else dict(self.shards))
        if self.shard_size is not None:
            sharding.parse_size(self.shard_size)
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {list(COMPRESSIONS)}, got {self.compression!r}")
        if not isinstance(self.label_offset, int) or self.label_offset < 0:
            raise ValueError(f"label_offset must be a non-negative integer, got {self.label_offset!r}")
        sharding.validate_template(self.template, by_class=self.by_class)

    @property
    def template(self) -> str:
        if self.name_template:
            return self.name_template
        return sharding.DEFAULT_BY_CLASS_TEMPLATE if self.by_class else sharding.DEFAULT_TEMPLATE

    def settings(self) -> dict[str, Any]:
        """The JSON form stored in the manifest and compared on re-runs."""
        shard_counts = sharding.parse_shard_counts(
            dict(self.shards) if isinstance(self.shards, Mapping) else self.shards
        )
        return {
            "split": splits.parse_split_spec(self.split) if self.split is not None else None,
            "stratify": self.stratify,
            "seed": self.seed,
            "shards": shard_counts,
            "shard_size": sharding.parse_size(self.shard_size) if self.shard_size is not None else None,
            "by_class": self.by_class,
            "name_template": self.template,
            "compression": self.compression,
            "label_offset": self.label_offset,
            "dedupe": self.dedupe,
            "image": asdict(self.image),
        }


@dataclass(frozen=True)
class ShardPlan:
    """One shard to write: its split, file name and items in record order."""

    split: str
    file: str
    items: list[Item]


@dataclass
class ConversionResult:
    """The outcome of `convert`."""

    output_dir: str
    manifest: manifest.Manifest
    num_inputs: int
    num_written: int
    num_skipped: int
    num_converted: int
    num_duplicates: int
    shards_written: int
    shards_resumed: int
    already_complete: bool = False
    seconds: float = 0.0

    def summary(self) -> str:
        """A few human-readable lines about the conversion."""
        if self.already_complete:
            return f"{self.output_dir}: already converted with these settings; nothing to do."
        lines = [f"Wrote {self.num_written} of {self.num_inputs} images to {self.output_dir} in {self.seconds:.1f}s"]
        for name in self.manifest.split_names:
            info = self.manifest.split(name)
            lines.append(
                f"  {name}: {info.num_records} records in {len(info.shards)} shards, {info.num_bytes / 1e6:.1f} MB"
            )
        if self.shards_resumed:
            lines.append(f"  resumed: {self.shards_resumed} shards were already complete")
        extra = f"{self.num_skipped} skipped, {self.num_converted} converted, {self.num_duplicates} duplicate groups"
        lines.append(f"  {extra} (details: {fileio.join(self.output_dir, manifest.REPORT_NAME)})")
        return "\n".join(lines)


def convert(
    source: str | Source,
    output_dir: str,
    *,
    split: str | Mapping[str, float] | None = None,
    stratify: bool = True,
    seed: int = 0,
    shards: int | str | Mapping[str, int] | None = None,
    shard_size: int | str | None = None,
    by_class: bool = False,
    name_template: str | None = None,
    compression: str | None = None,
    label_offset: int = 0,
    dedupe: bool = False,
    resize: int | None = None,
    max_size: int | None = None,
    center_crop: int | None = None,
    image_format: str = "keep",
    quality: int = 95,
    check: str = "decode",
    array_encoding: str = "png",
    strict: bool = False,
    workers: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
    runner: str = "local",
    beam_options: str | list[str] | None = None,
) -> ConversionResult:
    """Converts an image dataset into sharded TFRecords with a manifest.

    Args:
        source: a class-per-folder tree, a CSV/TSV list, an .npz/.npy file, or a source object
            (`FolderSource`, `FilenameSource`, `CsvSource`, `ArraySource`, `UnlabeledSource`).
        output_dir: the folder to write (local path or any TensorFlow filesystem URL).
        strict: fail on the first input that cannot be used instead of reporting it.
        workers: processes encoding images (default: all cores; 1 runs in this process).
        overwrite: replace a conversion written with other settings or inputs.
        progress: show a progress bar on stderr.
        runner: 'local' (a process pool here) or 'beam' (an Apache Beam pipeline: same plan, same
            encoder and shard writer, byte-identical output; needs `shardfeed[beam]`).
        beam_options: Beam pipeline flags, e.g. "--runner=DataflowRunner --project=p --region=r
            --temp_location=gs://b/tmp" (default: Beam's local DirectRunner).
        Other arguments: see `ConvertOptions` and `ImageOptions`.

    Returns:
        A ConversionResult; its `manifest` describes what was written.

    Raises:
        SourceError, ConvertError, ValueError: with a message that names the problem.
    """
    options = ConvertOptions(
        split=split,
        stratify=stratify,
        seed=seed,
        shards=shards,
        shard_size=shard_size,
        by_class=by_class,
        name_template=name_template,
        compression=compression,
        label_offset=label_offset,
        dedupe=dedupe,
        image=ImageOptions(
            resize=resize,
            max_size=max_size,
            center_crop=center_crop,
            image_format=image_format,
            quality=quality,
            check=check,
            array_encoding=array_encoding,
        ),
    )
    workers = (os.cpu_count() or 1) if workers is None else workers
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if runner not in RUNNERS:
        raise ValueError(f"runner must be one of {list(RUNNERS)}, got {runner!r}")
    if runner == "beam":
        from shardfeed.lazy import apache_beam

        apache_beam()  # fail now, with the install hint, not after planning
        workers = 1  # the pipeline does the parallel work
    return _Conversion(
        resolve_source(source), output_dir, options, strict, workers, overwrite, progress, runner, beam_options
    ).run()


class _Conversion:
    """One run of `convert`; holds the plan and the output folder's state."""

    def __init__(
        self,
        source: Source,
        output_dir: str,
        options: ConvertOptions,
        strict: bool,
        workers: int,
        overwrite: bool,
        progress: bool,
        runner: str = "local",
        beam_options: str | list[str] | None = None,
    ) -> None:
        self.source = source
        self.output_dir = output_dir
        self.options = options
        self.strict = strict
        self.workers = workers
        self.overwrite = overwrite
        self.progress = progress
        self.work_dir = fileio.join(output_dir, WORK_DIR)
        self.runner = runner
        self.beam_options = beam_options

    def run(self) -> ConversionResult:
        start = time.monotonic()
        with _executor(self.workers) as executor:
            return self._run(executor, start)

    def _run(self, executor: Executor | None, start: float) -> ConversionResult:
        discovery = self.source.discover()
        if not discovery.items:
            raise SourceError(
                f"no images found in {discovery.root!r} ({len(discovery.skipped)} files could not be used)"
            )
        self._fail_if_strict(discovery.skipped)
        state = {
            "source": {
                "kind": discovery.kind,
                "path": discovery.root,
                "fingerprint": discovery.fingerprint(),
                "num_inputs": len(discovery.items) + len(discovery.skipped),
            },
            "settings": self.options.settings(),
        }
        existing = self._check_output(state)
        if existing is not None:
            return self._already_complete(existing, start)
        dropped = self._dedupe(discovery, executor) if self.options.dedupe else []
        plans = plan_shards(discovery, self.options, dropped_keys={k for k, _ in dropped})
        fileio.makedirs(fileio.join(self.output_dir, shards.INDEX_DIR))
        fileio.makedirs(fileio.join(self.work_dir, "parts"))
        fileio.write_text_atomic(fileio.join(self.work_dir, STATE_NAME), manifest.dumps(state))
        results, resumed = self._write_all(plans, discovery, executor)
        duplicates = _duplicate_groups(self.work_dir, results)
        data = _merge(state, duplicates, discovery, self.options, results, dropped)
        _write_report(self.output_dir, duplicates, discovery, results, dropped)
        manifest.write_labels(self.output_dir, discovery.class_names, self.options.label_offset)
        manifest.write(self.output_dir, data)
        fileio.rmtree(self.work_dir)
        written = sum(r.num_records for r in results)
        return ConversionResult(
            self.output_dir,
            manifest.read(self.output_dir),
            state["source"]["num_inputs"],
            written,
            data["num_skipped"],
            sum(data["conversions"].values()),
            data["num_duplicates"],
            len(results) - resumed,
            resumed,
            seconds=time.monotonic() - start,
        )

    def _fail_if_strict(self, skipped: list[tuple[str, str]]) -> None:
        if self.strict and skipped:
            key, reason = skipped[0]
            raise ConvertError(f"{key}: {reason} (--strict: every input must be usable; {len(skipped)} are not)")

    def _check_output(self, state: dict[str, Any]) -> manifest.Manifest | None:
        """Returns the manifest when this exact conversion is already complete; else prepares
        the folder: resume a matching unfinished run, refuse a different one (or wipe it)."""
        state_file = fileio.join(self.work_dir, STATE_NAME)
        if fileio.exists(fileio.join(self.output_dir, manifest.MANIFEST_NAME)):
            old = manifest.read(self.output_dir)
            previous = {"source": old.data["source"], "settings": old.data["settings"]}
            if previous == state:
                fileio.rmtree(self.work_dir)
                return old
            self._refuse_or_clean(previous, state, "a finished conversion")
        elif fileio.exists(state_file):
            previous = json.loads(fileio.read_bytes(state_file))
            if previous != state:
                self._refuse_or_clean(previous, state, "an unfinished conversion")
        elif fileio.isdir(self.output_dir) and fileio.listdir(self.output_dir) and not self.overwrite:
            raise ConvertError(
                f"{self.output_dir!r} is not empty and holds no shardfeed conversion; choose an empty "
                "folder, or pass --overwrite to write into it anyway"
            )
        return None

    def _refuse_or_clean(self, previous: dict[str, Any], state: dict[str, Any], what: str) -> None:
        if not self.overwrite:
            raise ConvertError(
                f"{self.output_dir!r} holds {what} with other settings or inputs "
                f"({_describe_difference(previous, state)}); pass --overwrite to replace it, or "
                "choose another output folder"
            )
        _remove_conversion(self.output_dir)

    def _already_complete(self, existing: manifest.Manifest, start: float) -> ConversionResult:
        data = existing.data
        total = sum(existing.split(s).num_records for s in existing.split_names)
        return ConversionResult(
            self.output_dir,
            existing,
            data["source"]["num_inputs"],
            total,
            data["num_skipped"],
            sum(data["conversions"].values()),
            data["num_duplicates"],
            0,
            0,
            already_complete=True,
            seconds=time.monotonic() - start,
        )

    def _dedupe(self, discovery: Discovery, executor: Executor | None) -> list[tuple[str, str]]:
        """Returns (dropped key, kept key) for each later exact copy of an earlier input.

        Only inputs whose size some other input shares are read and hashed (exact copies have
        equal sizes), so a folder with few duplicates costs a stat per file, not a second read.
        """
        sizes = Counter(item.size for item in discovery.items)
        candidates = [item for item in discovery.items if sizes[item.size] > 1]
        chunks = (candidates[i : i + CHUNK_SIZE * 4] for i in range(0, len(candidates), CHUNK_SIZE * 4))
        hashes = itertools.chain.from_iterable(
            result
            for _, result in _map_ordered(
                executor, hash_items, ((None, (c, discovery.base)) for c in chunks), self.workers
            )
        )
        first: dict[str, str] = {}
        dropped = []
        for item, digest in zip(candidates, hashes, strict=True):
            if digest is None:
                continue
            if digest in first:
                dropped.append((item.key, first[digest]))
            else:
                first[digest] = item.key
        return dropped

    def _write_all(
        self, plans: list[ShardPlan], discovery: Discovery, executor: Executor | None
    ) -> tuple[list[shards.ShardResult], int]:
        """Writes every shard not already committed; returns all shard results in plan order."""
        done = {p.file: _slim(shards.read_part(self.work_dir, p.file, self.output_dir)) for p in plans}
        for name in fileio.listdir(self.output_dir):
            if name.endswith(shards.INCOMPLETE):
                fileio.remove(fileio.join(self.output_dir, name))
        pending = [p for p in plans if done[p.file] is None]
        if self.runner == "beam":
            from shardfeed import beam_runner

            beam_runner.write_shards(
                pending, self.output_dir, self.work_dir, discovery, self.options, self.beam_options
            )
            for plan in pending:
                done[plan.file] = _slim(shards.read_part(self.work_dir, plan.file, self.output_dir))
                if done[plan.file] is None:
                    raise ConvertError(f"the Beam pipeline finished without committing shard {plan.file}")
            self._fail_if_strict([s for p in pending for s in done[p.file].skipped])  # type: ignore[union-attr]
        else:
            self._write_local(plans, pending, done, discovery, executor)
        results = [done[p.file] for p in plans]
        return [r for r in results if r is not None], len(plans) - len(pending)

    def _write_local(
        self,
        plans: list[ShardPlan],
        pending: list[ShardPlan],
        done: dict[str, shards.ShardResult | None],
        discovery: Discovery,
        executor: Executor | None,
    ) -> None:
        """Encodes in the process pool, in order, and writes the shards here as chunks arrive."""
        total = sum(len(p.items) for p in plans)
        bar = tqdm(
            total=total,
            initial=total - sum(len(p.items) for p in pending),
            unit="img",
            desc="convert",
            file=sys.stderr,
            disable=not self.progress,
            smoothing=0.1,
        )
        # Chunks are cut and submitted lazily: no per-item task list is ever built.
        tasks = (
            (i, p.items[j : j + CHUNK_SIZE]) for i, p in enumerate(pending) for j in range(0, len(p.items), CHUNK_SIZE)
        )
        extra = (discovery.base, discovery.class_names, self.options.image, self.options.label_offset)
        stream = _map_ordered(executor, encode_items, ((task, (task[1], *extra)) for task in tasks), self.workers)
        flat = ((i, r) for (i, _), chunk in stream for r in self._checked(chunk, bar))
        with bar:
            for i, group in itertools.groupby(flat, key=lambda pair: pair[0]):
                plan = pending[i]
                done[plan.file] = _slim(
                    shards.write_shard(
                        self.output_dir,
                        self.work_dir,
                        plan.split,
                        plan.file,
                        (r for _, r in group),
                        class_names=discovery.class_names,
                        compression=self.options.compression,
                    )
                )

    def _checked(self, chunk: list[EncodedRecord | SkippedItem], bar: Any) -> list[EncodedRecord | SkippedItem]:
        bar.update(len(chunk))
        if self.strict:
            bad = [r for r in chunk if isinstance(r, SkippedItem)]
            self._fail_if_strict([(r.key, r.reason) for r in bad])
        return chunk


class _executor:
    """A process pool for `workers` > 1 (None for in-process work), shut down on exit."""

    def __init__(self, workers: int) -> None:
        self.pool: ProcessPoolExecutor | None = None
        if workers > 1:
            # fork is fast and safe while TensorFlow (and its threads) is not loaded here.
            method = "fork" if sys.platform == "linux" and "tensorflow" not in sys.modules else "spawn"
            self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method))
            # Start the workers now, while this process is small: forked later, each would carry
            # a copy of the item list, and worker memory would grow with the dataset.
            list(self.pool.map(_warm_up, range(workers)))

    def __enter__(self) -> Executor | None:
        return self.pool

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def _slim(result: shards.ShardResult | None) -> shards.ShardResult | None:
    """A shard result without its per-record list, which stays on disk in the partial manifest
    (so the converter's memory does not grow with the number of images)."""
    return None if result is None else dataclasses.replace(result, records=[])


def _warm_up(_: int) -> None:
    """A no-op task that makes the pool start its processes."""


def _map_ordered(
    executor: Executor | None, fn: Callable[..., Any], tasks: Iterable[tuple[Any, tuple[Any, ...]]], workers: int
) -> Iterator[tuple[Any, Any]]:
    """(tag, fn(*args)) for each (tag, args), in order, with at most 2 tasks per worker in flight
    (bounded memory whatever the dataset size)."""
    if executor is None:
        yield from ((tag, fn(*args)) for tag, args in tasks)
        return
    window: deque[tuple[Any, Future[Any]]] = deque()
    for tag, args in tasks:
        window.append((tag, executor.submit(fn, *args)))
        if len(window) >= 2 * workers:
            head, future = window.popleft()
            yield head, future.result()
    while window:
        head, future = window.popleft()
        yield head, future.result()


def plan_shards(
    discovery: Discovery, options: ConvertOptions, *, dropped_keys: set[str] | None = None
) -> list[ShardPlan]:
    """Assigns items to splits and shards. Pure: depends only on the items and the options."""
    items = [i for i in discovery.items if i.key not in (dropped_keys or set())]
    if discovery.presplit:
        if options.split is not None:
            names = sorted({i.split for i in items if i.split})
            raise ConvertError(f"the source is already split into {names}; drop the split option to keep those splits")
        by_split = splits.group_presplit(items)
    else:
        default = "test=1" if discovery.class_names is None else splits.DEFAULT_SPLIT
        fractions = splits.parse_split_spec(options.split or default)
        by_split = splits.assign_splits(items, fractions, seed=options.seed, stratify=options.stratify)
    counts = sharding.parse_shard_counts(
        dict(options.shards) if isinstance(options.shards, Mapping) else options.shards
    )
    if isinstance(counts, dict) and set(counts) != set(by_split):
        raise ConvertError(f"shards given for splits {sorted(counts)} but the splits are {sorted(by_split)}")
    shard_size = sharding.parse_size(options.shard_size) if options.shard_size is not None else None
    ratio = _size_ratio(items, discovery, options) if counts is None else 1.0
    plans: list[ShardPlan] = []
    for split_name, members in by_split.items():
        ordered = splits.seeded_order(members, options.seed)
        groups: list[tuple[str | None, list[Item]]] = [(None, ordered)]
        if options.by_class and discovery.class_names is not None:
            groups = [
                (name, [i for i in ordered if i.label == label]) for label, name in enumerate(discovery.class_names)
            ]
        for label_name, group in groups:
            if isinstance(counts, dict):
                count = min(counts[split_name], len(group))
            elif counts is not None:
                count = min(counts, len(group))
            else:
                count = sharding.num_shards(len(group), int(sum(i.size for i in group) * ratio), shard_size=shard_size)
            for index, (start, end) in enumerate(sharding.shard_bounds(len(group), count)):
                name = sharding.shard_name(options.template, split_name, index, count, label_name)
                plans.append(ShardPlan(split_name, name, group[start:end]))
    names = [p.file for p in plans]
    if len(set(names)) != len(names):
        raise ConvertError(f"shard name template {options.template!r} gives two shards the same name")
    return plans


def _size_ratio(items: list[Item], discovery: Discovery, options: ConvertOptions, sample: int = 16) -> float:
    """Output bytes per input byte, measured on a fixed sample when images are re-encoded."""
    if not options.image.transforms or not items:
        return 1.0
    chosen = splits.seeded_order(items, options.seed)[:sample]
    encoded = [
        r
        for r in encode_items(chosen, discovery.base, discovery.class_names, options.image, 0)
        if isinstance(r, EncodedRecord)
    ]
    source = sum(i.size for i in chosen if i.key in {r.key for r in encoded})
    return sum(len(r.data) for r in encoded) / source if source else 1.0


def _merge(
    state: dict[str, Any],
    duplicates: list[dict[str, Any]],
    discovery: Discovery,
    options: ConvertOptions,
    results: list[shards.ShardResult],
    dropped: list[tuple[str, str]],
) -> dict[str, Any]:
    """The manifest from the partial manifests of all shards."""
    split_data: dict[str, dict[str, Any]] = {}
    for result in results:
        entry = split_data.setdefault(
            result.split, {"num_records": 0, "num_bytes": 0, "class_counts": {}, "shards": []}
        )
        entry["num_records"] += result.num_records
        entry["num_bytes"] += result.num_bytes
        for name, count in result.class_counts.items():
            entry["class_counts"][name] = entry["class_counts"].get(name, 0) + count
        entry["shards"].append(
            {
                "file": result.file,
                "index_file": result.index_file,
                "num_records": result.num_records,
                "num_bytes": result.num_bytes,
                "sha256": result.sha256,
            }
        )
    conversions: dict[str, int] = {}
    for result in results:
        for _, reason in result.converted:
            for part in reason.split(", "):
                conversions[part] = conversions.get(part, 0) + 1
    return {
        "format": manifest.FORMAT_NAME,
        "version": manifest.MANIFEST_VERSION,
        "created_by": f"shardfeed {__version__}",
        **state,
        "labels": discovery.class_names,
        "label_offset": options.label_offset,
        "features": _feature_types(discovery.class_names is not None),
        "splits": split_data,
        "conversions": conversions,
        "num_skipped": len(discovery.skipped) + sum(len(r.skipped) for r in results),
        "num_duplicates": len(duplicates),
        "num_dropped_duplicates": len(dropped),
        "report": manifest.REPORT_NAME,
    }


def _feature_types(labelled: bool) -> dict[str, str]:
    types = {
        "image/encoded": "bytes",
        "image/format": "bytes",
        "image/height": "int64",
        "image/width": "int64",
        "image/channels": "int64",
        "image/colorspace": "bytes",
        "image/filename": "bytes",
        "image/key/sha256": "bytes",
    }
    if labelled:
        types.update({"image/class/label": "int64", "image/class/text": "bytes"})
    return types


def _duplicate_groups(work_dir: str, results: list[shards.ShardResult]) -> list[dict[str, Any]]:
    """Groups of records with identical source bytes; `leak` when a group spans splits.

    Streams the partial manifests twice: first 8-byte digest prefixes into one compact array to
    find candidate duplicates, then the keys of just those records.
    """
    prefixes = [
        np.array([int(digest[:16], 16) for _, digest in _part(work_dir, r).records], dtype=np.uint64) for r in results
    ]
    flat = np.concatenate(prefixes) if prefixes else np.zeros(0, np.uint64)
    values, counts = np.unique(flat, return_counts=True)
    repeated = set(values[counts > 1].tolist())
    if not repeated:
        return []
    by_hash: dict[str, list[tuple[str, str]]] = {}
    for result in results:
        for key, digest in _part(work_dir, result).records:
            if int(digest[:16], 16) in repeated:
                by_hash.setdefault(digest, []).append((key, result.split))
    groups = []
    for digest in sorted(by_hash):
        members = sorted(by_hash[digest])
        if len(members) > 1:
            group_splits = sorted({s for _, s in members})
            groups.append(
                {
                    "sha256": digest,
                    "files": [k for k, _ in members],
                    "splits": group_splits,
                    "leak": len(group_splits) > 1,
                }
            )
    return groups


def _part(work_dir: str, result: shards.ShardResult) -> shards.ShardResult:
    return shards.ShardResult.from_json(fileio.read_bytes(shards.part_path(work_dir, result.file)).decode())


def _write_report(
    output_dir: str,
    duplicates: list[dict[str, Any]],
    discovery: Discovery,
    results: list[shards.ShardResult],
    dropped: list[tuple[str, str]],
) -> None:
    """report.json: every input that is not in a shard as it was, with the reason."""
    skipped = sorted(discovery.skipped + [s for r in results for s in r.skipped])
    report = {
        "source": discovery.root,
        "skipped": [{"file": k, "reason": why} for k, why in skipped],
        "converted": [{"file": k, "reason": why} for k, why in sorted(c for r in results for c in r.converted)],
        "warnings": [{"file": k, "warning": w} for k, w in sorted(x for r in results for x in r.warnings)],
        "duplicates": duplicates,
        "dropped_duplicates": [{"file": k, "duplicate_of": kept} for k, kept in sorted(dropped)],
    }
    fileio.write_text_atomic(fileio.join(output_dir, manifest.REPORT_NAME), manifest.dumps(report))


def _describe_difference(previous: dict[str, Any], state: dict[str, Any]) -> str:
    diffs = []
    if previous.get("source", {}).get("fingerprint") != state["source"]["fingerprint"]:
        diffs.append("the input files differ")
    old, new = previous.get("settings", {}), state["settings"]
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            diffs.append(f"{key}: {old.get(key)!r} -> {new.get(key)!r}")
    return "; ".join(diffs) or "different state"


def _remove_conversion(output_dir: str) -> None:
    """Deletes what a shardfeed conversion wrote into `output_dir`, and nothing else."""
    names = set()
    manifest_file = fileio.join(output_dir, manifest.MANIFEST_NAME)
    if fileio.exists(manifest_file):
        old = json.loads(fileio.read_bytes(manifest_file))
        names = {s["file"] for split in old.get("splits", {}).values() for s in split["shards"]}
    parts_dir = fileio.join(output_dir, WORK_DIR, "parts")
    if fileio.isdir(parts_dir):
        names |= {n[: -len(".json")] for n in fileio.listdir(parts_dir) if n.endswith(".json")}
    for name in fileio.listdir(output_dir):
        if name in names or name.endswith(shards.INCOMPLETE):
            fileio.remove(fileio.join(output_dir, name))
    for name in (manifest.MANIFEST_NAME, manifest.LABELS_NAME, manifest.REPORT_NAME):
        fileio.remove(fileio.join(output_dir, name))
    fileio.rmtree(fileio.join(output_dir, shards.INDEX_DIR))
    fileio.rmtree(fileio.join(output_dir, WORK_DIR))
