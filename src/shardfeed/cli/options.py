"""Option objects from parsed flags: a flag whose `dest` is a field's name sets that field.

Flags default to None, so an option the user did not give keeps its dataclass default: defaults
live in the option classes only, and adding an option is one field plus one flag.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any, TypeVar

from shardfeed.format.schema import FOREIGN_KEY_NAMES

T = TypeVar("T")


def from_args(cls: type[T], args: argparse.Namespace, **fixed: Any) -> T:
    """`cls(...)` with every field that `args` sets (not None), plus `fixed` values; the record
    key flags go into its `foreign` field as one `ForeignKeys`."""
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    given = {n: getattr(args, n) for n in names if n not in fixed and getattr(args, n, None) is not None}
    if "foreign" in names and "foreign" not in fixed:
        given = {n: v for n, v in given.items() if n not in FOREIGN_KEY_NAMES}  # `add_record_key_flags`
        given["foreign"] = foreign_keys(args)
    return cls(**given, **fixed)


def foreign_keys(args: argparse.Namespace) -> Any:
    """The `ForeignKeys` the record key flags give, or None when none was given."""
    from shardfeed.format.schema import ForeignKeys

    flags = {n: getattr(args, n) for n in FOREIGN_KEY_NAMES if getattr(args, n, None) is not None}
    return ForeignKeys(**flags) if flags else None


NO_LIMIT = "none"


def pixel_limit(text: str) -> int | str:
    """`--max-pixels`: a pixel count ('50000000', '50M' for megapixels) or 'none'."""
    value = text.strip().lower()
    if value == NO_LIMIT:
        return NO_LIMIT
    try:
        return round(float(value[:-1]) * 1e6) if value.endswith("m") else int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a pixel count such as 50000000 or 50M, or 'none'; got {text!r}"
        ) from None


def add_pixel_limit_flag(group: Any) -> None:
    """The one `--max-pixels` flag (convert, predict); its value goes through `image_fields`."""
    group.add_argument(
        "--max-pixels",
        type=pixel_limit,
        help="refuse (report) images over this many pixels, width x height read from the header before "
        "any decode (default 89.5M, Pillow's bomb threshold; 'none': no limit)",
    )


def image_fields(args: argparse.Namespace) -> dict[str, Any]:
    """ImageOptions fields set by flags that are not a plain copy of one value (`--max-pixels none`)."""
    limit = getattr(args, "max_pixels", None)
    if limit is None:
        return {}
    return {"max_pixels": None if limit == NO_LIMIT else limit}


def add_record_key_flags(parser: Any, *, offset: bool = True) -> None:
    """The flags that say how other people's TFRecords hold image and label (adopt, bench, info)."""
    g = parser.add_argument_group("other TFRecords (not written by shardfeed)")
    g.add_argument("--image-key", help="the feature holding the encoded image or float pixels (default image/encoded)")
    g.add_argument(
        "--label-key", help="the integer class feature (default image/class/label; '' for images without labels)"
    )
    if offset:
        g.add_argument(
            "--label-offset",
            type=int,
            help="subtracted from stored labels so the model sees 0..K-1 (1 for labels written 1..K, as "
            "Inception's build_image_data.py and keras_imagenet do)",
        )


READS_DATA = ("train", "evaluate", "predict", "show", "bench")  # subcommands that load() a data folder


def add_cache_flags(parser: Any) -> None:
    """`--cache-dir` / `--cache-limit`: the shard cache for folders in a bucket (ReadOptions' fields)."""
    group = parser.add_argument_group("folders in a bucket (s3://, gs://, az://)")
    group.add_argument(
        "--cache-dir", help="where their shards are kept, verified, while read (default ~/.cache/shardfeed/shards)"
    )
    group.add_argument(
        "--cache-limit",
        type=byte_size,
        help="bytes the cache may hold, e.g. 20GB (default: no bound; at least 4 of the largest shard)",
    )


def byte_size(text: str) -> int:
    """`--cache-limit`: '20GB', '512MiB' or a byte count."""
    from shardfeed.write.sharding import parse_size

    try:
        return parse_size(int(text) if text.strip().isdigit() else text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size such as 20GB or 512MiB, got {text!r}") from None


def use_cache_flags(args: argparse.Namespace) -> None:
    """The cache flags as the process's defaults (`ReadOptions.shard_cache` reads them), so every
    dataset a command opens, wherever it is built, reads through the cache asked for."""
    from shardfeed.read.options import CACHE_DIR_VARIABLE, CACHE_LIMIT_VARIABLE

    for flag, variable in (("cache_dir", CACHE_DIR_VARIABLE), ("cache_limit", CACHE_LIMIT_VARIABLE)):
        if getattr(args, flag, None) is not None:
            os.environ[variable] = str(getattr(args, flag))
