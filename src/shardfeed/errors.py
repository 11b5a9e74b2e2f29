"""The exceptions shardfeed raises for problems a user can fix; each message says what to do.

All derive from `ShardfeedError`, so one `except shardfeed.ShardfeedError` catches them; each also
keeps the built-in base it has always had (ValueError for bad input and bad options,
FileNotFoundError for a run folder that lacks what is asked of it, RuntimeError for a conversion
that cannot go ahead), so existing `except ValueError` code still works.

    OptionError         an option value, or a combination of options, that cannot be honoured
    SourceError         the data (a source folder, foreign TFRecords) cannot be read as asked
    ManifestError       a converted folder's manifest is missing, unreadable or of another version
    CorruptRecordError  a record's framing, checksum or encoding is damaged
    RunFolderError      a training run folder is missing, unfinished or lacks a file
    ConvertError        the conversion cannot go ahead or failed
    StorageError        a bucket or remote file cannot be reached, read or written
      CacheDiskFull     the disk holding the shard cache has no room for a fetch
    ServiceError        a tf.data service server cannot start or cannot be reached
    MissingDependencyError  an optional dependency is not installed (also an ImportError)
    MeasurementError    a pipeline measured in a process of its own failed (bench)

The CLI prints these (and OSError) as one line, `error: ...`, exit status 1; anything else is a
bug and keeps its traceback.
"""

from __future__ import annotations

import re

from shardfeed.redaction import redact


class ShardfeedError(Exception):
    """Base of every shardfeed error. Its message never shows a secret a URL in it carries
    (`redaction.redact`): a notebook prints it, a log keeps it, a traceback shows it."""

    def __str__(self) -> str:
        return redact(super().__str__())


class OptionError(ShardfeedError, ValueError):
    """An option value, or a combination of options, that cannot be honoured (the message names
    the option, the allowed values and the fix)."""


class SourceError(ShardfeedError, ValueError):
    """The source cannot be read as a dataset (missing folder, bad CSV, no images, ...)."""


class ManifestError(ShardfeedError, ValueError):
    """A converted folder's manifest is missing, unreadable or of another version."""


class RunFolderError(ShardfeedError, FileNotFoundError):
    """A training run folder is missing, did not finish, or lacks the file asked for."""


class ConvertError(ShardfeedError, RuntimeError):
    """The conversion cannot go ahead or failed; the message says why and what to do."""


class ServiceError(ShardfeedError, ConnectionError):
    """A tf.data service server cannot start or cannot be reached (port in use, no dispatcher)."""


class CorruptRecordError(ShardfeedError, ValueError):
    """A record's framing or checksum is wrong: the shard is damaged or truncated."""


class StorageError(ShardfeedError, OSError):
    """A bucket or remote file cannot be reached, read or written; the message names the URL."""


class CacheDiskFull(StorageError):
    """The disk holding the shard cache has no room for a fetch (retrying would not help)."""


class MissingDependencyError(ShardfeedError, ImportError):
    """An optional dependency is not installed; the message says how to install it."""


class NativeOpError(ShardfeedError, RuntimeError):
    """A native library that SHARDFEED_NATIVE=require asks for cannot be had (read/native/build.py);
    the message says why."""


class MeasurementError(ShardfeedError, RuntimeError):
    """A pipeline measured in a process of its own (`bench`, train's probe) failed; the message
    names it and gives that process's last line."""


_NOISE = ("Detected at node", "File ", "Graph execution error", "<stack traces", "[[")


def tensorflow_message(error: BaseException) -> str:
    """The useful part of a TensorFlow op error, without the graph and stack noise.

    A check that fails inside a pipeline (a corrupt shard: our `tf.debugging.Assert`) reaches the
    caller as "Graph execution error: ... assertion failed: [<our message>] [[node ...]]"; a
    Python error raised inside one as "...SomeError: <message>". Either way the message is ours.
    """
    text = getattr(error, "message", None) or str(error)
    assertion = re.search(r"assertion failed: \[(.*?)\]\s*(?:\n|$)", text, re.S)
    if assertion:
        return assertion.group(1)
    lines = [line.strip() for line in text.splitlines()]
    kept = [line for line in lines if line and not line.startswith(_NOISE)]
    raised = [line for line in kept if "Error: " in line]
    if raised:
        return raised[-1].split("Error: ", 1)[1]
    return kept[0] if kept else text


def from_tensorflow(error: BaseException) -> ShardfeedError | None:
    """The shardfeed error a TensorFlow op error carries, or None when it carries none.

    Our Python code inside a pipeline (a bucket read that failed: `StorageError`) and our checks
    (a corrupt or missing shard: `tf.debugging.Assert`) reach the caller as TensorFlow's
    `UnknownError` / `InvalidArgumentError`, with our class name and message in its text. This
    makes the exception it was again, with the same one-line message as the CLI prints: a
    shard's corruption a `CorruptRecordError`, a missing shard a `SourceError`.
    """
    text = getattr(error, "message", None) or str(error)
    if re.search(r"assertion failed: \[", text):
        message = tensorflow_message(error)
        return (CorruptRecordError if "is corrupt or truncated" in message else SourceError)(message)
    ours: dict[str, type[ShardfeedError]] = {}
    for cls in _subclasses(ShardfeedError):  # a class before its subclasses: the first of a name is ours
        if not vars(cls).get("twin_of_tensorflows", False):
            ours.setdefault(cls.__name__, cls)
    raised = [m for m in re.finditer(r"(?m)^\s*(?:.*: )?(\w+Error): (.+)$", text) if m.group(1) in ours]
    if not raised:
        return None
    last = raised[-1]
    return ours[last.group(1)](last.group(2).strip())


def _subclasses(cls: type[ShardfeedError]) -> list[type[ShardfeedError]]:
    found: list[type[ShardfeedError]] = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found
