#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""(Re)creates tests/data/adapter-malformed/: LoRA adapters for the shared stories260K model
(dim 64, 5 layers, KV dim 32, FFN 172) that are each wrong in one way, in every format
lora_adapter_open() reads: PEFT directories (adapter_config.json + adapter_model.safetensors),
GGUF LoRA files and Molly adapter files; and EXPECTED, which maps each entry to a substring of
the error lora_adapter_open() must report (with the stories260K base).

Also writes seed corpora for the fuzzers: tests/fuzz/corpus/safetensors/ (valid and broken
safetensors files) and tests/fuzz/corpus/adapter-config/ (adapter_config.json variants).

    tools/gen-malformed-adapters.py [OUTDIR [FUZZ_CORPUS_DIR]]

Standard library only. The output is deterministic, so re-running it leaves git clean.
"""
import hashlib
import json
import os
import shutil
import struct
import sys

N_EMBD, N_LAYER, KV_DIM, N_FF = 64, 5, 32, 172
DIMS = {"q_proj": (64, 64), "k_proj": (64, 32), "v_proj": (64, 32), "o_proj": (64, 64),
        "gate_proj": (64, 172), "up_proj": (64, 172), "down_proj": (172, 64)}
GGUF_NAMES = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v",
              "o_proj": "attn_output", "gate_proj": "ffn_gate", "up_proj": "ffn_up",
              "down_proj": "ffn_down"}
PARENT = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn",
          "o_proj": "self_attn", "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
TARGET_INDEX = {"q_proj": 0, "k_proj": 1, "v_proj": 2, "o_proj": 3, "gate_proj": 4,
                "up_proj": 5, "down_proj": 6}


def values(n, seed):
    """n small deterministic floats."""
    return [((i * 7 + seed * 13) % 23 - 11) * 0.004 for i in range(n)]


def f32(vals):
    return struct.pack("<%df" % len(vals), *vals)


def f16(vals):
    return struct.pack("<%de" % len(vals), *vals)


# ---- safetensors ----

def st_raw(header, data=b"", pad=True, header_len=None):
    """A safetensors file from raw header bytes (or a dict) and data."""
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        header += b" " * (-len(header) % 8)
    n = len(header) if header_len is None else header_len
    return struct.pack("<Q", n) + header + data


def st_file(tensors, meta=None):
    """tensors: [(name, dtype, shape, data)] laid out in order."""
    hdr, off = {}, 0
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dtype, shape, data in tensors:
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    return st_raw(hdr, b"".join(t[3] for t in tensors))


def key(layer, proj):
    return "model.layers.%d.%s.%s" % (layer, PARENT[proj], proj)


def pair(layer=0, proj="q_proj", rank=2, dtype="F32", seed=1, a_shape=None, b_shape=None):
    n_in, n_out = DIMS[proj]
    a_shape = a_shape or [rank, n_in]
    b_shape = b_shape or [n_out, rank]
    pack = f32 if dtype == "F32" else f16
    na = 1
    for d in a_shape:
        na *= d
    nb = 1
    for d in b_shape:
        nb *= d
    k = "base_model.model." + key(layer, proj)
    return [(k + ".lora_A.weight", dtype, a_shape, pack(values(na, seed))),
            (k + ".lora_B.weight", dtype, b_shape, pack(values(nb, seed + 1)))]


BASE_CONFIG = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 2, "lora_alpha": 4,
               "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], "bias": "none",
               "use_rslora": False, "use_dora": False, "fan_in_fan_out": False,
               "rank_pattern": {}, "alpha_pattern": {}, "modules_to_save": None}


def config(**kw):
    c = dict(BASE_CONFIG)
    c.update(kw)
    return json.dumps(c, indent=2).encode() + b"\n"


# ---- GGUF ----

U32, F32T, STR, ARR = 4, 6, 8, 9
T_F32, T_F16, T_I32 = 0, 1, 26


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(k, vtype, v):
    out = gstr(k) + struct.pack("<I", vtype)
    if vtype == STR:
        return out + gstr(v)
    if vtype == U32:
        return out + struct.pack("<I", v)
    if vtype == F32T:
        return out + struct.pack("<f", v)
    if vtype == ARR:
        etype, elems = v
        return out + struct.pack("<IQ", etype, len(elems)) + b"".join(
            struct.pack("<I", x) for x in elems)
    raise ValueError(vtype)


ADAPTER_KVS = [("general.architecture", STR, "llama"), ("general.type", STR, "adapter"),
               ("adapter.type", STR, "lora"), ("adapter.lora.alpha", F32T, 4.0)]


def gguf(kvs=None, tensors=None):
    """tensors: [(name, ne, type, data)]; data aligned to 32."""
    kvs = ADAPTER_KVS if kvs is None else kvs
    if tensors is None:
        tensors = gguf_pair()
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    head += b"".join(kv(*x) for x in kvs)
    data, off = b"", 0
    for name, ne, ttype, d in tensors:
        head += gstr(name) + struct.pack("<I", len(ne))
        head += b"".join(struct.pack("<Q", x) for x in ne)
        head += struct.pack("<IQ", ttype, off)
        blob = d + b"\0" * (-len(d) % 32)
        data += blob
        off += len(blob)
    head += b"\0" * (-len(head) % 32)
    return head + data


def gguf_pair(layer=0, proj="q_proj", rank=2, a_ne=None, b_ne=None, ttype=T_F32, seed=1,
              a_vals=None):
    n_in, n_out = DIMS[proj]
    a_ne = a_ne or [n_in, rank]
    b_ne = b_ne or [rank, n_out]
    na = 1
    for d in a_ne:
        na *= d
    nb = 1
    for d in b_ne:
        nb *= d
    pack = f32 if ttype in (T_F32, T_I32) else f16
    base = "blk.%d.%s.weight" % (layer, GGUF_NAMES[proj])
    return [(base + ".lora_a", a_ne, ttype, pack(a_vals or values(na, seed))),
            (base + ".lora_b", b_ne, ttype, pack(values(nb, seed + 1)))]


# ---- Molly adapter files (layout in daemon/lora/lora-file.h) ----

def sha(b):
    return hashlib.sha256(b).digest()


def molly(mats=None, name="m", base_desc="llama 5x64 vocab 512 (llama)", domains=(),
          exemplars=(), fingerprint=b"\0" * 32, edit=None, edit_table=None, fix_checksum=True,
          fix_content=True, truncate=None):
    """mats: [dict(layer, target, rank, n_in, n_out, dtype, scale, a, b)]."""
    if mats is None:
        mats = [dict(layer=0, target=0, rank=2, n_in=64, n_out=64, dtype=1, scale=2.0,
                     a=f16(values(128, 1)), b=f16(values(128, 2)))]
    strings = b""
    for s in [name, base_desc] + list(domains) + list(exemplars):
        b = s.encode()
        strings += struct.pack("<I", len(b)) + b
    n = len(mats)
    header_bytes = 256 + 128 * n + len(strings)
    data_offset = (header_bytes + 4095) // 4096 * 4096
    offs, off = [], data_offset
    for m in mats:
        a_off = off
        off += (len(m["a"]) + 4095) // 4096 * 4096
        b_off = off
        off += (len(m["b"]) + 4095) // 4096 * 4096
        offs.append((a_off, b_off))
    file_bytes = off
    table = b""
    for m, (a_off, b_off) in zip(mats, offs):
        table += struct.pack("<6If I QQQQ", m["layer"], m["target"], m["rank"], m["n_in"],
                             m["n_out"], m["dtype"], m["scale"], 0, a_off, len(m["a"]), b_off,
                             len(m["b"]))
        table += sha(m["a"]) + sha(m["b"])
    table = bytearray(table)
    if edit_table:
        edit_table(table)
    content = hashlib.sha256(b"molly-lora-content-v1\0" + struct.pack("<I", n))
    for i in range(n):
        e = bytes(table[128 * i:128 * i + 128])
        content.update(e[0:28] + e[64:128])
    target_mask = 0
    for m in mats:
        target_mask |= 1 << m["target"]
    hdr = bytearray(256)
    hdr[0:8] = b"MOLLYLRA"
    struct.pack_into("<IIQQ", hdr, 8, 1, header_bytes, data_offset, file_bytes)
    hdr[64:96] = content.digest() if fix_content else b"\x55" * 32
    hdr[96:128] = fingerprint
    struct.pack_into("<IIIIIIIIII", hdr, 160, 0, n, max(m["rank"] for m in mats), target_mask,
                     len(domains), len(exemplars), 256, 128, 256 + 128 * n, len(strings))
    hdr = hdr + table + strings
    if edit:
        edit(hdr)
    if fix_checksum:
        hdr[32:64] = b"\0" * 32
        hdr[32:64] = sha(bytes(hdr[:header_bytes]))
    out = bytearray(file_bytes)
    out[0:len(hdr)] = hdr
    for m, (a_off, b_off) in zip(mats, offs):
        out[a_off:a_off + len(m["a"])] = m["a"]
        out[b_off:b_off + len(m["b"])] = m["b"]
    out = bytes(out)
    return out[:truncate] if truncate is not None else out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, ".."))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "data",
                                                              "adapter-malformed")
    fuzz = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, "tests", "fuzz", "corpus")
    entries = {}  # name -> (kind, payload, expected)

    def peft(name, expect, cfg=None, tensors=None, st=None, extra=None, no_config=False,
             no_weights=False):
        assert name not in entries, name
        files = {}
        if not no_config:
            files["adapter_config.json"] = config() if cfg is None else cfg
        if not no_weights:
            files["adapter_model.safetensors"] = (st if st is not None else
                                                  st_file(pair() if tensors is None else tensors))
        files.update(extra or {})
        entries[name] = ("dir", files, expect)

    def file(name, data, expect):
        assert name not in entries, name
        entries[name] = ("file", data, expect)

    # -- PEFT: the directory and the config --
    peft("peft-no-config", "no adapter_config.json", no_config=True)
    peft("peft-no-weights", "no adapter_model.safetensors", no_weights=True)
    peft("peft-pickle-only", "adapter_model.bin", no_weights=True,
         extra={"adapter_model.bin": b"\x80\x02}q\x00."})
    peft("peft-config-not-json", "adapter_config.json is not valid JSON", cfg=b'{"r": 2,')
    peft("peft-config-trailing", "data after the JSON object", cfg=b'{"r": 2} x')
    peft("peft-config-not-object", "adapter_config.json is not a JSON object", cfg=b"[1, 2]")
    peft("peft-r-zero", "'r' is 0; a LoRA rank must be in 1..", cfg=config(r=0))
    peft("peft-r-string", "'r' is not an integer", cfg=config(r="2"))
    peft("peft-r-float", "'r' is not an integer", cfg=config(r=2.5))
    peft("peft-alpha-string", "'lora_alpha' is not a number", cfg=config(lora_alpha="4"))
    peft("peft-rslora-string", "'use_rslora' is not true or false", cfg=config(use_rslora="yes"))
    peft("peft-targets-number", "'target_modules' is neither a string nor a list",
         cfg=config(target_modules=5))
    peft("peft-targets-list-number", "'target_modules' is not a string",
         cfg=config(target_modules=["q_proj", 3]))
    peft("peft-targets-bad-regex", "target_modules: '.*(q_proj' is not a valid regular expression",
         cfg=config(target_modules=".*(q_proj"))
    peft("peft-rank-pattern-bad-regex", "rank_pattern 'q_proj[' : ".replace(" : ", ": ") +
         "'q_proj[' is not a valid regular expression", cfg=config(rank_pattern={"q_proj[": 2}))
    peft("peft-rank-pattern-not-int", "rank_pattern 'q_proj' is not an integer",
         cfg=config(rank_pattern={"q_proj": "2"}))
    peft("peft-rank-pattern-zero", "rank_pattern 'q_proj' is 0",
         cfg=config(rank_pattern={"q_proj": 0}))
    peft("peft-alpha-pattern-string", "alpha_pattern 'q_proj' is not a number",
         cfg=config(alpha_pattern={"q_proj": "x"}))
    peft("peft-rank-pattern-not-object", "'rank_pattern' is not an object",
         cfg=config(rank_pattern=["q_proj"]))
    peft("peft-layers-not-int", "'layers_to_transform' entry 0 is not an integer",
         cfg=config(layers_to_transform=["0"]))
    peft("peft-type-loha", "peft_type 'LOHA' is not supported", cfg=config(peft_type="LOHA"))
    peft("peft-use-dora", "use_dora: DoRA adapters are not supported", cfg=config(use_dora=True))
    peft("peft-layer-replication", "'layer_replication' is not supported",
         cfg=config(layer_replication=[[0, 2]]))
    peft("peft-modules-to-save", "modules_to_save ('lm_head') is not supported",
         cfg=config(modules_to_save=["lm_head"]),
         tensors=pair() + [("base_model.model.lm_head.weight", "F32", [2, 64],
                            f32(values(128, 3)))])
    peft("peft-trainable-tokens", "trainable_token_indices is not supported",
         cfg=config(trainable_token_indices=[1, 2]))

    # -- PEFT: the tensors --
    q = pair()
    peft("peft-a-without-b", "has no matching lora_B (module 'model.layers.0.self_attn.q_proj')",
         tensors=[q[0]])
    peft("peft-b-without-a", "has no matching lora_A (module 'model.layers.0.self_attn.q_proj')",
         tensors=[q[1]])
    peft("peft-rank-mismatch-ab", "rank mismatch: 'base_model.model.model.layers.0.self_attn."
         "q_proj.lora_A.weight' [2, 64] has rank 2",
         tensors=[q[0], pair(rank=3)[1]])
    peft("peft-rank-mismatch-config", "has rank 2, but adapter_config.json has r = 4",
         cfg=config(r=4))
    peft("peft-rank-pattern-mismatch", "rank_pattern 'self_attn.q_proj' gives 4",
         cfg=config(rank_pattern={"v_proj": 8, "self_attn.q_proj": 4}))
    peft("peft-rank-zero-tensor", "lora_A.weight': rank 0",
         tensors=pair(a_shape=[0, 64], b_shape=[64, 0]))
    peft("peft-wrong-n-in", "module 'model.layers.0.self_attn.q_proj': lora_A [2, 32] and "
         "lora_B [64, 2] do not fit base 'llama 5x64 vocab 512 (llama)', where q_proj is "
         "64 -> 64", tensors=pair(a_shape=[2, 32]))
    peft("peft-wrong-n-out", "where k_proj is 64 -> 32 (expected lora_A [rank, 64], lora_B [32, rank]",
         tensors=pair(proj="k_proj", b_shape=[64, 2]))
    peft("peft-layer-out-of-range", "layer 7 is past the base's 5 layers",
         tensors=pair(layer=7))
    peft("peft-dtype-i8", "dtype I8 is not supported (F32, F16 or BF16)",
         tensors=[(q[0][0], "I8", [2, 64], bytes(128)), q[1]])
    peft("peft-dtype-f64", "dtype F64 is not supported",
         tensors=[q[0], (q[1][0], "F64", [64, 2], bytes(1024))])
    peft("peft-3d-tensor", "expected 2 dimensions, has 3",
         tensors=pair(a_shape=[2, 64, 1]))
    peft("peft-1d-tensor", "expected 2 dimensions, has 1",
         tensors=[q[0], (q[1][0], "F32", [128], q[1][3])])
    peft("peft-lm-head", "module 'lm_head' is not a supported LoRA target",
         cfg=config(target_modules=["q_proj", "lm_head"]),
         tensors=q + [("base_model.model.lm_head.lora_A.weight", "F32", [2, 64],
                       f32(values(128, 5))),
                      ("base_model.model.lm_head.lora_B.weight", "F32", [512, 2],
                       f32(values(1024, 6)))])
    peft("peft-embed-tokens", "(module 'model.embed_tokens'): a LoRA on an embedding",
         cfg=config(target_modules=["q_proj", "embed_tokens"]),
         tensors=q + [("base_model.model.model.embed_tokens.lora_embedding_A", "F32", [2, 512],
                       f32(values(1024, 5))),
                      ("base_model.model.model.embed_tokens.lora_embedding_B", "F32", [64, 2],
                       f32(values(128, 6)))])
    peft("peft-dora-magnitude", "a DoRA magnitude vector",
         tensors=q + [("base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector",
                       "F32", [64], f32(values(64, 7)))])
    peft("peft-lora-bias", "a LoRA bias",
         tensors=q + [("base_model.model.model.layers.0.self_attn.q_proj.lora_B.bias",
                       "F32", [64], f32(values(64, 7)))])
    peft("peft-fused-qkv", "module 'model.layers.0.self_attn.qkv_proj' is not a supported",
         tensors=[(n.replace("q_proj", "qkv_proj"), d, s, b) for n, d, s, b in q])
    peft("peft-not-targeted", "module 'model.layers.0.self_attn.q_proj' is not targeted by "
         "adapter_config.json", cfg=config(target_modules=["v_proj"]))
    peft("peft-not-in-layers", "is not targeted by adapter_config.json (target_modules, "
         "layers_to_transform)", cfg=config(layers_to_transform=[1, 2]))
    peft("peft-excluded", "is not targeted", cfg=config(exclude_modules=["q_proj"]))
    peft("peft-regex-not-matching", "is not targeted",
         cfg=config(target_modules=r".*\.mlp\..*"))
    peft("peft-duplicate-module", "are both lora_A of 'model.layers.0.self_attn.q_proj'",
         tensors=q + [(q[0][0].replace("lora_A.weight", "lora_A.default.weight"), "F32",
                       [2, 64], q[0][3])])
    nan = bytearray(q[0][3])
    nan[0:4] = struct.pack("<f", float("nan"))
    peft("peft-nan", "is not finite", tensors=[(q[0][0], "F32", [2, 64], bytes(nan)), q[1]])
    big = bytearray(q[1][3])
    big[4:8] = struct.pack("<f", 1e6)
    peft("peft-f16-overflow", "does not fit f16 (use bf16)",
         tensors=[q[0], (q[1][0], "F32", [64, 2], bytes(big))])
    peft("peft-no-tensors", "no supported LoRA matrices", tensors=[])

    # -- safetensors structure (inside a PEFT directory) --
    good = st_file(q)
    hlen = struct.unpack("<Q", good[:8])[0]
    peft("st-empty", "file is 0 bytes, too short", st=b"")
    peft("st-short", "file is 5 bytes, too short", st=b"\x02\0\0\0\0")
    peft("st-header-huge", "header length 4611686018427387904 exceeds the 100000000-byte limit",
         st=struct.pack("<Q", 1 << 62) + b"{}")
    peft("st-header-past-end", "header length 1000 runs past the end of the file",
         st=struct.pack("<Q", 1000) + b"{}" + b" " * 30)
    peft("st-header-not-brace", "header does not start with '{'", st=st_raw(b"[]"))
    peft("st-header-bad-json", "header is not valid JSON", st=st_raw(b'{"a": {'))
    peft("st-header-trailing", "header has data after the JSON object", st=st_raw(b"{} x"))
    peft("st-header-not-utf8", "header is not valid JSON",
         st=st_raw(b'{"\xff\xfe": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}}',
                   b"\0" * 4))
    name_a, name_b = q[0][0], q[1][0]

    def hdr(a=None, b=None, meta=None, **top):
        h = {}
        if meta is not None:
            h["__metadata__"] = meta
        h[name_a] = {"dtype": "F32", "shape": [2, 64], "data_offsets": [0, 512]}
        h[name_b] = {"dtype": "F32", "shape": [64, 2], "data_offsets": [512, 1024]}
        if a is not None:
            h[name_a] = a
        if b is not None:
            h[name_b] = b
        h.update(top)
        return h

    data = q[0][3] + q[1][3]
    peft("st-unknown-dtype", "unknown dtype 'F33'",
         st=st_raw(hdr(a={"dtype": "F33", "shape": [2, 64], "data_offsets": [0, 512]}), data))
    peft("st-dtype-not-string", "dtype is not a string",
         st=st_raw(hdr(a={"dtype": 5, "shape": [2, 64], "data_offsets": [0, 512]}), data))
    peft("st-no-shape", "no shape", st=st_raw(hdr(a={"dtype": "F32", "data_offsets": [0, 512]}),
                                              data))
    peft("st-no-offsets", "no data_offsets",
         st=st_raw(hdr(a={"dtype": "F32", "shape": [2, 64]}), data))
    peft("st-shape-negative", "a shape dimension is negative (-2)",
         st=st_raw(hdr(a={"dtype": "F32", "shape": [-2, 64], "data_offsets": [0, 512]}), data))
    peft("st-shape-float", "a shape dimension is not an integer",
         st=st_raw(hdr(a={"dtype": "F32", "shape": [2.0, 64], "data_offsets": [0, 512]}), data))
    peft("st-shape-overflow", "shape overflows",
         st=st_raw(hdr(a={"dtype": "F32", "shape": [1 << 40, 1 << 40], "data_offsets": [0, 512]}),
                   data))
    peft("st-shape-bytes-overflow", "shape overflows",
         st=st_raw(hdr(a={"dtype": "F32", "shape": [1 << 31, 1 << 31], "data_offsets": [0, 512]}),
                   data))
    peft("st-too-many-dims", "shape has 9 dimensions (at most 8)",
         st=st_raw(hdr(a={"dtype": "F32", "shape": [1] * 9, "data_offsets": [0, 512]}), data))
    peft("st-entry-not-object", "entry is not an object", st=st_raw(hdr(a=[1, 2]), data))
    peft("st-offsets-not-pair", "data_offsets is not [begin, end]",
         st=st_raw(hdr(a={"dtype": "F32", "shape": [2, 64], "data_offsets": [0]}), data))
    peft("st-offsets-reversed", "data_offsets [512, 0] end before begin",
         st=st_raw(hdr(a={"dtype": "F32", "shape": [2, 64], "data_offsets": [512, 0]}), data))
    peft("st-offsets-past-end", "past the end of the data (1024 bytes)",
         st=st_raw(hdr(b={"dtype": "F32", "shape": [64, 2], "data_offsets": [512, 1536]}), data))
    peft("st-offsets-huge", "past the end of the data",
         st=st_raw(hdr(b={"dtype": "F32", "shape": [64, 2],
                          "data_offsets": [(1 << 64) - 512, (1 << 64) - 1]}), data))
    peft("st-size-mismatch", "128 F32 elements need 512 bytes, but data_offsets [512, 1000] "
         "hold 488", st=st_raw(hdr(b={"dtype": "F32", "shape": [64, 2],
                                     "data_offsets": [512, 1000]}), data))
    peft("st-overlap", "overlap tensor",
         st=st_raw(hdr(b={"dtype": "F32", "shape": [64, 2], "data_offsets": [256, 768]}),
                   data))
    peft("st-gap", "leaving a gap after byte 512",
         st=st_raw(hdr(b={"dtype": "F32", "shape": [64, 2], "data_offsets": [600, 1112]}),
                   data + bytes(88)))
    peft("st-trailing-data", "the tensors cover 1024 bytes of data, but the file holds 1030",
         st=st_raw(hdr(), data + bytes(6)))
    peft("st-metadata-not-string", "__metadata__ 'format' is not a string",
         st=st_raw(hdr(meta={"format": 1}), data))
    peft("st-metadata-not-object", "__metadata__ is not an object",
         st=st_raw(hdr(meta=["pt"]), data))
    peft("st-truncated", "past the end of the data", st=good[:len(good) - 100])
    peft("st-header-truncated", "runs past the end of the file", st=good[:8 + hlen - 10])

    # -- GGUF LoRA --
    gq = gguf_pair()
    file("gguf-no-type.gguf", gguf(kvs=[("general.architecture", STR, "llama")]),
         "no general.type: a model, not a LoRA adapter")
    file("gguf-type-model.gguf", gguf(kvs=[("general.architecture", STR, "llama"),
                                           ("general.type", STR, "model")]),
         "general.type is 'model', not 'adapter'")
    file("gguf-type-not-string.gguf", gguf(kvs=[("general.architecture", STR, "llama"),
                                                ("general.type", U32, 1)]),
         "general.type is not a string")
    file("gguf-adapter-type-ia3.gguf",
         gguf(kvs=ADAPTER_KVS[:2] + [("adapter.type", STR, "ia3")]),
         "adapter.type 'ia3' is not supported")
    file("gguf-no-adapter-type.gguf", gguf(kvs=ADAPTER_KVS[:2]),
         "adapter.type is missing or not a string")
    file("gguf-arch-mismatch.gguf",
         gguf(kvs=[("general.architecture", STR, "qwen2")] + ADAPTER_KVS[1:]),
         "adapter architecture 'qwen2' does not match the base's 'llama'")
    file("gguf-no-arch.gguf", gguf(kvs=ADAPTER_KVS[1:]),
         "general.architecture is missing or not a string")
    file("gguf-alpha-string.gguf",
         gguf(kvs=ADAPTER_KVS[:3] + [("adapter.lora.alpha", STR, "4")]),
         "adapter.lora.alpha is not a number")
    file("gguf-alpha-negative.gguf",
         gguf(kvs=ADAPTER_KVS[:3] + [("adapter.lora.alpha", F32T, -1.0)]),
         "adapter.lora.alpha -1 is not a finite number >= 0")
    file("gguf-alora.gguf",
         gguf(kvs=ADAPTER_KVS + [("adapter.alora.invocation_tokens", ARR, (U32, [1, 2]))]),
         "activated LoRA is not supported")
    file("gguf-a-without-b.gguf", gguf(tensors=[gq[0]]),
         "tensor 'blk.0.attn_q.weight.lora_a' has no matching 'blk.0.attn_q.weight.lora_b'")
    file("gguf-b-without-a.gguf", gguf(tensors=[gq[1]]),
         "tensor 'blk.0.attn_q.weight.lora_b' has no matching 'blk.0.attn_q.weight.lora_a'")
    file("gguf-rank-mismatch.gguf", gguf(tensors=[gq[0], gguf_pair(rank=4)[1]]),
         "rank mismatch: 'blk.0.attn_q.weight.lora_a' has rank 2")
    file("gguf-rank-zero.gguf", gguf(tensors=gguf_pair(rank=0)),
         "tensor 0 ('blk.0.attn_q.weight.lora_a'): ne[1] at offset 224 is zero")
    file("gguf-wrong-n-in.gguf", gguf(tensors=gguf_pair(a_ne=[32, 2])),
         "'blk.0.attn_q.weight': lora_a [32, 2] and lora_b [2, 64] do not fit base "
         "'llama 5x64 vocab 512 (llama)', where attn_q is 64 -> 64")
    file("gguf-wrong-n-out.gguf", gguf(tensors=gguf_pair(proj="k_proj", b_ne=[2, 64])),
         "where attn_k is 64 -> 32 (expected lora_a [64, rank], lora_b [rank, 32]")
    file("gguf-transposed.gguf", gguf(tensors=gguf_pair(a_ne=[2, 64], b_ne=[64, 2])),
         "do not fit base")
    file("gguf-layer-out-of-range.gguf", gguf(tensors=gguf_pair(layer=9)),
         "layer 9 is past the base's 5 layers")
    file("gguf-3d.gguf", gguf(tensors=[("blk.0.attn_q.weight.lora_a", [64, 2, 1], T_F32,
                                        f32(values(128, 1))), gq[1]]),
         "expected 2 dimensions, has 3")
    file("gguf-token-embd.gguf",
         gguf(tensors=gq + [("token_embd.weight.lora_a", [512, 2], T_F32, f32(values(1024, 3))),
                            ("token_embd.weight.lora_b", [2, 64], T_F32, f32(values(128, 4)))]),
         "'token_embd.weight' is not a supported LoRA target")
    file("gguf-output.gguf",
         gguf(tensors=gq + [("output.weight.lora_a", [64, 2], T_F32, f32(values(128, 3))),
                            ("output.weight.lora_b", [2, 512], T_F32, f32(values(1024, 4)))]),
         "'output.weight' is not a supported LoRA target")
    file("gguf-fused-qkv.gguf",
         gguf(tensors=[(n.replace("attn_q", "attn_qkv"), ne, t, d) for n, ne, t, d in gq]),
         "'blk.0.attn_qkv.weight' is not a supported LoRA target")
    file("gguf-not-lora-tensor.gguf",
         gguf(tensors=gq + [("blk.0.attn_q.weight", [8], T_F32, f32(values(8, 3)))]),
         "tensor 'blk.0.attn_q.weight' is not a LoRA tensor")
    file("gguf-type-i32.gguf", gguf(tensors=gguf_pair(ttype=T_I32)), "is not supported")
    file("gguf-nan.gguf", gguf(tensors=gguf_pair(a_vals=[float("inf")] + [0.0] * 127)),
         "is not finite")
    file("gguf-no-tensors.gguf", gguf(tensors=[]), "no supported LoRA matrices")
    good_gguf = gguf()
    file("gguf-truncated.gguf", good_gguf[:len(good_gguf) - 300], "past end of file")

    # -- Molly adapter files --
    def set32(off, v):
        return lambda h: struct.pack_into("<I", h, off, v)

    def set64(off, v):
        return lambda h: struct.pack_into("<Q", h, off, v)

    def tbl32(off, v):
        return lambda t: struct.pack_into("<I", t, off, v)

    def tbl64(off, v):
        return lambda t: struct.pack_into("<Q", t, off, v)

    file("molly-bad-magic.molly", b"MOLLYLRX" + molly()[8:],
         "not an adapter: expected a PEFT directory")
    file("molly-short.molly", molly()[:100], "truncated: 100 bytes, shorter than the 256-byte")
    file("molly-truncated-header.molly", molly()[:200], "truncated: 200 bytes")
    file("molly-version-2.molly", molly(edit=set32(8, 2)),
         "Molly adapter file version 2 is not supported")
    file("molly-header-checksum.molly", molly(edit=lambda h: h.__setitem__(300, h[300] ^ 1),
                                              fix_checksum=False),
         "header checksum mismatch")
    file("molly-header-size-huge.molly", molly(edit=set32(12, 1 << 31)),
         "header size 2147483648 is not in 256..")
    file("molly-data-offset.molly", molly(edit=set64(16, 8192)),
         "data offset 8192 is not the header size")
    file("molly-truncated.molly", molly(truncate=8192), "(truncated)")
    file("molly-longer.molly", molly() + bytes(4096), "but its header says 12288")
    file("molly-flags.molly", molly(edit=set32(160, 6)), "unknown flags 0x6")
    file("molly-no-mats.molly", molly(edit=set32(164, 0)), "no matrices")
    file("molly-n-mats-huge.molly", molly(edit=set32(164, 1 << 30)), "do not fill")
    file("molly-reserved.molly", molly(edit=lambda h: h.__setitem__(220, 1)),
         "reserved header bytes are not zero")
    file("molly-bad-target.molly", molly(edit_table=tbl32(4, 9)), "matrix 0: unknown target 9")
    file("molly-rank-zero.molly", molly(edit_table=tbl32(8, 0)), "none may be 0")
    file("molly-dtype-f32.molly", molly(edit_table=tbl32(20, 0)),
         "matrix 0: dtype 0 is not f16 or bf16")
    file("molly-scale-nan.molly", molly(edit_table=tbl32(24, 0x7fc00000)),
         "matrix 0: scale is not finite")
    file("molly-size-mismatch.molly", molly(edit_table=tbl64(40, 100)),
         "matrix 0: sizes 100/256 do not match")
    file("molly-misaligned.molly", molly(edit_table=tbl64(32, 4097)),
         "matrix 0: A offset 4097 is not a multiple of 4096")
    file("molly-overlap.molly", molly(edit_table=tbl64(48, 4096)),
         "matrix 0: B offset 4096 overlaps what comes before it")
    file("molly-in-header.molly", molly(edit_table=tbl64(32, 0)),
         "matrix 0: A offset 0 overlaps")
    file("molly-past-end.molly", molly(edit_table=tbl64(48, 1 << 62)),
         "matrix 0: B [4611686018427387904, +4096) runs past the end of the file")
    two = [dict(layer=1, target=0, rank=2, n_in=64, n_out=64, dtype=1, scale=2.0,
                a=f16(values(128, 1)), b=f16(values(128, 2))),
           dict(layer=0, target=0, rank=2, n_in=64, n_out=64, dtype=1, scale=2.0,
                a=f16(values(128, 3)), b=f16(values(128, 4)))]
    file("molly-out-of-order.molly", molly(mats=two),
         "matrix 1 (layer 0 q) is out of order or repeated")
    file("molly-gap-at-end.molly", molly(edit=set64(24, 16384)) [:12288] + bytes(4096),
         "the tensors end at 12288, but the file is 16384 bytes")
    file("molly-max-rank.molly", molly(edit=set32(168, 7)), "header says max rank 7")
    file("molly-string-overflow.molly",
         molly(edit=lambda h: struct.pack_into("<I", h, 256 + 128, 1 << 30)),
         "header: name 0 is 1073741824 bytes, past the end of the strings")
    file("molly-string-nul.molly", molly(name="a\0b"), "header: name 0 contains a NUL byte")
    file("molly-domains-huge.molly", molly(edit=set32(176, 1 << 30)),
         "1073741824 domains and 0 exemplars do not fit")
    file("molly-content-hash.molly", molly(fix_content=False),
         "content hash does not match the tensor table")
    file("molly-wrong-base.molly", molly(),
         "adapter 'm' was made for base 'llama 5x64 vocab 512 (llama)' (fingerprint "
         "0000000000000000), but the loaded base is")
    file("unknown-format.bin", b"hello, world\n", "not an adapter")

    # ---- write ----
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    lines = ["# Generated by tools/gen-malformed-adapters.py: <entry><TAB><substring of the "
             "error> (opened with the stories260K base)"]
    for name in sorted(entries):
        kind, payload, expect = entries[name]
        path = os.path.join(out, name)
        if kind == "dir":
            os.makedirs(path)
            for fname, data in sorted(payload.items()):
                with open(os.path.join(path, fname), "wb") as f:
                    f.write(data)
        else:
            with open(path, "wb") as f:
                f.write(payload)
        lines.append("%s\t%s" % (name, expect))
    with open(os.path.join(out, "EXPECTED"), "w") as f:
        f.write("\n".join(lines) + "\n")

    # ---- fuzz seeds ----
    st_dir = os.path.join(fuzz, "safetensors")
    cfg_dir = os.path.join(fuzz, "adapter-config")
    for d in (st_dir, cfg_dir):
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
    seeds = {"valid-f32": good, "valid-f16": st_file(pair(dtype="F16")),
             "valid-meta": st_file(q, meta={"format": "pt"}),
             "valid-empty": st_raw(b"{}"), "valid-scalar": st_file([("s", "F32", [], f32([1]))]),
             "valid-zero-size": st_file([("z", "F32", [0, 4], b""), q[0]])}
    for name in sorted(entries):
        kind, payload, _ = entries[name]
        if name.startswith("st-") and kind == "dir":
            seeds[name] = payload["adapter_model.safetensors"]
    for name, data in sorted(seeds.items()):
        with open(os.path.join(st_dir, name + ".safetensors"), "wb") as f:
            f.write(data)
    cfgs = {"default": config(),
            "regex": config(target_modules=r"model\.layers\.[0-3]\..*(q|v)_proj"),
            "all-linear": config(target_modules="all-linear"),
            "patterns": config(rank_pattern={"q_proj": 4, "layers.1.self_attn.v_proj": 8},
                               alpha_pattern={r"layers\.[12]\..*": 16.5}),
            "layers": config(layers_to_transform=[0, 2], layers_pattern="layers",
                             exclude_modules=["k_proj"], use_rslora=True),
            "modules-to-save": config(modules_to_save=["lm_head", "embed_tokens"]),
            "minimal": b'{"r": 4}', "empty": b"{}"}
    for name in sorted(entries):
        kind, payload, _ = entries[name]
        if name.startswith("peft-") and kind == "dir" and "adapter_config.json" in payload:
            if payload["adapter_config.json"] != config():
                cfgs[name] = payload["adapter_config.json"]
    for name, data in sorted(cfgs.items()):
        with open(os.path.join(cfg_dir, name + ".json"), "wb") as f:
            f.write(data)
    print("%d entries in %s, %d safetensors and %d config seeds" %
          (len(entries), out, len(seeds), len(cfgs)))


if __name__ == "__main__":
    main()
