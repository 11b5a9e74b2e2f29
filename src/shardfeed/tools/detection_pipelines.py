"""The detection pipelines `load` is compared with (bench/bench_detection.py), on a Pascal VOC folder.

  keras_hub_voc     the input pipeline of KerasHub's RetinaNet guide (keras-io,
                    guides/keras_hub/object_detection_retinanet.py, 2025-04): the XML files parsed
                    in Python into ragged lists, `from_tensor_slices`, `read_file` + `decode_jpeg`
                    per image, `keras.layers.Resizing(pad_to_aspect_ratio=True)` and
                    `MaxNumBoundingBoxes(100)` with `bounding_box_format="yxyx"`, batch. The guide
                    does not augment.
  keras_layers_voc  the same, with Keras' own augmentation layers given the boxes: Resizing to
                    1.125x the output (padded), `RandomCrop` to the output, `RandomFlip("horizontal")`
                    (Keras 3's bounding-box-aware preprocessing layers), then MaxNumBoundingBoxes.

Both yield (images, {"boxes", "labels"}) batches, as `load` does on the converted folder.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ElementTree
from typing import Any

from shardfeed.lazy import tensorflow

MAX_BOXES = 100
BOX_FORMAT = "yxyx"  # the guide's


def voc_metadata(root: str) -> tuple[list[str], list[list[list[int]]], list[list[int]]]:
    """The guide's `build_metadata`: image paths, int [ymin, xmin, ymax, xmax] boxes and class
    ids per image (class ids: the names in sorted order), parsed from Annotations/*.xml."""
    paths, boxes, labels, names = [], [], [], set()
    parsed = []
    for name in sorted(os.listdir(os.path.join(root, "Annotations"))):
        tree = ElementTree.parse(os.path.join(root, "Annotations", name)).getroot()
        objects = []
        for obj in tree.findall("object"):
            box = obj.find("bndbox")
            assert box is not None
            coords = [int(float(box.findtext(k) or 0)) for k in ("ymin", "xmin", "ymax", "xmax")]
            objects.append((obj.findtext("name") or "", coords))
            names.add(obj.findtext("name") or "")
        parsed.append((os.path.join(root, "JPEGImages", tree.findtext("filename") or ""), objects))
    ids = {n: i for i, n in enumerate(sorted(names))}
    for path, objects in parsed:
        paths.append(path)
        boxes.append([coords for _, coords in objects])
        labels.append([ids[n] for n, _ in objects])
    return paths, boxes, labels


def keras_hub_voc(
    path: str, batch_size: int, image_size: tuple[int, int], training: bool, augment: bool = False
) -> Any:
    """The guide's pipeline on the VOC folder `path` (module docstring); with `augment`, Keras'
    box-aware crop and flip."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    tf = tensorflow()
    import keras

    paths, boxes, labels = voc_metadata(path)
    metadata = {
        "path": tf.constant(paths),
        "boxes": tf.ragged.constant(boxes, ragged_rank=1, dtype=tf.float32),
        "labels": tf.ragged.constant(labels, dtype=tf.int64),
    }
    height, width = image_size
    margin = 1.125 if augment else 1.0
    layers = [
        keras.layers.Resizing(
            int(height * margin), int(width * margin), pad_to_aspect_ratio=True, bounding_box_format=BOX_FORMAT
        )
    ]
    if augment:
        layers += [
            keras.layers.RandomCrop(height, width, seed=0, bounding_box_format=BOX_FORMAT),
            keras.layers.RandomFlip("horizontal", seed=0, bounding_box_format=BOX_FORMAT),
        ]
    layers.append(keras.layers.MaxNumBoundingBoxes(MAX_BOXES, bounding_box_format=BOX_FORMAT))

    def load_image(example: dict[str, Any]) -> dict[str, Any]:
        image = tf.io.decode_jpeg(tf.io.read_file(example["path"]), channels=3)
        return {"images": image, "bounding_boxes": {"boxes": example["boxes"], "labels": example["labels"]}}

    def preprocess(data: dict[str, Any]) -> Any:
        for layer in layers:
            data = layer(data)
        return data

    ds = tf.data.Dataset.from_tensor_slices(metadata)
    if training:
        ds = ds.shuffle(len(paths), seed=0)
    ds = ds.map(load_image, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.batch(batch_size, drop_remainder=True)
    return ds.map(lambda d: (d["images"], d["bounding_boxes"]), num_parallel_calls=tf.data.AUTOTUNE)
