"""Large-model safetensors I/O: tensors written straight from their memory, read back as
views of a private memory map (no copies of multi-GB weight files).

The format is the one client/python/coil_safetensors.py documents (that module copies every
tensor two or three times, fine for tests, not for 2 GB of weights)."""
import json
import mmap
import struct

import torch

_DT = {
    torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.float64: "F64",
    torch.int64: "I64", torch.int32: "I32", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL",
}
_TD = {v: k for k, v in _DT.items()}


def save(tensors, path, metadata=None):
    """Write {name: tensor} to `path` (order kept)."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    off = 0
    items = []
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        if t.dtype not in _DT:
            raise ValueError("safetensors: %s has unsupported dtype %s" % (name, t.dtype))
        n = t.numel() * t.element_size()
        header[name] = {"dtype": _DT[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + n]}
        off += n
        items.append(t)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for t in items:
            if t.numel():
                # a byte view of the tensor's own memory, written without a copy
                f.write(memoryview(t.view(-1).view(torch.uint8).numpy()))


def load(path):
    """{name: tensor} backed by a private (copy-on-write) memory map of the file; the map
    lives as long as any of the tensors."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        dt = _TD[e["dtype"]]
        if end == b:
            out[name] = torch.empty(e["shape"], dtype=dt)
            continue
        out[name] = torch.frombuffer(mm, dtype=dt, offset=base + b,
                                     count=(end - b) // torch.empty((), dtype=dt).element_size()
                                     ).reshape(e["shape"])
    return out
