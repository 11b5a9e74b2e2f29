"""TensorFlow Datasets metadata beside the shards, so `tfds.builder_from_directory(OUT)` reads them.

TFDS opens a folder of TFRecords through three files (what `tfds.folder_dataset.write_metadata`
writes; see https://www.tensorflow.org/datasets/external_tfrecord):

    dataset_info.json                 file format, shard name template, shard lengths and bytes per split
    features.json                     a FeaturesDict: image/encoded as an Image, the label as a
                                      ClassLabel, the other keys as Text / int64 Scalars
    image.class.label.labels.txt      the ClassLabel's names, one per line

They are written here from the manifest, as canonical JSON, without importing TFDS (the
conversion path stays TensorFlow-free), so a conversion, its Beam twin and a resumed one write
the same bytes. Folders TFDS cannot read as they are (gzip shards, raw-pixel records, shard
names outside its `{SPLIT}-{SHARD_X_OF_Y}` scheme) get none, and `reason_not_written` says why.
"""

from __future__ import annotations

import json
import re
from typing import Any

from shardfeed.format import fileio, layout, manifest, schema
from shardfeed.format.tasks import task_of

# Every file this module may write (an overwrite removes them): the labels file is named after the
# label feature, ours or a `--schema` preset's.
FILES = (
    layout.TFDS_INFO,
    layout.TFDS_FEATURES,
    *sorted({layout.tfds_labels_file(p.keys.label_key or schema.LABEL) for p in schema.PRESETS.values()}),
)
TFDS_TEMPLATE = "{SPLIT}-{SHARD_X_OF_Y}"
_FEATURES = "tensorflow_datasets.core.features."


def reason_not_written(data: dict[str, Any]) -> str | None:
    """Why a manifest's folder gets no TFDS metadata, or None when it does."""
    settings = data["settings"]
    if settings.get("compression"):
        return "TFDS does not read gzip-compressed TFRecords"
    if "name_template" in settings and settings["name_template"] is None:
        return f"the shard names do not follow TFDS's {TFDS_TEMPLATE}"
    if settings.get("name_template", layout.SHARD_TEMPLATE) != layout.SHARD_TEMPLATE:
        return f"shard names {settings['name_template']!r} are not TFDS's {TFDS_TEMPLATE}"
    if "RAW" in data.get("image_formats", {}):
        return "raw-pixel records are not an image TFDS can decode (convert with --array-encoding png)"
    return None


def write(output_dir: str, data: dict[str, Any]) -> bool:
    """Writes the three files for the folder `data` (a manifest) describes; False when skipped."""
    if reason_not_written(data) is not None:
        return False
    name = _dataset_name(data)
    fileio.write_text_atomic(fileio.join(output_dir, layout.TFDS_INFO), _dumps(dataset_info(data, name)))
    fileio.write_text_atomic(fileio.join(output_dir, layout.TFDS_FEATURES), _dumps(features(data)))
    if data["labels"] is not None:
        fileio.write_text_atomic(fileio.join(output_dir, labels_name(data)), "\n".join(class_names(data)) + "\n")
    return True


def dataset_info(data: dict[str, Any], name: str) -> dict[str, Any]:
    """dataset_info.json: the DatasetInfo proto as JSON (int64 fields as strings, as protobuf does)."""
    splits = [entry for split, info in data["splits"].items() for entry in _generation_splits(split, info)]
    source = data["source"]
    description = f"Converted by {data['created_by']} from a {source['kind']} source ({source['num_inputs']} inputs)."
    stored = manifest.label_range(data)
    if stored is not None:
        key = schema.Schema.of_manifest(data.get("schema")).label_key or schema.LABEL
        offset = data.get("label_offset", 0)
        description += f" {key} holds class ids {stored[0]}..{stored[1]} (label offset {offset})."
    return {"description": description, "fileFormat": "tfrecord", "name": name, "splits": splits, "version": "1.0.0"}


def _generation_splits(split: str, info: dict[str, Any]) -> list[dict[str, Any]]:
    """A split's TFDS entries: its first generation under its own name, each appended generation
    (`convert --append`: shards named split-gNNNN-...) as split_gNNNN, since TFDS reads one shard
    sequence per split."""
    generations: dict[int, list[dict[str, Any]]] = {}
    for shard in info["shards"]:
        generations.setdefault(layout.generation_of(shard["file"], split), []).append(shard)
    return [
        {
            "filepathTemplate": TFDS_TEMPLATE if g == 0 else f"{split}-{layout.GENERATION.format(g)}-{{SHARD_X_OF_Y}}",
            "name": split if g == 0 else f"{split}_{layout.GENERATION.format(g)}",
            "numBytes": str(sum(shard["num_bytes"] for shard in shards)),
            "shardLengths": [str(shard["num_records"]) for shard in shards],
        }
        for g, shards in sorted(generations.items())
    ]


def _connector(key: str, kind: str, keys: schema.Schema, encoding: str, data: dict[str, Any]) -> dict[str, Any]:
    """The TFDS feature connector of one record key (a segmentation mask: a one-channel PNG image)."""
    if key in (keys.image_key, schema.SEGMENTATION_MASK):
        mask = key == schema.SEGMENTATION_MASK
        dims = ["-1", "-1", "1" if mask else "3"]
        image = {"dtype": "uint8", "encodingFormat": "png" if mask else encoding, "shape": {"dimensions": dims}}
        return {"image": image, "pythonClassName": _FEATURES + "image_feature.Image"}
    if key == keys.label_key:
        return {
            "classLabel": {"numClasses": str(len(class_names(data)))},
            "pythonClassName": _FEATURES + "class_label_feature.ClassLabel",
        }
    if kind == "bytes":
        return {"pythonClassName": _FEATURES + "text_feature.Text", "text": {}}
    tensor: dict[str, Any] = {"dtype": "int64" if kind == "int64" else "float32", "encoding": "none", "shape": {}}
    return {"pythonClassName": _FEATURES + "scalar.Scalar", "tensor": tensor}


def features(data: dict[str, Any]) -> dict[str, Any]:
    """features.json: our record keys as TFDS feature connectors."""
    formats = data.get("image_formats", {})
    encoding = "jpeg" if formats.get("JPEG", 0) >= sum(formats.values()) / 2 else "png"
    connectors: dict[str, Any] = {}
    keys = schema.Schema.of_manifest(data.get("schema"))
    known = {*schema.FEATURE_KEYS, keys.image_key, keys.label_key}
    lists = set(task_of(data.get("task")).list_features)  # one value per label or object
    if schema.LABEL in lists:
        lists.add(keys.label_key or schema.LABEL)
    for key, kind in data["features"].items():
        if key not in known:  # other writers' extras (boxes, ...): TFDS parses only those listed
            continue
        connector = _connector(key, kind, keys, encoding, data)
        if key in lists:  # a multi-label record's ids and names: one or more each
            connector = {
                "pythonClassName": _FEATURES + "sequence_feature.Sequence",
                "sequence": {"feature": connector, "length": "-1"},
            }
        connectors[key] = connector
    return {
        "featuresDict": {"features": connectors},
        "pythonClassName": _FEATURES + "features_dict.FeaturesDict",
    }


def labels_name(data: dict[str, Any]) -> str:
    """The ClassLabel's names file: TFDS names it after the feature ('label.labels.txt')."""
    label_key = schema.Schema.of_manifest(data.get("schema")).label_key or schema.LABEL
    return layout.tfds_labels_file(label_key)


def class_names(data: dict[str, Any]) -> list[str]:
    """The ClassLabel names: ours at their stored ids (placeholders below a label offset)."""
    offset = int(data.get("label_offset", 0))
    return [f"unused_{i}" for i in range(offset)] + list(data["labels"] or [])


def _dataset_name(data: dict[str, Any]) -> str:
    """A TFDS-valid dataset name (snake_case) from the source folder's name."""
    base = re.split(r"[\\/]", str(data["source"]["path"]).rstrip("/\\"))[-1]
    name = re.sub(r"[^a-z0-9]+", "_", re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", base).lower()).strip("_")
    return name if name and name[0].isalpha() else f"shardfeed_{name or 'dataset'}"


def _dumps(value: dict[str, Any]) -> str:
    return json.dumps(value, indent=2, sort_keys=True) + "\n"
