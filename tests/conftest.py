"""Shared fixtures: small real corpora built once per session from images the packages ship."""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from shardfeed import ConvertOptions, convert

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# botocore looks for credentials at the EC2 metadata address when none are set: tests talk to
# loopback only.
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
from bench.corpus import hostile_images

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

PHOTO_NAMES = ("astronaut", "coffee", "chelsea", "rocket")
# libjpeg's headers, which grain_dataset's crop-window decoder is compiled against (read/native/window_decode.py)
JPEG_HEADERS = any(Path(folder, "jpeglib.h").is_file() for folder in ("/usr/include", "/usr/local/include"))


def photos() -> dict[str, np.ndarray]:
    """Real colour photos from scikit-image, as uint8 RGB arrays."""
    import skimage.data

    return {name: getattr(skimage.data, name)()[..., :3] for name in PHOTO_NAMES}


def few_converted(tmp_path_factory: pytest.TempPathFactory, build: Callable[..., str]) -> Path:
    """64 images from `build` (a bench.corpus builder: folder, count, size), converted 48 to train
    and 16 to validate: whole batches of 8 or 16, for a run whose point is that it trains and scores
    (on some backend, from some weights), not what it learns."""
    source = build(str(tmp_path_factory.mktemp("few") / "source"), 64, size=64)
    out = tmp_path_factory.mktemp("few_shards") / "shards"
    convert(source, str(out), ConvertOptions(split="train=0.75,validation=0.25"), progress=False)
    return out


def crops(photo: np.ndarray, count: int, seed: int) -> list[np.ndarray]:
    """Distinct random crops (a few hundred pixels a side) of a photo."""
    rng = np.random.default_rng(seed)
    out = []
    h, w = photo.shape[:2]
    for _ in range(count):
        ch, cw = int(rng.integers(120, min(h, 300))), int(rng.integers(120, min(w, 300)))
        y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        out.append(np.ascontiguousarray(photo[y : y + ch, x : x + cw]))
    return out


def jpeg_bytes(array: np.ndarray, quality: int = 90, **kw: object) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, "JPEG", quality=quality, **kw)
    return buffer.getvalue()


def png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


# seconds per module in a recent full run (scripts/test_costs.py --write): the suite's order
MODULE_COSTS = Path(__file__).with_name("module_costs.json")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The costliest modules first, as a recent run measured them (MODULE_COSTS; a module not in
    it last), each module's tests in file order. `make test`'s workers take whole modules
    (`--dist loadscope`: a module's fixtures, a trained run, are built once), and longest first
    leaves no long module for one worker to finish alone at the end. A stable sort of the same
    collection: the same order on every worker, as xdist requires."""
    costs = json.loads(MODULE_COSTS.read_text()) if MODULE_COSTS.is_file() else {}
    items.sort(key=lambda item: -float(costs.get(item.nodeid.split("::")[0], 0.0)))  # nodeid: tests/x.py::...


@pytest.fixture(scope="session", autouse=True)
def jax_compilation_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One JAX compilation cache for the session's processes (both xdist workers and every
    `KERAS_BACKEND=jax` process they start): a program XLA compiled once, the same model at the
    same shapes in a later `train` or `evaluate`, is read back instead of compiled again (a
    second one-epoch train on JAX took half the time). Every program is kept, not only those over
    JAX's default second of compiling: Keras on JAX compiles each variable's initializer and each
    op run outside `jit` on its own, hundreds of small programs (`evaluate` of a detector trained
    in an earlier process: 85 s without them, 31 s with). A test's own settings stay."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "jax-compilation-cache"
    folder.mkdir(exist_ok=True)
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(folder))
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    return folder


@pytest.fixture(scope="session")
def photo_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """root/<photo name>/<n>.jpg: 4 classes x 10 real JPEG crops, plus one PNG per class."""
    root = tmp_path_factory.mktemp("photos")
    for c, (name, photo) in enumerate(photos().items()):
        folder = root / name
        folder.mkdir()
        for i, crop in enumerate(crops(photo, 10, seed=c)):
            (folder / f"{i:03d}.jpg").write_bytes(jpeg_bytes(crop))
        (folder / "extra.png").write_bytes(png_bytes(Image.fromarray(crops(photo, 1, seed=100 + c)[0])))
    return root


@pytest.fixture(scope="session")
def digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's real handwritten digits as uint8 (N, 8, 8) images and labels."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = np.clip(data.images * (255.0 / 16.0), 0, 255).astype(np.uint8)
    return images, data.target.astype(np.int64)


@pytest.fixture(scope="session")
def digits_tree(tmp_path_factory: pytest.TempPathFactory, digits: tuple[np.ndarray, np.ndarray]) -> Path:
    """root/<digit>/<n>.png from the first 300 real handwritten digits (upscaled to 32x32)."""
    root = tmp_path_factory.mktemp("digits")
    images, labels = digits
    for i, (image, label) in enumerate(zip(images[:300], labels[:300], strict=True)):
        folder = root / str(label)
        folder.mkdir(exist_ok=True)
        Image.fromarray(image).resize((32, 32), Image.Resampling.NEAREST).save(folder / f"{i:04d}.png")
    return root


def cmyk_jpeg(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).convert("CMYK").save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def exif_rotated_jpeg(array: np.ndarray, orientation: int = 6) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return jpeg_bytes(array, exif=exif.tobytes())


def corrupt_middle(data: bytes) -> bytes:
    """A JPEG with an invalid marker in its entropy-coded data (TensorFlow rejects it)."""
    out = bytearray(data)
    start = len(out) // 2
    out[start : start + 2] = b"\xff\x59"
    return bytes(out)


def damaged_middle(data: bytes) -> bytes:
    """A JPEG with garbage bytes mid-stream that libjpeg (and TensorFlow) decode with a warning."""
    out = bytearray(data)
    start = len(out) // 2
    out[start : start + 64] = b"\xff\xd9" * 32
    return bytes(out)


@pytest.fixture(scope="session")
def odd_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A class-per-folder tree mixing good, odd and broken files, with known expected outcomes.

    'good' files convert as they are, 'odd' files are converted (re-encoded), 'bad' files must
    end up in the report. The expected outcome is in the file name prefix.
    """
    root = tmp_path_factory.mktemp("odd")
    photo = photos()["chelsea"]
    a, b = photo[:200, :240], photo[50:250, 100:300]
    cat, dog = root / "cat", root / "dog"
    cat.mkdir()
    dog.mkdir()
    files: dict[Path, bytes] = {
        cat / "good_1.jpg": jpeg_bytes(np.ascontiguousarray(a)),
        cat / "good_2.jpg": jpeg_bytes(np.ascontiguousarray(b)),
        cat / "good_gray.jpg": jpeg_bytes(np.ascontiguousarray(a[..., 0])),
        dog / "good_3.png": png_bytes(Image.fromarray(np.ascontiguousarray(b))),
        cat / "odd_cmyk.jpg": cmyk_jpeg(np.ascontiguousarray(a)),
        cat / "odd_exif.jpg": exif_rotated_jpeg(np.ascontiguousarray(a)),
        dog / "odd_png_named.jpg": png_bytes(Image.fromarray(np.ascontiguousarray(a))),
        dog / "odd_16bit.png": png_bytes(Image.fromarray(np.ascontiguousarray(a[..., 0]).astype(np.uint16) * 257)),
        dog / "odd_palette.png": png_bytes(Image.fromarray(np.ascontiguousarray(a)).convert("P")),
        dog / "odd_alpha.png": png_bytes(Image.fromarray(np.ascontiguousarray(a)).convert("RGBA")),
        dog / "odd_gif.gif": _encoded(Image.fromarray(np.ascontiguousarray(b)).convert("P"), "GIF"),
        dog / "odd_bmp.bmp": _encoded(Image.fromarray(np.ascontiguousarray(b)), "BMP"),
        dog / "odd_webp.webp": _encoded(Image.fromarray(np.ascontiguousarray(b)), "WEBP"),
        dog / "odd_tiff.tif": _encoded(Image.fromarray(np.ascontiguousarray(b)), "TIFF"),
        cat / "bad_empty.jpg": b"",
        cat / "bad_text.jpg": b"this is not an image\n",
        cat / "bad_truncated.jpg": jpeg_bytes(np.ascontiguousarray(b))[:3000],
        dog / "bad_corrupt.jpg": corrupt_middle(jpeg_bytes(np.ascontiguousarray(b))),
        dog / "warn_damaged.jpg": damaged_middle(jpeg_bytes(np.ascontiguousarray(b))),
        dog / "bad_truncated.png": png_bytes(Image.fromarray(np.ascontiguousarray(b)))[:5000],
        root / "bad_loose_file.jpg": jpeg_bytes(np.ascontiguousarray(a)),
    }
    for path, data in files.items():
        path.write_bytes(data)
    return root


def _encoded(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt)
    return buffer.getvalue()


def shardfeed_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`shardfeed ARGS` run as a user runs it, in a process of its own (`env` over this one's)."""
    return subprocess.run(
        [sys.executable, "-m", "shardfeed", *args], capture_output=True, text=True, env={**os.environ, **env}
    )


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def shard_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()} | {
        f"index/{p.name}": p.read_bytes() for p in sorted((out / "index").iterdir())
    }


@pytest.fixture(scope="session")
def photo_shards(photo_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("photo_shards") / "out"
    convert(
        str(photo_tree),
        str(out),
        ConvertOptions(split="train=0.75,validation=0.25", shards=4),
        workers=1,
        progress=False,
    )
    return out


@pytest.fixture(scope="session")
def digit_shards(digits_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("digit_shards") / "out"
    convert(str(digits_tree), str(out), ConvertOptions(shards=3), workers=1, progress=False)
    return out


@pytest.fixture(scope="session")
def hostile() -> dict[str, bytes]:
    """Files declaring images far over the default pixel limit (`bench.corpus.hostile_images`)."""
    return hostile_images(photos()["coffee"][:64, :64])


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real S3 server (moto's) on a free loopback port for the session, with the environment
    s3fs reads (credentials, AWS_ENDPOINT_URL) set for this process and its children."""
    from bench.store_servers import s3_environment, start_s3, stop

    endpoint, server = start_s3(tmp_path_factory.mktemp("moto"))
    saved = {k: os.environ.get(k) for k in s3_environment(endpoint)}
    os.environ.update(s3_environment(endpoint))
    yield endpoint
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    stop(server)


@pytest.fixture()
def bucket(s3_endpoint: str, request: pytest.FixtureRequest) -> str:
    """A new empty bucket on the loopback S3 server: its s3:// URL."""
    import re

    import fsspec

    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:50].strip("-") + f"-{os.getpid()}"
    fs = fsspec.filesystem("s3")
    fs.mkdir(name)
    fs.invalidate_cache()
    return f"s3://{name}"


@pytest.fixture(scope="session")
def gcs_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real GCS emulator (fake-gcs-server) on a free loopback port for the session, with
    STORAGE_EMULATOR_HOST set for this process and its children."""
    from bench.store_servers import gcs_environment, start_gcs, stop

    endpoint, server = start_gcs(tmp_path_factory.mktemp("gcs"))
    saved = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ.update(gcs_environment(endpoint))
    yield endpoint
    if saved is None:
        os.environ.pop("STORAGE_EMULATOR_HOST", None)
    else:
        os.environ["STORAGE_EMULATOR_HOST"] = saved
    stop(server)


@pytest.fixture(params=["s3", "gs"])
def any_bucket(request: pytest.FixtureRequest) -> str:
    """A new empty bucket on the loopback S3 server, then on the GCS emulator: its URL."""
    if request.param == "s3":
        return str(request.getfixturevalue("bucket"))
    request.getfixturevalue("gcs_endpoint")
    from shardfeed.format import storage

    name = f"{request.node.originalname.replace('_', '-')[:40].strip('-')}-{os.getpid()}"
    fs, _ = storage.filesystem(f"gs://{name}")
    fs.mkdir(name)
    return f"gs://{name}"


def killed_after_two_shards(command: list[str], out: Path, env: dict[str, str] | None = None) -> bool:
    """Runs a conversion `command` writing into `out` and SIGKILLs it once two shards have
    committed (their partial manifests exist); False when it had already finished."""
    import signal
    import time

    proc = subprocess.Popen(command, env=env)
    parts = out / ".shardfeed" / "parts"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(parts.glob("*.json")) if parts.exists() else []) < 2:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    return not (out / "manifest.json").exists()


def in_private_mounts(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python -c script args` under `unshare -rm`: a mount namespace of its own, where the script
    may mount a small tmpfs (a disk that fills). Skips the test where the host allows none."""
    try:
        done = subprocess.run(
            ["unshare", "-rm", sys.executable, "-c", script, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )
    except FileNotFoundError:
        pytest.skip("no `unshare` here to make a private tmpfs")
    if done.returncode != 0 and not done.stdout.strip() and ("unshare" in done.stderr or "mount" in done.stderr):
        # no user namespaces or no tmpfs mounts allowed here (a container without the capability)
        pytest.skip(f"cannot mount a private tmpfs here: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return done


@contextlib.contextmanager
def recording_http_server(body: bytes) -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server answering every GET and HEAD with `body`: (its base URL, the paths
    it was asked for), to prove a URL in data is never fetched."""
    requests: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requests.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        do_HEAD = do_GET

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()


def string_constants(path: Path) -> list[tuple[int, str]]:
    """(line, value) of every string constant in a Python file, docstrings aside: what a test
    that keeps a spelling in one module scans the others for."""
    import ast

    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


DISCOVER_AND_CONVERT = """
import hashlib, importlib, json, os, sys
from shardfeed import ConvertOptions, convert, parallel
source_class, source, out, route = sys.argv[1:]
module, name = source_class.rsplit(".", 1)
Source = getattr(importlib.import_module(module), name)
if route == "here":  # as where TensorFlow is loaded: no forking, the containers read one by one here
    parallel.fork_is_safe = lambda: False
found = Source(source).discover()
held = {}  # each image's bytes as its span holds them (a staging folder goes after `convert`)
for item in found.items:
    with open(item.span[0], "rb") as f:
        f.seek(item.span[1])
        held[item.key] = hashlib.sha256(f.read(item.span[2])).hexdigest()
print(json.dumps({"files": sorted(os.listdir(found.base)), "held": held, "tf": "tensorflow" in sys.modules}))
convert(Source(source), out, ConvertOptions(shards=2, seed=3), workers=2, progress=False)
"""


def discovered_and_converted(source_class: str, source: Path, out: Path, route: str, cache: Path) -> dict[str, object]:
    """A container source (`source_class`, e.g. 'shardfeed.write.sources.tables.TableSource')
    discovered and converted in a fresh process, where TensorFlow is not loaded and worker
    processes may fork (route 'workers'), or as if they may not ('here'): what its discovery's
    base folder holds ('files'), the SHA-256 of the bytes each item's span holds ('held'), and
    whether TensorFlow was loaded ('tf')."""
    run = subprocess.run(
        [sys.executable, "-c", DISCOVER_AND_CONVERT, source_class, str(source), str(out), route],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "XDG_CACHE_HOME": str(cache)},
    )
    return json.loads(run.stdout.splitlines()[-1])  # type: ignore[no-any-return]
