"""convert --runner dask: the Beam pipeline on a real Dask cluster (a scheduler and two worker
processes on 127.0.0.1, started here on free ports and stopped after)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import shard_bytes
from test_voc_yolo import voc  # noqa: F401 (the fixture: a VOC folder as its tests build it)

from shardfeed import ConvertOptions, convert
from shardfeed.format import manifest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bench_dask import start_cluster
from bench.corpus import build_corpus

pytestmark = pytest.mark.slow  # training runs, fresh processes or servers: `make test`, not `make test-quick`


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """A `dask scheduler` and `dask worker` processes, each a real process of its own
    (`bench.bench_dask.start_cluster`)."""

    def __init__(self, tmp: Path, workers: int) -> None:
        self.address, procs = start_cluster(workers, tmp)
        self.scheduler, self.workers = procs[0], procs[1:]

    def executed(self) -> dict[str, int]:
        """Tasks each worker has executed, from the workers' own records."""
        from distributed import Client

        with Client(self.address, timeout=30) as client:
            return client.run(lambda dask_worker: dask_worker.state.executed_count)

    def stop(self) -> None:
        for proc in [*self.workers, self.scheduler]:
            if proc.poll() is None:
                proc.terminate()
        for proc in [*self.workers, self.scheduler]:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    (tmp_path / "dask").mkdir()
    c = Cluster(tmp_path / "dask", workers=2)
    try:
        yield c
    finally:
        c.stop()


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    cmd = [sys.executable, "-m", "shardfeed", "convert", *args, "-q", "--no-report"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def test_dask_output_is_byte_identical_and_both_workers_write(cluster: Cluster, odd_tree: Path, tmp_path: Path) -> None:
    options = ConvertOptions(split="train=0.6,validation=0.4", shards=4, seed=3)
    convert(str(odd_tree), str(tmp_path / "local"), options, workers=2, progress=False)
    flags = ["--split", "train=0.6,validation=0.4", "--shards", "4", "--seed", "3"]
    done = _cli(
        str(odd_tree), str(tmp_path / "dask-out"), *flags, "--runner", "dask", "--dask-address", cluster.address
    )
    assert done.returncode == 0, done.stderr
    assert "pipeline: " in done.stderr and " shards written in " in done.stderr  # it says what it did
    assert shard_bytes(tmp_path / "dask-out") == shard_bytes(tmp_path / "local")
    executed = cluster.executed()
    assert len(executed) == 2 and all(n > 0 for n in executed.values()), executed  # shards spread over both


def test_dask_into_a_bucket_is_byte_identical_and_both_workers_write(
    bucket: str, cluster: Cluster, odd_tree: Path, tmp_path: Path
) -> None:
    """The output in a bucket on the loopback S3 server (`bucket` comes first: the workers start
    with its credentials and endpoint in their environment, as a cluster's would be set up)."""
    import fsspec

    options = ConvertOptions(split="train=0.6,validation=0.4", shards=4, seed=3)
    convert(str(odd_tree), str(tmp_path / "local"), options, workers=2, progress=False)
    flags = ["--split", "train=0.6,validation=0.4", "--shards", "4", "--seed", "3"]
    out = f"{bucket}/dask-out"
    done = _cli(str(odd_tree), out, *flags, "--runner", "dask", "--dask-address", cluster.address)
    assert done.returncode == 0, done.stderr
    fs = fsspec.filesystem("s3")
    fs.invalidate_cache()
    root = out.removeprefix("s3://")
    written = {p[len(root) + 1 :]: fs.cat_file(p) for p in fs.find(root)}
    expected = shard_bytes(tmp_path / "local")
    names = [k for k in expected if k.startswith(("train", "validation", "index/"))]
    assert len(names) == 16 and all(written[k] == expected[k] for k in names)
    executed = cluster.executed()
    assert len(executed) == 2 and all(n > 0 for n in executed.values()), executed


def test_a_worker_killed_mid_job_then_the_same_command_resumes_to_the_same_bytes(
    cluster: Cluster, tmp_path: Path
) -> None:
    source = build_corpus(str(tmp_path / "src"), 400, classes=4)
    flags = ["--shards", "16", "--format", "png"]  # PNG encoding: slow enough to be caught mid-job
    convert(source, str(tmp_path / "local"), ConvertOptions(shards=16, image=_png()), workers=2, progress=False)
    out = tmp_path / "dask-out"
    args = [source, str(out), *flags, "--runner", "dask", "--dask-address", cluster.address]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    job = subprocess.Popen(
        [sys.executable, "-m", "shardfeed", "convert", *args, "-q", "--no-report"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 120
    while not any(p.name.endswith("-of-00016") for p in out.glob("*")) if out.exists() else True:
        assert time.monotonic() < deadline and job.poll() is None, "no shard was committed"
        time.sleep(0.05)
    os.kill(cluster.workers[1].pid, signal.SIGKILL)  # one worker dies while shards remain
    _, err = job.communicate(timeout=300)
    assert job.returncode in (0, 1) and "Traceback" not in err, err  # Dask retried it, or the job failed
    again = _cli(*args)
    assert again.returncode == 0, again.stderr
    assert shard_bytes(out) == shard_bytes(tmp_path / "local")


def _png() -> object:
    from shardfeed import ImageOptions

    return ImageOptions(image_format="png")


def test_no_scheduler_is_one_line_not_a_hang(photo_tree: Path, tmp_path: Path) -> None:
    address = f"tcp://127.0.0.1:{_free_port()}"  # nothing listens there
    done = _cli(str(photo_tree), str(tmp_path / "o"), "--runner", "dask", "--dask-address", address, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and address in lines[0] and "dask scheduler" in lines[0], done.stderr


def test_dask_runner_flags() -> None:
    from shardfeed.errors import OptionError
    from shardfeed.write.beam_runner import DASK_RUNNER, flags_for

    assert flags_for("dask", "--dask_client_address=tcp://h:1") == [
        f"--runner={DASK_RUNNER}",
        "--dask_client_address=tcp://h:1",
        "--dask_partition_size=1",
        "--dask_connection_timeout=10",
    ]
    with pytest.raises(OptionError, match="needs the scheduler: --dask-address"):
        flags_for("dask", None)
    with pytest.raises(OptionError, match="drop --runner="):
        flags_for("dask", "--runner=DirectRunner --dask_client_address=tcp://h:1")


NO_WORKERS = """
import sys
from shardfeed.write import beam_runner
beam_runner.WORKER_WAIT = 3
from shardfeed.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_scheduler_without_workers_is_said_and_then_an_error(odd_tree: Path, tmp_path: Path) -> None:
    """A scheduler with no worker: the run says it waits, then fails naming the command that
    starts one (it waited silently; 60 s were seen)."""
    address, procs = start_cluster(0, tmp_path)
    try:
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        command = [sys.executable, "-c", NO_WORKERS, "convert", str(odd_tree), str(tmp_path / "out")]
        done = subprocess.run(
            [*command, "--runner", "dask", "--dask-address", address, "-q"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=20)
    assert done.returncode == 1, done.stderr
    assert f"no worker is connected to {address} yet; waiting up to 3 s" in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        f"error: no Dask worker connected to {address} within 3 s; start workers there (`dask worker {address}`), "
        "on machines that reach the source and output folders"
    ), last


def test_a_detection_layout_on_dask_is_byte_identical(
    cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A VOC folder's objects (boxes, classes, difficult/truncated) and its skipped annotations reach
    the Dask workers in the plan files: shards and report.json are the local runner's."""
    root = request.getfixturevalue("voc")
    options = ConvertOptions(split="train=0.5,validation=0.5", shards=2, seed=1)
    convert(str(root), str(tmp_path / "local"), options, workers=2, progress=False)
    flags = ["--split", "train=0.5,validation=0.5", "--shards", "2", "--seed", "1"]
    done = _cli(str(root), str(tmp_path / "dask-out"), *flags, "--runner", "dask", "--dask-address", cluster.address)
    assert done.returncode == 0, done.stderr
    assert shard_bytes(tmp_path / "dask-out") == shard_bytes(tmp_path / "local")
    assert manifest.read(str(tmp_path / "dask-out")).header.task == "detection"
