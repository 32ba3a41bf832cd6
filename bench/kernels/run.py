#!/usr/bin/python3
"""bench/kernels: coil's generated kernels against PyTorch eager, in one run.

For each kernel it builds a small graph JSON, compiles it with build/coil (a fresh
COIL_CACHE_DIR), times `coil run --repeat N --threads T` (the median that coil prints on
stderr) and the same op in torch eager (OPENBLAS_NUM_THREADS=1, torch.set_num_threads(T),
median of N calls), on 1 and 2 threads; coil and eager alternate --rounds times (3) and the
table gives the median of their medians.  Copy bandwidth is measured in the same run by a
compiled copy kernel (aten.clone of a buffer of the same size: one read + one write) and by
torch's y.copy_(x); the reference is the larger of the two.  A kernel's bandwidth counts the
bytes it must move (inputs read once + outputs written once).

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


def cases():
    """(name, graph, inputs, params, eager fn, bytes moved, memory-bound)"""
    g = torch.Generator().manual_seed(0)
    R = lambda *s: torch.randn(*s, generator=g)
    out = []
    for (m, n) in ((1024, 1024), (64, 4096)):
        x = R(m, n)
        out.append((f"softmax {m}x{n}", graph([("x", x.shape)], [], [("aten._softmax", ["x", 1, False], "y")], ["y"]),
                    {"x": x}, {}, lambda x=x: torch.softmax(x, 1), 2 * x.numel() * F32, m * n * F32 > (1 << 21)))
    for (m, n) in ((128, 768), (4096, 1024)):
        x, w, b = R(m, n), R(n), R(n)
        out.append((f"layer_norm {m}x{n}",
                    graph([("x", x.shape)], [("w", w.shape), ("b", b.shape)],
                          [("aten.layer_norm", ["x", [n], "w", "b", 1e-5], "y")], ["y"]),
                    {"x": x}, {"w": w, "b": b}, lambda x=x, w=w, b=b, n=n: F.layer_norm(x, (n,), w, b, 1e-5),
                    2 * x.numel() * F32, m * n * F32 > (1 << 21)))
    x = R(4096, 1024)
    out.append(("gelu 4096x1024", graph([("x", x.shape)], [], [("aten.gelu", ["x"], "y")], ["y"]),
                {"x": x}, {}, lambda x=x: F.gelu(x), 2 * x.numel() * F32, True))
    b, s = R(1024), R(4096, 1)
    out.append(("chain (x+b)*s |> relu |> -b, 4096x1024",
                graph([("x", x.shape), ("s", s.shape)], [("b", b.shape)],
                      [("aten.add.Tensor", ["x", "b"], "t1"), ("aten.mul.Tensor", ["t1", "s"], "t2"),
                       ("aten.relu", ["t2"], "t3"), ("aten.sub.Tensor", ["t3", "b"], "y")], ["y"]),
                {"x": x, "s": s}, {"b": b}, lambda x=x, s=s, b=b: torch.relu((x + b) * s) - b,
                2 * x.numel() * F32, True))
    p = R(256, 256, 64)
    out.append(("permute 256x256x64 -> (2,0,1)",
                graph([("x", p.shape)], [], [("aten.permute", ["x", [2, 0, 1]], "t"), ("aten.clone", ["t"], "y")], ["y"]),
                {"x": p}, {}, lambda p=p: p.permute(2, 0, 1).contiguous(), 2 * p.numel() * F32, True))
    for d in range(3):
        shp = list(p.shape)
        shp[d] = 1
        outn = p.numel() // p.shape[d]
        out.append((f"sum 256x256x64 dim {d}",
                    graph([("x", p.shape)], [], [("aten.sum.dim_IntList", ["x", [d]], "y")], ["y"]),
                    {"x": p}, {}, lambda p=p, d=d: p.sum(d), (p.numel() + outn) * F32, True))
    return out


def copy_cases():
    res = []
    for n in (1 << 20, 1 << 22):
        x = torch.randn(n)
        res.append((n * F32, graph([("x", x.shape)], [], [("aten.clone", ["x"], "y")], ["y"]), {"x": x}))
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


def rounds(k, coil_fn, eager_fn):
    """k alternations of the two timings; the median of each (a shared machine drifts)."""
    ts = [[], []]
    for _ in range(k):
        ts[0].append(coil_fn())
        ts[1].append(eager_fn())
    return tuple(sorted(v)[len(v) // 2] for v in ts)


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
             f"of {a.repeat} calls)", ""]
    copy_bw = {}
    lines += ["| copy | threads | coil ms | coil GB/s | torch copy_ GB/s | reference GB/s |", "|---|---|---|---|---|---|"]
    for nbytes, gj, ins in copy_cases():
        for t in threads:
            x = ins["x"]
            y = torch.empty_like(x)
            ct, et = rounds(a.rounds, lambda: coil_time(a.coil, d, f"copy{nbytes}", gj, ins, {}, t, a.repeat,
                                                          a.target, env),
                            lambda: eager_time(lambda: y.copy_(x), t, a.repeat))
            bw = max(2 * nbytes / ct, 2 * nbytes / et)
            copy_bw[(nbytes, t)] = bw
            lines.append(f"| {nbytes >> 20} MiB | {t} | {ct * 1e3:.3f} | {2 * nbytes / ct / 1e9:.1f} | "
                         f"{2 * nbytes / et / 1e9:.1f} | {bw / 1e9:.1f} |")
    lines += ["", "| kernel | threads | coil ms | eager ms | speedup | coil GB/s | % of copy |",
              "|---|---|---|---|---|---|---|"]
    for name, gj, ins, pars, fn, nbytes, membound in cases():
        if a.only and not re.search(a.only, name):
            continue
        tag = re.sub(r"[^a-z0-9]+", "_", name)
        for t in threads:
            ct, et = rounds(a.rounds, lambda: coil_time(a.coil, d, tag, gj, ins, pars, t, a.repeat, a.target, env),
                            lambda: eager_time(fn, t, a.repeat))
            ref = min(copy_bw.items(), key=lambda kv: (abs(kv[0][0] - nbytes / 2), kv[0][1] != t))[1]
            ref = [bw for (nb, tt), bw in copy_bw.items() if tt == t and nb == min(
                (k[0] for k in copy_bw), key=lambda nb: abs(nb - nbytes / 2))][0]
            pct = f"{100 * nbytes / ct / ref:.0f}%" if membound else "(in cache)"
            lines.append(f"| {name} | {t} | {ct * 1e3:.3f} | {et * 1e3:.3f} | {et / ct:.2f}x | "
                         f"{nbytes / ct / 1e9:.1f} | {pct} |")
            print(lines[-1], file=sys.stderr)
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
        with open(a.out, "w") as f:
            f.write(text)


def ab(a, threads):
    """Interleaved A (--base) / B (--coil) timings of the same kernels."""
    d = tempfile.mkdtemp(prefix="coil-ab-")
    envs = [dict(os.environ, COIL_CACHE_DIR=os.path.join(d, f"cache{i}"), OPENBLAS_NUM_THREADS="1")
            for i in range(2)]
    med = lambda v: sorted(v)[len(v) // 2]
    print("| kernel | threads | A ms (min..max) | B ms (min..max) | B/A | eager ms | B/eager | B GB/s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, gj, ins, pars, fn, nbytes, membound in cases():
        if a.only and not re.search(a.only, name):
            continue
        tag = re.sub(r"[^a-z0-9]+", "_", name)
        for t in threads:
            ts = [[], [], []]
            for _ in range(a.rounds):
                for i, coil in enumerate((a.base, a.coil)):
                    ts[i].append(coil_time(coil, d, tag, gj, ins, pars, t, a.repeat, a.target, envs[i]))
                ts[2].append(eager_time(fn, t, a.repeat))
            ma, mb, me = med(ts[0]), med(ts[1]), med(ts[2])
            print(f"| {name} | {t} | {ma * 1e3:.3f} ({min(ts[0]) * 1e3:.3f}..{max(ts[0]) * 1e3:.3f}) | "
                  f"{mb * 1e3:.3f} ({min(ts[1]) * 1e3:.3f}..{max(ts[1]) * 1e3:.3f}) | {ma / mb:.2f}x | "
                  f"{me * 1e3:.3f} | {me / mb:.2f}x | {nbytes / mb / 1e9:.1f} |", flush=True)


if __name__ == "__main__":
    main()
