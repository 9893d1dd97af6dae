"""gguf_tensors.py - reading GGUF files in the tests' Python: parse(path) gives
the key/value pairs as [(key, type, value)] (arrays as (elem_type, list)) and
the tensors as name -> (dims, type, data) in file order, data being the
tensor's bytes up to the next tensor's (or the file's end), padding included."""
import struct
import sys

# GGUF value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
              BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}


def parse(path):
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    def text():
        nonlocal pos
        n = take("<Q")
        s = data[pos:pos + n].decode("utf-8", "surrogateescape")
        pos += n
        return s

    def value(t):
        if t == STR:
            return text()
        if t == ARR:
            et, n = take("<I"), take("<Q")
            return (et, [value(et) for _ in range(n)])
        return take(SCALAR_FMT[t])

    if data[:4] != b"GGUF":
        sys.exit(f"{path}: not a GGUF file")
    pos = 4
    _version, n_tensors, n_kv = take("<I"), take("<Q"), take("<Q")
    kvs = []
    for _ in range(n_kv):
        k = text()
        t = take("<I")
        kvs.append((k, t, value(t)))
    align = next((v for k, _, v in kvs if k == "general.alignment"), 32)
    info = []
    for _ in range(n_tensors):
        name = text()
        ne = [take("<Q") for _ in range(take("<I"))]
        info.append((name, ne, take("<I"), take("<Q")))
    start = (pos + align - 1) // align * align
    offsets = sorted(off for _, _, _, off in info)
    end_of = dict(zip(offsets, offsets[1:] + [len(data) - start]))
    tensors = {name: (ne, t, data[start + off:start + end_of[off]]) for name, ne, t, off in info}
    return kvs, tensors


def read_metadata(path):
    return parse(path)[0]


def read(path):
    return parse(path)[1]


def floats(path):
    """An f32 file's tensors: name -> (row length, values)."""
    out = {}
    for name, (ne, _, data) in read(path).items():
        n = 1
        for x in ne:
            n *= x
        out[name] = (ne[0], struct.unpack_from(f"<{n}f", data))
    return out
