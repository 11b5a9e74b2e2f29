"""`tf.train.Example` protobuf messages without importing TensorFlow.

The message layout mirrors tensorflow/core/example/{feature,example}.proto field for field, so
the bytes parse with `tf.io.parse_example`. It lives in a private descriptor pool, so it never
clashes with TensorFlow's own copy when both are loaded in one process.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Any, TypeAlias

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from shardfeed.errors import CorruptRecordError

_F = descriptor_pb2.FieldDescriptorProto


def _field(name: str, number: int, ftype: int, label: int, type_name: str = "", **kw: Any):
    if type_name:
        kw["type_name"] = type_name
    return _F(name=name, number=number, type=ftype, label=label, **kw)


def _list_message(name: str, ftype: int, packed: bool) -> descriptor_pb2.DescriptorProto:
    options = descriptor_pb2.FieldOptions(packed=True) if packed else None
    field = _field("value", 1, ftype, _F.LABEL_REPEATED)
    if options is not None:
        field.options.CopyFrom(options)
    return descriptor_pb2.DescriptorProto(name=name, field=[field])


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """The descriptor of TensorFlow's Example messages, written out in code."""
    fdp = descriptor_pb2.FileDescriptorProto(name="shardfeed/tf_example.proto", package="tensorflow", syntax="proto3")
    fdp.message_type.append(_list_message("BytesList", _F.TYPE_BYTES, packed=False))
    fdp.message_type.append(_list_message("FloatList", _F.TYPE_FLOAT, packed=True))
    fdp.message_type.append(_list_message("Int64List", _F.TYPE_INT64, packed=True))
    feature = descriptor_pb2.DescriptorProto(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, (name, type_name) in enumerate(
        [("bytes_list", "BytesList"), ("float_list", "FloatList"), ("int64_list", "Int64List")],
        start=1,
    ):
        feature.field.append(
            _field(
                name,
                number,
                _F.TYPE_MESSAGE,
                _F.LABEL_OPTIONAL,
                f".tensorflow.{type_name}",
                oneof_index=0,
            )
        )
    fdp.message_type.append(feature)
    features = descriptor_pb2.DescriptorProto(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.append(_field("key", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL))
    entry.field.append(_field("value", 2, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".tensorflow.Feature"))
    features.field.append(_field("feature", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".tensorflow.Features.FeatureEntry"))
    fdp.message_type.append(features)
    fdp.message_type.append(
        descriptor_pb2.DescriptorProto(
            name="Example",
            field=[_field("features", 1, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".tensorflow.Features")],
        )
    )
    return fdp


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file_descriptor())
Example: Any = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("tensorflow.Example"))

# a string: array.array takes a type parameter only in annotations before Python 3.12
FeatureValue: TypeAlias = "bytes | str | int | float | list[bytes] | list[int] | list[float] | np.ndarray | array[Any]"


def serialize_example(features: dict[str, FeatureValue]) -> bytes:
    """Serializes a flat feature dict as a `tf.train.Example`, deterministically.

    bytes/str values become a BytesList, ints an Int64List and floats a FloatList; a list takes
    the type of its first element, a NumPy array its dtype's and an `array.array` its typecode's
    (so an empty one still says its type, as readers' VarLenFeature check: an image without
    objects). Keys are written in sorted order so equal inputs give equal bytes whatever the
    dict order.
    """
    example = Example()
    feature_map = example.features.feature
    for key in sorted(features):
        value = features[key]
        feature = feature_map[key]
        if isinstance(value, bytes):
            feature.bytes_list.value.append(value)
        elif isinstance(value, str):
            feature.bytes_list.value.append(value.encode())
        elif isinstance(value, int):
            feature.int64_list.value.append(value)
        elif isinstance(value, float):
            feature.float_list.value.append(value)
        elif isinstance(value, array):  # 'f' or 'd': floats, else ints; present even when empty
            target = feature.float_list if value.typecode in "fd" else feature.int64_list
            target.value.extend(value) if value else target.SetInParent()
        elif isinstance(value, np.ndarray):
            _typed(feature, value)
        elif value and isinstance(value[0], (bytes, str)):
            feature.bytes_list.value.extend(v.encode() if isinstance(v, str) else v for v in value)
        elif value and isinstance(value[0], float):
            feature.float_list.value.extend(value)
        else:
            feature.int64_list.value.extend(int(v) for v in value)
    return example.SerializeToString(deterministic=True)


def _typed(feature: Any, values: np.ndarray) -> None:
    """`values` as the list its dtype says (floats, ints and booleans, or bytes), present even
    when empty."""
    kind = values.dtype.kind
    if kind == "b":
        values = values.astype(np.int64)
    target = feature.float_list if kind == "f" else feature.int64_list if kind in "iub" else feature.bytes_list
    if values.size:
        target.value.extend(values.ravel().tolist())
    else:
        target.SetInParent()


def _parsed(data: bytes) -> Example:
    """Serialized Example bytes as a message.

    Raises:
        CorruptRecordError: the bytes are not a valid Example message.
    """
    example = Example()
    try:
        example.ParseFromString(data)
    except Exception as e:  # protobuf raises its own DecodeError type
        raise CorruptRecordError(f"record is not a valid tf.train.Example: {e}") from e
    return example


def single_int64(data: bytes, key: str) -> int | None:
    """The one int64 value of feature `key` in serialized Example bytes, parsing nothing else
    into Python; None when the feature is absent, of another type or holds several values.

    Raises:
        CorruptRecordError: the bytes are not a valid Example message.
    """
    feature = _parsed(data).features.feature.get(key)
    values = feature.int64_list.value if feature is not None else []
    return int(values[0]) if len(values) == 1 else None


def parse_example(data: bytes, keys: Iterable[str] | None = None) -> dict[str, list[Any]]:
    """Parses serialized `tf.train.Example` bytes into {key: list of values}: every feature, or
    only those of `keys` that the record has (the rest are not turned into Python values: a
    reader that wants an image and its label, `IndexedRecords.encoded`, saves ~60% of the parse).

    Raises:
        ValueError: the bytes are not a valid Example message.
    """
    features = _parsed(data).features.feature
    out: dict[str, list[Any]] = {}
    for key, feature in features.items() if keys is None else ((k, features[k]) for k in keys if k in features):
        kind = feature.WhichOneof("kind")
        out[key] = list(getattr(feature, kind).value) if kind else []
    return out
