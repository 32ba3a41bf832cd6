"""Which coil targets this CPU runs: the same feature-set check as codegen/target.c.

Each target needs a set of CPU features (the ones that change what coil's C or oneDNN's code
may use); code built for it runs on a CPU that has all of them:

    generic      nothing beyond x86-64
    x86-64-v3    avx2 (the x86-64-v3 level: AVX, AVX2, FMA, BMI1/2, MOVBE)
    avx_vnni     avx2, avx_vnni
    x86-64-v4    avx2, avx512 (the x86-64-v4 level: AVX-512 F, BW, CD, DQ, VL)
    avx512_vnni  ... + avx512_vnni
    avx512_bf16  ... + avx512_bf16
    avx512_fp16  ... + avx512_fp16, avx_vnni (Sapphire Rapids)
    amx          ... + amx (AMX-TILE, AMX-BF16, AMX-INT8)

The CPU's features come from /proc/cpuinfo's "flags" (the kernel lists AVX/AVX-512/AMX only
when the OS saves their state, which is what the C side's xgetbv check asks too), less the
features $COIL_CPU_MASK names (comma-separated, read at every check: "avx512_bf16,amx")."""
import os
import platform

TARGETS = ("generic", "x86-64-v3", "avx_vnni", "x86-64-v4", "avx512_vnni", "avx512_bf16",
           "avx512_fp16", "amx")

# feature -> the cpuinfo flags it stands for
FEATURES = {
    "avx2": ("avx", "avx2", "fma", "bmi1", "bmi2", "movbe"),
    "avx512": ("avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl"),
    "avx512_vnni": ("avx512_vnni",),
    "avx512_bf16": ("avx512_bf16",),
    "avx512_fp16": ("avx512_fp16",),
    "avx_vnni": ("avx_vnni",),
    "amx": ("amx_tile", "amx_bf16", "amx_int8"),
}
_V4 = ("avx2", "avx512")
NEEDS = {
    "generic": (),
    "x86-64-v3": ("avx2",),
    "avx_vnni": ("avx2", "avx_vnni"),
    "x86-64-v4": _V4,
    "avx512_vnni": _V4 + ("avx512_vnni",),
    "avx512_bf16": _V4 + ("avx512_vnni", "avx512_bf16"),
    "avx512_fp16": _V4 + ("avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni"),
    "amx": _V4 + ("avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx"),
}

_flags = None


def _cpu_flags(path="/proc/cpuinfo"):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def mask():
    """The features $COIL_CPU_MASK pretends absent."""
    return {m for m in os.environ.get("COIL_CPU_MASK", "").replace(" ", ",").split(",") if m}


def features(flags=None):
    """The features of a set of cpuinfo flags (None: this CPU's, less $COIL_CPU_MASK's)."""
    global _flags
    masked = set()
    if flags is None:
        if _flags is None:
            _flags = _cpu_flags() if platform.machine() in ("x86_64", "AMD64") else set()
        flags, masked = _flags, mask()
    have = {f for f, need in FEATURES.items() if all(x in flags for x in need)}
    # the AVX-512 extensions count only on top of the x86-64-v4 level (as target.c)
    if "avx512" not in have:
        have -= {"avx512_vnni", "avx512_bf16", "avx512_fp16"}
    if "avx2" not in have:
        have -= {"avx512", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni"}
    return have - masked


def missing(target, flags=None):
    """The first feature `target` needs that this CPU lacks, or None."""
    have = features(flags)
    for f in NEEDS.get(target, ()):
        if f not in have:
            return f
    return None


def best_target(flags=None):
    """The best named target this CPU runs ("generic" when unknown or not x86-64)."""
    have = features(flags)
    return [t for t in TARGETS if all(f in have for f in NEEDS[t])][-1]


def runs_here(target, flags=None):
    """True when code built for `target` runs on this CPU; False for unknown names."""
    if target == "native":
        return True
    return target in TARGETS and missing(target, flags) is None


def check(what, target):
    """None when this CPU runs `target`, else the refusal's message (as client/artifact.c's)."""
    if target not in TARGETS:
        return "%s: unknown target '%s'; refusing to load it" % (what, target)
    lack = missing(target)
    if lack:
        return ("%s: built for target '%s', which needs %s: this CPU lacks it%s; refusing to load it"
                % (what, target, lack, " (COIL_CPU_MASK)" if lack in mask() else ""))
    return None
