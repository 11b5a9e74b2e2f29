"""What decides the bytes a conversion writes: `ConvertOptions`, parsed and checked once.

The options go into the manifest (`settings()`) and are compared when a conversion is run again,
so a finished folder is never silently rewritten with other settings. How the process runs
(workers, progress bar, runner) is not an option here: it never changes the bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from shardfeed.errors import OptionError
from shardfeed.format import layout
from shardfeed.format.schema import PRESETS, Schema
from shardfeed.format.tasks import task_of
from shardfeed.write import near_duplicates, sharding, splits
from shardfeed.write.images import ImageOptions

COMPRESSIONS = (None, "gzip")


LABEL_CONFLICT_RULES = ("keep", "drop", "first")  # ConvertOptions.label_conflicts


@dataclass(frozen=True)
class ConvertOptions:
    """Everything that decides the bytes written (and so goes into the manifest).

    Text forms are parsed on construction, so `split`, `shards` and `shard_size` hold the parsed
    values afterwards (a dict of fractions, an int or a dict of counts, a byte count).

    Attributes:
        split: 'train=0.8,validation=0.2' style fractions or a mapping (default that; 'test=1'
            for unlabeled data; must stay None for a source that is already split).
        stratify: split each class in the same proportions (default True).
        seed: seeds the split assignment and the record order (default 0).
        shards: shards per split: an int for every split, or 'train=16,validation=4' / a mapping.
        shard_size: target bytes per shard ('128MB' or an int); default: mean shard <= 200 MB.
        by_class: write one shard set per class instead of mixing classes.
        name_template: shard file names; default '{split}-{shard:05d}-of-{num_shards:05d}'.
        compression: None or 'gzip'.
        label_offset: added to class ids in the records. None (the default): the task's own base
            (`TaskSpec.label_base`, format/tasks.py): detection ids start at 1, 0 left for the background, as
            Model Garden and the OD API train on them; other tasks' ids start at 0, as Keras and
            TFDS read them (a `schema` preset's base where one is given). `resolved` fixes it once
            the source's task is known; shardfeed's readers subtract it, so models see 0..K-1.
        dedupe: drop duplicate images, keeping the first key in sorted order of each set: True
            (or 'exact'): byte-for-byte copies; 'near': also near-copies (`near_radius`).
        image: image checks and write-time transforms (`ImageOptions`).
        schema: a record layout other readers expect (`schema.PRESETS`: 'inception', 'tfds',
            'recipe'): its keys, and its label offset, shard names and JPEG re-encoding where
            `label_offset`, `name_template` and `image.format` are left at their defaults.
        split_rule: 'stratified' (default: split sizes exact for the whole set, each class in
            proportion; adding images can move others) or 'hash' (each image's split from a
            seeded hash of its key alone, as TFDS and Google's data pipelines split: sizes follow
            the fractions only on average, but an image keeps its split however the set grows;
            what `append` needs).
        append: add the source's new images to a finished conversion as a new generation of
            shards (write/append.py); not a setting of the bytes, so not in the manifest's settings.
        checksum: with `append`, read and hash every already-converted input to find changed
            bytes; by default only those whose size or modification time differ from when they
            were converted are read (as make and rsync decide; rsync's --checksum reads all).
        custom_split_names: allow split names that look like misspellings of known ones
            ('valdation', refused by default: a trainer looking for 'validation' finds none).
        near_radius: images whose perceptual hashes differ in at most this many of 64 bits are
            reported as near-duplicates (report.json `near_duplicates`, with leak flags across
            splits); 0..7, default 6 (measured: docs/benchmarks/near_duplicates.md); None: not looked for.
            Only reported, unless `split_groups` or `dedupe='near'` act on the groups.
        split_groups: 'near' assigns every image of a near-duplicate group to one split (the one
            holding most of it), so no split holds a near-copy of another's image; each image
            moved is paid back by an ungrouped image of its class moving the other way, so split
            sizes and class counts stay what the split fractions gave (with split_rule='hash',
            sizes follow the fractions only on average anyway: no payback). Hashes every image
            before the split (a second decode of each). Not with a source that is already split.
        label_conflicts: the rule for one image under different labels (exact copies, or a
            near-duplicate group): 'keep' every copy with its label, reported as a label conflict
            (the default: no label is picked for you); 'drop' every copy of it; 'first' the
            first key in sorted order with its label (the rule --dedupe keeps by), dropping the
            copies labelled otherwise. Dropped copies are in report.json `dropped_duplicates`,
            each with the labels of its copy and itself.
    """

    split: str | Mapping[str, float] | None = None
    stratify: bool = True
    seed: int = 0
    shards: int | str | Mapping[str, int] | None = None
    shard_size: int | str | None = None
    by_class: bool = False
    name_template: str | None = None
    compression: str | None = None
    label_offset: int | None = None
    dedupe: bool | str = False
    image: ImageOptions = field(default_factory=ImageOptions)
    schema: str | None = None
    split_rule: str = "stratified"
    append: bool = False
    checksum: bool = False
    custom_split_names: bool = False
    near_radius: int | None = near_duplicates.DEFAULT_RADIUS
    split_groups: str | None = None
    label_conflicts: str = "keep"

    def __post_init__(self) -> None:
        if self.label_conflicts not in LABEL_CONFLICT_RULES:
            raise OptionError(
                f"label_conflicts must be one of {list(LABEL_CONFLICT_RULES)}, got {self.label_conflicts!r}"
            )
        if self.split_rule not in splits.SPLIT_RULES:
            raise OptionError(f"split_rule must be one of {list(splits.SPLIT_RULES)}, got {self.split_rule!r}")
        self._check_near()
        if self.append and self.dedupe:
            raise OptionError(
                "dedupe=True with append=True is not supported: an appended image that copies an existing one is "
                "reported as a duplicate (report.json) instead; convert without --dedupe"
            )
        if self.near_radius is not None and (
            not isinstance(self.near_radius, int) or not 0 <= self.near_radius <= near_duplicates.MAX_RADIUS
        ):
            raise OptionError(
                f"near_radius must be 0..{near_duplicates.MAX_RADIUS} bits (or None), got {self.near_radius!r}"
            )
        if self.checksum and not self.append:
            raise OptionError("checksum=True (--checksum) only applies with append=True (--append)")
        if self.schema is not None:
            if self.schema not in PRESETS:
                raise OptionError(f"schema must be one of {sorted(PRESETS)}, got {self.schema!r}")
            preset = PRESETS[self.schema]
            if self.label_offset is None:
                object.__setattr__(self, "label_offset", preset.label_offset)
            if preset.jpeg and isinstance(self.image, ImageOptions) and self.image.image_format == "keep":
                object.__setattr__(self, "image", dataclasses.replace(self.image, image_format="jpeg"))
        if self.shards is not None and self.shard_size is not None:
            raise OptionError("pass shards or shard_size, not both")
        if self.split is not None:
            object.__setattr__(self, "split", splits.parse_split_spec(self.split, custom_names=self.custom_split_names))
        shards = dict(self.shards) if isinstance(self.shards, Mapping) else self.shards
        object.__setattr__(self, "shards", sharding.parse_shard_counts(shards))
        if self.shard_size is not None:
            object.__setattr__(self, "shard_size", sharding.parse_size(self.shard_size))
        if self.compression not in COMPRESSIONS:
            raise OptionError(f"compression must be one of {list(COMPRESSIONS)}, got {self.compression!r}")
        if self.label_offset is not None and (not isinstance(self.label_offset, int) or self.label_offset < 0):
            raise OptionError(f"label_offset must be a non-negative integer, got {self.label_offset!r}")
        if not isinstance(self.image, ImageOptions):
            raise OptionError(f"image must be an ImageOptions, got {type(self.image).__name__}")
        sharding.validate_template(self.template, by_class=self.by_class)

    def _check_near(self) -> None:
        """dedupe and split_groups values, and what acting on near-duplicate groups needs."""
        if self.dedupe == "exact":
            object.__setattr__(self, "dedupe", True)
        if self.dedupe not in (False, True, "near"):
            raise OptionError(f"dedupe must be True/'exact', 'near' or False, got {self.dedupe!r}")
        if self.split_groups not in (None, "near"):
            raise OptionError(f"split_groups must be 'near' or None, got {self.split_groups!r}")
        if (self.split_groups or self.dedupe == "near") and self.near_radius is None:
            raise OptionError("split_groups='near' and dedupe='near' act on near-duplicate groups: give a near_radius")
        if self.split_groups and self.append:
            raise OptionError(
                "split_groups='near' with append=True is not supported: appended images keep the split the hash "
                "rule gives them; their near-copies of converted images are reported (report.json)"
            )

    def label_base(self, task: str) -> int:
        """The first class id written for a source of `task`: `label_offset`, else the task's."""
        return self.label_offset if self.label_offset is not None else task_of(task).label_base

    def resolved(self, task: str) -> ConvertOptions:
        """These options with `label_offset` set to the label base of `task` (what the manifest's
        settings store, and a re-run compares)."""
        return dataclasses.replace(self, label_offset=self.label_base(task))

    @property
    def acts_on_near_duplicates(self) -> bool:
        """Whether near-duplicate groups decide which images go where (so they are found first)."""
        return self.split_groups == "near" or self.dedupe == "near" or self.label_conflicts != "keep"

    @property
    def template(self) -> str:
        """The shard name template in force."""
        if self.name_template:
            return self.name_template
        if self.schema is not None and PRESETS[self.schema].name_template:
            return PRESETS[self.schema].name_template  # type: ignore[return-value]
        return layout.BY_CLASS_TEMPLATE if self.by_class else layout.SHARD_TEMPLATE

    def split_fractions(self, labelled: bool) -> dict[str, float]:
        """The split fractions in force: as given, else train/validation (labelled) or all test."""
        if isinstance(self.split, dict):
            return self.split
        return splits.default_fractions(labelled)

    def settings(self) -> dict[str, Any]:
        """The JSON form stored in the manifest and compared on re-runs."""
        return {
            "split": self.split,
            "stratify": self.stratify,
            "seed": self.seed,
            "shards": self.shards,
            "shard_size": self.shard_size,
            "by_class": self.by_class,
            "name_template": self.template,
            "compression": self.compression,
            "label_offset": self.label_offset,
            "dedupe": self.dedupe,
            "image": asdict(self.image),
            **({"schema": self.schema} if self.schema else {}),
            **({"split_rule": self.split_rule} if self.split_rule != "stratified" else {}),
            **({"split_groups": self.split_groups} if self.split_groups else {}),
            **({"near_radius": self.near_radius} if self.acts_on_near_duplicates else {}),
            **({"label_conflicts": self.label_conflicts} if self.label_conflicts != "keep" else {}),
        }

    @property
    def keys(self) -> Schema:
        """The record keys written: ours, or the preset's."""
        return PRESETS[self.schema].keys if self.schema else Schema()
