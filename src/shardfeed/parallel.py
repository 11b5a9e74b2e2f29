"""The local worker pool: processes that encode chunks of items, results streamed back in order.

Forked while this process is small (before the item list is built), so worker memory does not
grow with the dataset; at most two tasks per worker in flight, so neither does the parent's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing
import os
import signal
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from typing import Any

CHUNK_SIZE = 32  # items per worker task: big enough to amortise IPC, small enough to balance


class WorkerPool:
    """A process pool for `workers` > 1 (None for in-process work), shut down on exit."""

    def __init__(self, workers: int) -> None:
        self.pool: ProcessPoolExecutor | None = None
        if workers > 1:
            method = "fork" if fork_is_safe() else "spawn"
            # Start the workers now, while this process is small: forked later, each would carry
            # a copy of the item list, and worker memory would grow with the dataset. SIGINT is
            # blocked meanwhile, so the workers start with it blocked (fork and exec keep the mask)
            # and a Ctrl-C before their worker_setup ran stays pending until they ignore it; a
            # Ctrl-C here is delivered when it is unblocked.
            previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                self.pool = ProcessPoolExecutor(
                    workers, mp_context=multiprocessing.get_context(method), initializer=worker_setup
                )
                list(self.pool.map(_warm_up, range(workers)))
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    def __enter__(self) -> Executor | None:
        return self.pool

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def forked_pool(tasks: int) -> ProcessPoolExecutor:
    """Worker processes forked from this one for `tasks` tasks (one per task, up to the cores),
    each set up by `worker_setup`: the sources' listing and staging tasks (call only where
    `fork_is_safe`)."""
    workers = min(tasks, os.cpu_count() or 1)
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"), initializer=worker_setup)


def fork_is_safe() -> bool:
    """Whether worker processes can be forked: fast, and safe while TensorFlow (and its threads)
    is not loaded here."""
    return sys.platform == "linux" and "tensorflow" not in sys.modules


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def worker_setup() -> None:
    """Runs first in every pool worker (conversion and verify pools).

    Ctrl-C reaches the whole process group: the parent stops the pool and says what happened;
    workers ignore SIGINT, so they no longer print a KeyboardInterrupt traceback each (it is
    blocked from their start until here: see WorkerPool). On Linux a
    worker also dies with its parent (a killed `convert` used to leave its workers running).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked while the pool started
    if sys.platform == "linux":
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _warm_up(_: int) -> None:
    """A no-op task that makes the pool start its processes."""


def map_ordered(
    executor: Executor | None, fn: Callable[..., Any], tasks: Iterable[tuple[Any, tuple[Any, ...]]], workers: int
) -> Iterator[tuple[Any, Any]]:
    """(tag, fn(*args)) for each (tag, args), in order, with at most 2 tasks per worker in flight
    (bounded memory whatever the dataset size)."""
    if executor is None:
        yield from ((tag, fn(*args)) for tag, args in tasks)
        return
    window: deque[tuple[Any, Future[Any]]] = deque()
    for tag, args in tasks:
        window.append((tag, executor.submit(fn, *args)))
        if len(window) >= 2 * workers:
            head, future = window.popleft()
            yield head, future.result()
    while window:
        head, future = window.popleft()
        yield head, future.result()


def in_child(fn: Callable[..., Any], *args: Any) -> tuple[Any, int | None]:
    """`fn(*args)` run in a child process of its own (forked where `fork_is_safe`): (its result,
    None), or (None, the child's exit code) when the child died before answering (-11: killed
    by SIGSEGV). An exception `fn` raises is raised here. For finding the input that kills a
    worker (write/isolation.py): a pool hides which task a dead worker held, and its exit code.
    """
    context: Any = multiprocessing.get_context("fork" if fork_is_safe() else "spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_answer, args=(send, fn, args), daemon=True)
    child.start()
    send.close()
    try:
        outcome, value = receive.recv()
    except EOFError:  # it died without a word
        child.join()
        return None, child.exitcode
    finally:
        receive.close()
    child.join()
    if outcome == "raised":
        raise value
    return value, None


def _answer(send: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """In the child of `in_child`: fn's result, or the exception it raised, sent back."""
    worker_setup()
    try:
        answer: tuple[str, Any] = ("done", fn(*args))
    except BaseException as e:  # sent back to be raised there; a pickling failure is an EOF there
        answer = ("raised", e)
    send.send(answer)
    send.close()
