"""`shardfeed verify PATH`: read and check every record; exit code 1 if anything is wrong."""

from __future__ import annotations

import argparse
import json
from typing import Any

from shardfeed.cli.options import add_record_key_flags, foreign_keys
from shardfeed.tools.verification import verify


def register(sub: Any) -> None:
    p = sub.add_parser("verify", help="check every record, image and checksum against the manifest")
    p.add_argument("path", nargs="+", help="converted folder, or TFRecord files/globs another program wrote")
    p.add_argument("--workers", type=int, help="processes (default: all cores)")
    p.add_argument("--no-decode", dest="decode", action="store_false", help="skip decoding the images")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    add_record_key_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    path = args.path[0] if len(args.path) == 1 else args.path
    report = verify(
        path,
        workers=args.workers,
        decode=args.decode,
        progress=not args.quiet and not args.json,
        foreign=foreign_keys(args),
    )
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.summary())
    return 0 if report.ok else 1
