"""gguf_tensors.py - the tensors of a GGUF file for the shell tests: read(path)
gives name -> (dims, type, data) in file order, data being the tensor's bytes
up to the next tensor's (or the file's end), alignment padding included."""
import struct

# byte sizes of the scalar metadata value types (8: string, 9: array)
SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def read(path):
    d = open(path, "rb").read()
    pos = 8

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, d, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    def text():
        nonlocal pos
        n = take("<Q")
        s = d[pos:pos + n].decode()
        pos += n
        return s

    def skip(t):
        nonlocal pos
        if t == 8:
            text()
        elif t == 9:
            et, n = take("<I"), take("<Q")
            for _ in range(n):
                skip(et)
        else:
            pos += SIZES[t]

    n_t, n_kv = take("<Q"), take("<Q")
    align = 32
    for _ in range(n_kv):
        key, t = text(), take("<I")
        if key == "general.alignment":
            align = struct.unpack_from("<I", d, pos)[0]
        skip(t)
    info = []
    for _ in range(n_t):
        name = text()
        ne = [take("<Q") for _ in range(take("<I"))]
        info.append((name, ne, take("<I"), take("<Q")))
    start = (pos + align - 1) // align * align
    ends = sorted(off for _, _, _, off in info)[1:] + [len(d) - start]
    end_of = dict(zip(sorted(off for _, _, _, off in info), ends))
    return {name: (ne, t, d[start + off:start + end_of[off]]) for name, ne, t, off in info}


def floats(path):
    """An f32 file's tensors: name -> (row length, values)."""
    out = {}
    for name, (ne, _, data) in read(path).items():
        n = 1
        for x in ne:
            n *= x
        out[name] = (ne[0], struct.unpack_from(f"<{n}f", data))
    return out
