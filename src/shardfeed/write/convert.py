"""Convert a source into sharded TFRecords: discover, plan, encode in parallel, write, merge.

    source     -> discovered items and skipped files (sources/)
    plan       -> items to splits and shards, seeded order (planning.py)
    records    -> encoded by a process pool (local_runner.py) or Apache Beam (beam_runner.py)
    shards     -> committed one by one with their partial manifests (shards.py); resumable
    manifest   -> merged last, with the report (merge.py); the folder is complete once it exists

What the output folder holds, by name: format/layout.py (the folder's one contract).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from shardfeed.errors import ConvertError, OptionError, SourceError
from shardfeed.format import fileio, folder_lock, label_map, layout, manifest, tfds_metadata
from shardfeed.format.manifest import Manifest
from shardfeed.format.tasks import task_of
from shardfeed.parallel import WorkerPool
from shardfeed.write import dedupe, folder_state, local_runner, merge, notes, shards
from shardfeed.write.append import Append, AppendOutcome, appendable
from shardfeed.write.encode import EncodingSpec, SkippedItem
from shardfeed.write.images import UPSCALED
from shardfeed.write.inputs_list import write_inputs
from shardfeed.write.items import Discovery
from shardfeed.write.options import ConvertOptions
from shardfeed.write.planning import ShardPlan, plan_shards
from shardfeed.write.shards import WriteTarget
from shardfeed.write.sources import Source, empty_source_hint, listed, resolve_source
from shardfeed.write.splits import GroupMoves

RUNNERS = ("local", "beam", "dask")
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # no space, quota, file size limit


@dataclass
class ConversionResult:
    """The outcome of `convert`."""

    output_dir: str
    manifest: Manifest
    num_inputs: int
    num_written: int
    num_skipped: int
    num_converted: int
    num_duplicates: int
    shards_written: int
    shards_resumed: int
    already_complete: bool = False
    seconds: float = 0.0
    requested_splits: tuple[str, ...] = ()  # the splits --split asked for (none for a pre-split source)
    appended: AppendOutcome | None = None  # what `append=True` added to a finished folder

    @classmethod
    def of(
        cls,
        m: Manifest,
        *,
        shards_written: int,
        shards_resumed: int,
        start: float,
        already_complete: bool = False,
    ) -> ConversionResult:
        """The result of a conversion whose manifest is `m`, started at `start` (time.monotonic)."""
        return cls(
            m.path,
            m,
            m.source["num_inputs"],
            sum(m.split(s).num_records for s in m.split_names),
            m.counts.skipped,
            sum(m.conversions.values()),
            m.counts.duplicates,
            shards_written,
            shards_resumed,
            already_complete=already_complete,
            seconds=time.monotonic() - start,
        )

    def summary(self) -> str:
        """A few human-readable lines about the conversion."""
        if self.already_complete:
            return f"{self.output_dir}: already converted with these settings; nothing to do."
        if self.appended is not None:
            return self.appended.summary(self.output_dir, self.manifest)
        lines = [f"Wrote {self.num_written} of {self.num_inputs} images to {self.output_dir} in {self.seconds:.1f}s"]
        for name in self.manifest.split_names:
            info = self.manifest.split(name)
            lines.append(
                f"  {name}: {info.num_records} records in {len(info.shards)} shard{'s' * (len(info.shards) != 1)}, "
                f"{info.num_bytes / 1e6:.1f} MB"
            )
        empty = [name for name in self.requested_splits if name not in self.manifest.split_names]
        if empty:
            lines.append(
                f"  warning: no {', '.join(map(repr, empty))} split was written: {self.num_written} images are too "
                "few for the fractions asked (--split); give it a larger fraction or convert more images"
            )
        if self.shards_resumed:
            lines.append(f"  resumed: {self.shards_resumed} shards were already complete")
        data = self.manifest.data
        dropped = data.get("num_dropped_duplicates", 0)
        extra = (
            f"{self.num_skipped} skipped, {notes.re_encoded(data, self.num_written, self.num_converted)}, "
            f"{self.num_duplicates} duplicate groups"
            + (f" ({dropped} duplicates dropped)" if dropped else "")
            + notes.near_summary(data)
        )
        lines.append(f"  {extra} (details: {fileio.join(self.output_dir, layout.REPORT)})")
        lines += notes.annotation_lines(data)
        lines += notes.label_conflict_lines(data, data.get("settings", {}).get("dedupe"))
        upscaled = data["conversions"].get(UPSCALED, 0)
        if upscaled:
            lines.append(
                f"  warning: {upscaled:,} images were smaller than the centre crop and were upscaled (listed in "
                "report.json); use a smaller --center-crop or --resize to at least the crop size"
            )
        lines += notes.label_base_lines(self.manifest)
        note = notes.non_jpeg_note(data.get("image_formats", {}))
        if note:
            lines.append(f"  {note}")
        no_tfds = tfds_metadata.reason_not_written(data)
        if no_tfds:
            lines.append(f"  no TFDS metadata (dataset_info.json): {no_tfds}")
        return "\n".join(lines)


def convert(
    source: str | Source,
    output_dir: str,
    options: ConvertOptions | None = None,
    *,
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
        output_dir: the folder to write (local path, or a bucket URL: s3://, gs://, az://, ...).
        options: what decides the bytes written: splits, shards, seed, image transforms, ...
            (`ConvertOptions`; default: its defaults).
        strict: fail on the first input that cannot be used instead of reporting it.
        workers: processes encoding images (default: all cores; 1 runs in this process).
        overwrite: replace a conversion written with other settings or inputs.
        progress: show a progress bar on stderr.
        runner: 'local' (a process pool here), 'dask' (the Beam pipeline on a Dask cluster: Beam's
            DaskRunner, the scheduler's address in beam_options as
            "--dask_client_address=tcp://HOST:8786", one shard per Dask partition so every worker
            gets shards; needs `shardfeed[dask]`), or 'beam' (an Apache Beam pipeline: same plan, same
            encoder and shard writer, byte-identical output; needs `shardfeed[beam]`).
        beam_options: Beam pipeline flags, e.g. "--runner=DataflowRunner --project=p --region=r
            --temp_location=gs://b/tmp" (default: Beam's local DirectRunner).

    Returns:
        A ConversionResult; its `manifest` describes what was written.

    Raises:
        SourceError, ConvertError, ValueError: with a message that names the problem.
    """
    workers = (os.cpu_count() or 1) if workers is None else workers
    if workers < 1:
        raise OptionError(f"workers must be >= 1, got {workers}")
    if runner not in RUNNERS:
        raise OptionError(f"runner must be one of {list(RUNNERS)}, got {runner!r}")
    if runner in ("beam", "dask"):
        from shardfeed.lazy import apache_beam, dask_distributed

        apache_beam()  # fail now, with the install hint, not after planning
        if runner == "dask":
            from shardfeed.write.beam_runner import flags_for

            dask_distributed()
            flags_for(runner, beam_options)  # the flags it needs are there
        workers = 1  # the pipeline does the parallel work
    run = _Run(strict, workers, overwrite, progress, runner, beam_options)
    options = folder_state.folder_options(options or ConvertOptions(), output_dir)
    return _Conversion(resolve_source(source), output_dir, options, run).run()


def _refuse_output_inside_source(source: Source, output_dir: str) -> None:
    """An output folder inside a source folder would be read back as images by the next run.

    Raises:
        SourceError: `output_dir` is `source`'s folder or inside it.
    """
    root = getattr(source, "root", None)
    if not isinstance(root, str) or fileio.is_remote(root) or fileio.is_remote(output_dir):
        return
    real_root, out = os.path.realpath(root), os.path.realpath(output_dir)
    if os.path.commonpath([real_root, out]) == real_root:
        raise SourceError(
            f"the output folder {output_dir!r} is inside the source folder {root!r}: its shards would be "
            "read as images by the next conversion; write to a folder outside the source"
        )


@dataclass(frozen=True)
class _Run:
    """How a conversion runs (never what it writes)."""

    strict: bool
    workers: int
    overwrite: bool
    progress: bool
    runner: str
    beam_options: str | list[str] | None


class _Conversion:
    """One run of `convert`: the stages above, over one output folder."""

    def __init__(self, source: Source, output_dir: str, options: ConvertOptions, run: _Run) -> None:
        self.source, self.output_dir, self.options, self.run_settings = source, output_dir, options, run
        self.work_dir = folder_state.work_dir(output_dir)

    @property
    def workers(self) -> int:
        """Worker processes of the local pool (append.ShardWriter)."""
        return self.run_settings.workers

    def run(self) -> ConversionResult:
        start = time.monotonic()
        _refuse_output_inside_source(self.source, self.output_dir)
        # The pool first: workers forked after the lock is taken would inherit it, and outlive a
        # killed run holding it (its re-run was refused naming a dead pid).
        with WorkerPool(self.run_settings.workers) as pool, folder_lock.hold(self.output_dir):
            discovery = listed(self.source).with_safe_names()
            if not discovery.items:
                raise SourceError(
                    f"no images found in {discovery.root!r} ({len(discovery.skipped)} files could not be used)"
                    + empty_source_hint(discovery)
                )
            self._fail_if_strict(discovery.skipped)
            self.options = self.options.resolved(discovery.task)
            state = folder_state.conversion_state(discovery, self.options)
            if self.options.append and fileio.exists(fileio.join(self.output_dir, layout.MANIFEST)):
                return self._append(discovery, state, pool, start)
            existing = folder_state.check_output(
                self.output_dir,
                state,
                overwrite=self.run_settings.overwrite,
                labelled=discovery.class_names is not None,
            )
            if existing is not None:
                self._source_finished()
                return ConversionResult.of(
                    existing, shards_written=0, shards_resumed=0, already_complete=True, start=start
                )
            spec = EncodingSpec.of(discovery, self.options)
            dropped, groups = dedupe.before_split(spec, discovery, self.options, pool, self.run_settings.workers)
            planned = plan_shards(
                discovery,
                self.options,
                dropped_keys={k for k, _ in dropped},
                groups=groups if self.options.split_groups else None,
            )
            with self._disk_full_as_error(discovery):
                folder_state.start(self.output_dir, state)
                results, resumed = self.write_all(planned.shards, spec, pool)
                if not sum(r.num_records for r in results):
                    raise ConvertError(notes.nothing_written(discovery, results))
                self._finish(state, discovery, results, dropped, planned.moves)
            self._source_finished()
        result = ConversionResult.of(
            manifest.read(self.output_dir), shards_written=len(results) - resumed, shards_resumed=resumed, start=start
        )
        if not discovery.presplit:
            result.requested_splits = tuple(self.options.split_fractions(labelled=discovery.class_names is not None))
        return result

    def _source_finished(self) -> None:
        """Tells a source that stages its images (tables, tars: write/sources/staging.py) they can go."""
        finished = getattr(self.source, "finished", None)
        if finished is not None:
            finished()

    def _append(
        self, discovery: Discovery, state: dict[str, Any], pool: Executor | None, start: float
    ) -> ConversionResult:
        """`append=True` on a finished folder: the next generation (write/append.py)."""
        with self._disk_full_as_error(discovery):
            outcome = Append(self, discovery, state, pool).run()
        result = ConversionResult.of(
            manifest.read(self.output_dir),
            shards_written=outcome.shards_written,
            shards_resumed=outcome.shards_resumed,
            start=start,
        )
        result.appended = outcome
        return result

    def _finish(
        self,
        state: dict[str, Any],
        discovery: Discovery,
        results: list[shards.ShardResult],
        dropped: list[tuple[str, str]],
        moves: GroupMoves | None,
    ) -> None:
        """Merges the partial manifests: report, labels, then the manifest (last), and cleans up."""
        duplicates, near = merge.record_groups(self.work_dir, results, self.options.near_radius)
        report = merge.report_of(duplicates, discovery, results, dropped, near)  # once: the manifest counts it
        data = merge.merge_manifest(
            state, duplicates, discovery, self.options, results, dropped, near, moves, report=report
        )
        merge.write_report(self.output_dir, report, moves)
        first_id = self.options.label_base(discovery.task)
        manifest.write_labels(self.output_dir, discovery.class_names, first_id)
        if task_of(discovery.task).label_map and discovery.class_names:
            label_map.write(self.output_dir, discovery.class_names, first_id)
        if appendable(discovery, self.options):
            write_inputs(self.output_dir, self.work_dir, results, generation=0)
        tfds_metadata.write(self.output_dir, data)
        manifest.write(self.output_dir, data)
        fileio.rmtree(self.work_dir)

    @contextlib.contextmanager
    def _disk_full_as_error(self, discovery: Discovery) -> Iterator[None]:
        """A full output disk while writing becomes one ConvertError line (`_disk_full`)."""
        try:
            yield
        except OSError as e:
            if e.errno not in DISK_FULL:
                raise
            raise ConvertError(self._disk_full(e, discovery)) from e

    def _disk_full(self, error: OSError, discovery: Discovery) -> str:
        """The one line for a full output disk: the folder, what is still needed, what is free.
        Committed shards stay; the shard being written stays `.incomplete` and is rewritten by
        the re-run (which resumes), so nothing that looks complete is left half-written."""
        written = sum(
            fileio.size(fileio.join(self.output_dir, n))
            for n in fileio.listdir(self.output_dir)
            if not n.endswith(layout.INCOMPLETE) and not fileio.isdir(fileio.join(self.output_dir, n))
        )
        needed = max(0, sum(item.size for item in discovery.items) - written)
        free = "" if fileio.is_remote(self.output_dir) else f", {shutil.disk_usage(self.output_dir).free:,} free"
        return (
            f"the disk holding {self.output_dir!r} is full ({error.strerror}): about {needed:,} more bytes are needed "
            f"(estimated from the inputs' sizes{free}); free some space, then run the same command again to resume "
            "(finished shards are kept)"
        )

    def _fail_if_strict(self, skipped: list[tuple[str, str]]) -> None:
        if self.run_settings.strict and skipped:
            key, reason = skipped[0]
            raise ConvertError(
                f"{key}: {reason} (strict=True, --strict: every input must be usable; {len(skipped)} are not)"
            )

    def write_all(
        self, plans: list[ShardPlan], spec: EncodingSpec, pool: Executor | None
    ) -> tuple[list[shards.ShardResult], int]:
        """Writes every shard not already committed; returns all shard results in plan order."""
        target = WriteTarget(self.output_dir, self.work_dir, spec, self.options.compression)
        done = {p.file: target.committed(p.file) for p in plans}
        for name in fileio.listdir(self.output_dir):
            if name.endswith(layout.INCOMPLETE):
                fileio.remove(fileio.join(self.output_dir, name))
        pending = [p for p in plans if done[p.file] is None]
        if self.run_settings.runner in ("beam", "dask"):
            from shardfeed.write import beam_runner

            flags = beam_runner.flags_for(self.run_settings.runner, self.run_settings.beam_options)
            written = beam_runner.write_shards(pending, target, flags)
            self._fail_if_strict([s for r in written.values() for s in r.skipped])
        else:
            written = local_runner.write_shards(
                pending,
                target,
                pool,
                workers=self.run_settings.workers,
                total=sum(len(p.items) for p in plans),
                progress=self.run_settings.progress,
                check=self._check_chunk if self.run_settings.strict else None,
            )
        done.update(written)
        results = [done[p.file] for p in plans]
        return [r for r in results if r is not None], len(plans) - len(pending)

    def _check_chunk(self, chunk: list[Any]) -> None:
        """--strict: an input skipped, or one of its objects, fails the conversion."""
        if self.run_settings.strict:
            self._fail_if_strict([(r.key, r.reason) for r in chunk if isinstance(r, SkippedItem)])
            objects = [r for r in chunk if not isinstance(r, SkippedItem) and r.skipped_annotations]
            self._fail_if_strict(
                [(r.key, f"annotation {i}: {why}") for r in objects for i, why in r.skipped_annotations]
            )
