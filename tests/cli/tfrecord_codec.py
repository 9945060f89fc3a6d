"""An independent pure-Python TFRecord and tf.train.Example codec for the CLI tests: written
from the formats' descriptions (TFRecord framing with masked CRC-32C; the protobuf wire format of
tf.train.Example), sharing no code with mltool, so the tests compare mltool against it."""
import os
import struct

from cli_common import Failure, expect

_CRC_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data):
    c = 0xFFFFFFFF
    t = _CRC_TABLE
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(payload):
    head = struct.pack("<Q", len(payload))
    return head + struct.pack("<I", masked(head)) + payload + struct.pack("<I", masked(payload))


def write_tfrecord(path, payloads):
    """Writes the records and the DALI index beside them; returns the frame offsets."""
    offsets, data = [], b""
    for p in payloads:
        offsets.append(len(data))
        data += frame(p)
    with open(path, "wb") as f:
        f.write(data)
    with open(os.path.splitext(path)[0] + ".idx", "w") as f:
        f.writelines(f"{o} {len(p) + 16}\n" for o, p in zip(offsets, payloads))
    return offsets


def frames(path):
    """[(offset, frame size, payload)] of a TFRecord file, every CRC checked."""
    data = open(path, "rb").read()
    out, pos = [], 0
    while pos < len(data):
        expect(pos + 12 <= len(data), f"{path}: byte {pos}: truncated frame header")
        length, lcrc = struct.unpack_from("<QI", data, pos)
        expect(lcrc == masked(data[pos:pos + 8]), f"{path}: byte {pos}: bad length CRC")
        end = pos + 12 + length
        expect(end + 4 <= len(data), f"{path}: byte {pos}: truncated frame")
        payload = data[pos + 12:end]
        (dcrc,) = struct.unpack_from("<I", data, end)
        expect(dcrc == masked(payload), f"{path}: byte {pos}: bad data CRC")
        out.append((pos, length + 16, payload))
        pos = end + 4
    return out


def encode_varint(v):
    v &= (1 << 64) - 1
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7F) | 0x80])
        v >>= 7
    return out + bytes([v])


def field(number, payload):
    return encode_varint(number << 3 | 2) + encode_varint(len(payload)) + payload


def example(features):
    """tf.train.Example bytes as protobuf writes them deterministically: names sorted, int64
    and float lists packed. `features`: name -> int | [ints] | float | [floats] | bytes | str."""
    entries = b""
    for name in sorted(features):
        v = features[name]
        if isinstance(v, (bytes, str)):
            feature = field(1, field(1, v.encode() if isinstance(v, str) else v))
        elif isinstance(v, float) or (isinstance(v, list) and v and isinstance(v[0], float)):
            floats = v if isinstance(v, list) else [v]
            feature = field(2, field(1, struct.pack(f"<{len(floats)}f", *floats)))
        else:
            feature = field(3, field(1, b"".join(encode_varint(x) for x in (v if isinstance(v, list) else [v]))))
        entries += field(1, field(1, name.encode()) + field(2, feature))
    return field(1, entries)


def read_varint(buf, pos):
    v, shift = 0, 0
    while True:
        expect(pos < len(buf), "protobuf: truncated varint")
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v, pos
        shift += 7
        expect(shift < 70, "protobuf: varint too long")


def fields(buf):
    """[(field number, wire type, value)]: value an int (varint, fixed) or bytes (LEN)."""
    out, pos = [], 0
    while pos < len(buf):
        tag, pos = read_varint(buf, pos)
        num, wt = tag >> 3, tag & 7
        if wt == 0:
            v, pos = read_varint(buf, pos)
        elif wt == 1:
            v = struct.unpack_from("<Q", buf, pos)[0]
            pos += 8
        elif wt == 2:
            n, pos = read_varint(buf, pos)
            expect(pos + n <= len(buf), "protobuf: truncated length-delimited field")
            v = bytes(buf[pos:pos + n])
            pos += n
        elif wt == 5:
            v = struct.unpack_from("<I", buf, pos)[0]
            pos += 4
        else:
            raise Failure(f"protobuf: wire type {wt}")
        out.append((num, wt, v))
    return out


def signed64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def decode_example(buf):
    """tf.train.Example → {name: ("bytes"|"float"|"int64", [values])}; strict."""
    result = {}
    for num, wt, v in fields(buf):
        expect(num == 1 and wt == 2, f"Example: unexpected field {num}/{wt}")
        for fnum, fwt, entry in fields(v):
            expect(fnum == 1 and fwt == 2, f"Features: unexpected field {fnum}/{fwt}")
            name, feat = None, b""
            for enum, ewt, ev in fields(entry):
                expect(ewt == 2 and enum in (1, 2), f"map entry: unexpected field {enum}/{ewt}")
                if enum == 1:
                    name = ev.decode("utf-8")
                else:
                    feat = ev
            expect(name is not None, "map entry without a key")
            kind, values = None, []
            for knum, kwt, kv in fields(feat):
                expect(kwt == 2 and knum in (1, 2, 3), f"Feature: unexpected field {knum}/{kwt}")
                kind = {1: "bytes", 2: "float", 3: "int64"}[knum]
                for lnum, lwt, lv in fields(kv):
                    expect(lnum == 1, f"{kind}_list: field {lnum}")
                    if kind == "bytes":
                        expect(lwt == 2, "bytes_list: wire type")
                        values.append(lv)
                    elif kind == "int64":
                        if lwt == 0:
                            values.append(signed64(lv))
                        else:
                            expect(lwt == 2, "int64_list: wire type")
                            p = 0
                            while p < len(lv):
                                x, p = read_varint(lv, p)
                                values.append(signed64(x))
                    else:
                        if lwt == 5:
                            values.append(struct.unpack("<f", struct.pack("<I", lv))[0])
                        else:
                            expect(lwt == 2 and len(lv) % 4 == 0, "float_list: wire type")
                            values.extend(struct.unpack(f"<{len(lv) // 4}f", lv))
            result[name] = (kind, values)
    return result
