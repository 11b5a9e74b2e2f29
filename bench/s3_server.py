"""An S3 server on loopback (moto's standalone server) for tests and benchmarks.

    endpoint, server = start_s3(logs)   # http://127.0.0.1:PORT, a real server process
    os.environ.update(s3_environment(endpoint))
    ...
    stop(server)

The environment is what botocore (so s3fs) reads: test credentials and `AWS_ENDPOINT_URL`.
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
    log = open(logs / f"moto-{port}.log", "wb")  # noqa: SIM115 (lives as long as the server)
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return f"http://127.0.0.1:{port}", server
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                stop(server)
                raise RuntimeError(f"moto's S3 server did not start on port {port} (log: {log.name})") from None
            time.sleep(0.1)


def s3_environment(endpoint: str) -> dict[str, str]:
    """What botocore reads to reach the loopback server with test credentials."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }


def stop(server: subprocess.Popen[bytes]) -> None:
    server.kill()
    server.wait(timeout=30)


@contextlib.contextmanager
def peak_usage(cache: Path) -> Iterator[list[int]]:
    """Samples a shard cache folder's bytes on disk every 2 ms while the block runs; the list's
    one item is the peak seen (read it after the block)."""
    from shardfeed.read.shard_cache import ShardCache

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
