"""Processes that start with TensorFlow already imported: a test's `python -m shardfeed ...` or
`python -c SCRIPT` forked from a waiting process instead of a new interpreter importing it again.

Importing TensorFlow (with Keras 3, and the JAX, pandas, scikit-learn and matplotlib it pulls in
where they are installed) costs ~6.5 s of CPU a process on the two-core machine, more than most
test commands' own work; the suite started hundreds. A zygote (Android's name for the same thing)
is a Python process started with the test's environment that imports `tensorflow` and `keras`,
then waits on a Unix socket; each command is a `fork()` of it that takes the request's
stdin/stdout/stderr, environment, working folder and argv, and runs the command as `python -m`
or `python -c` would, in `__main__`, ending with the interpreter's own exit (atexit handlers,
thread joins: a hang at exit still shows). It is a real process of its own, killed and signalled
by its pid; the zygote reports its exit status as `subprocess` does (-N for signal N).

Forking after the import is safe because importing TensorFlow starts none of its runtime (no
thread pools, no eager context: those start with the first op), and the zygote runs no op.

Only for tests whose point is not a fresh interpreter: what a process reads from the environment
while importing TensorFlow and Keras (KERAS_BACKEND, KERAS_HOME, TF_*, JAX_*, ...) is the
zygote's, so each distinct set of those gets a zygote of its own; anything that checks an import
itself (what `import shardfeed` pulls in, a first build of the native ops, startup noise) keeps
`subprocess`. One zygote per key per pytest worker, ended when the worker exits (its control
pipe closes; the zygote kills any child still running).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Mapping, Sequence
from typing import IO, Any

# environment variables a process reads while importing TensorFlow, Keras, JAX or PyTorch (or
# that decide where their caches are): requests differing in these get different zygotes
IMPORT_TIME = ("KERAS_", "TF_", "JAX_", "XLA_", "CUDA_", "TORCH", "OMP_", "MKL_", "OPENBLAS", "PYTHON", "LD_")
IMPORT_TIME_NAMES = ("HOME", "XDG_CACHE_HOME", "PATH")
PRELOAD = ("tensorflow", "keras")


# -- the zygote -------------------------------------------------------------------------------


def _serve(path: str) -> tuple[dict[str, Any], list[int]] | None:
    """Imports PRELOAD, then forks a child per request until the control pipe (stdin) closes.
    Returns in a child only: its request, for the module's top level to run."""
    for name in PRELOAD:
        __import__(name)
    gc.freeze()  # the imports' objects out of the collector's reach: children neither scan nor copy them
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    waiting: dict[int, socket.socket] = {}
    ended, ended_signal = os.pipe()  # a child's end wakes the loop (SIGCHLD written here): no polling
    for fd in (ended, ended_signal):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(ended_signal)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        readable, _, _ = select.select([listener, sys.stdin, ended], [], [])
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 4096):
            break
        if ended in readable:
            os.read(ended, 4096)
        if listener in readable:
            conn, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (ended, ended_signal):
                    os.close(fd)
                listener.close()
                for other in waiting.values():
                    other.close()
                conn.close()
                return json.loads(message), fds
            for fd in fds:
                os.close(fd)
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            waiting[pid] = conn
        _reap(waiting)
    for pid in waiting:
        os.kill(pid, signal.SIGKILL)
    return None


def _reap(waiting: dict[int, socket.socket]) -> None:
    """Sends each ended child's exit status (subprocess's returncode) to whoever started it."""
    while waiting:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):  # the test stopped waiting (it failed or timed out)
                conn.sendall(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
            conn.close()


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """The child takes the request's standard streams, environment, folder and argv, and runs its
    command as `python -m NAME` or `python -c CODE` would."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    flag, what, *rest = request["argv"]
    if flag == "-m":
        sys.argv = [what, *rest]
        runpy.run_module(what, run_name="__main__", alter_sys=True)
    else:
        sys.argv = ["-c", *rest]
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = __builtins__
        sys.modules["__main__"] = main
        exec(compile(what, "<string>", "exec"), main.__dict__)


# -- the tests' side --------------------------------------------------------------------------


class _Zygote:
    """A started zygote: its socket, and the pipe whose closing ends it."""

    def __init__(self, env: Mapping[str, str]) -> None:
        folder = self.folder = tempfile.mkdtemp(prefix="zygote-")
        self.path = os.path.join(folder, "socket")
        self.process = subprocess.Popen(
            [sys.executable, __file__, self.path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=dict(env),
            cwd=folder,
            text=True,
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the zygote did not start (exit {self.process.wait()})")

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            self.process.wait(timeout=60)
        shutil.rmtree(self.folder, ignore_errors=True)


_ZYGOTES: dict[tuple[tuple[str, str], ...], _Zygote] = {}
_LOCK = threading.Lock()


def _key(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(IMPORT_TIME) or k in IMPORT_TIME_NAMES))


def _zygote(env: Mapping[str, str]) -> _Zygote:
    with _LOCK:
        key = _key(env)
        if key not in _ZYGOTES or _ZYGOTES[key].process.poll() is not None:
            _ZYGOTES[key] = _Zygote(env)
        return _ZYGOTES[key]


@atexit.register
def _close_all() -> None:
    for zygote in _ZYGOTES.values():
        zygote.close()


def _stream(choice: Any, default_fd: int) -> tuple[int, int | None]:
    """(fd for the child, our read end) for subprocess's stdin/stdout/stderr choices."""
    if choice is None:
        return os.dup(default_fd), None
    if choice == subprocess.DEVNULL:
        return os.open(os.devnull, os.O_RDWR), None
    if choice == subprocess.PIPE:
        read, write = os.pipe()
        return write, read
    if choice == subprocess.STDOUT:
        return -1, None  # resolved by the caller: stderr goes where stdout goes
    return os.dup(choice if isinstance(choice, int) else choice.fileno()), None


class Forked:
    """A command forked from a zygote, with the part of `subprocess.Popen` the tests use: pid,
    returncode, stdout/stderr pipes, poll, wait, communicate, send_signal, kill, terminate."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stdin: Any = subprocess.DEVNULL,  # not the test's own stdin, as Popen's default would give
        stdout: Any = None,
        stderr: Any = None,
        text: bool = False,
        bufsize: int = -1,  # accepted for Popen's sake: reads are buffered either way
    ) -> None:
        if len(argv) < 2 or argv[0] != sys.executable or argv[1] not in ("-m", "-c"):
            raise ValueError(f"a zygote runs `{sys.executable} -m NAME ...` or `-c CODE ...`, not {argv[:2]}")
        self.args = list(argv)
        env = dict(os.environ if env is None else env)
        child_in, _ = _stream(stdin, 0)
        child_out, out_read = _stream(stdout, 1)
        child_err, err_read = _stream(stderr, 2)
        if child_err == -1:
            child_err = os.dup(child_out)
        request = {"argv": list(argv[1:]), "env": env, "cwd": os.fspath(cwd or os.getcwd())}
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._conn.connect(_zygote(env).path)
        socket.send_fds(self._conn, [json.dumps(request).encode()], [child_in, child_out, child_err])
        for fd in (child_in, child_out, child_err):
            os.close(fd)
        self._replies = self._conn.makefile("r")
        self.pid: int = json.loads(self._replies.readline())["pid"]
        self.returncode: int | None = None
        mode = "r" if text else "rb"
        self.stdin = None
        self.stdout: IO[Any] | None = os.fdopen(out_read, mode) if out_read is not None else None
        self.stderr: IO[Any] | None = os.fdopen(err_read, mode) if err_read is not None else None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._conn], [], [], 0)[0]:
            self._read_status()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._conn], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
            self._read_status()
        assert self.returncode is not None
        return self.returncode

    def _read_status(self) -> None:
        line = self._replies.readline()
        if not line:
            raise RuntimeError("the zygote ended before the command did")
        self.returncode = json.loads(line)["returncode"]
        self._conn.close()

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Reads stdout and stderr to their end (both at once, as subprocess does, so neither
        pipe fills), then waits for the exit; `timeout` bounds the whole, as in subprocess."""
        deadline = None if timeout is None else time.monotonic() + timeout
        found: dict[str, Any] = {}
        readers = [
            threading.Thread(target=lambda n=name, s=stream: found.__setitem__(n, s.read()), daemon=True)
            for name, stream in (("out", self.stdout), ("err", self.stderr))
            if stream is not None
        ]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        return found.get("out"), found.get("err")

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def popen(argv: Sequence[str], **kwargs: Any) -> Forked:
    """`subprocess.Popen(argv, ...)`, forked from a zygote (argv: sys.executable -m/-c ...)."""
    return Forked(argv, **kwargs)


def run(
    argv: Sequence[str],
    *,
    capture_output: bool = False,
    timeout: float | None = None,
    check: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run(argv, ...)`, forked from a zygote: on a timeout the command is killed and
    TimeoutExpired raised, as subprocess.run does."""
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process = Forked(argv, **kwargs)
    try:
        out, err = process.communicate(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    done = subprocess.CompletedProcess(list(argv), process.returncode, out, err)
    if check:
        done.check_returncode()
    return done


if __name__ == "__main__":
    served = _serve(sys.argv[1])
    if served is not None:
        _become(*served)
