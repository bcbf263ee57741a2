# SPDX-License-Identifier: MIT
# gguf_read.py: a minimal GGUF v3 reader on the standard library alone, for the shell tests
# (tests/tool-quantize.sh, tests/tool-perplexity.sh): read(path) -> (metadata dict,
# {tensor name: (shape list, ggml type id, data bytes)}), and zero_tensor() to blank a tensor.
import math
import struct

_SCALAR = {0: '<B', 1: '<b', 2: '<H', 3: '<h', 4: '<I', 5: '<i', 6: '<f', 7: '<?',
           10: '<Q', 11: '<q', 12: '<d'}
# bytes per block and values per block of the tensor types the tests use
_BLOCK = {0: (4, 1), 1: (2, 1), 30: (2, 1), 8: (34, 32), 2: (18, 32)}


def _parse(d):
    o = 0

    def take(fmt):
        nonlocal o
        v = struct.unpack_from(fmt, d, o)[0]
        o += struct.calcsize(fmt)
        return v

    def string():
        nonlocal o
        n = take('<Q')
        s = d[o:o + n]
        o += n
        return s.decode('utf-8', 'surrogateescape')

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et = take('<I')
            n = take('<Q')
            return [value(et) for _ in range(n)]
        return take(_SCALAR[t])

    assert d[:4] == b'GGUF', 'not a GGUF file'
    o = 4
    take('<I')
    n_tensors = take('<Q')
    n_kv = take('<Q')
    kv = {}
    for _ in range(n_kv):
        k = string()
        kv[k] = value(take('<I'))
    infos = []
    for _ in range(n_tensors):
        name = string()
        nd = take('<I')
        ne = [take('<Q') for _ in range(nd)]
        ty = take('<I')
        infos.append((name, ne, ty, take('<Q')))
    align = kv.get('general.alignment', 32)
    start = (o + align - 1) // align * align
    return kv, infos, start


def read(path):
    d = open(path, 'rb').read()
    kv, infos, start = _parse(d)
    tensors = {}
    for name, ne, ty, off in infos:
        size = None
        if ty in _BLOCK:
            bb, bv = _BLOCK[ty]
            size = math.prod(ne) // bv * bb
        tensors[name] = (ne, ty, d[start + off:start + off + size] if size else None)
    return kv, tensors


def zero_tensor(path, name):
    """Overwrites an F32 tensor's data with zeros, in place."""
    with open(path, 'r+b') as f:
        d = f.read()
        kv, infos, start = _parse(d)
        for n, ne, ty, off in infos:
            if n == name:
                assert ty == 0, 'only F32 tensors'
                f.seek(start + off)
                f.write(b'\0' * 4 * math.prod(ne))
                return
    raise KeyError(name)
