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
import errno
import faulthandler
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from shardfeed.errors import ServiceError
from shardfeed.lazy import tensorflow
from shardfeed.read.service import reachable

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


def check_port_free(port: int) -> None:
    """Refuses a port another server listens on. gRPC binds with SO_REUSEPORT, so a second
    dispatcher on a used port would start and share the port with the first, and clients would
    reach one or the other at random; a plain bind (no SO_REUSEPORT) is refused by the kernel.

    Raises:
        ServiceError: the port is in use.
    """
    if port == 0:
        return
    for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is not "in use"
                probe.bind((host, port))
            return
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ServiceError(
                    f"port {port} is in use (another `shardfeed serve` or program listens on it); choose another "
                    "--port, or 0 for any free one"
                ) from e  # any other failure (no IPv6 here): try the next family


def wait_until_reachable(
    address: str, timeout: float | None, stop: StopFlag, waiting: Callable[[], None] | None = None
) -> bool:
    """Waits, in Python (signals keep working), until something accepts connections at `address`.

    TF's worker start blocks inside C++ until its dispatcher answers, holding the interpreter
    lock: no Python signal handler, timer or thread runs meanwhile, so a worker started with its
    dispatcher gone ignored SIGTERM and SIGINT for hours. Waiting here first keeps that call short.

    `waiting` is called once, when the first attempt finds nothing there (to say so).

    Returns:
        False when `stop` was set first.

    Raises:
        ServiceError: nothing answered within `timeout` seconds (None: wait forever).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    first = True
    while not reachable(address, timeout=1.0):
        if first and waiting is not None:
            waiting()
        first = False
        if stop.wait(0.5):
            return False
        if deadline is not None and time.monotonic() > deadline:
            raise ServiceError(
                f"no dispatcher answered at {address} within {timeout:g} s; is `shardfeed serve dispatcher` "
                "running there (and the port open)?"
            )
    return True


@contextlib.contextmanager
def uninterruptible_call(seconds: float) -> Iterator[None]:
    """For a call into TensorFlow that may block holding the interpreter lock: SIGINT and SIGTERM
    end the process at once (their default action: nothing of ours is running to clean up), and a
    C-level watchdog (`faulthandler`, which needs no Python to run) ends it with status 1 if the
    call takes longer than `seconds`."""
    previous = {sig: signal.signal(sig, signal.SIG_DFL) for sig in (signal.SIGINT, signal.SIGTERM)}
    with open(os.devnull, "w") as sink:
        faulthandler.dump_traceback_later(seconds, exit=True, file=sink)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def address(server: Any) -> str:
    """grpc://HOST:PORT of a started server."""
    target = getattr(server, "target", None)
    if target is None:  # WorkerServer has no target: its bound port
        return f"grpc://localhost:{server._address.rsplit(':', 1)[-1]}"
    return str(target)


class StopFlag:
    """Set by a signal handler, polled by the main thread.

    Not a `threading.Event`: a handler runs in the main thread between two bytecodes, possibly
    inside `Event.wait` while that holds the event's lock, and `Event.set` would then wait for
    that lock forever (a worker stuck this way ignored SIGTERM in a test run). A plain
    attribute takes no lock.
    """

    def __init__(self) -> None:
        self.raised = False

    def set(self) -> None:
        self.raised = True

    def is_set(self) -> bool:
        return self.raised

    def wait(self, seconds: float) -> bool:
        """Sleeps up to `seconds` in short steps; True once the flag is set."""
        deadline = time.monotonic() + seconds
        while not self.raised and time.monotonic() < deadline:
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        return self.raised


@contextlib.contextmanager
def stop_on_signals() -> Iterator[StopFlag]:
    """A flag set by SIGINT or SIGTERM while the block runs (installed first, so that a signal
    arriving while a server starts still stops it cleanly)."""
    stop = StopFlag()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


STOP_SECONDS = 10.0  # how long a server may take to stop before the process ends without it
START_SECONDS = 60.0  # the same for a start (a worker's dispatcher vanishing between check and start)


def serve_until(server: Any, stop: StopFlag) -> None:
    """Blocks until `stop` is set, then stops the server (its port is released on return). A stop
    stuck in TensorFlow (waiting on a peer that is gone) ends the process after STOP_SECONDS, and
    a second signal ends it at once."""
    while not stop.wait(0.2):
        pass
    stopper = getattr(server, "_stop", None)
    if stopper is not None:
        with uninterruptible_call(STOP_SECONDS):
            stopper()
    sys.stderr.flush()
