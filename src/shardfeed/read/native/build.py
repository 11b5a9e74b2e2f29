"""Small native libraries compiled on first use, once per machine, into the user's cache.

`load`'s fused resize op (read/native/fused_resize.py, C++ against TensorFlow), its batch decode op
(read/native/batch_decode.py, C and C++ against TensorFlow and libjpeg) and `grain_dataset`'s
crop-window JPEG decoder (read/native/window_decode.py, C against libjpeg) are compiled by the
machine's compiler from the sources the package ships (read/native/csrc/) into

    $XDG_CACHE_HOME/shardfeed/ops/<key>/<library>      (default ~/.cache/shardfeed/ops/...)

where <key> hashes the sources, the command (headers, flags, libraries), the compiler's
`--version`, the machine type and what else the caller names (TensorFlow's version): later
processes load what is there. Concurrent first uses build once (the cache's lock file in the
folder); a failed build leaves `failed.txt` there, with the compiler's output, so that later
processes do not try again (a changed source, library or compiler is a new key); a compiler
killed by a signal (a run interrupted while it built) leaves nothing, and the next process builds. Each caller
falls back to its pure path, with one warning, where no library can be had.

A build that succeeds also writes a pointer (`<library>-<key>.path`, its key leaving out the
compiler): a machine whose compiler has since gone (a slim image built from one that had it)
loads the library found there instead of giving up. Libraries linked against libjpeg have its
version (read from `jpeglib.h` by the preprocessor) in their key, so a libjpeg installed or
upgraded after a failed or older build is built for. `SHARDFEED_NATIVE` decides: `auto` (the
default) as above, `off` never builds or loads one (the pure paths, no warning), `require` makes
a library that cannot be had an error (`NativeOpError`) instead of a warning. `status()` says, for
this process, which libraries are live, where, built against what, and what runs instead of
those that are not (`shardfeed native`).

A library's first load after its build runs its pixel check (`verified`): a few images through
it and through the reference it promises to equal (TensorFlow's ops; simplejpeg's decode for the
ctypes decoder); one that differs is removed and marked failed, so its pure path runs.

Every process that loads a library marks it used (its modification time); when a new build is
made, the cache's other folders that nothing has used for `STALE_DAYS` (builds for sources,
TensorFlows or compilers since replaced, old failures) are removed, so upgrades do not pile up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from shardfeed.errors import NativeOpError, OptionError
from shardfeed.format import layout
from shardfeed.format.folder_lock import waited
from shardfeed.lazy import tensorflow

log = logging.getLogger("shardfeed")

SOURCES = Path(__file__).with_name("csrc")
FAILED = "failed.txt"
CHECKED = "checked.txt"  # a build's pixel check passed (what it was compared with)
BUILD_TIMEOUT_S = 300
STALE_DAYS = 30  # a cache folder nothing has used for this long goes when a new build is made
# The fused resize's flags (and its callers'): -ffp-contract=off, no fused multiply-adds, which
# would round differently from TensorFlow's kernel.
OPTIMIZE = ("-O3", "-ffp-contract=off", "-fPIC", "-shared")


ENV = "SHARDFEED_NATIVE"
MODES = ("auto", "off", "require")
LIBJPEG_PROBE = "#include <stdio.h>\n#include <jpeglib.h>\nshardfeed_libjpeg JPEG_LIB_VERSION LIBJPEG_TURBO_VERSION\n"


@dataclasses.dataclass
class Library:
    """What this process knows of one native library (`status`)."""

    what: str  # 'the fused resize op'
    instead: str  # what runs where it is not live
    live: bool = False
    path: str | None = None
    built_with: dict[str, str] = dataclasses.field(default_factory=dict)  # tensorflow, libjpeg, compiler, machine
    reason: str | None = None  # why it is not live


_STATUS: dict[str, Library] = {}


def status() -> dict[str, Library]:
    """The native libraries this process has asked for, by file name (`shardfeed native`)."""
    return dict(_STATUS)


def mode() -> str:
    """SHARDFEED_NATIVE's value: auto (default), off or require.

    Raises:
        OptionError: another value.
    """
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in MODES:
        raise OptionError(f"{ENV}={value!r}: expected one of {', '.join(MODES)}")
    return value


def op_library(
    library: str, sources: Sequence[str], command: Callable[[str], list[str]], *, what: str, instead: str, **kw: Any
) -> Any:
    """A TensorFlow op library: `built` (keyed by TensorFlow's version too) and loaded into this
    process; None where either fails (`unavailable`)."""
    tf = tensorflow()
    path = built(library, sources, command, what=what, instead=instead, extra=tf.__version__, **kw)
    if path is None:
        return None
    try:
        return tf.load_op_library(str(path))
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError, tf.errors.AlreadyExistsError) as e:
        unavailable(library, f"{path} did not load ({e})")
        return None


def built(
    library: str,
    sources: Sequence[str],
    command: Callable[[str], list[str]],
    *,
    what: str,
    instead: str,
    extra: str = "",
    libjpeg: bool = False,
) -> Path | None:
    """`library` compiled by `command(compiler)` (without its output path: `-o <path>` is added)
    from `sources` (files of read/native/csrc/, which the command names) into its folder of the cache,
    now unless there; where there is no compiler, the library an earlier build left (its
    pointer). None (`unavailable`) where SHARDFEED_NATIVE is off, its build failed, now or
    before, or the cache cannot be written. `extra` (TensorFlow's version) and, with `libjpeg`,
    the version of the libjpeg headers the compiler sees are in its key."""
    entry = _STATUS.setdefault(library, Library(what, instead))
    entry.built_with = {"machine": platform.machine(), **({"tensorflow": extra} if extra else {})}
    if mode() == "off":
        unavailable(library, f"{ENV}=off", quiet=True)
        return None
    cache = Path(layout.user_cache("ops"))
    pointer = cache / f"{library}-{_key([], sources, extra)}.path"
    name = os.environ.get("CXX", "c++")
    compiler = shutil.which(name)
    if compiler is None:
        found = _pointed(pointer, library)
        if found is None:
            unavailable(library, f"no C++ compiler ({name}) on PATH, and no build of it in {cache}")
            return None
        return _live(library, found, compiler=f"none on PATH now (built before, {found.parent.name})")
    try:
        version = _libjpeg_version(compiler) if libjpeg else ""
        full = command(compiler)
        folder = cache / _key(full, sources, f"{extra}\0{version}", compiler=compiler)
        path = _built(folder / library, full, what)
    except (OSError, subprocess.SubprocessError) as e:  # an unwritable cache, a compiler that cannot start
        unavailable(library, f"could not be built ({e})")
        return None
    if path is None:
        unavailable(library, f"did not build ({folder / FAILED})")
        return None
    with contextlib.suppress(OSError):  # written once per build, not by every process that loads it
        if not pointer.is_file() or pointer.read_text().strip() != folder.name:
            pointer.write_text(folder.name + "\n")
    return _live(library, path, compiler=compiler, **({"libjpeg": version or "no jpeglib.h"} if libjpeg else {}))


def verified(library: str, check: Callable[[], str | None], reference: str) -> bool:
    """Whether the live `library` gives the pixels it promises: `check()` (the library's own
    comparison with `reference` on a few images, None where every value is equal) runs once per
    build, the first time a process loads it, and its verdict stays in the build's folder
    (`checked.txt`). A library whose pixels differ (a libjpeg or compiler that rounds otherwise)
    is removed and its folder marked failed (`failed.txt` says what differed): no process loads
    or builds it again for that key, and this one runs the pure path (`unavailable`)."""
    entry = _STATUS.get(library)
    if entry is None or not entry.live or entry.path is None:
        return False
    built = Path(entry.path)
    if (built.parent / CHECKED).is_file():
        entry.built_with["pixels"] = f"equal to {reference} (checked at build)"
        return True
    problem = check()
    if problem is None:
        with contextlib.suppress(OSError):  # a read-only cache: checked again by the next process
            (built.parent / CHECKED).write_text(f"pixels equal to {reference}\n")
        entry.built_with["pixels"] = f"equal to {reference} (checked now)"
        return True
    with contextlib.suppress(OSError):
        (built.parent / FAILED).write_text(f"pixel check: {problem}\n")
        built.unlink()
    unavailable(library, f"its pixels differ from {reference} ({problem})")
    return False


def unavailable(library: str, reason: str, *, quiet: bool = False) -> None:
    """Records why `library` is not live and says it once (a warning naming what runs instead;
    none when `quiet`); under SHARDFEED_NATIVE=require raises instead.

    Raises:
        NativeOpError: SHARDFEED_NATIVE=require.
    """
    entry = _STATUS.setdefault(library, Library(library, "the pure path"))
    entry.live, entry.path, entry.reason = False, None, reason
    if mode() == "require":
        raise NativeOpError(f"{entry.what} cannot be used: {reason} ({ENV}=require; `shardfeed native` says more)")
    if not quiet:
        log.warning("%s: %s: %s", entry.what, reason, entry.instead)


def _live(library: str, path: Path, **facts: str) -> Path:
    """Records `library` as live at `path`, built with `facts`."""
    entry = _STATUS[library]
    entry.live, entry.path, entry.reason = True, str(path), None
    entry.built_with.update(facts)
    return path


def _pointed(pointer: Path, library: str) -> Path | None:
    """The library an earlier build's pointer names, where it is still there."""
    try:
        found = pointer.parent / pointer.read_text().strip() / library
    except OSError:
        return None
    if not found.is_file():
        return None
    _mark_used(found)
    return found


@functools.cache  # one preprocessor run a process, for both libraries linked to libjpeg
def _libjpeg_version(compiler: str) -> str:
    """'62 2.1.5': JPEG_LIB_VERSION and LIBJPEG_TURBO_VERSION as the compiler's preprocessor
    reads them from jpeglib.h; '' where it has no jpeglib.h (its build then fails: headers
    installed later change this, so the key, so the build is tried again)."""
    done = subprocess.run(
        [compiler, "-E", "-P", "-x", "c", "-"], input=LIBJPEG_PROBE, capture_output=True, text=True, timeout=60
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("shardfeed_libjpeg")]
    return " ".join(lines[-1].split()[1:]) if done.returncode == 0 and lines else ""


def _key(command: Sequence[str], sources: Sequence[str], extra: str, *, compiler: str | None = None) -> str:
    """What a built library depends on: the sources, the command, the compiler's version (none
    given: the pointer's key, which leaves the compiler out), the machine type, and `extra`."""
    digest = hashlib.sha256()
    for name in sources:
        digest.update((SOURCES / name).read_bytes())
    version = ""
    if compiler is not None:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
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
