"""The native libraries' switch and report: SHARDFEED_NATIVE=auto|off|require, a machine without
a compiler loading what an earlier build left, libjpeg's version in the key, `shardfeed native`.

Built for real with the machine's compiler into each test's own cache ($XDG_CACHE_HOME); the
crop-window decoder (C against libjpeg, no TensorFlow) is the library built, the quickest.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CXX", "c++")) is None, reason="no C++ compiler")

ASK = (
    "from shardfeed.read.native import build as native_build, window_decode\n"
    "print('available', window_decode.available())\n"
    "print('status', native_build.status()['window_decode.so'])\n"
)


def _ask(cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """A fresh process asking for the crop-window decoder with `env` over this one's."""
    return subprocess.run(
        [sys.executable, "-c", ASK],
        env={**os.environ, "XDG_CACHE_HOME": str(cache), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_without_a_compiler_the_library_built_before_is_loaded(tmp_path: Path) -> None:
    """It gave up before looking in the cache: a slim image made from one that had built the
    library took the slow path. Now the pointer the build left is followed."""
    built = _ask(tmp_path / "cache")
    assert built.returncode == 0 and "available True" in built.stdout, built.stderr
    later = _ask(tmp_path / "cache", CXX="no-such-c++")
    assert later.returncode == 0 and "available True" in later.stdout, later.stderr
    assert "none on PATH now (built before" in later.stdout and "compiling" not in later.stderr
    fresh = _ask(tmp_path / "empty", CXX="no-such-c++")  # nothing built there: the pure path, one warning
    assert "available False" in fresh.stdout and "no C++ compiler (no-such-c++) on PATH" in fresh.stderr


def test_off_builds_nothing_says_nothing_and_require_fails_in_one_line(tmp_path: Path) -> None:
    off = _ask(tmp_path / "cache", SHARDFEED_NATIVE="off")
    assert off.returncode == 0 and "available False" in off.stdout, off.stderr
    assert "crop-window" not in off.stderr and not (tmp_path / "cache").exists()
    required = subprocess.run(
        [sys.executable, "-m", "shardfeed", "native"],
        env={
            **os.environ,
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
            "CXX": "no-such-c++",
            "SHARDFEED_NATIVE": "require",
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    last = required.stderr.strip().splitlines()[-1]
    assert required.returncode == 1 and "Traceback" not in required.stderr, required.stderr
    assert last.startswith("error: the fused resize op cannot be used: no C++ compiler (no-such-c++)"), last
    wrong = _ask(tmp_path / "cache", SHARDFEED_NATIVE="sometimes")
    assert "SHARDFEED_NATIVE='sometimes': expected one of auto, off, require" in wrong.stderr


def test_the_key_holds_the_libjpeg_version_the_headers_declare(tmp_path: Path) -> None:
    """A build against no jpeglib.h failed and was never tried again once the headers were
    installed: the key now holds the version the preprocessor reads, so it changes with them.
    The version is checked against jconfig.h/jpeglib.h read here as text."""
    from shardfeed.read.native import build as native_build

    compiler = shutil.which(os.environ.get("CXX", "c++")) or "c++"
    found = native_build._libjpeg_version(compiler)
    headers = " ".join(
        p.read_text() for p in Path("/usr/include").rglob("j*.h") if p.name in ("jconfig.h", "jpeglib.h")
    )
    if not headers:
        assert found == ""
        return
    declared = [
        re.search(rf"#define {name}\s+(\S+)", headers) for name in ("JPEG_LIB_VERSION", "LIBJPEG_TURBO_VERSION")
    ]
    assert found.split() == [m.group(1) for m in declared if m], found
    # a compiler that sees no jpeglib.h: an empty version, so another key than with the headers
    script = tmp_path / "cc.sh"
    script.write_text(f'#!/bin/sh\n[ "$1" = "-E" ] && exit 1\nexec {compiler} "$@"\n')
    script.chmod(0o755)
    assert native_build._libjpeg_version(str(script)) == ""


def test_shardfeed_native_says_what_is_live_and_what_the_rest_costs(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "SHARDFEED_QUIET_TF": "1"}
    off = subprocess.run(
        [sys.executable, "-m", "shardfeed", "native"],
        env={**env, "SHARDFEED_NATIVE": "off"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert off.returncode == 0, off.stderr
    lines = off.stdout.splitlines()
    assert lines[0] == "SHARDFEED_NATIVE=off" and len(lines) == 4
    assert lines[1].startswith("fused_resize.so: not live (the fused resize op): SHARDFEED_NATIVE=off; instead ")
    assert "0.54 instead of 0.43 ms of CPU an image" in lines[2]


CHECK = (
    "from shardfeed.read.native import build as native_build, window_decode\n"
    "import sys\n"
    "print('available', window_decode.available())\n"
    "library = native_build.status()['window_decode.so']\n"
    "print('pixels', library.built_with.get('pixels'))\n"
    "if len(sys.argv) > 1:  # a build not checked yet whose pixels differ: its check says so\n"
    "    import pathlib\n"
    "    (pathlib.Path(library.path).parent / 'checked.txt').unlink()\n"
    "    print('kept', native_build.verified('window_decode.so', lambda: '3 values differ', 'the reference'))\n"
)


def _check(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHECK, *args],
        env={**os.environ, "XDG_CACHE_HOME": str(cache)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_build_is_pixel_checked_once_and_one_that_differs_is_never_used(tmp_path: Path) -> None:
    """'Every pixel equals TensorFlow's' rested on the machine's libjpeg and compiler: the first
    load of a build now compares it with its reference (simplejpeg's whole decode, here), keeps
    the verdict in the build's folder, and a library whose pixels differ is removed and marked
    failed, so no later process loads or builds it again."""
    cache = tmp_path / "cache"
    first = _check(cache)
    assert (
        "available True" in first.stdout and "pixels equal to simplejpeg's whole decode (checked now)" in first.stdout
    )
    assert [p.read_text() for p in cache.rglob("checked.txt")] == ["pixels equal to simplejpeg's whole decode\n"]
    again = _check(cache)
    assert "(checked at build)" in again.stdout, again.stdout
    (checked,) = cache.rglob("checked.txt")
    checked.unlink()  # as a build made before the check: its first load now checks it
    assert "(checked now)" in _check(cache).stdout and checked.is_file()
    differ = _check(cache, "differ")
    assert "kept False" in differ.stdout and "its pixels differ from the reference (3 values differ)" in differ.stderr
    folder = checked.parent
    assert not (folder / "window_decode.so").exists()
    assert (folder / "failed.txt").read_text() == "pixel check: 3 values differ\n"
    after = _ask(cache)
    assert "available False" in after.stdout and "compiling" not in after.stderr, after.stderr


def test_the_resize_check_sees_a_rounding_that_differs() -> None:
    """The fused resize's check compares values, not shapes: an op that truncates where
    TensorFlow rounds fails it; TensorFlow's own ops pass."""
    import tensorflow as tf

    from shardfeed.read.native import fused_resize

    class Truncating:
        def shardfeed_fused_resize(self, image: tf.Tensor, size: tf.Tensor, flip: tf.Tensor) -> tf.Tensor:
            resized = tf.cast(tf.image.resize(image, size), tf.uint8)  # truncated, not rounded
            return tf.cond(flip, lambda: tf.image.flip_left_right(resized), lambda: resized)

    class Rounding:
        def shardfeed_fused_resize(self, image: tf.Tensor, size: tf.Tensor, flip: tf.Tensor) -> tf.Tensor:
            resized = tf.cast(tf.round(tf.image.resize(image, size)), tf.uint8)
            return tf.cond(flip, lambda: tf.image.flip_left_right(resized), lambda: resized)

    problem = fused_resize._pixel_check(Truncating())
    assert problem is not None and re.match(r"resized to \(16, 16\), flip False: \d+ values differ", problem)
    assert fused_resize._pixel_check(Rounding()) is None
