"""`shardfeed serve`: TensorFlow's tf.data service servers, in the foreground.

A dispatcher hands out work; workers (on other machines, with the data readable at the same
path) run the input pipelines and stream batches to trainers that call
`load(..., service="grpc://DISPATCHER:PORT")`. These are TF's own servers
(`tf.data.experimental.service.DispatchServer` / `WorkerServer`), not ours.

Security: the servers have no authentication. Any client that reaches the dispatcher can have
the workers run a dataset graph that reads any file the worker process can read, and stream it
back. TF binds them to every interface of the machine (its gRPC servers listen on [::]:PORT; the
Python API offers no bind address), so run them on a private network or behind firewall rules
that admit only the trainers.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from shardfeed.lazy import tensorflow

SECURITY_NOTE = (
    "no authentication: anyone who can reach this port can read any file this process can read; "
    "it listens on all interfaces, so keep it on a private network or behind a firewall"
)


def start_dispatcher(port: int = 0, *, work_dir: str | None = None, worker_timeout: float | None = None) -> Any:
    """A started DispatchServer; with `work_dir`, fault tolerant (its journal lets a restarted
    dispatcher resume the jobs it was running); `worker_timeout`: seconds without a heartbeat
    before a worker counts as gone (TF's default otherwise)."""
    service = tensorflow().data.experimental.service
    config = service.DispatcherConfig(
        port=port,
        work_dir=work_dir,
        fault_tolerant_mode=work_dir is not None,
        worker_timeout_ms=int(worker_timeout * 1000) if worker_timeout else None,
    )
    return service.DispatchServer(config)


def start_worker(dispatcher: str, port: int = 0, *, worker_address: str | None = None) -> Any:
    """A started WorkerServer registered with `dispatcher` (HOST:PORT); `worker_address` is how
    trainers reach it (default localhost:PORT: set it when trainers run on other machines)."""
    service = tensorflow().data.experimental.service
    address = dispatcher.split("://", 1)[-1]
    config = service.WorkerConfig(dispatcher_address=address, port=port, worker_address=worker_address)
    return service.WorkerServer(config)


def address(server: Any) -> str:
    """grpc://HOST:PORT of a started server."""
    target = getattr(server, "target", None)
    if target is None:  # WorkerServer has no target: its bound port
        return f"grpc://localhost:{server._address.rsplit(':', 1)[-1]}"
    return str(target)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM while the block runs (installed first, so that a signal
    arriving while a server starts still stops it cleanly)."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve_until(server: Any, stop: threading.Event) -> None:
    """Blocks until `stop` is set, then stops the server (its port is released on return)."""
    while not stop.wait(0.2):
        pass
    stopper = getattr(server, "_stop", None)
    if stopper is not None:
        stopper()
    sys.stderr.flush()
