"""The tf.data service through our CLI: a dispatcher and two workers as real processes on loopback
ports (TF's servers listen on every interface and offer no bind address, so the tests only ever
connect through localhost and pick free ports)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import zygote
from test_coco import coco  # noqa: F401  (a fixture)

from shardfeed import ConvertOptions, OptionError, ReadOptions, ServiceOptions, convert, load, read_manifest
from shardfeed.errors import ServiceError

pytestmark = pytest.mark.slow  # training runs, fresh processes or servers: `make test`, not `make test-quick`

tf = pytest.importorskip("tensorflow")


def start(*args: str) -> tuple[zygote.Forked, str]:
    """`shardfeed serve ...` in its own process; returns it and the address it prints."""
    proc = zygote.popen(
        [sys.executable, "-m", "shardfeed", "serve", *args], stderr=subprocess.PIPE, text=True, bufsize=1
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 1.0)
        if ready:
            line = proc.stderr.readline()
            if line.startswith("serving tf.data"):
                return proc, line.split(" at ")[1].split()[0]
        if proc.poll() is not None:
            raise AssertionError(f"serve exited with {proc.returncode}: {proc.stderr.read()}")
    proc.kill()
    raise AssertionError("serve did not start within 120 s")


@pytest.fixture(scope="module")
def data(digits_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("service") / "out"
    convert(str(digits_tree), str(out), ConvertOptions(shards=6), workers=1, progress=False)
    return out


@pytest.fixture
def cluster() -> Iterator[tuple[str, list[zygote.Forked]]]:
    dispatcher, address = start("dispatcher", "--port", "0")
    workers = [start("worker", "--dispatcher", address.split("://")[1])[0] for _ in range(2)]
    procs = [dispatcher, *workers]
    yield address, procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _names(ds: object) -> list[str]:
    return [name.decode() for batch in ds for name in batch[-1].numpy()]  # type: ignore[attr-defined]


def test_an_epoch_delivers_every_record_once_and_the_next_is_reshuffled(
    data: Path, cluster: tuple[str, list[zygote.Forked]]
) -> None:
    address, _ = cluster
    expected = read_manifest(str(data)).split("validation").num_records
    read = ReadOptions(with_filenames=True)
    uncompressed = ServiceOptions(address, compress=False)
    ds = load(
        str(data), split="validation", batch_size=8, image_size=16, training=False, read=read, service=uncompressed
    )
    first = _names(ds)
    assert len(first) == expected and len(set(first)) == expected
    train = load(str(data), split="train", batch_size=8, image_size=16, read=read, service=address)
    one, two = _names(train), _names(train)
    assert Counter(one) == Counter(two) and one != two  # same records (remainders dropped per worker), new order


def test_a_killed_worker_that_comes_back_lets_the_epoch_finish(data: Path, tmp_path: Path) -> None:
    """TF's semantics, measured: after a worker dies (SIGKILL) the trainer waits for it; once a
    worker is back at the same address the epoch finishes, without the records the dead one held
    (at most once). A worker that never comes back leaves the trainer waiting: run workers under a
    supervisor that restarts them (docs/scaling.md)."""
    dispatcher, address = start("dispatcher", "--port", "0")
    host_port = address.split("://")[1]
    ports = [str(_free_port()), str(_free_port())]
    workers = [start("worker", "--dispatcher", host_port, "--port", port)[0] for port in ports]
    procs = [dispatcher, *workers]
    try:
        reader = started_reader(data, address)
        workers[0].send_signal(signal.SIGKILL)  # one worker dies mid-epoch
        workers[0].wait()
        procs.append(start("worker", "--dispatcher", host_port, "--port", ports[0])[0])  # and is restarted
        out, err = reader.communicate(timeout=240)
        assert reader.returncode == 0, err[-2000:]
        names = out.split()[2:]
        total = read_manifest(str(data)).split("train").num_records
        assert 8 <= len(names) <= total and len(set(names)) == len(names)  # at most once
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


READER = """import sys, time
from shardfeed import load, ReadOptions
ds = load(sys.argv[1], split='train', batch_size=4, image_size=16, training=False,
          read=ReadOptions(with_filenames=True), service=sys.argv[2])
names = []
for batch in ds:
    names += [n.decode() for n in batch[-1].numpy()]
    if len(names) == 8:
        print('started', flush=True)
    time.sleep(0.02)
print('done', len(names), *names, flush=True)
"""


def started_reader(data: Path, address: str) -> zygote.Forked:
    """A trainer-like process reading the train split through the service, once it has 8 records."""
    reader = zygote.popen(
        [sys.executable, "-c", READER, str(data), address], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert reader.stdout is not None
    assert reader.stdout.readline().strip() == "started"
    return reader


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_servers_stop_on_signals_and_leave_no_process(sig: int) -> None:
    dispatcher, address = start("dispatcher", "--port", "0")
    worker, _ = start("worker", "--dispatcher", address.split("://")[1])
    for proc in (worker, dispatcher):
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 0
        assert proc.stderr is not None and "stopped" in proc.stderr.read()
    for proc in (worker, dispatcher):
        with pytest.raises(ProcessLookupError):
            os.kill(proc.pid, 0)


def test_options_the_service_cannot_run_are_refused(data: Path) -> None:
    service = "grpc://localhost:1"
    with pytest.raises(ValueError, match=r"shuffle='global' .* use shuffle='buffer'"):
        load(str(data), read=ReadOptions(shuffle="global"), seed=0, service=service)
    with pytest.raises(ValueError, match=r"filter_fn= is a Python callable"):
        load(str(data), read=ReadOptions(filter_fn=lambda f: True), service=service)
    with pytest.raises(OptionError, match=r"service mode must be one of \['distributed_epoch'"):
        ServiceOptions(service, mode="everywhere")
    with pytest.raises(OptionError, match="service must look like grpc://HOST:PORT"):
        load(str(data), service="http://localhost:1")


def test_a_restarted_dispatcher_resumes_from_its_journal(data: Path, tmp_path: Path) -> None:
    port = str(_free_port())
    journal = str(tmp_path / "journal")
    dispatcher, address = start("dispatcher", "--port", port, "--work-dir", journal)
    worker, _ = start("worker", "--dispatcher", f"localhost:{port}")
    procs = [dispatcher, worker]
    try:
        reader = started_reader(data, address)
        dispatcher.send_signal(signal.SIGKILL)
        dispatcher.wait()
        procs.append(start("dispatcher", "--port", port, "--work-dir", journal)[0])
        out, err = reader.communicate(timeout=240)
        assert reader.returncode == 0, err[-2000:]
        names = out.split()[2:]
        assert len(names) == len(set(names)) == read_manifest(str(data)).split("train").num_records
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_train_reads_through_the_service(data: Path, tmp_path: Path, cluster: tuple[str, list]) -> None:
    address, _ = cluster
    out = tmp_path / "run"
    args = ["train", str(data), "--out", str(out), "--epochs", "2", "--image-size", "16", "--batch-size", "16"]
    done = zygote.run(
        [sys.executable, "-m", "shardfeed", *args, "--service", address],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "validation: accuracy" in done.stderr and (out / "model.keras").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_worker_waiting_for_an_absent_dispatcher_stops_on_signals(sig: int) -> None:
    """TF's worker start blocks in C++ holding the interpreter lock; such workers ignored both
    signals for hours. Now they wait in Python, saying so, and stop when told."""
    worker = zygote.popen(
        [sys.executable, "-m", "shardfeed", "serve", "worker", "--dispatcher", f"localhost:{_free_port()}"],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stderr is not None
    assert worker.stderr.readline().startswith("waiting for the dispatcher at localhost:")
    worker.send_signal(sig)
    assert worker.wait(timeout=30) == 0
    assert "stopped before the server had started" in worker.stderr.read()


def test_a_worker_gives_up_on_an_unreachable_dispatcher_after_its_timeout() -> None:
    args = ["serve", "worker", "--dispatcher", f"localhost:{_free_port()}", "--dispatcher-timeout", "2"]
    done = zygote.run([sys.executable, "-m", "shardfeed", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "error: no dispatcher answered at localhost:" in done.stderr and "within 2 s" in done.stderr


def test_servers_stop_when_the_dispatcher_went_first() -> None:
    dispatcher, address = start("dispatcher", "--port", "0")
    worker, _ = start("worker", "--dispatcher", address.split("://")[1])
    for proc in (dispatcher, worker):  # the worker outlives its dispatcher, then is told to stop
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_a_second_dispatcher_on_a_used_port_is_refused() -> None:
    port = str(_free_port())
    first, _ = start("dispatcher", "--port", port)
    try:
        done = zygote.run(
            [sys.executable, "-m", "shardfeed", "serve", "dispatcher", "--port", port],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1 and f"port {port} is in use" in done.stderr
    finally:
        first.kill()
        first.wait()


def test_reading_from_an_address_where_no_dispatcher_answers_fails_at_once(data: Path) -> None:
    with pytest.raises(ServiceError, match=r"no tf\.data service dispatcher answers at grpc://localhost:"):
        load(str(data), service=f"grpc://localhost:{_free_port()}")


VANISHING = """import os, sys
from shardfeed import load
from shardfeed.errors import tensorflow_message
folder, address = sys.argv[1], sys.argv[2]
ds = load(folder, split='train', batch_size=4, image_size=16, training=False, service=address)
os.remove(os.path.join(folder, 'train-00002-of-00006'))  # after load checked the files
seen = 0
try:
    for batch in ds:
        seen += 1
    print('finished', seen)
except Exception as e:
    print('error', tensorflow_message(e))
"""


def test_a_shard_vanishing_while_the_service_reads_it_never_hangs(
    data: Path, tmp_path: Path, cluster: tuple[str, list[zygote.Forked]]
) -> None:
    """Issue 29, item 1 through the tf.data service: the workers run the same checked shard
    reader, so the trainer gets an error naming a missing shard, not an endless wait."""
    import shutil

    folder = shutil.copytree(data, tmp_path / "data")
    address, _ = cluster
    done = zygote.run(
        [sys.executable, "-c", VANISHING, str(folder), address], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("error") and "is missing" in done.stdout and "train-" in done.stdout, done.stdout


def test_a_bucket_is_read_through_the_workers_mirrors(data: Path, bucket: str, tmp_path: Path) -> None:
    """Workers started with --mirror hold the bucket's shards, verified, in their cache folder; the
    trainer's pipeline reads those copies by content name: the records of a local read."""
    from shardfeed.format import storage

    fs, root = storage.filesystem(f"{bucket}/digits")
    fs.put(str(data), root, recursive=True)
    url, mirrors = f"{bucket}/digits", str(tmp_path / "mirror")
    dispatcher, address = start("dispatcher", "--port", "0")
    flags = ["--dispatcher", address.split("://")[1], "--mirror", url, "--cache-dir", mirrors]
    workers = [start("worker", *flags)[0] for _ in range(2)]
    try:
        manifest = read_manifest(str(data)).data["splits"]
        copies = {p.name for p in (tmp_path / "mirror").glob("*.tfrecord")}
        assert copies == {f"{s['sha256']}.tfrecord" for split in manifest.values() for s in split["shards"]}
        read = ReadOptions(with_filenames=True)
        service = ServiceOptions(address, mirror_dir=mirrors)
        kw = {"batch_size": 8, "image_size": 16, "training": False, "read": read}
        got = _names(load(url, split="validation", service=service, **kw))  # type: ignore[arg-type]
        assert Counter(got) == Counter(_names(load(str(data), split="validation", **kw)))  # type: ignore[arg-type]
        train = _names(load(url, split="train", batch_size=8, image_size=16, read=read, service=service))
        assert len(train) == len(set(train)) > 0
    finally:
        for proc in [dispatcher, *workers]:
            proc.kill()
            proc.wait()


MIRRORLESS = """import sys
from shardfeed import ServiceOptions, load
from shardfeed.errors import tensorflow_message
url, address, mirrors = sys.argv[1:4]
service = ServiceOptions(address, mirror_dir=mirrors)
try:
    n = sum(1 for _ in load(url, batch_size=4, image_size=16, training=False, service=service))
    print('finished', n)
except Exception as e:
    print('error', tensorflow_message(e))
"""


def test_a_worker_without_the_mirror_fails_the_read_naming_the_flag(
    data: Path, bucket: str, tmp_path: Path, cluster: tuple[str, list[zygote.Forked]]
) -> None:
    from shardfeed.format import storage

    fs, root = storage.filesystem(f"{bucket}/digits")
    fs.put(str(data), root, recursive=True)
    address, _ = cluster
    done = zygote.run(
        [sys.executable, "-c", MIRRORLESS, f"{bucket}/digits", address, str(tmp_path / "empty")],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("error") and "--mirror" in done.stdout and ".tfrecord" in done.stdout, done.stdout


def test_a_mirror_over_the_cache_limit_is_refused_at_start(data: Path, bucket: str) -> None:
    from shardfeed.format import storage

    fs, root = storage.filesystem(f"{bucket}/digits")
    fs.put(str(data), root, recursive=True)
    worker = ["serve", "worker", "--dispatcher", "localhost:1", "--mirror", f"{bucket}/digits"]
    done = zygote.run(
        [sys.executable, "-m", "shardfeed", *worker, "--cache-limit", "1000"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "over the cache limit of 1,000" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_detection_batches_come_through_the_service(
    coco: Path,  # noqa: F811
    tmp_path: Path,
    cluster: tuple[str, list[zygote.Forked]],
) -> None:
    """Boxes and labels padded per batch, made by the workers: each image's are those read here."""
    from shardfeed.write.sources import CocoSource

    address, _ = cluster
    out = tmp_path / "squares"
    convert(CocoSource(str(coco), str(coco.parent / "images")), str(out), ConvertOptions(split="train=1", shards=3))

    def per_image(ds: object) -> list[tuple[bytes, bytes]]:
        return sorted(
            (y["boxes"].numpy()[0].tobytes(), y["labels"].numpy()[0].tobytes())
            for _, y in ds  # type: ignore[attr-defined]
        )

    local = per_image(load(str(out), batch_size=1, image_size=48, training=False))
    served = per_image(load(str(out), batch_size=1, image_size=48, training=False, service=address))
    assert served == local and len(local) == 3
