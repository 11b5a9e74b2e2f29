"""The Object Detection API's label map, `label_map.pbtxt`: class ids and names as its tools write them.

    item {
      id: 1                  # the OD API and Model Garden keep 0 for the background: ids from 1
      name: 'raccoon'        # or an Open Images id ('/m/01g317'), with
      display_name: 'person' # the name people read
    }

A `StringIntLabelMap` message in protobuf's text format, read here by protobuf's own text parser
against the two messages of the OD API's `string_int_label_map.proto` (built from a descriptor:
the OD API itself is not a dependency); fields this reader does not use (keypoints, frequency)
are skipped.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

from shardfeed.errors import SourceError
from shardfeed.format import fileio, layout

FILE_NAME = layout.LABEL_MAP
MAX_BYTES = 16 << 20  # a label map of a few thousand classes is a few hundred KB


@functools.cache
def _message_class() -> Any:
    """StringIntLabelMap as the OD API's proto declares the fields read here."""
    proto = descriptor_pb2.FileDescriptorProto(name="shardfeed_label_map.proto", package="shardfeed.label_map")
    item = proto.message_type.add(name="StringIntLabelMapItem")
    string, int32 = descriptor_pb2.FieldDescriptorProto.TYPE_STRING, descriptor_pb2.FieldDescriptorProto.TYPE_INT32
    optional = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    item.field.add(name="name", number=1, type=string, label=optional)
    item.field.add(name="id", number=2, type=int32, label=optional)
    item.field.add(name="display_name", number=3, type=string, label=optional)
    whole = proto.message_type.add(name="StringIntLabelMap")
    whole.field.add(
        name="item",
        number=1,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
        type_name=".shardfeed.label_map.StringIntLabelMapItem",
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shardfeed.label_map.StringIntLabelMap"))


def parse(text: str, where: str) -> dict[int, str]:
    """{id: name} of a label map's text (`display_name` where an item has one, else `name`).

    Raises:
        SourceError: not a label map (protobuf's parser says where), an item without an id or a
            name, or an id given twice; naming `where`.
    """
    message = _message_class()()
    try:
        text_format.Parse(text, message, allow_unknown_field=True)
    except text_format.ParseError as e:
        raise SourceError(f"{where} is not a label map (StringIntLabelMap text): {e}") from None
    names: dict[int, str] = {}
    for number, item in enumerate(message.item):
        name = item.display_name or item.name
        if not item.HasField("id") or not name:
            raise SourceError(f"{where}: item {number} has no {'id' if not item.HasField('id') else 'name'}")
        if item.id in names:
            raise SourceError(f"{where}: id {item.id} is given twice ({names[item.id]!r}, {name!r})")
        names[item.id] = name
    return names


def dumps(names: Sequence[str], first_id: int) -> str:
    """The label map of classes `names` numbered from `first_id`, in protobuf's text format, as
    the OD API's and Datumaro's readers parse it."""
    message = _message_class()()
    for number, name in enumerate(names):
        message.item.add(id=first_id + number, name=name)
    return text_format.MessageToString(message)


def write(output_dir: str, names: Sequence[str], first_id: int) -> bool:
    """label_map.pbtxt beside a detection folder's labels.txt; not written (False) when the ids
    start at 0: the OD API refuses a label map whose id 0 is not the background."""
    if first_id < 1:
        return False
    fileio.write_text_atomic(fileio.join(output_dir, FILE_NAME), dumps(names, first_id))
    return True
