"""What a converted folder holds, by name: the one place those names are spelled (TFDS'
`naming.py` is the model). Writers and readers ask this module; `tests/test_layout.py` fails when
another module spells one of these names itself.

    OUT/
      train-00000-of-00004             shards: SHARD_TEMPLATE (BY_CLASS_TEMPLATE with --by-class,
      train-g0001-00000-of-00002         or the user's --name-template); appended generations carry
                                         GENERATION after the split (generation_template)
      index/train-00000-of-00004.idx   each shard's DALI-style record index (index_file), and
      index/inputs-g0000.json.gz         each generation's list of inputs (inputs_file), and
      index/train.labels.npy             each split's record labels, made when a sampler asks (labels_file)
      manifest.json                    MANIFEST, written last: a folder without it is unfinished
      labels.txt                       LABELS, one `id:name` line per class
      label_map.pbtxt                  LABEL_MAP: detection's class ids as the OD API reads them
      report.json, report.html         REPORT (every skipped, re-encoded, duplicate input), REPORT_PAGE
      dataset_info.json, features.json TFDS_INFO, TFDS_FEATURES and the ClassLabel names file
      image.class.label.labels.txt       (tfds_labels_file), so `tfds.builder_from_directory` reads it
      .shardfeed/                      WORK_DIR while a conversion runs: STATE, partial manifests,
                                         PLANS_DIR (Beam's per-shard plans); gone when it is done
      .shardfeed.lock                  LOCK (flock) on a disk; OBJECT_LOCK in a bucket
      <any>.incomplete                 INCOMPLETE: a file being written, renamed when whole

Beside other people's TFRecords (`adopt`, foreign reads) shardfeed keeps FOREIGN_COUNTS, the
records counted per file; a shard cache folder (and a build of the fused resize op) holds
CACHE_LOCK. The user's own cache, `user_cache()`, holds the bucket shard cache (shards/),
containers' staging copies (staged/) and the fused resize op's builds (ops/).
"""

from __future__ import annotations

import functools
import os
import re

SHARD_TEMPLATE = "{split}-{shard:05d}-of-{num_shards:05d}"
BY_CLASS_TEMPLATE = "{split}-{label}-{shard:05d}-of-{num_shards:05d}"
GENERATION = "g{:04d}"  # generation N of `convert --append`: shards split-gNNNN-..., its inputs list
GENERATION_PATTERN = r"g(\d{4})"  # and how a name is read back (generation_of)

INDEX_DIR = "index"  # a sub-folder, so 'train-*' globs match only shards
INDEX_SUFFIX = ".idx"
MANIFEST = "manifest.json"
LABELS = "labels.txt"
LABEL_MAP = "label_map.pbtxt"  # detection: the OD API's StringIntLabelMap (format/label_map.py)
REPORT = "report.json"
REPORT_PAGE = "report.html"
TFDS_INFO = "dataset_info.json"
TFDS_FEATURES = "features.json"

WORK_DIR = ".shardfeed"
STATE = "state.json"  # in WORK_DIR: what the running conversion is, so a re-run resumes it
PLANS_DIR = "plans"  # in WORK_DIR: a Beam conversion's items per shard
LOCK = ".shardfeed.lock"
# In a bucket (not '.shardfeed...': ram:// deletes the work folder '.shardfeed' by name prefix)
OBJECT_LOCK = ".lock.shardfeed"
INCOMPLETE = ".incomplete"

FOREIGN_COUNTS = ".shardfeed-counts.json"
CACHE_LOCK = ".lock"


def user_cache(name: str) -> str:
    """`name` in this user's shardfeed cache: $XDG_CACHE_HOME/shardfeed/NAME (~/.cache/shardfeed/NAME)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "shardfeed", name)


def index_file(shard_file: str) -> str:
    """A shard's index file, relative to the folder (as the manifest records it)."""
    return f"{INDEX_DIR}/{shard_file}{INDEX_SUFFIX}"


def inputs_file(generation: int) -> str:
    """The list of a generation's inputs, relative to the folder."""
    return f"{INDEX_DIR}/inputs-{GENERATION.format(generation)}.json.gz"


def generation_template(template: str, generation: int) -> str:
    """The shard names of a generation: the folder's template with -gNNNN after the split (our
    `{split}-*` globs and DALI's file lists still take them; TFDS gets one split per generation)."""
    return template.replace("{split}", "{split}-" + GENERATION.format(generation), 1)


def tfds_labels_file(label_key: str) -> str:
    """The ClassLabel's names file: TFDS names it after the feature ('image.class.label.labels.txt')."""
    return label_key.replace("/", ".") + ".labels.txt"


def incomplete(path: str) -> str:
    """The name a file is written under until it is whole."""
    return path + INCOMPLETE


def labels_file(split: str) -> str:
    """Every record's label of a split, in record order (read/record_labels.py), relative to the folder."""
    return f"{INDEX_DIR}/{split}.labels.npy"


_FIELD = re.compile(r"\{(\w+)(?::0?(\d+)d)?\}")  # a template's {split}, {label}, {shard:05d}, ...
_FIELD_PATTERNS = {"split": r"[A-Za-z][A-Za-z0-9_]*", "shard": r"\d+", "num_shards": r"\d+"}


@functools.cache
def _template_pattern(template: str) -> re.Pattern[str]:
    """A regex that matches the names `template` makes, a group per field."""
    parts, position = [], 0
    for field in _FIELD.finditer(template):
        parts.append(re.escape(template[position : field.start()]))
        name, width = field.group(1), field.group(2)
        value = rf"\d{{{width}}}" if width else _FIELD_PATTERNS.get(name, r"[^/]+?")
        parts.append(f"(?P<{name}>{value})")
        position = field.end()
    parts.append(re.escape(template[position:]))
    return re.compile("^" + "".join(parts) + "$")


def shard_name_fields(name: str, template: str = SHARD_TEMPLATE) -> dict[str, str] | None:
    """The fields of a shard file name `template` made ({'split': 'train', 'shard': '00000',
    'num_shards': '00004'}), or None where it is not one of its names."""
    found = _template_pattern(template).match(name)
    return found.groupdict() if found else None


def generation_of(shard_file: str, split: str) -> int:
    """The generation a shard of `split` belongs to: N for `split-gNNNN-...` (an append's), 0 else."""
    found = re.match(re.escape(split) + "-" + GENERATION_PATTERN + "-", shard_file)
    return int(found.group(1)) if found else 0
