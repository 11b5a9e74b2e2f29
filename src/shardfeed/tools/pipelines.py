"""The pipelines `shardfeed bench` compares, each built from a plain, JSON-able description.

A `PipelineSpec` names one pipeline and its settings; `build` turns it into a `tf.data.Dataset`.
Because a spec is plain data, a benchmark can run every pipeline in a fresh process
(tools/fresh_runs.py): pipelines measured one after another in one process bias whichever runs
first (an abandoned pipeline keeps threads and CPU busy). Run as a script, this module measures
one spec and prints its `Throughput` as JSON:

    python -m shardfeed.tools.pipelines '{"kind": "shardfeed", "path": "data/flowers"}'

The kinds:
  shardfeed       `load` on converted shards (what users run)
  plain_tfdata    the per-record pipeline a user writes by hand on the same shards: interleave ->
                  shuffle -> map(parse_single_example + decode_and_crop_jpeg + resize + flip) ->
                  batch -> prefetch (evaluation: the same with the centre crop)
  keras_folder    `tf.keras.utils.image_dataset_from_directory` on the image folder
  hf_tf_dataset   Hugging Face's own TensorFlow path on a `save_to_disk` folder: `load_from_disk`,
                  a transform that decodes, random-crops (training) or centre-crops to the size and
                  flips, then `to_tf_dataset` (shuffled for training)
  tfds_expert     a prepared TFDS dataset read as the TF Model Garden reads ImageNet: SkipDecoding,
                  then the same crop-window decode, resize and flip as plain_tfdata
  decode_ceiling  the folder's JPEG bytes already in memory, decoded by `load`'s own per-image
                  code with map(AUTOTUNE): what reading and parsing could at best reach
  parse           `load`'s reading and parsing (records/s, no decode)
  raw_parse       TFRecordDataset reading the same shards, no check, then the same parsing
  raw_read        TFRecordDataset reading the same shards, no check, no parsing: the reader's limit
  keras_hub_voc, keras_layers_voc   detection on a Pascal VOC folder: KerasHub's RetinaNet guide's
                  pipeline, and the same with Keras' box-aware crop and flip (detection_pipelines.py)
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from shardfeed.errors import OptionError
from shardfeed.format.schema import ENCODED, LABEL, Schema
from shardfeed.lazy import tensorflow
from shardfeed.read.augment import Augment, random_crop_window
from shardfeed.read.mixture import Mixture
from shardfeed.read.options import BATCH_SIZE, DecodeOptions, ReadOptions

KINDS = (
    "shardfeed",
    "plain_tfdata",
    "keras_folder",
    "hf_tf_dataset",
    "tfds_expert",
    "decode_ceiling",
    "parse",
    "raw_parse",
    "raw_read",
    "memory_decode",
    "memory_records",
    "keras_hub_voc",
    "keras_layers_voc",
)
PARSE_BATCH = 256
IN_MEMORY = 2048  # records a split's in-memory stages hold (the first ones, in file order)


@dataclass(frozen=True)
class PipelineSpec:
    """One pipeline to measure, as plain data (it crosses a process boundary as JSON).

    Attributes:
        kind: one of KINDS.
        path: converted folder (shard kinds) or image folder (keras_folder, decode_ceiling).
        read, decode: `ReadOptions` / `DecodeOptions` fields for `load` (JSON values only).
        epochs: passes over the split to time; max_batches: stop after this many (after warm-up).
    """

    kind: str
    path: str
    split: str = "train"
    batch_size: int = BATCH_SIZE
    image_size: tuple[int, int] = (224, 224)
    training: bool = True
    augment: bool | None = None
    epochs: int = 1
    read: dict[str, Any] = field(default_factory=dict)
    decode: dict[str, Any] = field(default_factory=dict)
    service: str | None = None
    max_batches: int | None = None
    warmup_batches: int = 2
    mix_with: list[str] = field(default_factory=list)  # more converted folders: a Mixture with `path`
    mix_weights: list[float] = field(default_factory=list)  # one per folder, `path` first

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise OptionError(f"pipeline kind must be one of {list(KINDS)}, got {self.kind!r}")
        object.__setattr__(self, "image_size", tuple(self.image_size))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PipelineSpec:
        return cls(**json.loads(text))


def build(spec: PipelineSpec) -> Any:
    """The dataset `spec` describes, repeated for `spec.epochs` passes."""
    builders = {
        "shardfeed": _shardfeed,
        "plain_tfdata": plain_tfdata,
        "keras_folder": _keras_folder,
        "hf_tf_dataset": _hf_tf_dataset,
        "tfds_expert": _tfds_expert,
        "decode_ceiling": _decode_ceiling,
        "parse": _parse,
        "raw_parse": _raw_parse,
        "raw_read": _raw_read,
        "memory_decode": _memory_decode,
        "memory_records": _memory_records,
        "keras_hub_voc": _keras_voc,
        "keras_layers_voc": lambda spec: _keras_voc(spec, augment=True),
    }
    return builders[spec.kind](spec).repeat(spec.epochs).prefetch(tensorflow().data.AUTOTUNE)


def _shardfeed(spec: PipelineSpec) -> Any:
    from shardfeed.read.dataset import load

    path: Any = spec.path
    if spec.mix_with:
        path = Mixture((spec.path, *spec.mix_with), tuple(spec.mix_weights), union_labels=True)
    return load(
        path,
        split=spec.split,
        batch_size=spec.batch_size,
        image_size=spec.image_size,
        training=spec.training,
        augment=spec.augment,
        read=ReadOptions(**spec.read),
        decode=DecodeOptions(**spec.decode),
        service=spec.service,
    )


def plain_tfdata(spec: PipelineSpec) -> Any:
    """The per-record tf.data pipeline a user writes by hand (the tf.data guide's shape), on our shards."""
    tf = tensorflow()
    from shardfeed.read import shardset

    features = {ENCODED: tf.io.FixedLenFeature([], tf.string), LABEL: tf.io.FixedLenFeature([], tf.int64)}

    def one(record: Any, seed: Any) -> Any:
        parsed = tf.io.parse_single_example(record, features)
        return _cropped_jpeg(parsed[ENCODED], seed, spec), parsed[LABEL]

    files = shardset.from_manifest(spec.path, spec.split).files
    ds = tf.data.Dataset.from_tensor_slices(files)
    if spec.training:
        ds = ds.shuffle(len(files))
    ds = ds.interleave(
        tf.data.TFRecordDataset, cycle_length=16, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False
    )
    if spec.training:
        ds = ds.shuffle(4096)
    ds = tf.data.Dataset.zip((ds, tf.data.Dataset.random(seed=0).batch(2)))
    ds = ds.map(one, num_parallel_calls=tf.data.AUTOTUNE, deterministic=not spec.training)
    return ds.batch(spec.batch_size, drop_remainder=spec.training)


def _cropped_jpeg(data: Any, seed: Any, spec: PipelineSpec) -> Any:
    """A JPEG decoded the way the TF reference models' input code does it: only the crop window
    (random-resized for training, the centre 87.5% for evaluation), resized, flipped at random."""
    tf = tensorflow()
    shape = tf.io.extract_jpeg_shape(data)
    if spec.training:
        window = random_crop_window(shape, seed, Augment())
    else:
        side = tf.cast(tf.cast(tf.minimum(shape[0], shape[1]), tf.float32) * 0.875, tf.int32)
        window = tf.stack([(shape[0] - side) // 2, (shape[1] - side) // 2, side, side])
    image = tf.image.resize(tf.io.decode_and_crop_jpeg(data, window, channels=3), spec.image_size)
    if spec.training:
        image = tf.image.stateless_random_flip_left_right(image, seed)
    return tf.cast(image, tf.uint8)


def _tfds_expert(spec: PipelineSpec) -> Any:
    """TFDS read as its experts read it (the TF Model Garden's ImageNet input): a prepared TFDS
    dataset (`spec.path`: its version folder) opened with `builder_from_directory`, the image
    left undecoded (`SkipDecoding`), files shuffled, then `_cropped_jpeg` in a parallel map."""
    tf = tensorflow()
    import tensorflow_datasets as tfds  # a benchmark's peer (dev install), as hf_tf_dataset's datasets

    ds = tfds.builder_from_directory(spec.path).as_dataset(
        split=spec.split, shuffle_files=spec.training, decoders={"image": tfds.decode.SkipDecoding()}
    )
    if spec.training:
        ds = ds.shuffle(4096)
    ds = tf.data.Dataset.zip((ds, tf.data.Dataset.random(seed=0).batch(2)))
    ds = ds.map(
        lambda example, seed: (_cropped_jpeg(example["image"], seed, spec), example["label"]),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=not spec.training,
    )
    return ds.batch(spec.batch_size, drop_remainder=spec.training)


def _keras_voc(spec: PipelineSpec, augment: bool = False) -> Any:
    from shardfeed.tools.detection_pipelines import keras_hub_voc

    return keras_hub_voc(spec.path, spec.batch_size, spec.image_size, spec.training, augment)


def _keras_folder(spec: PipelineSpec) -> Any:
    tf = tensorflow()
    return tf.keras.utils.image_dataset_from_directory(
        spec.path, image_size=spec.image_size, batch_size=spec.batch_size, verbose=False
    )


def _hf_tf_dataset(spec: PipelineSpec) -> Any:
    """`datasets`' documented TensorFlow path for image classification (see the module docstring)."""
    import datasets
    import numpy as np

    loaded = datasets.load_from_disk(spec.path)
    ds = loaded[spec.split] if isinstance(loaded, datasets.DatasetDict) else loaded
    height, width = spec.image_size
    rng = np.random.default_rng(0)

    def transform(batch: dict[str, Any]) -> dict[str, Any]:
        pixels = []
        for image in batch["image"]:
            im = image.convert("RGB")
            side = min(im.size)
            if spec.training:
                crop = int(side * rng.uniform(0.5, 1.0))
                x, y = int(rng.integers(0, im.width - crop + 1)), int(rng.integers(0, im.height - crop + 1))
            else:
                crop, x, y = side, (im.width - side) // 2, (im.height - side) // 2
            im = im.crop((x, y, x + crop, y + crop)).resize((width, height))
            array = np.asarray(im, dtype=np.float32)
            pixels.append(array[:, ::-1] if spec.training and rng.random() < 0.5 else array)
        return {"pixel_values": pixels, "label": batch["label"]}

    ds.set_transform(transform)
    return ds.to_tf_dataset(
        columns="pixel_values",
        label_cols="label",
        batch_size=spec.batch_size,
        shuffle=spec.training,
        drop_remainder=spec.training,
    )


def _decode_ceiling(spec: PipelineSpec) -> Any:
    """The folder's image bytes in memory, decoded with `load`'s per-image code, map(AUTOTUNE)."""
    tf = tensorflow()
    from shardfeed.read.decode.image import decode_one

    blobs = []
    for path in image_files(spec.path):
        with open(path, "rb") as f:
            blobs.append(f.read())
    preprocess = _preprocess(spec)
    zero = tf.constant(0, tf.int64)
    ds = _with_seed_pairs(blobs).map(
        lambda data, seed: decode_one(data, zero, zero, zero, seed, schema=Schema(), options=preprocess),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=False,
    )
    return ds.batch(spec.batch_size, drop_remainder=spec.training)


def _parse(spec: PipelineSpec) -> Any:
    """`load`'s reading (checked, interleaved, shuffled files) and batched parsing; no decode."""
    from shardfeed.read import shardset
    from shardfeed.read.shard_pipeline import checked_records

    shards, schema = shardset.open_split(spec.path, spec.split)
    records = checked_records(shards, shuffle_files=True, seed=None, deterministic=False, skip_corrupt=False)
    return _parsed(records, schema)


def _raw_parse(spec: PipelineSpec) -> Any:
    """The same parsing after the raw reader: what parsing costs, apart from our reading."""
    from shardfeed.read import shardset

    shards, schema = shardset.open_split(spec.path, spec.split)
    return _parsed(_raw_records(shards.files), schema)


def _parsed(records: Any, schema: Schema) -> Any:
    """Batches of records parsed with the features `load` parses (for JPEG shards: the image
    bytes and the label); the image bytes."""
    tf = tensorflow()
    from shardfeed.read.decode.parsing import feature_spec, parsed_schema

    schema = parsed_schema(schema)
    features = feature_spec(schema)
    return records.batch(PARSE_BATCH).map(
        lambda s: tf.io.parse_example(s, features)[schema.image_key], num_parallel_calls=tf.data.AUTOTUNE
    )


def _raw_read(spec: PipelineSpec) -> Any:
    """The same shards through TFRecordDataset alone (16 parallel reads): no check, no parsing."""
    from shardfeed.read import shardset

    return _raw_records(shardset.from_manifest(spec.path, spec.split).files).batch(PARSE_BATCH)


def _memory_decode(spec: PipelineSpec) -> Any:
    """The split's stored images (IN_MEMORY of them) decoded whole from memory by TensorFlow, on
    tf.data's parallel map, no crop, resize or batching of pixels: the decode limit."""
    tf = tensorflow()
    from shardfeed.read.indexed import IndexedRecords

    records = IndexedRecords(spec.path, split=spec.split)
    blobs = [records.encoded(i)[0] for i in range(min(len(records), IN_MEMORY))]
    decoded = tf.data.Dataset.from_tensor_slices(blobs).map(
        lambda data: tf.shape(tf.io.decode_image(data, channels=3, expand_animations=False))[0],
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=False,
    )
    return decoded.batch(spec.batch_size)


def _memory_records(spec: PipelineSpec) -> Any:
    """The split's records (IN_MEMORY of them), parsed once up front as `load`'s readers parse
    them, from memory through `load`'s own decoder (crop-window decode, resize, flip: per record,
    or by batch where `load` decodes by batch), batched: `load` without its reading, parsing,
    order, seeds per epoch and hand-off."""
    tf = tensorflow()
    from shardfeed.read import shardset
    from shardfeed.read.decode.mapped import batch_decodable, batch_decoder, record_decoder, record_preparer
    from shardfeed.read.decode.parsing import record_parser
    from shardfeed.read.indexed import IndexedRecords

    records = IndexedRecords(spec.path, split=spec.split)
    serialized = [records.record(i) for i in range(min(len(records), IN_MEMORY))]
    _, schema = shardset.open_split(spec.path, spec.split)
    parsed = record_parser(schema)(tf.constant(serialized))  # in memory already: parsed once, up front
    preprocess = _preprocess(spec)
    by_batch = batch_decodable(schema, preprocess)
    per_record = record_preparer(schema, preprocess) if by_batch else record_decoder(schema, preprocess)
    decoded = _with_seed_pairs(parsed).map(per_record, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    batches = decoded.batch(spec.batch_size, drop_remainder=spec.training)
    if by_batch:
        return batches.map(batch_decoder(preprocess), num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    return batches


def _preprocess(spec: PipelineSpec) -> Any:
    """`load`'s per-image settings for `spec` (size, augmentation, decode options)."""
    from shardfeed.read.augment import resolve_augment
    from shardfeed.read.decode.image import Preprocess

    augment = resolve_augment(spec.augment, spec.training)
    return Preprocess(spec.image_size, augment, DecodeOptions(**spec.decode), training=spec.training)


def _with_seed_pairs(values: Any) -> Any:
    """(value, seed pair) elements: in-memory values (bytes, or parsed records' features) beside
    a seeded stream of random pairs, as `load` gives each record its own seed."""
    tf = tensorflow()
    return tf.data.Dataset.zip((tf.data.Dataset.from_tensor_slices(values), tf.data.Dataset.random(seed=0).batch(2)))


def _raw_records(files: list[str]) -> Any:
    from shardfeed.read.shard_pipeline import READ_BUFFER

    return tensorflow().data.TFRecordDataset(files, num_parallel_reads=min(16, len(files)), buffer_size=READ_BUFFER)


def image_files(folder: str) -> list[str]:
    """Image files below a folder, sorted."""
    found: list[str] = []
    for directory, _, names in os.walk(folder):
        found.extend(os.path.join(directory, n) for n in names if not n.startswith("."))
    return sorted(found)


def main(argv: list[str]) -> int:
    """Measures the spec given as JSON and prints its `Throughput` as one JSON line."""
    from shardfeed.lazy import quiet_tensorflow
    from shardfeed.tools.timing import measure

    quiet_tensorflow()
    spec = PipelineSpec.from_json(argv[0])
    result = measure(build(spec), max_batches=spec.max_batches, warmup_batches=spec.warmup_batches)
    print(json.dumps(result.as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
