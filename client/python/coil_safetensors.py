"""Minimal safetensors writer/reader in pure Python (no `safetensors` package needed).

File layout: 8-byte little-endian header length N, N bytes of JSON header
({name: {"dtype", "shape", "data_offsets": [begin, end]}, optional "__metadata__": {str: str}}),
then the raw little-endian tensor bytes; offsets are relative to the end of the header.

Values accepted by `save`:
  * torch tensors (any of the supported dtypes; copied to contiguous CPU memory),
  * `RawTensor(dtype, shape, data)` with a safetensors dtype name ("F32", ...) and raw bytes,
  * numpy arrays (when numpy is present).
`load_raw` needs only the standard library; `load` returns torch tensors (needs torch).
"""
import json
import math
import struct
import sys

# safetensors dtype name -> (coil dtype name, element size, struct code or None)
DTYPES = {
    "F32": ("f32", 4, "f"),
    "BF16": ("bf16", 2, None),
    "F16": ("f16", 2, "e"),
    "F64": ("f64", 8, "d"),
    "I64": ("i64", 8, "q"),
    "I32": ("i32", 4, "i"),
    "I8": ("i8", 1, "b"),
    "U8": ("u8", 1, "B"),
    "BOOL": ("bool", 1, "?"),
}
COIL_TO_ST = {v[0]: k for k, v in DTYPES.items()}

_MAX_HEADER = 100 * 1024 * 1024


class SafetensorsError(ValueError):
    pass


class RawTensor:
    """A tensor as safetensors stores it: dtype name ("F32", ...), shape, raw little-endian bytes."""

    __slots__ = ("dtype", "shape", "data")

    def __init__(self, dtype, shape, data):
        if dtype not in DTYPES:
            raise SafetensorsError("unsupported dtype %r" % (dtype,))
        self.dtype = dtype
        self.shape = [int(d) for d in shape]
        self.data = bytes(data)
        if len(self.data) != self.numel() * DTYPES[dtype][1]:
            raise SafetensorsError("data holds %d bytes, shape %s of %s needs %d" % (
                len(self.data), self.shape, dtype, self.numel() * DTYPES[dtype][1]))

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def coil_dtype(self):
        return DTYPES[self.dtype][0]

    def tolist(self):
        """Flat row-major list of Python numbers (bool for BOOL)."""
        n = self.numel()
        if self.dtype == "BF16":
            half = struct.unpack("<%dH" % n, self.data)
            return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in half]
        return list(struct.unpack("<%d%s" % (n, DTYPES[self.dtype][2]), self.data))

    @classmethod
    def from_list(cls, dtype, shape, values):
        """Build from a flat list of Python numbers (BF16 is rounded to nearest even)."""
        if dtype == "BF16":
            out = []
            for v in values:
                (bits,) = struct.unpack("<I", struct.pack("<f", float(v)))
                if math.isnan(v):
                    h = (bits >> 16) | 0x40
                else:
                    h = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
                out.append(h & 0xFFFF)
            return cls(dtype, shape, struct.pack("<%dH" % len(out), *out))
        return cls(dtype, shape, struct.pack("<%d%s" % (len(values), DTYPES[dtype][2]), *values))

    def __repr__(self):
        return "RawTensor(%s, %s)" % (self.dtype, self.shape)


def _torch_dtype_map():
    import torch
    return {
        torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.float64: "F64",
        torch.int64: "I64", torch.int32: "I32", torch.int8: "I8", torch.uint8: "U8",
        torch.bool: "BOOL",
    }


def to_raw(value):
    """Convert a torch tensor / numpy array / RawTensor to a RawTensor."""
    if isinstance(value, RawTensor):
        return value
    mod = type(value).__module__
    if mod.startswith("torch"):
        import torch
        m = _torch_dtype_map()
        if value.dtype not in m:
            raise SafetensorsError("unsupported torch dtype %s" % value.dtype)
        t = value.detach().to("cpu").contiguous()
        flat = t.reshape(-1)
        if flat.dtype == torch.bool:
            flat = flat.to(torch.uint8)
        data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
        if sys.byteorder != "little" and flat.element_size() > 1:
            raise SafetensorsError("big-endian hosts are not supported")
        return RawTensor(m[value.dtype], list(t.shape), data)
    if mod.startswith("numpy"):
        import numpy as np
        names = {"float32": "F32", "float16": "F16", "float64": "F64", "int64": "I64",
                 "int32": "I32", "int8": "I8", "uint8": "U8", "bool": "BOOL"}
        a = np.ascontiguousarray(value)
        if a.dtype.name not in names:
            raise SafetensorsError("unsupported numpy dtype %s" % a.dtype)
        return RawTensor(names[a.dtype.name], list(a.shape), a.astype(a.dtype.newbyteorder("<")).tobytes())
    raise SafetensorsError("cannot store a %s" % type(value).__name__)


def dumps(tensors, metadata=None):
    """Serialize {name: tensor} to bytes."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks = []
    off = 0
    for name, value in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise SafetensorsError("bad tensor name %r" % (name,))
        r = to_raw(value)
        header[name] = {"dtype": r.dtype, "shape": r.shape, "data_offsets": [off, off + len(r.data)]}
        chunks.append(r.data)
        off += len(r.data)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)  # pad so the data starts 8-byte aligned
    return struct.pack("<Q", len(h)) + h + b"".join(chunks)


def save(tensors, path, metadata=None):
    data = dumps(tensors, metadata)
    with open(path, "wb") as f:
        f.write(data)


def loads_raw(buf):
    """Parse bytes; returns (dict name -> RawTensor in file order, metadata dict or None)."""
    buf = memoryview(buf)
    if len(buf) < 8:
        raise SafetensorsError("file too short")
    (n,) = struct.unpack("<Q", buf[:8])
    if n > _MAX_HEADER or 8 + n > len(buf):
        raise SafetensorsError("bad header length %d" % n)
    try:
        header = json.loads(bytes(buf[8:8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SafetensorsError("bad header JSON: %s" % e)
    if not isinstance(header, dict):
        raise SafetensorsError("header is not an object")
    meta = header.pop("__metadata__", None)
    data = buf[8 + n:]
    out = {}
    spans = []
    for name, info in header.items():
        try:
            dtype, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError("bad entry for %r" % name)
        if dtype not in DTYPES:
            raise SafetensorsError("%r: unsupported dtype %r" % (name, dtype))
        if not (isinstance(b, int) and isinstance(e, int) and 0 <= b <= e <= len(data)):
            raise SafetensorsError("%r: bad data_offsets %r" % (name, info["data_offsets"]))
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            raise SafetensorsError("%r: bad shape %r" % (name, shape))
        out[name] = RawTensor(dtype, shape, data[b:e])
        spans.append((b, e))
    spans.sort()
    pos = 0
    for b, e in spans:
        if b != pos:
            raise SafetensorsError("data offsets overlap or leave a hole at byte %d" % pos)
        pos = e
    if pos != len(data):
        raise SafetensorsError("%d trailing bytes after the last tensor" % (len(data) - pos))
    return out, meta


def load_raw(path):
    """Read a file with the standard library only: dict name -> RawTensor."""
    with open(path, "rb") as f:
        return loads_raw(f.read())[0]


def load_metadata(path):
    with open(path, "rb") as f:
        return loads_raw(f.read())[1]


def raw_to_torch(r):
    import torch
    tdt = {v: k for k, v in _torch_dtype_map().items()}[r.dtype]
    if r.numel() == 0:
        return torch.empty(r.shape, dtype=tdt)
    if tdt == torch.bool:
        return torch.frombuffer(bytearray(r.data), dtype=torch.uint8).to(torch.bool).reshape(r.shape)
    return torch.frombuffer(bytearray(r.data), dtype=tdt).reshape(r.shape)


def load(path):
    """Read a file into a dict name -> torch tensor (needs torch)."""
    return {k: raw_to_torch(v) for k, v in load_raw(path).items()}
