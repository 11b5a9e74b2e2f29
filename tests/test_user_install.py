"""The install a user makes, tested: the built wheel with only the `cpu` extra in a fresh venv.

`make test` runs with the dev tools installed, so it cannot see a runtime dependency that only a
dev extra brings (matplotlib was one: `show`, `train` and `evaluate` failed in a user's install).
Here the wheel is built from this tree, installed into a new virtual environment with nothing
but `shardfeed[cpu]`, and the README's everyday commands run in that environment's own processes
on real photos: convert -> info -> verify -> show -> train (1 epoch) -> evaluate -> predict ->
report. Each must exit 0, and write what it says it writes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from conftest import JPEG_HEADERS

from shardfeed.format.folder_lock import waited

pytestmark = pytest.mark.slow  # training runs, fresh processes or servers: `make test`, not `make test-quick`

ROOT = Path(__file__).resolve().parents[1]
INSTALL_TIMEOUT_S = 1200  # a fresh machine downloads TensorFlow; a warm pip cache takes ~1 min
COMMAND_TIMEOUT_S = 600
# --no-compile: pip's byte-compiling of every installed module (TensorFlow's thousands) took 15 of
# the `cpu` install's 38 s; the commands here compile what they import, once (_run keeps no
# PYTHONDONTWRITEBYTECODE), and what is installed is the same
PIP_INSTALL = ("-q", "--no-compile")


def _run(command: list[str], *, cwd: Path, timeout: float = COMMAND_TIMEOUT_S) -> str:
    """Runs `command`; its combined output, or a failure that shows it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}:\n{output[-4000:]}"
    return output


def _built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from this tree, once a test run: pip builds in the tree's own build/
    folder, where two builds at once (xdist's workers each setting up a fixture) collide
    ("File exists: ...dist-info"), so the first builds under a lock and the others take its wheel.
    The folder is the run's: xdist's workers share their base's parent, a run without xdist has
    its own base."""
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shardfeed-wheel"
    shared.mkdir(exist_ok=True)
    with waited(str(shared / "build.lock")):
        if not list(shared.glob("shardfeed-*.whl")):
            _run(
                [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(shared), str(ROOT)],
                cwd=shared,
                timeout=INSTALL_TIMEOUT_S,
            )
    (wheel,) = shared.glob("shardfeed-*.whl")
    return wheel


@pytest.fixture(scope="module")
def user_env(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel built from this tree with only the `cpu` extra."""
    return _extra_env(wheel, "cpu", tmp_path_factory.mktemp("user_install"))


def test_the_user_install_has_no_dev_tools(user_env: Path) -> None:
    """The environment is the user's, not ours: none of the dev extra's packages are in it (else
    this test would prove nothing about the runtime dependencies)."""
    python = str(user_env / "bin" / "python")
    probe = "import importlib.util as u; print([m for m in ('pytest', 'sklearn', 'skimage', 'moto') if u.find_spec(m)])"
    assert _run([python, "-c", probe], cwd=user_env).strip() == "[]"


def test_everyday_commands_run_in_the_user_install(user_env: Path, photo_tree: Path, tmp_path: Path) -> None:
    """convert -> info -> verify -> show -> train -> evaluate -> predict -> report, each exit 0."""
    cli = str(user_env / "bin" / "shardfeed")
    data, run = tmp_path / "data", tmp_path / "run"
    _run(
        [cli, "convert", str(photo_tree), str(data), "--split", "train=0.75,validation=0.25", "--seed", "0"],
        cwd=tmp_path,
    )
    assert (data / "manifest.json").is_file() and (data / "report.html").is_file()
    assert "astronaut" in _run([cli, "info", str(data)], cwd=tmp_path)
    _run([cli, "verify", str(data)], cwd=tmp_path)
    _run([cli, "show", str(data), "-o", str(tmp_path / "grid.png")], cwd=tmp_path)
    assert (tmp_path / "grid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    train = [
        cli,
        "train",
        str(data),
        "--out",
        str(run),
        "--model",
        "small_cnn",
        "--epochs",
        "1",
        "--image-size",
        "32",
        "--batch-size",
        "8",
    ]
    _run(train, cwd=tmp_path)
    assert (run / "model.keras").is_file()
    _run([cli, "evaluate", str(run)], cwd=tmp_path)
    assert (run / "eval-validation" / "confusion_matrix.png").is_file()
    predictions = tmp_path / "predictions.csv"
    _run([cli, "predict", str(run), str(photo_tree / "coffee"), "-o", str(predictions)], cwd=tmp_path)
    assert len(predictions.read_text().splitlines()) == 1 + len(list((photo_tree / "coffee").iterdir()))
    _run([cli, "report", str(data), "-o", str(tmp_path / "data.html")], cwd=tmp_path)
    _run([cli, "report", str(run), "-o", str(tmp_path / "run.html")], cwd=tmp_path)
    assert "<html" in (tmp_path / "run.html").read_text()


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
def test_the_fused_resize_op_builds_from_the_wheels_sources(user_env: Path, tmp_path: Path) -> None:
    """The ops' C and C++ sources ship in the wheel and compile against the user's TensorFlow
    (the batch decode op also against the system's libjpeg, where its headers are)."""
    probe = (
        "import tensorflow as tf; from shardfeed.read.native import batch_decode, fused_resize as f; "
        "print('shape', f.resize_flip(tf.zeros([5, 7, 3], tf.uint8), (2, 3), tf.constant(True)).shape); "
        "print('batch op', batch_decode.available())"
    )
    env_python = str(user_env / "bin" / "python")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))},
        "XDG_CACHE_HOME": str(tmp_path / "cache"),  # the test's own: the build is made here
    }
    done = subprocess.run(
        [env_python, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
    )
    assert done.returncode == 0 and "shape (2, 3, 3)" in done.stdout, done.stderr[-3000:]
    assert list((tmp_path / "cache" / "shardfeed" / "ops").glob("*/fused_resize.so"))
    assert f"batch op {JPEG_HEADERS}" in done.stdout, done.stderr[-3000:]
    # `shardfeed native` in the user's install: what is live, from the builds just made
    done = subprocess.run(
        [str(user_env / "bin" / "shardfeed"), "native"],
        cwd=tmp_path,
        env={**env, "CXX": "no-such-c++"},  # no compiler now: the builds made before are found
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "fused_resize.so: live (the fused resize op)" in done.stdout, done.stdout
    assert "compiler none on PATH now (built before" in done.stdout, done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from this tree."""
    return _built_wheel(tmp_path_factory)


def _extra_env(wheel: Path, extra: str, base: Path) -> Path:
    """A fresh venv with the wheel and only `extra` (the extras but `cpu` bring no TensorFlow:
    conversion does not need it)."""
    env_dir = base / f"venv-{extra}"
    venv.create(env_dir, with_pip=True, symlinks=True)
    _run(
        [
            str(env_dir / "bin" / "python"),
            "-m",
            "pip",
            "install",
            *PIP_INSTALL,
            f"shardfeed[{extra}] @ {wheel.as_uri()}",
        ],
        cwd=base,
        timeout=INSTALL_TIMEOUT_S,
    )
    return env_dir


def test_the_hub_and_webdataset_extras_convert_their_sources(wheel: Path, photo_tree: Path, tmp_path: Path) -> None:
    """`shardfeed[hub]` converts a Hub Parquet file and `shardfeed[webdataset]` a brace pattern of
    tars, each in a venv holding that extra alone."""
    import io
    import tarfile

    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    photos = sorted(photo_tree.rglob("*.jpg"))
    classes = sorted(p.name for p in photo_tree.iterdir())
    table = pa.table({"image": [{"bytes": p.read_bytes(), "path": None} for p in photos]})
    table = table.append_column("label", pa.array([classes.index(p.parent.name) for p in photos]))
    pq.write_table(table, tmp_path / "train-00000-of-00001.parquet")
    for n in range(2):
        with tarfile.open(tmp_path / f"data-{n:06d}.tar", "w") as tar:
            for i, p in enumerate(photos[n::2]):
                for name, data in ((f"{n}{i:04d}.jpg", p.read_bytes()), (f"{n}{i:04d}.cls", b"1")):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    for extra, source in (("hub", "train-00000-of-00001.parquet"), ("webdataset", "data-{000000..000001}.tar")):
        cli = str(_extra_env(wheel, extra, tmp_path) / "bin" / "shardfeed")
        out = tmp_path / f"out-{extra}"
        _run([cli, "convert", str(tmp_path / source), str(out), "--split", "train=1"], cwd=tmp_path)
        assert (out / "manifest.json").is_file(), extra
        assert '"num_records": 40' in (out / "manifest.json").read_text(), extra


def test_the_s3_extra_converts_into_a_bucket(wheel: Path, photo_tree: Path, s3_endpoint: str, tmp_path: Path) -> None:
    """`shardfeed[s3]` alone: convert into a bucket on a loopback S3 server, then info on it."""
    import fsspec

    fsspec.filesystem("s3", skip_instance_cache=True).mkdir("extra-s3")
    cli = str(_extra_env(wheel, "s3", tmp_path) / "bin" / "shardfeed")
    _run([cli, "convert", str(photo_tree), "s3://extra-s3/photos", "--no-report"], cwd=tmp_path)
    assert "astronaut" in _run([cli, "info", "s3://extra-s3/photos"], cwd=tmp_path)


def test_the_beam_extra_converts_on_beams_local_runner(wheel: Path, photo_tree: Path, tmp_path: Path) -> None:
    """`shardfeed[beam]` alone: convert --runner beam (Beam's DirectRunner), the shards the
    local runner writes."""
    cli = str(_extra_env(wheel, "beam", tmp_path) / "bin" / "shardfeed")
    _run([cli, "convert", str(photo_tree), str(tmp_path / "beam"), "--runner", "beam", "--seed", "0"], cwd=tmp_path)
    _run([cli, "convert", str(photo_tree), str(tmp_path / "local"), "--seed", "0"], cwd=tmp_path)
    shards = sorted(p.name for p in (tmp_path / "local").glob("train-*"))
    assert shards and all((tmp_path / "beam" / n).read_bytes() == (tmp_path / "local" / n).read_bytes() for n in shards)


GRAIN_BATCHES = """import sys
import shardfeed
ds = shardfeed.grain_dataset(sys.argv[1], batch_size=4, image_size=32, seed=0)
shapes = {(x.shape, x.dtype.name, y.shape) for x, y in ds}
print(sorted(shapes), ds.steps_per_epoch, "tensorflow" in sys.modules)
from shardfeed.read.native import window_decode  # its C source ships in the wheel: the key reads it
print("window decoder", window_decode.available())
"""


def test_the_grain_extra_feeds_batches_without_tensorflow(
    wheel: Path, user_env: Path, photo_tree: Path, tmp_path: Path
) -> None:
    """`shardfeed[grain]` alone (no TensorFlow): convert, then `grain_dataset`'s batches; the
    `cpu` install without it is told in one line which extra to add."""
    python = str(_extra_env(wheel, "grain", tmp_path) / "bin" / "python")
    data = tmp_path / "data"
    _run([python, "-m", "shardfeed", "convert", str(photo_tree), str(data), "--split", "train=1"], cwd=tmp_path)
    printed = _run([python, "-c", GRAIN_BATCHES, str(data)], cwd=tmp_path)  # stdout, then stderr (Grain's notes)
    assert "[((4, 32, 32, 3), 'uint8', (4,))] 11 False\n" in printed, printed
    assert f"window decoder {JPEG_HEADERS and shutil.which('c++') is not None}" in printed, printed
    missing = subprocess.run(
        [str(user_env / "bin" / "python"), "-c", GRAIN_BATCHES, str(data)], capture_output=True, text=True, timeout=120
    )
    assert missing.returncode == 1 and "pip install 'shardfeed[grain]'" in missing.stderr, missing.stderr[-2000:]
