"""Multi-label's target: a set of class ids an image, as a k-hot vector no crop or flip moves.

load             float32 [B, K] of 0 and 1 (K: the folder's classes)
IndexedRecords   float32 [K]
grain_dataset    float32 [B, K]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from shardfeed.format.schema import LABEL, MULTI_LABEL
from shardfeed.lazy import tensorflow
from shardfeed.read.targets.base import Targets, TfTargets

if TYPE_CHECKING:
    from shardfeed.format.schema import Schema
    from shardfeed.read.decode.image import Preprocess


class MultiLabelTargets(Targets):
    """A k-hot vector an image (module docstring)."""

    task: ClassVar[str] = MULTI_LABEL
    images_only: ClassVar[bool] = False

    def features(self, schema: Schema) -> dict[str, Any]:
        tf = tensorflow()
        return {schema.label_key: tf.io.VarLenFeature(tf.int64)} if schema.label_key else {}

    def tf_targets(self, schema: Schema, options: Preprocess) -> TfTargets | None:
        key, classes, offset = schema.label_key, schema.num_classes or 0, schema.label_offset
        if key is None:
            return None
        return lambda parsed, seed: (k_hot(parsed[key], classes, offset),)

    def raw(self, example: dict[str, Any], offset: int, classes: int) -> Any:
        ids = example.get(LABEL, [])
        vector = np.zeros(classes, np.float32)
        vector[np.asarray(ids if isinstance(ids, list) else [ids], np.int64) - offset] = 1.0
        return vector


def k_hot(ids: Any, classes: int, offset: int) -> Any:
    """A multi-label record's stored ids (a 1-D list) as a float32 [classes] vector of 0 and 1."""
    tf = tensorflow()
    return tf.minimum(tf.reduce_sum(tf.one_hot(ids - offset, classes, dtype=tf.float32), axis=0), 1.0)
