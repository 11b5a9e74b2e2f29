"""The one rule for names that come from data: they stay inside the folders the user named.

Datasets are often made by someone else: a tar from the Hub, a CSV from a labelling vendor, a
manifest someone edited. Any name such data carries (a tar member, a split name, a path in a
table or a manifest, a class name written into a file) is checked here before it is joined to a
folder, and refused with the reason when it could reach outside it (`../`, an absolute path) or is
not a plain name (control characters, NUL). A file such a name leads to is opened only if it
is a regular file (`fileio.read_regular`: a FIFO blocks forever, a device never ends). Sources
report a refused item with the reason and go on; readers of a converted folder refuse the folder
in one line.

Each check returns the reason a name is refused, or None when it may be used, so a caller decides
whether one bad item is a per-item skip or a whole refusal.
"""

from __future__ import annotations

import os
import posixpath
import re
from typing import Any

from shardfeed.format import fileio

# Caps on the files a dataset names for its own use, checked from the file's size before it is
# read (a class list or data.yaml linked to /dev/zero grew to 5.3 GB before a MemoryError):
MAX_LIST_BYTES = 64 << 20  # classes.txt, obj.names, ImageSets/Main/*.txt: names, one a line
MAX_YAML_BYTES = 1 << 20  # data.yaml: a few paths and class names
MAX_JSON_BYTES = 4 << 30  # COCO annotations: instances_train2017.json is 448 MB, LVIS's ~1.1 GB

# Split names end up in shard file names and manifests: TFDS' own rule for them is `\w+`; `-` too.
SPLIT_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# What cannot stand in one line of a text file for every reader: C0 and C1 controls and DEL (a
# terminal acts on \x9b as on ESC [), the separators Python's str.splitlines also breaks at
# (U+0085 is a C1 control; U+2028, U+2029), and the bidirectional controls that reorder what a
# terminal or an editor shows (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069: "Trojan Source")
_NOT_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def split_refusal(name: object) -> str | None:
    """Why `name` cannot be a split name (letters, digits, '_' and '-' only), or None."""
    if not isinstance(name, str) or not SPLIT_NAME.match(name):
        return f"split name {str(name)[:80]!r} is not letters, digits, '_' and '-' only"
    return None


def entry_refusal(name: object) -> str | None:
    """Why `name` cannot be a file entry relative to a folder, or None: it must be a relative
    path that stays below the folder (no '..' part, not absolute, no drive or backslash, no
    control characters)."""
    if not isinstance(name, str) or not name:
        return f"entry {name!r} is not a file name"
    if _CONTROL.search(name):
        return f"entry {name[:80]!r} holds control characters"
    if "\\" in name or name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return f"entry {name[:80]!r} is an absolute path, not one inside the folder"
    if "://" in name:
        return f"entry {name[:80]!r} is a URL, not a file inside the folder"
    if ".." in name.split("/"):
        return f"entry {name[:80]!r} leaves the folder ('..')"
    return None


def normalised_entry(name: str) -> str:
    """A safe entry (see `entry_refusal`) in its plain form: no './', no doubled '/'."""
    return posixpath.normpath(name).lstrip("/")


def inside(folder: str, path: str) -> bool:
    """True when the local `path`, its links followed, lies inside `folder` (links followed too)."""
    return _within(os.path.realpath(folder), os.path.realpath(path))


def _within(real_root: str, real: str) -> bool:
    """Whether the resolved path `real` is the resolved folder `real_root` or lies below it."""
    return os.path.commonpath([real_root, real]) == real_root


# How a user reads files a dataset reaches through links that leave its folder (off by default)
OUTSIDE_OPTION = "--outside-files"


def link_refusal(real_root: str, path: str) -> str | None:
    """Why the local file `path` of the dataset whose folder resolves to `real_root`
    (`os.path.realpath` of it, resolved once by the caller) may not be read without
    OUTSIDE_OPTION, or None: a link somewhere on its path leads outside the folder. A downloaded
    VOC, YOLO or segmentation folder is data someone else made: a linked XML, label file, mask or
    image had its target's content copied into the output (an image into shards and report.html)."""
    if fileio.is_remote(path):
        return None
    real = os.path.realpath(path)
    if _within(real_root, real):
        return None
    return f"a link that leads outside the dataset's folder (to {real!r}); read only with {OUTSIDE_OPTION}"


def read_inside(root: str, path: str, max_bytes: int, limit: str) -> bytes:
    """The bytes of `path`, a file the dataset in `root` names for its own use (a class list,
    data.yaml, a split list, an annotation file): read only when it is a regular file of at most
    `max_bytes` (`limit` says what that is, for the message) and, local, inside `root` once links
    are resolved: a linked classes.txt became the class names, a FIFO hung the conversion.

    Raises:
        fileio.UnusableFileError: outside `root`, not a regular file, or too large (the reason).
        OSError: it cannot be read.
    """
    if not fileio.is_remote(path) and not fileio.is_remote(root) and not inside(root, path):
        raise fileio.UnusableFileError(
            f"a link that leads outside the dataset's folder (to {os.path.realpath(path)!r}); copy the file into it"
        )
    return fileio.read_regular(path, max_bytes, limit)


def text_refusal(value: str, what: str = "class name") -> str | None:
    """Why `value` cannot be written as one line of a text file (labels.txt), or None: it holds
    a character some reader splits lines at or acts on (`_NOT_ONE_LINE`), named in the reason."""
    found = _NOT_ONE_LINE.search(value)
    if found:
        return f"{what} {value[:80]!r} holds a line break or control character (U+{ord(found.group()):04X})"
    return None


def too_deep(value: Any, limit: int) -> bool:
    """Whether `value` (parsed JSON, from data someone else wrote) nests lists and objects deeper
    than `limit`, found without recursion (a walker that recurses is what deep nesting breaks)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False
