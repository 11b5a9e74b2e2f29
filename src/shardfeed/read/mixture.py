"""Several converted folders read as one training stream, each in a stated proportion.

    mix = shardfeed.Mixture(["data/main", "data/curated"], weights=(0.7, 0.3))
    ds = shardfeed.load(mix, seed=0, batch_size=64)        # steps_per_epoch(mix, ...) agrees

An epoch of the mixture is defined by the first source: it holds that source's split once
(n0 records) and, from each other source i, round(w_i / w_0 * n0) records, interleaved in a
seeded order (`order.mixture_order`), so the proportions are exact per epoch and the order is a
pure function of (seed, epoch): `ReadOptions(epoch=, start_record=)` resume it exactly, and the
resume state needs nothing more than for one folder. Labels are reconciled by class name: the
sources must name the same classes, or, with `union_labels=True`, the label map is the first
source's classes followed by each new class in source order (stated in `Mixture.class_names`).
The decoder looks each record's label up by its class name (image/class/text, which `convert`
writes), so nothing is rewritten; records without class names (some adopted folders) whose
stored label differs from its id in the map are rewritten as they are read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardfeed.errors import OptionError
from shardfeed.format import fileio, manifest, schema
from shardfeed.format.example_proto import Example
from shardfeed.read.indexed import IndexedRecords
from shardfeed.read.remote.cache import ShardCache


@dataclass(frozen=True)
class Mixture:
    """Converted folders (or their manifests) and their weights; see the module docstring.

    Raises:
        OptionError: fewer than two sources, weights that are not positive or not one per source.
    """

    sources: tuple[str | manifest.Manifest, ...]
    weights: tuple[float, ...]
    union_labels: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", tuple(self.sources))
        object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))
        if len(self.sources) < 2:
            raise OptionError(f"a Mixture needs at least two sources, got {len(self.sources)}")
        if len(self.weights) != len(self.sources) or not all(w > 0 and math.isfinite(w) for w in self.weights):
            raise OptionError(
                f"weights must be one positive number per source ({len(self.sources)}), got {list(self.weights)}"
            )

    @property
    def paths(self) -> list[str]:
        """The sources' folders."""
        return [s if isinstance(s, str) else s.path for s in self.sources]

    def as_json(self) -> dict[str, Any]:
        """The mixture as a run records it (absolute folders, weights)."""
        return {"sources": [fileio.absolute(s) for s in self.paths], "weights": list(self.weights)}


@dataclass(frozen=True)
class MixedSplit:
    """One split of every source, opened: sizes, per-epoch counts, the label map."""

    manifests: list[manifest.Manifest]
    sizes: list[int]
    counts: list[int]
    class_names: list[str]
    label_maps: list[dict[int, int] | None] = field(default_factory=list)  # stored -> stored id; None: same
    by_text: bool = False  # every record names its class (image/class/text): labels looked up by name

    @property
    def epoch_length(self) -> int:
        return sum(self.counts)


def open_mixture(mix: Mixture, split: str) -> MixedSplit:
    """The split of every source and how they mix.

    Raises:
        OptionError: sources with other class names (without `union_labels`), unlabeled or
            compressed sources, an empty split.
        ManifestError: a source without the split.
    """
    manifests = [manifest.opened(s) for s in mix.sources]
    for m in manifests:
        if m.labels is None:
            raise OptionError(f"{m.path} holds unlabeled images; a Mixture mixes labelled training data")
        keys = m.keys
        if (
            m.compression == "gzip"
            or keys.pixels_as_floats
            or (keys.image_key, keys.label_key)
            != (
                schema.ENCODED,
                schema.LABEL,
            )
        ):
            raise OptionError(
                f"{m.path}: a Mixture reads by index, which needs uncompressed shards with encoded images under "
                f"{schema.ENCODED} and labels under {schema.LABEL}"
            )
    sizes = [m.split(split).num_records for m in manifests]
    if not all(sizes):
        raise OptionError(
            f"split {split!r} is empty in {[m.path for m, n in zip(manifests, sizes, strict=True) if not n]}"
        )
    names = _class_names(manifests, mix.union_labels)
    offset = manifests[0].label_offset
    by_text = all(schema.TEXT in m.features for m in manifests)
    maps: list[dict[int, int] | None] = []
    for m in manifests:
        own = {i + m.label_offset: names.index(name) + offset for i, name in enumerate(m.labels or [])}
        maps.append(None if by_text or all(k == v for k, v in own.items()) else own)
    total = sum(mix.weights)
    shares = [w / total for w in mix.weights]
    length = sizes[0] / shares[0]
    counts = [sizes[0], *(max(1, round(s * length)) for s in shares[1:])]
    return MixedSplit(manifests, sizes, counts, names, maps, by_text)


def _class_names(manifests: list[manifest.Manifest], union: bool) -> list[str]:
    names = list(manifests[0].labels or [])
    for m in manifests[1:]:
        others = list(m.labels or [])
        if set(others) != set(names) and not union:
            missing, extra = sorted(set(names) - set(others)), sorted(set(others) - set(names))
            raise OptionError(
                f"{m.path} names other classes than {manifests[0].path} (only in the first: {missing[:5]}, only "
                f"here: {extra[:5]}); pass Mixture(..., union_labels=True) to train on the union of their "
                "classes (the first source's, then each new one in source order)"
            )
        names += [n for n in others if n not in names]
    return names


class MixedRecords:
    """The sources' records numbered end to end (`order.mixture_order` ids), labels rewritten to
    the mixture's label map where a source numbers its classes otherwise."""

    def __init__(self, mixed: MixedSplit, split: str, cache: ShardCache | None = None) -> None:
        self.sources = [IndexedRecords(m, split, cache=cache) for m in mixed.manifests]
        self.bases = np.cumsum([0, *mixed.sizes])[:-1]
        self.maps = mixed.label_maps
        self.label_key = schema.LABEL

    def __len__(self) -> int:
        return int(sum(len(s) for s in self.sources))

    def record(self, index: int) -> bytes:
        source = int(np.searchsorted(self.bases, index, side="right")) - 1
        data = self.sources[source].record(index - int(self.bases[source]))
        label_map = self.maps[source]
        if label_map is None:
            return data
        example = Example()
        example.ParseFromString(data)
        values = example.features.feature[self.label_key].int64_list.value
        values[0] = label_map[int(values[0])]
        return bytes(example.SerializeToString(deterministic=True))
