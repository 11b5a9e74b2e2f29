"""Entry point: builds the parser from the subcommand modules and maps errors to exit codes."""

from __future__ import annotations

import _thread
import argparse
import logging
import os
import signal
import sys
import threading
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

from shardfeed.cli import (
    adopt_cmd,
    bench_cmd,
    convert_cmd,
    evaluate_cmd,
    info_cmd,
    native_cmd,
    predict_cmd,
    report_cmd,
    serve_cmd,
    show_cmd,
    train_cmd,
    verify_cmd,
)
from shardfeed.cli.options import READS_DATA, add_cache_flags, use_cache_flags
from shardfeed.errors import ShardfeedError, tensorflow_message
from shardfeed.format import storage
from shardfeed.lazy import quiet_tensorflow
from shardfeed.version import __version__

SUBCOMMANDS = (
    convert_cmd,
    adopt_cmd,
    info_cmd,
    verify_cmd,
    show_cmd,
    bench_cmd,
    train_cmd,
    evaluate_cmd,
    predict_cmd,
    report_cmd,
    serve_cmd,
    native_cmd,
)
log = logging.getLogger("shardfeed")


class _Parser(argparse.ArgumentParser):
    """argparse, with secrets in URLs redacted from its error line (it repeats the bad arguments)."""

    def error(self, message: str) -> NoReturn:
        super().error(storage.redact(message))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="shardfeed",
        description="Image datasets -> sharded TFRecords -> fast tf.data pipelines.",
    )
    parser.add_argument("--version", action="version", version=f"shardfeed {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.register(sub)
    for name in READS_DATA:
        add_cache_flags(sub.choices[name])
    return parser


FLAG_VALUED = ("--beam-options",)  # options whose value is itself a string of flags
# options whose value may be left out: their values (the first: what the bare flag means)
OPTIONAL_VALUED = {"--dedupe": convert_cmd.DEDUPE_KINDS}
# quiet unless -v ("Found credentials in environment variables." on every open)
STORAGE_LOGGERS = (
    "botocore",
    "aiobotocore",
    "s3fs",
    "fsspec",
    "gcsfs",
    "adlfs",
    "azure",
)


def joined_flag_values(argv: Sequence[str]) -> list[str]:
    """`argv` with each `--beam-options "--runner=X ..."` written as `--beam-options=--runner=X ...`:
    argparse takes a separate value that starts with '-' for another option and stops with
    'expected one argument', so the documented form would never parse; and each bare `--dedupe`
    before a word that is none of its values (`convert --dedupe SRC OUT`) as `--dedupe=exact`:
    argparse took the source folder for the flag's value and refused it."""
    out: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        if args[i] in FLAG_VALUED and i + 1 < len(args) and args[i + 1].startswith("-"):
            out.append(f"{args[i]}={args[i + 1]}")
            i += 2
        elif args[i] in OPTIONAL_VALUED and i + 1 < len(args) and args[i + 1] not in OPTIONAL_VALUED[args[i]]:
            out.append(f"{args[i]}={OPTIONAL_VALUED[args[i]][0]}")
            i += 1
        else:
            out.append(args[i])
            i += 1
    return out


BUG_LINE = (
    "shardfeed stopped on an error it does not expect, a bug: please report it with the command and the traceback below"
)
INTERRUPT_AGAIN_S = 0.05  # after a swallowed Ctrl-C: long enough for the callback to have returned


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI; exit code 0 ok, 1 failure, 2 usage error. Everything it prints goes out with
    the secrets URLs carry redacted (format/storage.py `redact`)."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Redacting(sys.stdout), _Redacting(sys.stderr)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = streams


class _Redacting:
    """A text stream that redacts what is written to it and is otherwise the stream it wraps."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(storage.redact(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(joined_flag_values(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(message)s",
        stream=sys.stderr,
    )
    use_cache_flags(args)
    if not args.verbose:
        quiet_tensorflow()
        for chatty in STORAGE_LOGGERS:
            logging.getLogger(chatty).setLevel(logging.WARNING)
    warnings.showwarning = _show_warning
    if threading.current_thread() is threading.main_thread():
        stop_cleanly()
    try:
        code = int(args.run(args) or 0)
        sys.stdout.flush()  # inside the try: a closed pipe fails here, not at interpreter exit
        return code
    except BrokenPipeError:
        # `shardfeed info ... | head`: the reader has gone; stop quietly, as cat and grep do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ShardfeedError, OSError) as e:  # what a user can fix: bad input, options, files, a store
        log.error("error: %s", e)
        return 1
    except KeyboardInterrupt:
        hint = getattr(args, "interrupted", None)
        log.error("interrupted" + (f"; {hint}" if hint else ""))
        return 130
    except Exception as e:
        if type(e).__module__.startswith("tensorflow"):  # an op failed inside a pipeline: its own message
            log.error("error: %s", tensorflow_message(e))
            return 1
        log.error(BUG_LINE)
        raise


def _show_warning(message: Warning | str, category: type[Warning], *_: object, **__: object) -> None:
    """A warning as one line, as errors are ('warning: ...'), without the file and source line."""
    log.warning("warning: %s", message)


def stop_cleanly() -> None:
    """Ctrl-C and `kill` stop a command the same clean way, and neither is lost (main thread only)."""
    signal.signal(signal.SIGTERM, _terminated)  # `kill`: the same clean stop as Ctrl-C
    sys.unraisablehook = _unraisable


def _unraisable(unraisable: Any) -> None:
    """A Ctrl-C (or SIGTERM) that landed in a garbage-collection callback is not lost: Python
    can only print it there ("Exception ignored in ...") and carry on (a verify ran on to exit 0
    after Ctrl-C), so it is raised again in the main thread a moment later, from another thread:
    raised here, it would land in this hook and be lost the same way. If that one is swallowed
    too, this runs again. SIGTERM's handler raises it: SIGINT's may be ignored (a process started
    in the background of a shell without job control), and then interrupt_main does nothing."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        again = threading.Timer(INTERRUPT_AGAIN_S, _thread.interrupt_main, args=(signal.SIGTERM,))
        again.daemon = True  # a command that has finished by then just ends
        again.start()
        return
    sys.__unraisablehook__(unraisable)


def _terminated(*_: object) -> None:
    """SIGTERM as Ctrl-C: the command's `finally` blocks run (a conversion stops its workers and
    releases its folder; a training run records that it was interrupted) instead of dying at once."""
    raise KeyboardInterrupt
