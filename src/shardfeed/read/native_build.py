"""Small native libraries compiled on first use, once per machine, into the user's cache.

`load`'s fused resize op (read/fused_resize.py, C++ against TensorFlow), its batch decode op
(read/batch_decode.py, C and C++ against TensorFlow and libjpeg) and `grain_dataset`'s
crop-window JPEG decoder (read/window_decode.py, C against libjpeg) are compiled by the
machine's compiler from the sources the package ships (read/csrc/) into

    $XDG_CACHE_HOME/shardfeed/ops/<key>/<library>      (default ~/.cache/shardfeed/ops/...)

where <key> hashes the sources, the command (headers, flags, libraries), the compiler's
`--version`, the machine type and what else the caller names (TensorFlow's version): later
processes load what is there. Concurrent first uses build once (the cache's lock file in the
folder); a failed build leaves `failed.txt` there, with the compiler's output, so that later
processes do not try again (a changed source, library or compiler is a new key); a compiler
killed by a signal (a run interrupted while it built) leaves nothing, and the next process builds. Each caller
falls back to its pure path, with one warning, where no library can be had.

Every process that loads a library marks it used (its modification time); when a new build is
made, the cache's other folders that nothing has used for `STALE_DAYS` (builds for sources,
TensorFlows or compilers since replaced, old failures) are removed, so upgrades do not pile up.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shardfeed.format import layout
from shardfeed.format.folder_lock import waited
from shardfeed.lazy import tensorflow

log = logging.getLogger("shardfeed")

SOURCES = Path(__file__).with_name("csrc")
FAILED = "failed.txt"
BUILD_TIMEOUT_S = 300
STALE_DAYS = 30  # a cache folder nothing has used for this long goes when a new build is made
# The fused resize's flags (and its callers'): -ffp-contract=off, no fused multiply-adds, which
# would round differently from TensorFlow's kernel.
OPTIMIZE = ("-O3", "-ffp-contract=off", "-fPIC", "-shared")


def op_library(library: str, command: Sequence[str], sources: Sequence[str], *, what: str, instead: str) -> Any:
    """A TensorFlow op library: `built` (keyed by TensorFlow's version too) and loaded into this
    process; None where either fails, with one warning naming `what` and what runs `instead`."""
    tf = tensorflow()
    path = built(library, command, sources, what=what, instead=instead, extra=tf.__version__)
    if path is None:
        return None
    try:
        return tf.load_op_library(str(path))
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError, tf.errors.AlreadyExistsError) as e:
        log.warning("%s %s did not load (%s): %s", what, path, e, instead)
        return None


def compiler(variable: str, default: str, language: str, instead: str) -> str | None:
    """The compiler `$variable` names (else `default`) as a path; None where there is none, with
    one warning saying what runs `instead`."""
    name = os.environ.get(variable, default)
    found = shutil.which(name)
    if found is None:
        log.warning("no %s compiler (%s): %s", language, name, instead)
    return found


def built(
    library: str, command: Sequence[str], sources: Sequence[str], *, what: str, instead: str, extra: str = ""
) -> Path | None:
    """`library` compiled by `command` (without its output path: `-o <path>` is added) from
    `sources` (files of read/csrc/, which the command names) into its folder of the cache, now
    unless there; None where its build failed, now or before, or the cache cannot be written,
    with one warning naming `what` and what runs `instead`."""
    try:
        folder = Path(layout.user_cache("ops")) / _key(command, sources, extra)
        path = _built(folder / library, command, what)
    except (OSError, subprocess.SubprocessError) as e:  # an unwritable cache, a compiler that cannot start
        log.warning("%s could not be built (%s): %s", what, e, instead)
        return None
    if path is None:
        log.warning("%s did not build (%s): %s", what, folder / FAILED, instead)
    return path


def _key(command: Sequence[str], sources: Sequence[str], extra: str) -> str:
    """What a built library depends on: the sources, the command, the compiler's version, the
    machine type, and `extra`."""
    digest = hashlib.sha256()
    for name in sources:
        digest.update((SOURCES / name).read_bytes())
    version = subprocess.run([command[0], "--version"], capture_output=True, text=True, timeout=60).stdout
    digest.update("\0".join([*command, version, platform.machine(), extra]).encode())
    return digest.hexdigest()[:20]


def _built(library: Path, command: Sequence[str], what: str) -> Path | None:
    """`library`, compiled now unless there (None: its build failed, now or before)."""
    if library.is_file():
        _mark_used(library)
        return library
    folder = library.parent
    folder.mkdir(parents=True, exist_ok=True)
    with waited(str(folder / layout.CACHE_LOCK)):
        if library.is_file():  # another process built it while this one waited
            return library
        if (folder / FAILED).is_file():
            return None
        log.warning("compiling %s for this machine once (seconds) into %s", what, folder)
        partial = folder / f"{library.name}.{os.getpid()}.tmp"
        try:
            done = subprocess.run(
                [*command, "-o", str(partial)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            done = subprocess.CompletedProcess(command, 1, "", f"timed out after {BUILD_TIMEOUT_S} s")
        if done.returncode != 0:
            if done.returncode > 0:  # not a compiler killed by a signal (an interrupted run: tried again)
                (folder / FAILED).write_text(" ".join(command) + "\n" + done.stdout + done.stderr)
            partial.unlink(missing_ok=True)
            return None
        os.replace(partial, library)
    _remove_stale(folder.parent, keep=folder)
    return library


def _mark_used(library: Path) -> None:
    """Sets the library's modification time to now: the cache's record of its last use."""
    with contextlib.suppress(OSError):  # a read-only cache: nothing is pruned there either
        os.utime(library)


def _remove_stale(cache: Path, keep: Path) -> None:
    """Removes the folders of `cache` (but `keep`) whose newest file is older than STALE_DAYS:
    libraries no process has loaded for that long, failed builds as old."""
    cutoff = time.time() - STALE_DAYS * 24 * 3600
    for folder in cache.iterdir():
        try:
            stale = (
                folder != keep
                and folder.is_dir()
                and folder.stat().st_mtime < cutoff  # not one another process has just made
                and all(f.stat().st_mtime < cutoff for f in folder.iterdir())
            )
        except OSError:  # removed by another process meanwhile
            continue
        if stale:
            shutil.rmtree(folder, ignore_errors=True)
