"""`shardfeed native`: which native libraries are live, built where, and what their absence costs."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "native",
        help="say which native libraries (fused resize, JPEG batch decode, crop-window decode) are live, "
        "building those not built yet (SHARDFEED_NATIVE=auto|off|require decides)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from shardfeed.tools.native_ops import format_status, native_status

    print(format_status(native_status()), flush=True)  # SHARDFEED_NATIVE=require: an error where one is not live
    return 0
