#!/usr/bin/python3
"""An independent reader of TensorBoard event files, for the tests: the TFRecord framing and its
CRC-32C checked here in pure Python, the Event messages parsed by Google's protobuf library
(Debian's python3-protobuf) from descriptors with TensorBoard's field numbers
(tensorboard/compat/proto/event.proto, summary.proto, tensor.proto).

    read_tfevents.py FILE             prints one JSON object per event; exits 1 naming the first bad record
    read_tfevents.py --scalars FILE   prints "STEP TAG VALUE" per scalar instead (VALUE: Python's repr)
"""
import json
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def message_classes():
    proto = descriptor_pb2.FileDescriptorProto(name="tb_subset.proto", package="tb", syntax="proto3")

    def message(name, fields):
        m = proto.message_type.add(name=name)
        for field_name, number, kind, type_name, repeated in fields:
            f = m.field.add(name=field_name, number=number, type=kind,
                            label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
            if type_name:
                f.type_name = ".tb." + type_name

    message("Event", [("wall_time", 1, F.TYPE_DOUBLE, None, False), ("step", 2, F.TYPE_INT64, None, False),
                      ("file_version", 3, F.TYPE_STRING, None, False), ("summary", 5, F.TYPE_MESSAGE, "Summary", False)])
    message("Summary", [("value", 1, F.TYPE_MESSAGE, "Value", True)])
    message("Value", [("tag", 1, F.TYPE_STRING, None, False), ("simple_value", 2, F.TYPE_FLOAT, None, False),
                      ("tensor", 8, F.TYPE_MESSAGE, "TensorProto", False),
                      ("metadata", 9, F.TYPE_MESSAGE, "SummaryMetadata", False)])
    message("SummaryMetadata", [("plugin_data", 1, F.TYPE_MESSAGE, "PluginData", False)])
    message("PluginData", [("plugin_name", 1, F.TYPE_STRING, None, False), ("content", 2, F.TYPE_BYTES, None, False)])
    message("TensorProto", [("dtype", 1, F.TYPE_INT32, None, False),
                            ("tensor_shape", 2, F.TYPE_MESSAGE, "TensorShapeProto", False),
                            ("string_val", 8, F.TYPE_BYTES, None, True)])
    message("TensorShapeProto", [])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    get = getattr(message_factory, "GetMessageClass", None)
    if get is None:  # protobuf before 4.22
        factory = message_factory.MessageFactory(pool)
        get = factory.GetPrototype
    return get(pool.FindMessageTypeByName("tb.Event"))


def main(path, scalars_only=False):
    Event = message_classes()
    data = open(path, "rb").read()
    at, index = 0, 0
    while at < len(data):
        if at + 12 > len(data):
            sys.exit(f"record {index}: truncated header at byte {at}")
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        if masked(header) != length_crc:
            sys.exit(f"record {index}: bad length CRC at byte {at}")
        body = data[at + 12:at + 12 + length]
        if len(body) != length or at + 16 + length > len(data):
            sys.exit(f"record {index}: truncated body at byte {at}")
        (body_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        if masked(body) != body_crc:
            sys.exit(f"record {index}: bad data CRC at byte {at}")
        event = Event()
        event.ParseFromString(body)
        out = {"wall_time": event.wall_time, "step": event.step}
        if event.file_version:
            out["file_version"] = event.file_version
        for value in event.summary.value:
            if value.HasField("tensor"):
                out.setdefault("texts", []).append(
                    {"tag": value.tag, "plugin": value.metadata.plugin_data.plugin_name, "dtype": value.tensor.dtype,
                     "text": b"".join(value.tensor.string_val).decode()})
            else:
                out.setdefault("scalars", []).append({"tag": value.tag, "value": value.simple_value})
        if scalars_only:
            for scalar in out.get("scalars", []):
                print(out["step"], scalar["tag"], repr(scalar["value"]))
        else:
            print(json.dumps(out))
        at += 16 + length
        index += 1


if __name__ == "__main__":
    if sys.argv[1] == "--scalars":
        main(sys.argv[2], scalars_only=True)
    else:
        main(sys.argv[1])
