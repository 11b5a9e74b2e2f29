"""`shardfeed native`: which of shardfeed's native libraries are live on this machine, built
where and against what, and what runs instead of those that are not (DeepSpeed's `ds_report`
is the anchor).

The three libraries (read/native/build.py builds them): `load`'s fused resize op and its JPEG
batch decode op, `grain_dataset`'s crop-window JPEG decoder. Asking builds those not built yet
(once per machine), unless SHARDFEED_NATIVE=off.
"""

from __future__ import annotations

from shardfeed.read.native import batch_decode, fused_resize, window_decode
from shardfeed.read.native import build as native_build

# What each library's absence costs, as measured (docs/benchmarks/load.md, the named sections).
COSTS = {
    fused_resize.LIBRARY: "~0.30 ms of CPU a 224 px image instead of ~0.06 (TensorFlow's resize, round and flip)",
    batch_decode.LIBRARY: "training 1.245x slower, 0.54 instead of 0.43 ms of CPU an image (2026-11-28)",
    window_decode.LIBRARY: "grain_dataset ~1.3x slower (1.21x load's time before it, 0.93-0.95x since)",
}


def native_status() -> dict[str, native_build.Library]:
    """Each library by file name, after asking for it (building it where that is needed and
    allowed).

    Raises:
        NativeOpError: SHARDFEED_NATIVE=require and one cannot be had.
    """
    for available in (fused_resize.available, batch_decode.available, window_decode.available):
        available()
    return native_build.status()


def format_status(libraries: dict[str, native_build.Library]) -> str:
    """The lines `shardfeed native` prints."""
    lines = [f"{native_build.ENV}={native_build.mode()}"]
    for name, library in libraries.items():
        if library.live:
            facts = ", ".join(f"{k} {v}" for k, v in library.built_with.items())
            lines.append(f"{name}: live ({library.what}), {library.path}; built with {facts}")
        else:
            lines.append(
                f"{name}: not live ({library.what}): {library.reason}; instead {library.instead}, "
                f"costing {COSTS.get(name, 'speed')}"
            )
    return "\n".join(lines)
