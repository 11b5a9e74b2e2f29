"""`shardfeed adopt FOLDER_OR_GLOB [--out DIR]`: manifest, index and labels for TFRecords another
program wrote, so every command reads them as a converted folder (tools/adopt.py)."""

from __future__ import annotations

import argparse
from typing import Any

from shardfeed.cli.options import add_record_key_flags, from_args
from shardfeed.tools.adopt import AdoptOptions, adopt


def register(sub: Any) -> None:
    p = sub.add_parser(
        "adopt",
        help="make TFRecords another program wrote readable by every command (manifest, index; shards untouched)",
    )
    p.add_argument("source", nargs="+", help="a folder of TFRecords (adopted in place), or files/globs (with --out)")
    p.add_argument("--out", help="folder for the manifest and hard links to the shards (copies across filesystems)")
    add_record_key_flags(p)
    p.add_argument(
        "--split-pattern",
        help="regex searched in each file name; its group 'split' (else its first group) names the file's split "
        r"(e.g. '_(\w+)_\d+-of-'); default: the split word in the name (train-, validation_, -test.tfrecord)",
    )
    p.add_argument("--labels", dest="labels_file", help="class names: 'id:name' per line, or one name per line")
    p.add_argument("--workers", type=int, help="processes (default: all cores)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    source = args.source[0] if len(args.source) == 1 else args.source
    result = adopt(source, args.out, from_args(AdoptOptions, args), progress=not args.quiet)
    print(result.summary())
    return 0
