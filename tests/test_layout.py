"""format/layout.py is the converted folder's contract: no other module spells one of its names,
and every file a conversion (and an append) leaves is one it names."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from conftest import string_constants

import shardfeed
from shardfeed import ConvertOptions, convert
from shardfeed.format import layout

SRC = Path(shardfeed.__file__).parent
NAMES = {value for name, value in vars(layout).items() if name.isupper() and isinstance(value, str)}
TEMPLATES = (layout.SHARD_TEMPLATE, layout.BY_CLASS_TEMPLATE)
# The same words naming other folders' files: Hugging Face's save_to_disk writes a state.json; a
# training run folder has its own contract (training/run_folder.py).
OTHERS = {("write/sources/tables.py", "state.json"), ("training/run_folder.py", "report.html")}


def _spelled(path: Path, root: Path = SRC) -> list[str]:
    """String constants in `path` (docstrings aside) that are a layout name or hold a template."""
    rel = path.relative_to(root).as_posix()
    return [
        f"{rel}:{line} {value!r}"
        for line, value in string_constants(path)
        if (value in NAMES or any(t in value for t in TEMPLATES)) and (rel, value) not in OTHERS
    ]


def test_no_other_module_spells_a_name_of_the_folder() -> None:
    spelled = [hit for path in sorted(SRC.rglob("*.py")) if path.name != "layout.py" for hit in _spelled(path)]
    assert spelled == []


def test_the_check_sees_a_spelled_name(tmp_path: Path) -> None:
    """The scan above can fail: a module that writes 'manifest.json' itself is caught."""
    module = tmp_path / "rogue.py"
    module.write_text(
        '"""Doc: manifest.json."""\nNAME = "manifest.json"\nT = "{split}-{shard:05d}-of-{num_shards:05d}.tf"\n'
    )
    found = [hit.split(" ", 1)[1] for hit in _spelled(module, tmp_path)]
    assert found == ["'manifest.json'", "'{split}-{shard:05d}-of-{num_shards:05d}.tf'"]


def _described(name: str, splits: set[str]) -> bool:
    """Whether a file of a converted folder (path relative to it) is one layout names."""
    shard = "(" + "|".join(map(re.escape, splits)) + r")(-" + layout.GENERATION_PATTERN + r")?-\d{5}-of-\d{5}"
    fixed = {layout.MANIFEST, layout.LABELS, layout.REPORT, layout.REPORT_PAGE, layout.TFDS_INFO, layout.TFDS_FEATURES}
    fixed |= {layout.LOCK, layout.tfds_labels_file("image/class/label")}
    if name in fixed or re.fullmatch(shard, name):
        return True
    shard_name = re.fullmatch(re.escape(layout.INDEX_DIR) + "/(.*)" + re.escape(layout.INDEX_SUFFIX), name)
    if shard_name and re.fullmatch(shard, shard_name.group(1)):
        return True
    return any(name == layout.inputs_file(g) for g in range(3))


def test_every_file_of_a_converted_and_appended_folder_is_named_by_the_layout(photo_tree: Path, tmp_path: Path) -> None:
    source, out = tmp_path / "src", tmp_path / "out"
    later = []
    for c in sorted(p for p in photo_tree.iterdir() if p.is_dir()):
        (source / c.name).mkdir(parents=True)
        for i, image in enumerate(sorted(c.iterdir())):
            (later if i >= 6 else []).append((image, source / c.name / image.name))
            if i < 6:
                (source / c.name / image.name).write_bytes(image.read_bytes())
    options = ConvertOptions(shards=2, split="train=0.75,validation=0.25", split_rule="hash")
    convert(str(source), str(out), options, workers=1, progress=False)
    for image, copy in later:
        copy.write_bytes(image.read_bytes())
    convert(str(source), str(out), dataclasses.replace(options, append=True), workers=1, progress=False)
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert any("-g0001-" in f for f in files), files  # the append wrote a generation
    assert [f for f in files if not _described(f, {"train", "validation"})] == []
    assert not (out / layout.WORK_DIR).exists()


@pytest.mark.parametrize(
    "template",
    [layout.SHARD_TEMPLATE, layout.BY_CLASS_TEMPLATE, "{split}{shard:02d}-{num_shards}.tfrec", "x_{split}_{shard}.rec"],
)
def test_shard_names_are_read_back_by_the_template_that_made_them(template: str) -> None:
    """adopt and the TFDS metadata read shard names back through format/layout.py, not by their
    own regexes: every name a template makes gives back its fields; other names give None."""
    for split, label, shard, count in (("train", "cat", 0, 4), ("validation", "hot_dog", 11, 16), ("test", "a", 3, 7)):
        name = template.format(split=split, label=label, shard=shard, num_shards=count)
        fields = layout.shard_name_fields(name, template)
        assert fields is not None, name
        assert fields["split"] == split and int(fields["shard"]) == shard, (name, fields)
        if "{label}" in template:
            assert fields["label"] == label
    generation = layout.generation_template(layout.SHARD_TEMPLATE, 2).format(split="train", shard=0, num_shards=1)
    assert layout.shard_name_fields(generation) is None and layout.generation_of(generation, "train") == 2
    assert layout.generation_of("train-00000-of-00001", "train") == 0
    assert layout.shard_name_fields("train-00000-of-00004.tfrecord") is None
    assert layout.shard_name_fields("README") is None
