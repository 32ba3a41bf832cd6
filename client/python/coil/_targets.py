"""Which coil targets this CPU runs: the same chain check as codegen/target.c.

Targets form a chain, each adding features to the one before it:
    generic < x86-64-v3 < x86-64-v4 < avx512_vnni < avx512_bf16
Code built for a target runs on a CPU whose best target comes at or after it. The CPU's
features come from /proc/cpuinfo's "flags" (the kernel lists AVX/AVX-512 only when the OS
saves their state, which is what the C side's xgetbv check asks too)."""
import platform

TARGETS = ("generic", "x86-64-v3", "x86-64-v4", "avx512_vnni", "avx512_bf16")

# features each target adds over the one before it (cpuinfo flag names)
_ADDS = {
    "x86-64-v3": ("avx", "avx2", "fma", "bmi1", "bmi2", "movbe"),
    "x86-64-v4": ("avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl"),
    "avx512_vnni": ("avx512_vnni",),
    "avx512_bf16": ("avx512_bf16",),
}

_best = None


def _cpu_flags(path="/proc/cpuinfo"):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def best_target(flags=None):
    """The best named target this CPU runs ("generic" when unknown or not x86-64)."""
    global _best
    if flags is None:
        if _best is not None:
            return _best
        if platform.machine() not in ("x86_64", "AMD64"):
            _best = "generic"
            return _best
        flags = _cpu_flags()
        cache = True
    else:
        cache = False
    best = "generic"
    for t in TARGETS[1:]:
        if not all(f in flags for f in _ADDS[t]):
            break
        best = t
    if cache:
        _best = best
    return best


def runs_here(target, flags=None):
    """True when code built for `target` runs on this CPU; False for unknown names."""
    if target == "native":
        return True
    if target not in TARGETS:
        return False
    return TARGETS.index(target) <= TARGETS.index(best_target(flags))
