"""mltool index: writes DALI index files that match the TFRecord framing, parsed here
independently; bad files get exit 2 with the file and byte offset; --keep-going gives 4.

    index_test.py MLTOOL MLTOOL_TESTGEN
"""
import json
import os
import struct
import sys
import tempfile

from cli_common import expect, run

mltool, testgen = sys.argv[1], sys.argv[2]


def frames(path):
    data = open(path, "rb").read()
    pos, out = 0, []
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        out.append((pos, 8 + 4 + length + 4))
        pos += 16 + length
    return out


def read_index(path):
    return [tuple(map(int, line.split())) for line in open(path)]


with tempfile.TemporaryDirectory() as tmp:
    a, b = os.path.join(tmp, "a.tfrecord"), os.path.join(tmp, "b.tfrecord")
    for p in (a, b):
        code, _, err = run([testgen, "tfrecord", p])
        expect(code == 0, "testgen writes records: " + err)
        os.remove(p[:-len(".tfrecord")] + ".idx")

    code, out, err = run([mltool, "index", a, "--json"])
    expect(code == 0, "index exits 0: " + err)
    summary = json.loads(out)
    expect(summary["records"] == len(frames(a)), "--json counts the records")
    expect(read_index(os.path.join(tmp, "a.idx")) == frames(a), "a.idx matches the framing")

    # Paths from stdin.
    code, _, err = run([mltool, "index", "-"], stdin=b + "\n")
    expect(code == 0, "index reads paths from stdin: " + err)
    expect(read_index(os.path.join(tmp, "b.idx")) == frames(b), "b.idx matches the framing")

    # A flipped bit in the data of the third record: exit 2, file and byte offset named.
    bad = os.path.join(tmp, "bad.tfrecord")
    data = bytearray(open(a, "rb").read())
    third = frames(a)[2][0]
    data[third + 12] ^= 0x01
    open(bad, "wb").write(bytes(data))
    code, _, err = run([mltool, "index", bad])
    expect(code == 2, f"a corrupt record exits 2 (got {code})")
    expect(bad in err and f"byte {third}" in err, "the error names the file and byte offset: " + err)
    expect(not os.path.exists(os.path.join(tmp, "bad.idx")), "no index is published for a bad file")

    # --keep-going: the good file is indexed, the bad one reported, exit 4.
    os.remove(os.path.join(tmp, "a.idx"))
    code, out, err = run([mltool, "index", "--keep-going", "--json", bad, a])
    expect(code == 4, f"--keep-going with one bad file exits 4 (got {code})")
    expect(os.path.exists(os.path.join(tmp, "a.idx")), "the good file was indexed")
    expect(json.loads(out)["failed"] == 1, "--json reports one failure")

    code, _, err = run([mltool, "index", os.path.join(tmp, "missing.tfrecord")])
    expect(code == 2 and "missing.tfrecord" in err, "a missing file exits 2 naming it")

print("ok: mltool index")
