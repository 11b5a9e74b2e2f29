"""What an output folder already holds, and what a conversion may do with it.

    empty or missing      -> write
    other files           -> refused (unless overwrite: write beside them)
    an unfinished run     -> resumed when source and settings match; else refused, or wiped with overwrite
    a finished conversion -> nothing to do when they match; else refused, or wiped with overwrite

The state compared is the source (kind, path, fingerprint, input count) and the settings, kept in
`.shardfeed/state.json` while a conversion runs and in the manifest once it is done.

A finished folder's recorded settings (manifest.json `settings`) are also how a later run uses
them: adopted by `--append` for the options a user did not give (an append never changes how the
folder was written), and spelled as the convert flags that would write it again.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict
from typing import Any

from shardfeed.errors import ConvertError
from shardfeed.format import fileio, layout, manifest, storage, tfds_metadata
from shardfeed.write import splits
from shardfeed.write.images import ImageOptions
from shardfeed.write.items import Discovery
from shardfeed.write.options import ConvertOptions


def work_dir(output_dir: str) -> str:
    """The work folder of an unfinished conversion (state and partial manifests)."""
    return fileio.join(output_dir, layout.WORK_DIR)


def conversion_state(discovery: Discovery, options: ConvertOptions) -> dict[str, Any]:
    """What identifies a conversion: its inputs and its settings."""
    return {
        "source": {
            "kind": discovery.kind,
            "path": storage.redact(discovery.root),
            "fingerprint": discovery.fingerprint(),
            "num_inputs": len(discovery.items) + len(discovery.skipped),
        },
        "settings": options.settings(),
    }


def check_output(
    output_dir: str, state: dict[str, Any], *, overwrite: bool, labelled: bool = True
) -> manifest.Manifest | None:
    """Returns the manifest when this exact conversion is already complete; else prepares
    the folder: resume a matching unfinished run, refuse a different one (or wipe it)."""
    state_file = fileio.join(work_dir(output_dir), layout.STATE)
    if fileio.exists(fileio.join(output_dir, layout.MANIFEST)):
        old = manifest.read(output_dir)
        previous = {"source": old.source, "settings": old.settings}
        if same_conversion(previous, state, labelled=labelled):
            fileio.rmtree(work_dir(output_dir))
            return old
        _refuse_or_clean(output_dir, previous, state, "a finished conversion", overwrite, labelled)
    elif fileio.exists(state_file):
        previous = json.loads(fileio.read_bytes(state_file))
        if not same_conversion(previous, state, labelled=labelled):
            _refuse_or_clean(output_dir, previous, state, "an unfinished conversion", overwrite, labelled)
    elif (
        fileio.isdir(output_dir)
        and set(fileio.listdir(output_dir)) - {layout.LOCK, layout.OBJECT_LOCK}
        and not overwrite
    ):
        raise ConvertError(
            f"{output_dir!r} is not empty and holds no shardfeed conversion; choose an empty "
            "folder, or pass overwrite=True (--overwrite) to write into it anyway"
        )
    return None


def same_conversion(previous: dict[str, Any], state: dict[str, Any], *, labelled: bool = True) -> bool:
    """Whether two states of the same source describe the same conversion, comparing settings as
    resolved (the default split spelled out is the default split)."""
    return _resolved(previous, labelled) == _resolved(state, labelled)


def _resolved(state: dict[str, Any], labelled: bool) -> dict[str, Any]:
    """`state` with an implicit split (None) replaced by the fractions it stands for; a pre-split
    source has None on both sides, so comparing resolved values is still exact."""
    settings = dict(state.get("settings", {}))
    if settings.get("split") is None:
        settings["split"] = splits.default_fractions(labelled)
    # An image option added since the folder was written counts as its default (max_pixels).
    settings["image"] = {**asdict(ImageOptions()), **settings.get("image", {})}
    settings.setdefault("split_rule", "stratified")
    return {**state, "settings": settings}


def start(output_dir: str, state: dict[str, Any]) -> None:
    """Creates the folders a conversion writes into and records its state (for resuming)."""
    fileio.makedirs(fileio.join(output_dir, layout.INDEX_DIR))
    fileio.makedirs(fileio.join(work_dir(output_dir), "parts"))
    fileio.write_text_atomic(fileio.join(work_dir(output_dir), layout.STATE), manifest.dumps(state))


def _refuse_or_clean(
    output_dir: str, previous: dict[str, Any], state: dict[str, Any], what: str, overwrite: bool, labelled: bool
) -> None:
    if not overwrite:
        difference = describe_difference(previous, state, labelled=labelled)
        raise ConvertError(
            f"{output_dir!r} holds {what} with other settings or inputs ({difference}); pass overwrite=True "
            "(--overwrite) to replace it, or choose another output folder"
            + (
                "; to add new images to it instead, append=True (--append)"
                if difference == "the input files differ" and what == "a finished conversion"
                else ""
            )
        )
    remove_conversion(output_dir)


def describe_difference(previous: dict[str, Any], state: dict[str, Any], *, labelled: bool = True) -> str:
    """What differs between two conversion states: 'key: old -> new' for each resolved setting
    that changed (nested settings by their dotted key), and whether the inputs differ."""
    diffs = []
    if previous.get("source", {}).get("fingerprint") != state["source"]["fingerprint"]:
        diffs.append("the input files differ")
    old = _flat(_resolved(previous, labelled)["settings"])
    new = _flat(_resolved(state, labelled)["settings"])
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            diffs.append(f"{key}: {old.get(key)!r} -> {new.get(key)!r}")
    return "; ".join(diffs) or "different state"


def _flat(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested setting groups (e.g. image.resize) as dotted keys, so a change names only itself."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict) and key == "image":
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def unfinished_shards(output_dir: str) -> set[str]:
    """The shards an unfinished conversion (or append) has committed: its partial manifests' names."""
    parts_dir = fileio.join(work_dir(output_dir), "parts")
    if not fileio.isdir(parts_dir):
        return set()
    return {n[: -len(".json")] for n in fileio.listdir(parts_dir) if n.endswith(".json")}


def remove_conversion(output_dir: str) -> None:
    """Deletes what a shardfeed conversion wrote into `output_dir`, and nothing else."""
    names = set()
    manifest_file = fileio.join(output_dir, layout.MANIFEST)
    if fileio.exists(manifest_file):
        old = json.loads(fileio.read_bytes(manifest_file))
        names = {s["file"] for split in old.get("splits", {}).values() for s in split["shards"]}
    names |= unfinished_shards(output_dir)
    for name in fileio.listdir(output_dir):
        if name in names or name.endswith(layout.INCOMPLETE):
            fileio.remove(fileio.join(output_dir, name))
    for name in (layout.MANIFEST, layout.LABELS, layout.LABEL_MAP, layout.REPORT, *tfds_metadata.FILES):
        fileio.remove(fileio.join(output_dir, name))
    fileio.rmtree(fileio.join(output_dir, layout.INDEX_DIR))
    fileio.rmtree(work_dir(output_dir))


_ADOPTED = ("split", "stratify", "seed", "shards", "shard_size", "by_class", "compression", "label_offset", "dedupe")


def folder_options(options: ConvertOptions, output_dir: str) -> ConvertOptions:
    """`options` for an append to `output_dir`: every setting left at its default takes the
    folder's own value (an append never changes how the folder was written, so a user need not
    repeat --split-rule hash or --split); settings given that differ are still refused by the
    append's check. Unchanged when not appending or the folder has no manifest yet."""
    if not options.append or not fileio.exists(fileio.join(output_dir, layout.MANIFEST)):
        return options
    settings, default = manifest.read(output_dir).settings, ConvertOptions()
    taken: dict[str, Any] = {
        name: settings[name]
        for name in _ADOPTED
        if name in settings and getattr(options, name) == getattr(default, name)
    }
    if options.split_rule == default.split_rule:
        taken["split_rule"] = settings.get("split_rule", default.split_rule)
    if options.name_template is None and options.schema is None and settings.get("name_template"):
        taken["name_template"] = settings["name_template"]
    if options.image == default.image and isinstance(settings.get("image"), dict):
        taken["image"] = ImageOptions(**settings["image"])
    return dataclasses.replace(options, **taken)


def as_flags(settings: dict[str, Any], task: str) -> str:
    """The convert flags that reproduce a folder's recorded settings (those not at their
    defaults for its `task`), so a command that converts it again keeps them."""
    default = ConvertOptions().resolved(task).settings()
    flags = []
    for name in _ADOPTED:
        value = settings.get(name, default.get(name))
        if value == default.get(name):
            continue
        if isinstance(value, bool):
            flags.append(f"--{name.replace('_', '-')}" if value else "--no-stratify")
        elif isinstance(value, dict):
            flags.append(f"--{name.replace('_', '-')} " + ",".join(f"{k}={v:g}" for k, v in value.items()))
        else:
            flags.append(f"--{name.replace('_', '-')} {value}")
    if settings.get("name_template", default["name_template"]) != default["name_template"]:
        flags.append(f"--name-template '{settings['name_template']}'")
    if settings.get("image", default["image"]) != default["image"]:
        flags.append("(and the image flags it was converted with)")
    return "".join(" " + f for f in flags)
