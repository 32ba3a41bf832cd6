#!/usr/bin/python3
"""bench/kernels: coil's generated kernels against PyTorch eager, in one run.

For each kernel it builds a small graph JSON, compiles it with build/coil (a fresh
COIL_CACHE_DIR), times `coil run --repeat N --threads T` (the median that coil prints on
stderr) and the same op in torch eager (OPENBLAS_NUM_THREADS=1, torch.set_num_threads(T),
median of N calls), on 1 and 2 threads; coil and eager alternate --rounds times (3): the
table gives the median of their medians, and each ratio (speedup, % of copy, % of limit) as
the median over rounds of that ratio within a round, so that both sides of it saw the machine
in the same state.  References measured in the same run, at 4 and 16
MiB: copy (a compiled aten.clone against torch's y.copy_(x): one read + one write) and read
(a compiled full sum against torch's x.sum()); each is the larger of the two.  Every kernel
row times its references again in each of its rounds, so that the kernel and its reference
see the same machine (a shared machine's bandwidth drifts by 2x within minutes).  A kernel's
bandwidth counts the bytes it must move (inputs read once + outputs written once).  Kernels
with math per element are also timed at an in-cache shape (their first dim cut): where that
rate is below the memory reference, the kernel is compute-bound and that rate is its limit.

Usage: /usr/bin/python3 bench/kernels/run.py [--coil build/coil] [--repeat 50] [--target T]
Writes a markdown table to stdout (and bench/results/kernels.md).

A/B mode (a noisy, shared machine): --base OLD_COIL --rounds K [--only REGEX] [--threads 1]
times the same kernels with two coil binaries (separate caches), alternating A and B K times,
and prints per kernel the median of the K medians and their spread (min..max) for each, and
B's speedup over A; eager and copy are not timed.  Writes nothing unless --out is given."""
import argparse, json, os, re, struct, subprocess, sys, tempfile, time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch
import torch.nn.functional as F

F32 = 4


def st_write(path, tensors):
    """Minimal safetensors writer (f32 only)."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def graph(inputs, params, nodes, outputs):
    T = lambda n, s: {"name": n, "dtype": "f32", "shape": list(s)}
    return {"format": "coil-graph", "version": 1, "inputs": [T(n, s) for n, s in inputs],
            "params": [T(n, s) for n, s in params],
            "nodes": [{"id": f"n{i}", "op": op, "args": args, "outputs": [o]} for i, (op, args, o) in enumerate(nodes)],
            "outputs": outputs}


class Case:
    """One kernel at one shape: its graph, data and eager twin.  `moved` counts the bytes it
    must move (inputs read once + outputs written once), `buf` its largest buffer (which copy
    or read reference it is held to), `reads` whether it mostly reads (a reduction: its
    memory limit is the read bandwidth, not the copy's)."""

    def __init__(self, name, gj, ins, pars, fn, moved, buf, reads=False):
        self.name, self.gj, self.ins, self.pars, self.fn = name, gj, ins, pars, fn
        self.moved, self.buf, self.reads = moved, buf, reads


def softmax(m, n, R):
    x = R(m, n)
    return Case(f"softmax {m}x{n}", graph([("x", x.shape)], [], [("aten._softmax", ["x", 1, False], "y")], ["y"]),
                {"x": x}, {}, lambda: torch.softmax(x, 1), 2 * x.numel() * F32, x.numel() * F32)


def layer_norm(m, n, R):
    x, w, b = R(m, n), R(n), R(n)
    return Case(f"layer_norm {m}x{n}", graph([("x", x.shape)], [("w", w.shape), ("b", b.shape)],
                                             [("aten.layer_norm", ["x", [n], "w", "b", 1e-5], "y")], ["y"]),
                {"x": x}, {"w": w, "b": b}, lambda: F.layer_norm(x, (n,), w, b, 1e-5),
                2 * x.numel() * F32, x.numel() * F32)


def gelu(m, n, R):
    x = R(m, n)
    return Case(f"gelu {m}x{n}", graph([("x", x.shape)], [], [("aten.gelu", ["x"], "y")], ["y"]),
                {"x": x}, {}, lambda: F.gelu(x), 2 * x.numel() * F32, x.numel() * F32)


def chain(m, n, R):
    x, b, s = R(m, n), R(n), R(m, 1)
    return Case(f"chain (x+b)*s |> relu |> -b, {m}x{n}",
                graph([("x", x.shape), ("s", s.shape)], [("b", b.shape)],
                      [("aten.add.Tensor", ["x", "b"], "t1"), ("aten.mul.Tensor", ["t1", "s"], "t2"),
                       ("aten.relu", ["t2"], "t3"), ("aten.sub.Tensor", ["t3", "b"], "y")], ["y"]),
                {"x": x, "s": s}, {"b": b}, lambda: torch.relu((x + b) * s) - b,
                2 * x.numel() * F32, x.numel() * F32)


def permute(a, b, c, R):
    p = R(a, b, c)
    return Case(f"permute {a}x{b}x{c} -> (2,0,1)",
                graph([("x", p.shape)], [], [("aten.permute", ["x", [2, 0, 1]], "t"), ("aten.clone", ["t"], "y")],
                      ["y"]),
                {"x": p}, {}, lambda: p.permute(2, 0, 1).contiguous(), 2 * p.numel() * F32, p.numel() * F32)


def sum_dim(d):
    def make(a, b, c, R):
        p = R(a, b, c)
        return Case(f"sum {a}x{b}x{c} dim {d}", graph([("x", p.shape)], [], [("aten.sum.dim_IntList", ["x", [d]], "y")],
                                                      ["y"]),
                    {"x": p}, {}, lambda: p.sum(d), (p.numel() + p.numel() // p.shape[d]) * F32,
                    p.numel() * F32, reads=True)
    return make


# (builder, shape, in-cache shape or None).  Kernels with math per element (exp, erf, a
# division) are also timed at an in-cache shape: their first dim cut so that their buffers
# fit one core's L2, which shows their speed when memory is not what limits them.  Where
# that is below the memory reference, the kernel is bound by its own arithmetic, not by
# memory.  The rest (a permute, a chain of adds and multiplies, sums) move memory and
# little else; their limit is the memory reference.
KERNELS = [(softmax, (1024, 1024), (64, 1024)), (softmax, (64, 4096), None),
           (layer_norm, (128, 768), None), (layer_norm, (4096, 1024), (128, 1024)),
           (gelu, (4096, 1024), (128, 1024)), (chain, (4096, 1024), None),
           (permute, (256, 256, 64), None)] + [(sum_dim(d), (256, 256, 64), None) for d in range(3)]


def cases(small=False):
    """The kernels at their bench shapes, or (small) at their in-cache shapes (None where the
    bench shape already fits in cache)."""
    g = torch.Generator().manual_seed(0)
    R = lambda *s: torch.randn(*s, generator=g)
    return [None if small and sm is None else make(*(sm if small else shape), R) for make, shape, sm in KERNELS]


def copy_cases(read=False):
    """Reference kernels at 4 and 16 MiB: a copy (aten.clone: one read + one write), or with
    read a full sum (one read)."""
    res = []
    for n in (1 << 20, 1 << 22):
        x = torch.randn(n)
        op = ("aten.sum.default", ["x"]) if read else ("aten.clone", ["x"])
        res.append((n * F32, graph([("x", x.shape)], [], [(op[0], op[1], "y")], ["y"]), {"x": x}))
    return res


def coil_time(coil, d, name, gj, ins, pars, threads, repeat, target, env):
    gp, ip, wp = (os.path.join(d, f"{name}.{e}") for e in ("json", "in.safetensors", "w.safetensors"))
    with open(gp, "w") as f:
        json.dump(gj, f)
    st_write(ip, ins)
    st_write(wp, pars)
    cmd = [coil, "run", gp, "-i", ip, "-w", wp, "-o", os.path.join(d, "out.safetensors"),
           "--threads", str(threads), "--repeat", str(repeat)]
    if target:
        cmd += ["--target", target]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    m = re.search(r"run ([0-9.]+) ms", r.stderr)
    if r.returncode or not m:
        sys.exit(f"coil run failed: {' '.join(cmd)}\n{r.stderr}")
    return float(m.group(1)) / 1e3


def eager_time(fn, threads, repeat):
    torch.set_num_threads(threads)
    for _ in range(3):
        fn()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2]


def med(v):
    return sorted(v)[len(v) // 2]


def rounds(k, *fns):
    """k alternations of the timings: each fn's k times, round by round.  A shared machine
    drifts by 2x over minutes, so ratios are taken within a round (coil against eager or
    a reference timed seconds apart) and their median reported."""
    ts = [[] for _ in fns]
    for _ in range(k):
        for v, fn in zip(ts, fns):
            v.append(fn())
    return ts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--coil", default="build/coil")
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--target", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default=None, help="regex: only kernels whose name matches")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--base", default=None, help="A/B mode: the baseline coil binary")
    ap.add_argument("--rounds", type=int, default=None,
                    help="alternations of coil and eager per row, medians reported (3; A/B mode: 7)")
    a = ap.parse_args()
    a.rounds = a.rounds or (7 if a.base else 3)
    threads = [int(t) for t in a.threads.split(",")]
    if a.base:
        return ab(a, threads)
    if a.out is None:
        a.out = "bench/results/kernels.md"
    d = tempfile.mkdtemp(prefix="coil-bench-")
    env = dict(os.environ, COIL_CACHE_DIR=os.path.join(d, "cache"), OPENBLAS_NUM_THREADS="1")
    lines = [f"# bench/kernels ({time.strftime('%Y-%m-%d %H:%M')}, torch {torch.__version__}, "
             f"{os.cpu_count()} CPUs, target {a.target or 'native'}, median of {a.rounds} alternating rounds "
             f"of {a.repeat} calls; each ratio the median of its rounds' ratios)", ""]
    # Reference timers: (kind, bytes) -> (bytes moved, coil timer(t), torch timer(t)).  Each
    # reference is timed on its own first (the reference table), then again in every round
    # of each kernel's row, so that a row's kernel and its reference share the machine's
    # state: this machine's bandwidth drifts by 2x within minutes.
    timers = {}
    for kind in ("copy", "read"):
        for nbytes, gj, ins in copy_cases(read=kind == "read"):
            x = ins["x"]
            y = torch.empty_like(x)
            tfn = (lambda x=x, y=y: y.copy_(x)) if kind == "copy" else (lambda x=x: x.sum())
            timers[(kind, nbytes)] = (nbytes * (2 if kind == "copy" else 1),
                                      lambda t, kind=kind, nbytes=nbytes, gj=gj, ins=ins:
                                      coil_time(a.coil, d, f"{kind}{nbytes}", gj, ins, {}, t, a.repeat, a.target, env),
                                      lambda t, tfn=tfn: eager_time(tfn, t, a.repeat))
    lines += ["| reference | size | threads | coil ms | coil GB/s | torch GB/s | reference GB/s |",
              "|---|---|---|---|---|---|---|"]
    for (kind, nbytes), (moved, cfn, tfn) in timers.items():
        for t in threads:
            ct, et = map(med, rounds(a.rounds, lambda: cfn(t), lambda: tfn(t)))
            bw = max(moved / ct, moved / et)
            lines.append(f"| {kind} | {nbytes >> 20} MiB | {t} | {ct * 1e3:.3f} | {moved / ct / 1e9:.1f} | "
                         f"{moved / et / 1e9:.1f} | {bw / 1e9:.1f} |")
    lines += ["", "| kernel | threads | coil ms | eager ms | speedup | coil GB/s | copy GB/s | % of copy | "
              "in-cache GB/s | bound | % of limit | limit / eager | targets |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    misses, nrows = [], 0
    sizes = sorted({nb for _, nb in timers})
    for c, sm in zip(cases(), cases(small=True)):
        if a.only and not re.search(a.only, c.name):
            continue
        tag = re.sub(r"[^a-z0-9]+", "_", c.name)
        nb = min(sizes, key=lambda n: abs(n - c.buf))
        kinds = ["copy"] + (["read"] if c.reads else [])
        for t in threads:
            kfn = lambda: coil_time(a.coil, d, tag, c.gj, c.ins, c.pars, t, a.repeat, a.target, env)
            efn = lambda: eager_time(c.fn, t, a.repeat)
            if c.buf <= (1 << 21):  # fits in cache as it is: no memory reference
                cts, ets = rounds(a.rounds, kfn, efn)
                ct, et, sp = med(cts), med(ets), med([e / k for k, e in zip(cts, ets)])
                v, nrows = verdict(sp), nrows + 1
                lines.append(f"| {c.name} | {t} | {ct * 1e3:.3f} | {et * 1e3:.3f} | {sp:.2f}x | "
                             f"{c.moved / ct / 1e9:.1f} | | (in cache) | | | | | {v} |")
                if v != "met":
                    misses.append(f"{c.name} at {t}T: {v}")
                print(lines[-1], file=sys.stderr)
                continue
            reffns = []
            for k in kinds:
                _, cfn, tfn = timers[(k, nb)]
                reffns += [lambda cfn=cfn: cfn(t), lambda tfn=tfn: tfn(t)]
            if sm is not None:  # the in-cache shape, in the same rounds too
                stag = re.sub(r"[^a-z0-9]+", "_", sm.name)
                reffns.append(lambda: coil_time(a.coil, d, stag, sm.gj, sm.ins, sm.pars, t, a.repeat, a.target, env))
            ts = rounds(a.rounds, kfn, efn, *reffns)
            # per round: coil's rate, eager's, each reference's (the larger of coil's and
            # torch's), the in-cache rate; ratios within a round, medians over rounds
            R = range(a.rounds)
            rate = [c.moved / ts[0][r] for r in R]
            erate = [c.moved / ts[1][r] for r in R]
            ref = {k: [max(timers[(k, nb)][0] / ts[2 + 2 * i][r], timers[(k, nb)][0] / ts[3 + 2 * i][r]) for r in R]
                   for i, k in enumerate(kinds)}
            mem = ref[kinds[-1]]
            limit, bound, cache_col = mem, "read" if c.reads else "memory", ""
            if sm is not None:
                cache = [sm.moved / ts[-1][r] for r in R]
                cache_col = f"{med(cache) / 1e9:.1f}"
                if med(cache) < med(mem):
                    limit, bound = cache, "compute"
            sp = med([rate[r] / erate[r] for r in R])
            of_copy = med([rate[r] / ref["copy"][r] for r in R])
            of_limit = med([rate[r] / limit[r] for r in R])
            gain = med([limit[r] / erate[r] for r in R])
            v, nrows = verdict(sp, gain, bound, of_copy), nrows + 1
            lines.append(f"| {c.name} | {t} | {med(ts[0]) * 1e3:.3f} | {med(ts[1]) * 1e3:.3f} | {sp:.2f}x | "
                         f"{med(rate) / 1e9:.1f} | {med(ref['copy']) / 1e9:.1f} | {100 * of_copy:.0f}% | {cache_col} | "
                         f"{bound} | {100 * of_limit:.0f}% | {gain:.2f}x | {v} |")
            if v != "met":
                misses.append(f"{c.name} at {t}T: {v}")
            print(lines[-1], file=sys.stderr)
    lines += ["", "Columns: *copy GB/s*: the copy reference of the kernel's largest buffer's size (4 or 16 "
              "MiB), timed in the same rounds as the kernel (the larger of coil's and torch's copy); *% of copy*: "
              "coil's GB/s over it. *in-cache GB/s* (kernels with math per element): coil's rate on the same "
              "kernel with its first dim cut to fit L2, memory out of the way. *bound*: compute where that "
              "in-cache rate is below the memory reference (copy; for reductions read, timed in the same "
              "rounds too), else memory/read. *% of limit*: coil's GB/s over "
              "the lower of the two. *limit / eager*: the most any kernel could gain over eager at that limit. "
              "*targets* (issue #5): at least 1.5x eager, and memory-bound kernels (memory/read) at 70% or more "
              "of the copy reference; a speedup that misses is *out of reach* when even a kernel running "
              "at the limit would not be 1.5x this eager.", "",
              f"Targets: {nrows - len(misses)} of {nrows} rows met"
              + ("." if not misses else "; missed: " + "; ".join(misses) + ".")]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
        with open(a.out, "w") as f:
            f.write(text)


def verdict(speedup, limit_gain=None, bound=None, of_copy=None):
    """The issue's targets for one row: 'met', or what is missed."""
    out = []
    if speedup < 1.5:
        out.append(f"{speedup:.2f}x < 1.5x eager" +
                   (f" (out of reach: at the {bound} limit a kernel is {limit_gain:.2f}x eager)"
                    if limit_gain is not None and limit_gain < 1.5 else ""))
    if bound in ("memory", "read") and of_copy < 0.70:
        out.append(f"{100 * of_copy:.0f}% < 70% of copy")
    return "; ".join(out) or "met"


def ab(a, threads):
    """Interleaved A (--base) / B (--coil) timings of the same kernels."""
    d = tempfile.mkdtemp(prefix="coil-ab-")
    envs = [dict(os.environ, COIL_CACHE_DIR=os.path.join(d, f"cache{i}"), OPENBLAS_NUM_THREADS="1")
            for i in range(2)]
    med = lambda v: sorted(v)[len(v) // 2]
    print("| kernel | threads | A ms (min..max) | B ms (min..max) | B/A | eager ms | B/eager | B GB/s |")
    print("|---|---|---|---|---|---|---|---|")
    for c in cases():
        if a.only and not re.search(a.only, c.name):
            continue
        name, nbytes = c.name, c.moved
        tag = re.sub(r"[^a-z0-9]+", "_", name)
        for t in threads:
            ts = [[], [], []]
            for _ in range(a.rounds):
                for i, coil in enumerate((a.base, a.coil)):
                    ts[i].append(coil_time(coil, d, tag, c.gj, c.ins, c.pars, t, a.repeat, a.target, envs[i]))
                ts[2].append(eager_time(c.fn, t, a.repeat))
            ma, mb, me = med(ts[0]), med(ts[1]), med(ts[2])
            print(f"| {name} | {t} | {ma * 1e3:.3f} ({min(ts[0]) * 1e3:.3f}..{max(ts[0]) * 1e3:.3f}) | "
                  f"{mb * 1e3:.3f} ({min(ts[1]) * 1e3:.3f}..{max(ts[1]) * 1e3:.3f}) | {ma / mb:.2f}x | "
                  f"{me * 1e3:.3f} | {me / mb:.2f}x | {nbytes / mb / 1e9:.1f} |", flush=True)


if __name__ == "__main__":
    main()
