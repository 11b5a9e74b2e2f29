"""`load`'s resize, rounding and flip as one compiled TensorFlow op, built once per TensorFlow.

The op (csrc/fused_resize.cc, csrc/fused_resize_op.cc) gives, bit for bit, what
`tf.cast(tf.round(tf.image.resize(image, size)), tf.uint8)` then a left-right flip give (the same
float32 arithmetic in the same order as TensorFlow's ResizeBilinear kernel), in about a quarter
of the CPU (0.07 against ~0.30 ms a 224 px image): each source row is interpolated once,
nothing is written as float32, the flip is free. So using it changes no pixel, and where it
cannot be had `load` runs TensorFlow's ops instead.

It is compiled on first use by the machine's C++ compiler (`$CXX`, else `c++`) against the
installed TensorFlow's headers (`tf.sysconfig`), ~10 s, into

    $XDG_CACHE_HOME/shardfeed/ops/<key>/fused_resize.so      (default ~/.cache/shardfeed/ops/...)

where <key> hashes the sources, TensorFlow's version and flags, the compiler and the machine type:
later processes load it. Concurrent first uses build once (a lock file in the folder); a
failed build leaves `failed.txt` there, with the compiler's output, so that later processes
do not try again (a changed source, TensorFlow or compiler is a new key). A missing compiler
or a failed build or load logs one warning and falls back; `DecodeOptions(fused_resize=False)`
never builds.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

from shardfeed.format import layout
from shardfeed.format.folder_lock import waited
from shardfeed.lazy import tensorflow

log = logging.getLogger("shardfeed")

SOURCES = Path(__file__).with_name("csrc")
KERNEL, OP = "fused_resize.cc", "fused_resize_op.cc"
LIBRARY, FAILED = "fused_resize.so", "failed.txt"
BUILD_TIMEOUT_S = 300
# -ffp-contract=off: no fused multiply-adds, which would round differently from TensorFlow's kernel.
OPTIMIZE = ("-O3", "-ffp-contract=off", "-fPIC", "-shared")


def resize_flip(image: Any, size: tuple[int, int], flip: Any) -> Any:
    """`image` (uint8 [h, w, c]) resized to `size`, rounded to uint8 and mirrored where `flip`
    (a bool tensor) holds, by the compiled op; None where it cannot be had (see the module
    docstring): the caller then runs TensorFlow's ops, which give the same pixels."""
    library = _library()
    if library is None:
        return None
    tf = tensorflow()
    return library.shardfeed_fused_resize(image, tf.constant(size, tf.int32), flip)


def available() -> bool:
    """Whether the op can be used in this process: built (now, once per machine and TensorFlow,
    if not yet) and loaded. `make install` and `make test` call it, so that the build is not
    made in the middle of a run."""
    return _library() is not None


@functools.cache
def _library() -> Any:
    """The loaded op library, built first if this machine has none for this TensorFlow; None
    (with one warning) where that fails."""
    tf = tensorflow()
    compiler = shutil.which(os.environ.get("CXX", "c++"))
    if compiler is None:
        log.warning("no C++ compiler (%s): load resizes with TensorFlow's ops", os.environ.get("CXX", "c++"))
        return None
    command = _command(tf, compiler)
    try:
        folder = Path(layout.user_cache("ops")) / _key(command)
        path = _built(folder, command)
    except (OSError, subprocess.SubprocessError) as e:  # an unwritable cache, a compiler that cannot start
        log.warning("the fused resize op could not be built (%s): load resizes with TensorFlow's ops", e)
        return None
    if path is None:
        log.warning("the fused resize op did not build (%s): load resizes with TensorFlow's ops", folder / FAILED)
        return None
    try:
        return tf.load_op_library(str(path))
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError, tf.errors.AlreadyExistsError) as e:
        log.warning("the fused resize op %s did not load (%s): load resizes with TensorFlow's ops", path, e)
        return None


def _command(tf: Any, compiler: str) -> list[str]:
    """The compiler command, less its output path."""
    flags = tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags()
    return [compiler, *OPTIMIZE, str(SOURCES / KERNEL), str(SOURCES / OP), *flags]


def _key(command: list[str]) -> str:
    """What the built library depends on: the sources, the command (TensorFlow's headers and
    flags, the compiler), TensorFlow's and the compiler's versions, the machine type."""
    tf = tensorflow()
    digest = hashlib.sha256()
    for name in (KERNEL, OP):
        digest.update((SOURCES / name).read_bytes())
    version = subprocess.run([command[0], "--version"], capture_output=True, text=True, timeout=60).stdout
    digest.update("\0".join([*command, tf.__version__, version, platform.machine()]).encode())
    return digest.hexdigest()[:20]


def _built(folder: Path, command: list[str]) -> Path | None:
    """The library in `folder`, compiled now unless there (None: its build failed, now or before)."""
    library = folder / LIBRARY
    if library.is_file():
        return library
    folder.mkdir(parents=True, exist_ok=True)
    with waited(str(folder / layout.CACHE_LOCK)):
        if library.is_file():  # another process built it while this one waited
            return library
        if (folder / FAILED).is_file():
            return None
        log.warning("compiling the fused resize op for this TensorFlow once (~10 s) into %s", folder)
        partial = folder / f"{LIBRARY}.{os.getpid()}.tmp"
        try:
            done = subprocess.run(
                [*command, "-o", str(partial)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            done = subprocess.CompletedProcess(command, -1, "", f"timed out after {BUILD_TIMEOUT_S} s")
        if done.returncode != 0:
            (folder / FAILED).write_text(" ".join(command) + "\n" + done.stdout + done.stderr)
            partial.unlink(missing_ok=True)
            return None
        os.replace(partial, library)
        return library
