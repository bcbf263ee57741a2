#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""(Re)creates tests/data/gguf-malformed/: small GGUF files that are each wrong in one way,
and EXPECTED, which maps each file name to a substring of the error the reader must report.

    tools/gen-malformed-gguf.py [OUTDIR]

Standard library only. The output is deterministic, so re-running it leaves git clean.
"""
import os
import struct
import sys

# GGUF value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
# ggml tensor types
T_F32, T_F16, T_Q8_0 = 0, 1, 8

SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
              BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(vtype, v):
    """Encodes a value (without its type field). Arrays are (elem_type, [elements])."""
    if vtype == STR:
        return gstr(v)
    if vtype == ARR:
        etype, elems = v
        out = struct.pack("<IQ", etype, len(elems))
        return out + b"".join(value(etype, x) for x in elems)
    return struct.pack(SCALAR_FMT[vtype], v)


def kv(key, vtype, v):
    return gstr(key) + struct.pack("<I", vtype) + value(vtype, v)


def tensor_info(name, ne, ttype, offset, n_dims=None):
    n_dims = len(ne) if n_dims is None else n_dims
    return (gstr(name) + struct.pack("<I", n_dims) + b"".join(struct.pack("<Q", x) for x in ne)
            + struct.pack("<IQ", ttype, offset))


def header(n_tensors, n_kv, version=3, magic=b"GGUF"):
    return magic + struct.pack("<IQQ", version, n_tensors, n_kv)


def pad(b, align=32):
    return b + b"\0" * (-len(b) % align)


BASE_KVS = [
    kv("general.architecture", STR, "llama"),
    kv("general.name", STR, "malformed"),
    kv("llama.block_count", U32, 1),
]


def model(kvs=None, tensors=None, data=None, align=32, n_kv=None, n_tensors=None, version=3,
          magic=b"GGUF"):
    """A file from encoded kv pairs, tensor infos and the data section."""
    kvs = BASE_KVS if kvs is None else kvs
    if tensors is None:
        tensors = [tensor_info("a.weight", [8, 2], T_F32, 0),
                   tensor_info("b.weight", [8], T_F32, 64)]
        data = bytes(range(64)) + bytes(range(32))
    data = b"" if data is None else data
    head = header(len(tensors) if n_tensors is None else n_tensors,
                  len(kvs) if n_kv is None else n_kv, version, magic)
    return pad(head + b"".join(kvs) + b"".join(tensors), align) + data


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.normpath(
        os.path.join(here, "..", "tests", "data", "gguf-malformed"))
    os.makedirs(out, exist_ok=True)
    good = model()
    files = {}  # name -> (bytes, expected substring)

    def add(name, data, expect):
        assert name not in files, name
        files[name] = (data, expect)

    kv_start = 24
    first_kv_end = kv_start + len(BASE_KVS[0])
    name_kv_value = first_kv_end + 8 + len("general.name") + 4  # the string length field
    tinfo_start = kv_start + sum(len(k) for k in BASE_KVS)

    add("empty.gguf", b"", "empty file")
    add("truncated-header.gguf", good[:13], "truncated: n_tensors at offset 8")
    vocab_only = model(tensors=[])
    add("truncated-kv-type.gguf", vocab_only[:first_kv_end + 8 + len("general.name") + 2],
        "key 'general.name': truncated: value type at offset %d needs 4 bytes, only 2 left"
        % (first_kv_end + 8 + len("general.name")))
    add("truncated-kv-string.gguf", vocab_only[:name_kv_value + 8 + 3],
        "key 'general.name': string value at offset %d: length 9 exceeds the 3 bytes left"
        % name_kv_value)
    add("truncated-tensor-info.gguf", good[:tinfo_start + 8 + len("a.weight") + 4 + 5],
        "tensor 0 ('a.weight'): truncated: ne at offset")
    add("truncated-data.gguf", good[:-10], "past end of file")
    add("truncated-before-data.gguf", good[:tinfo_start + len(tensor_info("a", [8, 2], 0, 0))
                                           + len(tensor_info("b", [8], 0, 0)) + 14],
        "truncated: tensor data section starts")
    add("bad-magic.gguf", model(magic=b"GGUX"), "bad magic")
    add("version-1.gguf", model(version=1), "version 1")
    add("version-4.gguf", model(version=4), "unsupported GGUF version 4")
    add("version-big-endian.gguf", model(version=3 << 24), "big-endian")
    add("huge-n-kv.gguf", model(n_kv=1 << 62), "n_kv 4611686018427387904 at offset 16")
    add("huge-n-tensors.gguf", model(n_tensors=(1 << 64) - 1),
        "n_tensors 18446744073709551615 at offset 8")
    add("huge-key-length.gguf",
        header(0, 1) + struct.pack("<Q", 1 << 63) + b"general.name",
        "key at offset 24: length 9223372036854775808 exceeds the 12 bytes left")
    add("huge-string-length.gguf",
        model(kvs=[gstr("general.name") + struct.pack("<IQ", STR, 0xFFFFFFFFFFFF) + b"x" * 8]),
        "key 'general.name': string value at offset 48: length 281474976710655 exceeds")
    huge_arr = (gstr("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARR, STR, 0xFFFFFFFF)
                + gstr("a") * 4)
    add("huge-string-array-count.gguf", model(kvs=[huge_arr], tensors=[]),
        "key 'tokenizer.ggml.tokens': array of 4294967295 strings at offset 57 exceeds")
    add("huge-array-count.gguf",
        model(kvs=[gstr("tokenizer.ggml.scores") + struct.pack("<IIQ", ARR, F32, 1 << 60)
                   + b"\0" * 64], tensors=[]),
        "array of 1152921504606846976 f32")
    nested = (U32, [1, 2])
    for _ in range(9):
        nested = (ARR, [nested])
    add("nested-too-deep.gguf", model(kvs=[kv("deep", ARR, nested)], tensors=[]),
        "nests arrays deeper than 8 levels")
    ok_nested = (U32, [1, 2])
    for _ in range(7):
        ok_nested = (ARR, [ok_nested])
    add("nested-truncated.gguf", model(kvs=[kv("deep", ARR, ok_nested)], tensors=[])[:24 + 60],
        "key 'deep': array of 1 arrays at offset 64 exceeds the 8 bytes left")
    add("unknown-value-type.gguf", model(kvs=[gstr("x.y") + struct.pack("<IQ", 13, 0)]),
        "key 'x.y': unknown value type 13")
    add("unknown-array-type.gguf",
        model(kvs=[gstr("x.y") + struct.pack("<IIQ", ARR, 99, 0)]),
        "unknown element type 99")
    add("bool-not-0-or-1.gguf", model(kvs=BASE_KVS + [gstr("x.flag") + struct.pack("<IB", BOOL, 2)]),
        "bool value at offset")
    add("empty-key.gguf", model(kvs=[gstr("") + struct.pack("<IB", U8, 1)]),
        "key length 0 is not in 1..65535")
    add("duplicate-key.gguf", model(kvs=BASE_KVS + [kv("general.name", STR, "again")]),
        "key 'general.name' at offset %d: duplicate key (first at offset %d)"
        % (tinfo_start, first_kv_end))
    add("alignment-zero.gguf", model(kvs=BASE_KVS + [kv("general.alignment", U32, 0)]),
        "alignment 0 is not a power of two")
    add("alignment-three.gguf", model(kvs=BASE_KVS + [kv("general.alignment", U32, 3)]),
        "alignment 3 is not a power of two")
    add("alignment-wrong-type.gguf", model(kvs=BASE_KVS + [kv("general.alignment", STR, "32")]),
        "key 'general.alignment' at offset %d: type str, expected u32" % tinfo_start)
    add("alignment-u64.gguf", model(kvs=BASE_KVS + [kv("general.alignment", U64, 32)]),
        "type u64, expected u32")

    def tensors_file(tinfos, data=b"\0" * 128):
        return model(tensors=tinfos, data=data)

    def data_start(n_tensors):
        # the test tensors below have one-character names and n_dims 1
        return len(pad(header(0, 0) + b"".join(BASE_KVS)
                       + tensor_info("t", [8], T_F32, 0) * n_tensors))

    add("unknown-tensor-type.gguf", tensors_file([tensor_info("t", [32], 4, 0)]),
        "tensor 0 ('t'): unknown tensor type 4")
    add("unknown-tensor-type-big.gguf", tensors_file([tensor_info("t", [32], 1000, 0)]),
        "unknown tensor type 1000")
    add("n-dims-0.gguf", tensors_file([tensor_info("t", [], T_F32, 0)]), "n_dims 0 at offset")
    add("n-dims-5.gguf", tensors_file([tensor_info("t", [1, 1, 1, 1, 1], T_F32, 0)]),
        "n_dims 5 at offset")
    add("ne-zero.gguf", tensors_file([tensor_info("t", [4, 0], T_F32, 0)]), "ne[1] at offset")
    add("ne-overflow.gguf", tensors_file([tensor_info("t", [1 << 32, 1 << 32], T_F32, 0)]),
        "shape overflows")
    add("ne-bytes-overflow.gguf", tensors_file([tensor_info("t", [1 << 62, 1], T_F32, 0)]),
        "size in bytes overflows (a row of 4611686018427387904 f32 values)")
    add("ne-bytes-overflow-rows.gguf", tensors_file([tensor_info("t", [1 << 40, 1 << 21], T_F32, 0)]),
        "size in bytes overflows (2097152 rows of 4398046511104 bytes)")
    add("ne0-not-block-multiple.gguf", tensors_file([tensor_info("t", [33, 2], T_Q8_0, 0)]),
        "ne[0] = 33 is not a multiple of the q8_0 block size 32")
    add("offset-past-end.gguf", tensors_file([tensor_info("t", [8], T_F32, 4096)]),
        "tensor 0 ('t'): data [%d, %d) past end of file (size %d)"
        % (data_start(1) + 4096, data_start(1) + 4096 + 32, data_start(1) + 128))
    add("offset-huge.gguf", tensors_file([tensor_info("t", [8], T_F32, (1 << 64) - 32)]),
        "past end of file")
    add("misaligned-offset.gguf", tensors_file([tensor_info("t", [8], T_F32, 16)]),
        "offset 16 at offset")
    add("overlapping-tensors.gguf",
        tensors_file([tensor_info("a", [16], T_F32, 0), tensor_info("b", [8], T_F32, 32)]),
        "tensor 1 ('b'): data [%d, %d) overlaps tensor 0 ('a') at [%d, %d)"
        % (data_start(2) + 32, data_start(2) + 64, data_start(2), data_start(2) + 64))
    add("duplicate-tensor-name.gguf",
        tensors_file([tensor_info("a", [8], T_F32, 0), tensor_info("a", [8], T_F32, 32)]),
        "tensor 1 ('a') at offset")
    add("tensor-name-empty.gguf", tensors_file([tensor_info("", [8], T_F32, 0)]), "bad name")

    # A stale file not in the new list would stay behind, so clear ours first.
    for f in os.listdir(out):
        if f.endswith(".gguf"):
            os.unlink(os.path.join(out, f))
    with open(os.path.join(out, "EXPECTED"), "w") as exp:
        exp.write("# Generated by tools/gen-malformed-gguf.py: <file>\\t<substring of the error "
                  "message>\n".replace("\\t", "<TAB>"))
        for name in sorted(files):
            data, expect = files[name]
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
            exp.write("%s\t%s\n" % (name, expect))
    print("wrote %d files to %s" % (len(files), out))


if __name__ == "__main__":
    main()
