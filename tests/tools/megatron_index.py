#!/usr/bin/env python3
"""Megatron-LM indexed datasets (.bin + .idx, "MMIDIDX"), written and read from the published
layout (megatron/core/datasets/indexed_dataset.py), not from kintsugi's code:

  .idx: b"MMIDIDX\\x00\\x00", <Q version 1, <B dtype code, <Q sequence count S,
        <Q document count D + 1, int32[S] sequence lengths, int64[S] sequence byte pointers,
        int64[D + 1] document index (document d = sequences [idx[d], idx[d+1]))
  .bin: the ids of every sequence back to back, in the dtype's width (little-endian)

Usage:
  megatron_index.py write PREFIX DTYPE_CODE IDS.json   (IDS.json: a list of documents, each a
                                                         list of ids; one sequence per document)
  megatron_index.py read PREFIX                         (prints the documents as JSON)
"""
import array
import json
import struct
import sys

MAGIC = b"MMIDIDX\x00\x00"
# dtype code -> array typecode (sizes as on the x86-64 and arm64 Linux of CI)
TYPECODES = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 8: "H"}


def write(prefix, code, documents):
    typecode = TYPECODES[code]
    lengths, pointers, offset = [], [], 0
    with open(prefix + ".bin", "wb") as f:
        for doc in documents:
            data = array.array(typecode, doc)
            if sys.byteorder != "little":
                data.byteswap()
            f.write(data.tobytes())
            lengths.append(len(doc))
            pointers.append(offset)
            offset += len(doc) * data.itemsize
    with open(prefix + ".idx", "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(documents) + 1))
        f.write(struct.pack(f"<{len(lengths)}i", *lengths))
        f.write(struct.pack(f"<{len(pointers)}q", *pointers))
        f.write(struct.pack(f"<{len(documents) + 1}q", *range(len(documents) + 1)))


def read(prefix):
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    assert idx[:9] == MAGIC, "bad magic"
    (version,) = struct.unpack_from("<Q", idx, 9)
    assert version == 1, version
    code = idx[17]
    sequences, documents = struct.unpack_from("<QQ", idx, 18)
    at = 34
    lengths = struct.unpack_from(f"<{sequences}i", idx, at)
    at += 4 * sequences
    pointers = struct.unpack_from(f"<{sequences}q", idx, at)
    at += 8 * sequences
    doc_index = struct.unpack_from(f"<{documents}q", idx, at)
    assert at + 8 * documents == len(idx), "index size"
    with open(prefix + ".bin", "rb") as f:
        data = f.read()
    itemsize = array.array(TYPECODES[code]).itemsize
    out = []
    for d in range(documents - 1):
        ids = []
        for s in range(doc_index[d], doc_index[d + 1]):
            chunk = array.array(TYPECODES[code])
            chunk.frombytes(data[pointers[s] : pointers[s] + lengths[s] * itemsize])
            if sys.byteorder != "little":
                chunk.byteswap()
            ids.extend(chunk)
        out.append(ids)
    return out


if __name__ == "__main__":
    if sys.argv[1] == "write":
        with open(sys.argv[4]) as f:
            write(sys.argv[2], int(sys.argv[3]), json.load(f))
    elif sys.argv[1] == "read":
        json.dump(read(sys.argv[2]), sys.stdout)
    else:
        sys.exit(__doc__)
