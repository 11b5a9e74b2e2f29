"""The fused resize op: TensorFlow's resize, rounding and flip bit for bit, built once, or left out."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import photos

from shardfeed import DecodeOptions, load
from shardfeed.read.augment import Augment
from shardfeed.read.native import fused_resize

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which(os.environ.get("CXX", "c++")) is None, reason="no C++ compiler"),
]


def _reference(image: np.ndarray, size: tuple[int, int], flip: bool) -> np.ndarray:
    """What `load` computes without the op: TensorFlow's bilinear resize, round, cast, flip."""
    import tensorflow as tf

    out = tf.cast(tf.round(tf.image.resize(image, size)), tf.uint8)
    return (tf.reverse(out, [1]) if flip else out).numpy()


def test_the_op_equals_tensorflows_resize_round_and_flip() -> None:
    """Random windows of real photos, shrunk and enlarged to square, wide, tall, odd and 1-pixel
    sizes, 3, 1 and 4 channels, flipped and not; and windows whose rows and columns fall on
    source pixels (the same size, three times as large) or end at the photo's last row and
    column (where the op reads rows from a copy): every value equals TensorFlow's."""
    rng = np.random.default_rng(0)
    sizes = [(224, 224), (64, 96), (333, 17), (1, 1), (500, 480), (7, 300)]
    checked = 0
    for photo in photos().values():
        alpha = (np.arange(photo.shape[0] * photo.shape[1]) % 251).reshape(*photo.shape[:2], 1).astype(np.uint8)
        for image in (photo, photo[..., :1], np.concatenate([photo, alpha], axis=-1)):
            h, w = image.shape[:2]
            for size in sizes:
                ch, cw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
                y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
                checked += _check(image[y : y + ch, x : x + cw], size)
            checked += _check(image[h - 150 :, w - 160 :], (150, 160))  # the same size
            checked += _check(image[h - 50 :, w - 40 :], (150, 120))  # three times as large
            checked += _check(image[h - 1 :, w - 1 :], (5, 9))  # the last pixel alone
    assert checked == 4 * 3 * (len(sizes) + 3) * 2


def _check(window: np.ndarray, size: tuple[int, int]) -> int:
    """Asserts that the op's output for `window` equals TensorFlow's, flipped and not: 2 checks."""
    import tensorflow as tf

    window = np.ascontiguousarray(window)
    for flip in (False, True):
        got = fused_resize.resize_flip(tf.constant(window), size, tf.constant(flip))
        assert got is not None, "the op did not build on a machine with a compiler"
        expected = _reference(window, size, flip)
        assert got.shape == expected.shape
        np.testing.assert_array_equal(got.numpy(), expected, err_msg=f"{window.shape} -> {size} {flip}")
    return 2


def test_the_build_without_avx2_gives_the_same_values(tmp_path: Path) -> None:
    """The kernel built without its AVX2 versions (as on a CPU without AVX2, or not x86): the same
    check in a fresh process (an op is registered once per process)."""
    import tensorflow as tf

    library = tmp_path / "portable.so"
    command = fused_resize._command(tf, shutil.which(os.environ.get("CXX", "c++")) or "c++")
    subprocess.run([*command, "-DSHARDFEED_PORTABLE", "-o", str(library)], check=True, capture_output=True, timeout=600)
    script = textwrap.dedent(
        f"""
        import numpy as np, tensorflow as tf
        from test_fused_resize import _reference, photos
        op = tf.load_op_library({str(library)!r})
        rng = np.random.default_rng(1)
        for photo in photos().values():
            alpha = np.full((*photo.shape[:2], 1), 200, np.uint8)
            for image in (photo, np.concatenate([photo, alpha], axis=-1)):
                for size, flip in (((224, 224), True), ((77, 300), False), ((400, 390), True)):
                    h, w = int(rng.integers(1, photo.shape[0])), int(rng.integers(1, photo.shape[1]))
                    window = np.ascontiguousarray(image[-h:, -w:])
                    got = op.shardfeed_fused_resize(window, size, flip).numpy()
                    np.testing.assert_array_equal(got, _reference(window, size, flip))
        print("same")
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0 and "same" in done.stdout, done.stderr[-3000:]


def test_load_gives_the_same_batches_with_and_without_the_op(photo_shards: Path) -> None:
    """Training (random crops and flips) and evaluation batches, colour and grey: identical."""

    def batches(fused: bool, training: bool, channels: int) -> np.ndarray:
        ds = load(
            str(photo_shards),
            split="train",
            training=training,
            augment=Augment() if training else None,
            batch_size=8,
            image_size=(48, 40),
            seed=3,
            decode=DecodeOptions(fused_resize=fused, channels=channels),
        )
        return np.concatenate([images.numpy() for images, _ in ds])

    for training in (True, False):
        for channels in (3, 1):
            with_op, without = batches(True, training, channels), batches(False, training, channels)
            assert with_op.shape[-1] == channels
            np.testing.assert_array_equal(with_op, without)
    flips = batches(True, True, 3)
    assert not np.array_equal(flips, batches(True, False, 3)), "training batches should differ from evaluation's"


def _use_the_op(cache: Path, compiler: str) -> subprocess.CompletedProcess[str]:
    """A fresh process resizing one image through `fused_resize` with `compiler` as $CXX."""
    script = textwrap.dedent(
        """
        import numpy as np, tensorflow as tf
        from shardfeed.read.native import fused_resize
        out = fused_resize.resize_flip(tf.zeros([5, 7, 3], tf.uint8), (3, 4), tf.constant(False))
        print("result:", None if out is None else out.shape)
        """
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "CXX": compiler, "SHARDFEED_QUIET_TF": "1"}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)


def _logging_compiler(tmp_path: Path, body: str) -> tuple[str, Path]:
    """A compiler script that notes each build (not its `--version`) in a file, then runs `body`."""
    calls = tmp_path / "builds.txt"
    script = tmp_path / "cxx.sh"
    script.write_text(
        f'#!/bin/sh\n[ "$1" = "--version" ] || echo build >> {calls}\n'
        f'[ "$1" = "--version" ] && exec {shutil.which("c++")} --version\n{body}\n'
    )
    script.chmod(0o755)
    return str(script), calls


def test_a_failed_build_falls_back_with_one_warning_and_is_not_retried(tmp_path: Path) -> None:
    compiler, calls = _logging_compiler(tmp_path, 'echo "fatal error: no headers here" >&2\nexit 1')
    for _ in range(2):
        done = _use_the_op(tmp_path / "cache", compiler)
        assert done.returncode == 0, done.stderr
        assert "result: None" in done.stdout
        assert "the fused resize op: did not build" in done.stderr and "TensorFlow's ops" in done.stderr
    assert calls.read_text().split() == ["build"], "the second process should not have tried again"
    (failed,) = (tmp_path / "cache" / "shardfeed" / "ops").glob("*/failed.txt")
    assert "fatal error: no headers here" in failed.read_text()


def test_a_build_interrupted_by_a_signal_is_built_by_the_next_process(tmp_path: Path) -> None:
    """The first process's compiler is killed (as when a run is stopped while it builds): that
    process falls back, leaves no failed.txt, and the next process builds and uses the op."""
    marker = tmp_path / "killed-once"
    body = f'[ -e {marker} ] || {{ touch {marker}; kill -TERM $$; }}\nexec {shutil.which("c++")} "$@"'
    compiler, calls = _logging_compiler(tmp_path, body)
    first, second = (_use_the_op(tmp_path / "cache", compiler) for _ in range(2))
    assert first.returncode == 0 and "result: None" in first.stdout, first.stderr
    assert second.returncode == 0 and "result: (3, 4, 3)" in second.stdout, second.stderr
    assert calls.read_text().split() == ["build", "build"]
    assert not list((tmp_path / "cache" / "shardfeed" / "ops").glob("*/failed.txt"))


def test_no_compiler_falls_back_with_one_warning(tmp_path: Path) -> None:
    done = _use_the_op(tmp_path / "cache", str(tmp_path / "no-such-c++"))
    assert done.returncode == 0, done.stderr
    assert "result: None" in done.stdout and "no C++ compiler" in done.stderr


def test_processes_starting_together_build_once_and_later_ones_load_it(tmp_path: Path) -> None:
    compiler, calls = _logging_compiler(tmp_path, f'exec {shutil.which("c++")} "$@"')
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "CXX": compiler, "SHARDFEED_QUIET_TF": "1"}
    script = "import tensorflow as tf; from shardfeed.read.native import fused_resize as f; "
    script += "print('result:', f.resize_flip(tf.zeros([5, 7, 3], tf.uint8), (3, 4), tf.constant(True)).shape)"
    both = [
        subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
        )
        for _ in range(2)
    ]
    for process in both:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err
        assert "result: (3, 4, 3)" in out
    assert calls.read_text().split() == ["build"]
    later = _use_the_op(tmp_path / "cache", compiler)
    assert "result: (3, 4, 3)" in later.stdout and "compiling" not in later.stderr
    assert calls.read_text().split() == ["build"]


def test_a_new_build_removes_the_cache_folders_nothing_has_used_for_30_days(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Builds of older sources or TensorFlows, and old failures, go when a new build is made, once
    no process has loaded them for `STALE_DAYS`; a library loaded since is kept (loading marks it)."""
    from shardfeed.read.native import build as native_build

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    ops = tmp_path / "cache" / "shardfeed" / "ops"
    old = time.time() - (native_build.STALE_DAYS + 1) * 24 * 3600
    folders = {name: ops / name for name in ("old-build", "old-failure", "used-lately", "loaded-now")}
    for name, folder in folders.items():
        folder.mkdir(parents=True)
        kept = folder / ("failed.txt" if name == "old-failure" else "kernel.so")
        kept.write_text("x")
        for path in (kept, folder):
            os.utime(path, (old, old) if name != "used-lately" else None)
    # "loaded-now": an old build a process loads now (its key is the real one's) is marked used
    cxx = shutil.which(os.environ.get("CXX", "c++")) or "c++"

    def command(compiler: str, *more: str) -> list[str]:
        return [compiler, "-O0", "-fPIC", "-shared", str(native_build.SOURCES / "fused_resize.cc"), *more]

    key = native_build._key(command(cxx), ("fused_resize.cc",), "\0", compiler=cxx)
    os.rename(folders["loaded-now"], ops / key)
    assert native_build.built("kernel.so", ("fused_resize.cc",), command, what="k", instead="-") is not None
    assert (ops / key / "kernel.so").stat().st_mtime > time.time() - 60
    pointers = [p.name for p in ops.glob("kernel.so-*.path")]  # where a machine without a compiler looks
    assert len(pointers) == 1 and (ops / pointers[0]).read_text() == f"{key}\n"
    assert sorted(p.name for p in ops.iterdir()) == sorted([key, "old-build", "old-failure", "used-lately", *pointers])

    def other(compiler: str) -> list[str]:  # a new build (another key): the stale go
        return command(compiler, "-DSHARDFEED_OTHER_KEY")

    assert native_build.built("kernel.so", ("fused_resize.cc",), other, what="k", instead="-") is not None
    new = native_build._key(other(cxx), ("fused_resize.cc",), "\0", compiler=cxx)
    assert sorted(p.name for p in ops.iterdir()) == sorted([key, new, "used-lately", *pointers])
