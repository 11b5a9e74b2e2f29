"""What `load` parses of a record: the image's features and its targets' (read/targets/ says which).

Records are parsed where they are read, a chunk at a time (`record_parser`: one `parse_example`
per 64 records in the shard reader's batches, measured 1.08x `load`'s training images/s against a
`parse_single_example` per record); read/decode/mapped.py then maps over each parsed record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from shardfeed.format.schema import Schema
from shardfeed.lazy import tensorflow
from shardfeed.read.targets import targets_of


def feature_spec(schema: Schema) -> dict[str, Any]:
    """Record key -> tf.io feature: the image (bytes, or a float pixel list), its stored size
    (where parsed), its targets (`Targets.features`) and its file name (when asked)."""
    tf = tensorflow()
    spec: dict[str, Any] = {}
    if schema.pixels_as_floats:
        spec[schema.image_key] = tf.io.VarLenFeature(tf.float32)
    else:
        spec[schema.image_key] = tf.io.FixedLenFeature([], tf.string)
    for key in (schema.height_key, schema.width_key, schema.channels_key):
        if key:
            spec[key] = tf.io.FixedLenFeature([], tf.int64, default_value=0)
    spec |= targets_of(schema.task).features(schema)
    if schema.filename_key:
        spec[schema.filename_key] = tf.io.FixedLenFeature([], tf.string, default_value="")
    return spec


def parsed_schema(schema: Schema) -> Schema:
    """The schema records are parsed with: for all-JPEG shards without the dimensions, which only
    serve raw-pixel records (fewer features make each parse cheaper), unless the targets are
    placed with the stored size (boxes)."""
    if schema.all_jpeg and not targets_of(schema.task).stored_size:
        return dataclasses.replace(schema, height_key=None, width_key=None, channels_key=None)
    return schema


def record_parser(schema: Schema) -> Callable[[Any], Any]:
    """A function (serialized records [N]) -> the features `record_decoder` reads, each [N, ...]; a
    list feature (boxes, multi-label ids, float pixels) ragged, so that each record, unbatched,
    has its own values as a dense 1-D tensor."""
    tf = tensorflow()
    spec = {
        key: tf.io.RaggedFeature(feature.dtype) if isinstance(feature, tf.io.VarLenFeature) else feature
        for key, feature in feature_spec(parsed_schema(schema)).items()
    }
    return tf.autograph.experimental.do_not_convert(lambda serialized: tf.io.parse_example(serialized, spec))
