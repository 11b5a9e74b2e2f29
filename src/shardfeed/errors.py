"""The exceptions shardfeed raises for problems a user can fix; each message says what to do.

All derive from `ShardfeedError`, so one `except shardfeed.ShardfeedError` catches them; each also
keeps the built-in base it has always had (ValueError for bad input, RuntimeError for a
conversion that cannot go ahead), so existing `except ValueError` code still works.
"""

from __future__ import annotations


class ShardfeedError(Exception):
    """Base of every shardfeed error."""


class SourceError(ShardfeedError, ValueError):
    """The source cannot be read as a dataset (missing folder, bad CSV, no images, ...)."""


class ManifestError(ShardfeedError, ValueError):
    """A converted folder's manifest is missing, unreadable or of another version."""


class ConvertError(ShardfeedError, RuntimeError):
    """The conversion cannot go ahead or failed; the message says why and what to do."""


class CorruptRecordError(ShardfeedError, ValueError):
    """A record's framing or checksum is wrong: the shard is damaged or truncated."""
