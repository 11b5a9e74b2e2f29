"""Shard planning: how many shards, which records go in each, and what they are called.

Pure functions over counts and sizes; no I/O.
"""

from __future__ import annotations

import hashlib
import math
import re
import string

from shardfeed.errors import OptionError
from shardfeed.format import layout

# Default target: mean shard size between 100 and 200 MB, as the TensorFlow guide advises.
DEFAULT_MAX_SHARD_BYTES = 200 * 10**6
_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
}


def parse_size(text: str | int) -> int:
    """Bytes from '128MB', '1.5GiB', '64KB' or a plain integer.

    Raises:
        ValueError: not a positive size with a known unit.
    """
    if isinstance(text, int):
        value, unit = float(text), ""
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text)
        if not match or match.group(2).upper() not in _UNITS:
            raise OptionError(f"shard size {text!r} is not a size like '128MB', '1GiB' or '500KB'")
        value, unit = float(match.group(1)), match.group(2).upper()
    size = int(value * _UNITS[unit])
    if size <= 0:
        raise OptionError(f"shard size must be positive, got {text!r}")
    return size


def num_shards(num_records: int, total_bytes: int, *, shard_size: int | None = None) -> int:
    """The number of shards for a split.

    With `shard_size`, enough shards that none exceeds it on average. Without, the smallest power
    of two that keeps the mean shard at or under 200 MB (so between 100 and 200 MB once the split
    is big enough: ImageNet's ~140 GB train split gives its familiar 1024). Never more shards
    than records, never fewer than one (zero for an empty split).
    """
    if num_records <= 0:
        return 0
    if shard_size is not None:
        wanted = math.ceil(total_bytes / shard_size)
    else:
        wanted = 1
        while total_bytes / wanted > DEFAULT_MAX_SHARD_BYTES:
            wanted *= 2
    return max(1, min(wanted, num_records))


def shard_bounds(num_records: int, count: int) -> list[tuple[int, int]]:
    """[start, end) record ranges for `count` shards whose sizes differ by at most one."""
    if count <= 0:
        return []
    base, extra = divmod(num_records, count)
    bounds = []
    start = 0
    for i in range(count):
        end = start + base + (1 if i < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def parse_shard_counts(spec: int | str | dict[str, int] | None) -> int | dict[str, int] | None:
    """`--shards` as an int for every split, or per split from 'train=16,validation=4'."""
    if spec is None or isinstance(spec, int):
        if isinstance(spec, int) and spec < 1:
            raise OptionError(f"shards must be >= 1, got {spec}")
        return spec
    if isinstance(spec, dict):
        counts = dict(spec)
    elif re.fullmatch(r"-?\d+", spec.strip()):
        return parse_shard_counts(int(spec))
    else:
        counts = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            name, sep, value = part.partition("=")
            if not sep or not re.fullmatch(r"-?\d+", value.strip()):
                raise OptionError(f"shards entry {part!r} must look like split=count, e.g. 'train=16,validation=4'")
            counts[name.strip()] = int(value)
    for name, count in counts.items():
        if count < 1:
            raise OptionError(f"shards for split {name!r} must be >= 1, got {count}")
    return counts


def validate_template(template: str, *, by_class: bool) -> None:
    """Checks a shard name template has the fields it needs and no others.

    Raises:
        ValueError: naming the missing or unknown fields.
    """
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as e:
        raise OptionError(f"shard name template {template!r} is malformed: {e}") from e
    needed = {"split", "shard", "num_shards"} | ({"label"} if by_class else set())
    allowed = needed | {"label"}
    if not needed <= fields or not fields <= allowed:
        raise OptionError(
            f"shard name template {template!r} must use {sorted(needed)} (and nothing but "
            f"{sorted(allowed)}); e.g. '{layout.SHARD_TEMPLATE}.tfrecord'"
        )
    if "/" in template:
        raise OptionError(f"shard name template {template!r} must not contain '/'")


MAX_LABEL_IN_NAME = 100  # characters of a class name in a --by-class shard name (file names: 255 bytes)


def safe_label(name: str) -> str:
    """A class name made safe for a file name: letters, digits, '.', '_' and '-', and at most
    MAX_LABEL_IN_NAME characters (a longer one keeps its start and a hash of the whole, so two
    long names that share a start stay two names)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "_"
    if len(safe) <= MAX_LABEL_IN_NAME:
        return safe
    return f"{safe[: MAX_LABEL_IN_NAME - 9]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def shard_name(template: str, split: str, shard: int, count: int, label: str | None = None) -> str:
    """The file name of one shard."""
    return template.format(split=split, shard=shard, num_shards=count, label=safe_label(label or ""))
