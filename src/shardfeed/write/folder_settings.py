"""A finished folder's recorded settings (manifest.json `settings`), as a later run uses them:
adopted by `--append` for the options a user did not give (an append never changes how the
folder was written), and spelled as the convert flags that would write it again."""

from __future__ import annotations

import dataclasses
from typing import Any

from shardfeed.format import fileio, layout, manifest
from shardfeed.write.images import ImageOptions
from shardfeed.write.options import ConvertOptions

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


def as_flags(settings: dict[str, Any]) -> str:
    """The convert flags that reproduce a folder's recorded settings (those not at their
    defaults), so a command that converts it again keeps them."""
    default = ConvertOptions().settings()
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
