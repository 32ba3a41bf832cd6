"""GNN message passing (issue #21): GCN, GraphSAGE (mean) and GAT (edge softmax) written in plain
torch, on synthetic power-law graphs (1e4 and 1e5 nodes, 10x as many edges), coil against
PyTorch eager, paired within each round (eager, coil, eager, coil ...), at 1 and 2 threads.

Every model gathers node features along the edges (index_select), scatters messages into the
targets (scatter_add, scatter_reduce sum/mean/amax) and runs small linear layers. coil's
scatters are deterministic (one thread per column, no atomics): the report checks that the
1- and 2-thread outputs are the same bits, and that coil matches eager.

    /usr/bin/python3 bench/gnn/run.py [--nodes 10000,100000] [--threads 1,2] [--rounds 5]
        [--out bench/results/gnn] [--ops [sum,mean,amax,gather]]

--ops times each message-passing op alone against eager, ONNX Runtime and the copy bandwidth
(bench/results/gnn-ops.md).
"""
import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import coil  # noqa: E402

F_IN, HID, F_OUT = 64, 64, 16


def power_law_graph(n, e, seed):
    """e directed edges: sources uniform, targets drawn with weight 1/(rank+1)^0.8 over a random
    node order (a few hubs with thousands of in-edges, most nodes with a handful)."""
    g = torch.Generator().manual_seed(seed)
    w = 1.0 / torch.arange(1, n + 1, dtype=torch.float64) ** 0.8
    order = torch.randperm(n, generator=g)
    dst = order[torch.multinomial(w, e, replacement=True, generator=g)]
    src = torch.randint(0, n, (e,), generator=g)
    return src, dst


def col(i, f):
    return i.unsqueeze(1).expand(-1, f)


class GCN(torch.nn.Module):
    """Two GCN layers: x' = D^-1/2 (A + I) D^-1/2 x W (degrees counted with a scatter_add)."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(F_IN, HID), torch.nn.Linear(HID, F_OUT)

    def prop(self, h, src, dst, norm):
        m = torch.index_select(h, 0, src) * norm.unsqueeze(1)
        return torch.zeros_like(h).scatter_add(0, col(dst, h.shape[1]), m) + h

    def forward(self, x, src, dst):
        deg = torch.zeros(x.shape[0]).scatter_add(0, dst, torch.ones(dst.shape[0])) + 1
        dis = deg.rsqrt()
        norm = torch.index_select(dis, 0, src) * torch.index_select(dis, 0, dst)
        h = torch.relu(self.prop(self.l1(x), src, dst, norm))
        return self.prop(self.l2(h), src, dst, norm)


class SAGE(torch.nn.Module):
    """Two GraphSAGE layers, mean aggregation: x' = W_l mean_{j->i} x_j + W_r x_i."""

    def __init__(self):
        super().__init__()
        self.l1, self.r1 = torch.nn.Linear(F_IN, HID), torch.nn.Linear(F_IN, HID)
        self.l2, self.r2 = torch.nn.Linear(HID, F_OUT), torch.nn.Linear(HID, F_OUT)

    def agg(self, h, src, dst):
        m = torch.index_select(h, 0, src)
        return torch.zeros_like(h).scatter_reduce(0, col(dst, h.shape[1]), m, "mean", include_self=False)

    def forward(self, x, src, dst):
        h = torch.relu(self.l1(self.agg(x, src, dst)) + self.r1(x))
        return self.l2(self.agg(h, src, dst)) + self.r2(h)


class GAT(torch.nn.Module):
    """One GAT layer, one head: e_ij = leaky_relu(a_s . Wh_j + a_d . Wh_i), softmax over each
    target's in-edges (max by scatter_reduce amax, sums by scatter_add), weighted sum of Wh_j."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Linear(F_IN, HID, bias=False)
        self.a_s, self.a_d = torch.nn.Parameter(torch.randn(HID) * 0.1), torch.nn.Parameter(torch.randn(HID) * 0.1)
        self.out = torch.nn.Linear(HID, F_OUT)

    def forward(self, x, src, dst):
        h = self.w(x)
        s, d = (h * self.a_s).sum(1), (h * self.a_d).sum(1)
        e = torch.nn.functional.leaky_relu(torch.index_select(s, 0, src) + torch.index_select(d, 0, dst), 0.2)
        mx = torch.full((x.shape[0],), -1e30).scatter_reduce(0, dst, e, "amax", include_self=True)
        p = torch.exp(e - torch.index_select(mx, 0, dst))
        den = torch.zeros(x.shape[0]).scatter_add(0, dst, p)
        alpha = p / torch.index_select(den, 0, dst)
        m = torch.index_select(h, 0, src) * alpha.unsqueeze(1)
        agg = torch.zeros_like(h).scatter_add(0, col(dst, h.shape[1]), m)
        return self.out(torch.nn.functional.elu(agg))


MODELS = {"gcn": GCN, "sage": SAGE, "gat": GAT}


class Agg(torch.nn.Module):
    """The aggregation alone: messages [edges, F] reduced into their targets' rows (PyG's
    scatter(msg, dst, reduce=...) as plain torch writes it)."""

    def __init__(self, red, n):
        super().__init__()
        self.red, self.n = red, n

    def forward(self, msg, dst):
        i, z = col(dst, msg.shape[1]), torch.zeros(self.n, msg.shape[1])
        if self.red == "sum":
            return z.scatter_add(0, i, msg)
        return z.scatter_reduce(0, i, msg, self.red, include_self=False)


class GatherScatter(torch.nn.Module):
    """Message passing in eager's terms: gather the sources' rows, add them into the targets'."""

    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, x, src, dst):
        msg = torch.index_select(x, 0, src)
        return torch.zeros(self.n, x.shape[1]).scatter_add(0, col(dst, x.shape[1]), msg)


def csr_of(src, dst, n):
    """The graph's adjacency by target: crow [n + 1], col (sources in edge order within a target)."""
    order = torch.sort(dst, stable=True)[1]
    crow = torch.zeros(n + 1, dtype=torch.int64)
    crow[1:] = torch.cumsum(torch.bincount(dst, minlength=n), 0)
    return crow, src[order].contiguous()


def csr_module(n, e, f, threads):
    """coil.sparse_mm_reduce (sum) over a CSR graph given as inputs, compiled from graph JSON."""
    import tempfile
    g = {"format": "coil-graph", "version": 1,
         "inputs": [{"name": "crow", "dtype": "i64", "shape": [n + 1]}, {"name": "col", "dtype": "i64", "shape": [e]},
                    {"name": "x", "dtype": "f32", "shape": [n, f]}],
         "params": [], "constants": [],
         "nodes": [{"id": "agg", "op": "coil.sparse_mm_reduce", "args": ["crow", "col", None, "x", "sum"],
                    "outputs": ["y"]}], "outputs": ["y"]}
    d = tempfile.mkdtemp()
    path = os.path.join(d, "csr.json")
    with open(path, "w") as fh:
        json.dump(g, fh)
    info = coil._compile_cli(path)
    return coil.load(info["artifact"], [], threads=threads)


class Gather(torch.nn.Module):
    """The message gather alone: the source rows along the edges."""

    def forward(self, x, src):
        return torch.index_select(x, 0, src)


def ops_bench(a):
    """--ops: each message-passing op alone against eager, ONNX Runtime (where torch.onnx exports it:
    ScatterElements add, Gather) and the copy bandwidth of this machine at T threads (a tensor copy
    as large as the messages, in the same round). Bytes an op needs: what it must read and write
    once (messages, index, the output written and its zeros read), the targets' rows cached."""
    import tempfile
    sys.path.insert(0, os.path.join(ROOT, "bench", "dynamic"))
    import run as dyn  # noqa: E402
    why = dyn.ort_available()
    rows = []
    tmp = tempfile.mkdtemp()
    for n in [int(v) for v in a.nodes.split(",")]:
        e, f = 10 * n, F_IN
        src, dst = power_law_graph(n, e, seed=n)
        g = torch.Generator().manual_seed(2)
        x, msg = torch.randn(n, f, generator=g), torch.randn(e, f, generator=g)
        big, big2 = torch.empty(e * f), torch.randn(e * f, generator=g)
        for op in a.ops.split(","):
            m = Gather() if op == "gather" else GatherScatter(n) if op == "csr" else Agg(op, n)
            ins = (x, src) if op == "gather" else (x, src, dst) if op == "csr" else (msg, dst)
            need = (e * f * 4 + e * 8 + n * f * 4) if op == "gather" else (e * f * 4 + e * 8 + 2 * n * f * 4)
            if op == "csr":  # the CSR (sources by target) and x read, y written: no messages
                crow, colx = csr_of(src, dst, n)
                need = e * 8 + (n + 1) * 8 + 2 * n * f * 4
            with torch.no_grad():
                want = m(*ins)
            ort_path, ort_why = None, why
            if not why and op in ("sum", "gather", "csr"):
                ort_path = os.path.join(tmp, "%s_%d.onnx" % (op, n))
                try:
                    torch.onnx.export(m, ins, ort_path, opset_version=16)
                except Exception as ex:  # noqa: BLE001
                    ort_path, ort_why = None, "export failed: %s" % str(ex).splitlines()[0][:80]
                files = []
                for i, t in enumerate(ins):
                    fn = os.path.join(tmp, "in%d_%d.bin" % (i, n))
                    t.numpy().tofile(fn)
                    files.append(fn)
            elif not why:
                ort_why = "no ONNX form (scatter_reduce %s)" % op
            for t in [int(v) for v in a.threads.split(",")]:
                torch.set_num_threads(t)
                if op == "csr":
                    fcsr = csr_module(n, e, f, t)
                    fc = (lambda fcsr, crow, colx: lambda x, src, dst: fcsr(crow, colx, x))(fcsr, crow, colx)
                    fc.close = fcsr.close
                else:
                    fc = coil.compile(m, ins, threads=t)
                got = fc(*ins)
                err = float((got.double() - want.double()).abs().max() / want.double().abs().max())
                ort = dyn.Ort(ort_path, t) if ort_path else None
                ort_err = None
                if ort:
                    shapes = [list(v.shape) for v in ins]
                    dts = ["float32" if v.dtype == torch.float32 else "int64" for v in ins]
                    outf = os.path.join(tmp, "out.bin")
                    ort.run(shapes, dts, reps=1, warmup=1, inputs=files, out=outf)
                    og = torch.from_numpy(__import__("numpy").fromfile(outf, dtype="float32")).reshape(want.shape)
                    ort_err = float((og.double() - want.double()).abs().max() / want.double().abs().max())
                te, tc, to, tcp = [], [], [], []
                timed(m, ins), timed(fc, ins)
                for _ in range(a.rounds):
                    te.append(timed(m, ins))
                    tc.append(timed(fc, ins))
                    time.sleep(0.05)
                    t0 = time.perf_counter()
                    big.copy_(big2)
                    tcp.append(time.perf_counter() - t0)
                    if ort:
                        time.sleep(0.05)
                        to.append(ort.run(shapes, dts, reps=1, inputs=files)["times_ms"][0] / 1e3)
                if ort:
                    ort.close()
                fc.close()
                med = statistics.median
                bw = 2 * e * f * 4 / med(tcp)
                r = {"op": op, "nodes": n, "edges": e, "features": f, "threads": t, "eager_ms": 1e3 * med(te),
                     "coil_ms": 1e3 * med(tc), "ort_ms": 1e3 * med(to) if to else None, "rel_err": err,
                     "ort_rel_err": ort_err, "ort_note": None if ort else ort_why, "copy_gbs": bw / 1e9,
                     "need_mb": need / 1e6, "coil_gbs": need / med(tc) / 1e9}
                r["eager_x"] = r["eager_ms"] / r["coil_ms"]
                r["ort_x"] = r["ort_ms"] / r["coil_ms"] if to else None
                r["of_copy"] = r["coil_gbs"] / r["copy_gbs"]
                rows.append(r)
                print("%-6s n=%-6d %dT eager %8.2f coil %8.2f ort %s  x%.2f  %.0f%% of copy (%.1f GB/s)  err %.1e" % (
                    op, n, t, r["eager_ms"], r["coil_ms"], "%.2f" % r["ort_ms"] if to else "-", r["eager_x"],
                    100 * r["of_copy"], r["copy_gbs"], err), flush=True)
    out = a.out + "-ops"
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
            "cpus": os.cpu_count(), "load_avg": os.getloadavg(), "rounds": a.rounds}
    with open(out + ".json", "w") as fh:
        json.dump({"meta": meta, "rows": rows}, fh, indent=1)
    with open(out + ".md", "w") as fh:
        fh.write("# bench/gnn --ops: the message-passing ops alone (issue #21)\n\n")
        fh.write("%s, %d CPUs, torch %s, load %s; medians of %d rounds, each round eager, coil, a copy and ORT "
                 "in turn, each after 50 ms of quiet. Power-law graphs (10 edges per node), %d features. sum, mean, amax: "
                 "`zeros(nodes, F).scatter_add / scatter_reduce(0, dst.unsqueeze(1).expand_as(msg), msg, ..., "
                 "include_self=False)`; gather: `index_select(x, 0, src)`; csr: gather and sum in one, "
                 "coil.sparse_mm_reduce over the graph in CSR by target (built outside the timing) against eager's "
                 "index_select + scatter_add (and ORT's Gather + ScatterElements). ORT: onnxruntime-node 1.30 "
                 "(all optimizations, sequential, intra-op threads T), opset 16. need: bytes the op must move "
                 "once; GB/s: need / coil's time; of copy: that over a %d-float tensor copy's rate "
                 "(read + write) in the same round.\n\n"
                 % (meta["date"], meta["cpus"], meta["torch"], ", ".join("%.2f" % v for v in meta["load_avg"]),
                    a.rounds, F_IN, F_IN * 10))
        fh.write("| op | nodes | threads | eager ms | coil ms | ORT ms | eager/coil | ORT/coil | need MB | coil GB/s "
                 "| copy GB/s | of copy | rel err |\n|" + " --- |" * 13 + "\n")
        for r in rows:
            fh.write("| %s | %d | %d | %.2f | %.2f | %s | %.2fx | %s | %.0f | %.1f | %.1f | %.0f%% | %.1e |\n" % (
                r["op"], r["nodes"], r["threads"], r["eager_ms"], r["coil_ms"],
                "%.2f" % r["ort_ms"] if r["ort_ms"] else (r["ort_note"] or "-"),
                r["eager_x"], "%.2fx" % r["ort_x"] if r["ort_x"] else "-", r["need_mb"], r["coil_gbs"],
                r["copy_gbs"], 100 * r["of_copy"], r["rel_err"]))
    print("wrote %s.md and .json" % out)


def timed(fn, ins):
    time.sleep(0.05)  # the same quiet before every engine's call (the previous one's spinning threads go idle)
    t0 = time.perf_counter()
    with torch.no_grad():
        fn(*ins)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="10000,100000")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--models", default="gcn,sage,gat")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "gnn"))
    ap.add_argument("--ops", nargs="?", const="sum,mean,amax,gather,csr", default=None,
                    help="the message-passing ops alone (sum,mean,amax,gather,csr) instead of the models")
    a = ap.parse_args()
    if a.ops:
        return ops_bench(a)
    rows = []
    for n in [int(v) for v in a.nodes.split(",")]:
        src, dst = power_law_graph(n, 10 * n, seed=n)
        x = torch.randn(n, F_IN, generator=torch.Generator().manual_seed(1))
        ins = (x, src, dst)
        indeg = torch.bincount(dst, minlength=n)
        for name in a.models.split(","):
            torch.manual_seed(0)
            m = MODELS[name]().eval()
            with torch.no_grad():
                want = m(*ins)
            outs = {}
            for t in [int(v) for v in a.threads.split(",")]:
                torch.set_num_threads(t)
                t0 = time.perf_counter()
                f = coil.compile(m, ins, threads=t)
                compile_s = time.perf_counter() - t0
                got = f(*ins)
                outs[t] = got
                err = float((got.double() - want.double()).abs().max() / want.double().abs().max())
                te, tc = [], []
                timed(m, ins), timed(f, ins)  # warm
                for _ in range(a.rounds):
                    te.append(timed(m, ins))
                    tc.append(timed(f, ins))
                r = {"model": name, "nodes": n, "edges": 10 * n, "max_in_degree": int(indeg.max()), "threads": t,
                     "eager_ms": 1e3 * statistics.median(te), "coil_ms": 1e3 * statistics.median(tc),
                     "rel_err": err, "compile_s": compile_s}
                r["speedup"] = r["eager_ms"] / r["coil_ms"]
                rows.append(r)
                print("%-5s n=%-6d %dT eager %8.2f ms coil %8.2f ms  %.2fx  err %.1e" % (
                    name, n, t, r["eager_ms"], r["coil_ms"], r["speedup"], err), flush=True)
                f.close()
            ts = sorted(outs)
            same = all(torch.equal(outs[ts[0]], outs[k]) for k in ts[1:])
            for r in rows:
                if r["model"] == name and r["nodes"] == n:
                    r["same_bits_across_threads"] = same
    geo = {t: math.exp(statistics.mean(math.log(r["speedup"]) for r in rows if r["threads"] == t))
           for t in sorted({r["threads"] for r in rows})}
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
            "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
            "load_avg": os.getloadavg(), "rounds": a.rounds}
    with open(a.out + ".json", "w") as fh:
        json.dump({"meta": meta, "rows": rows, "geomean": geo}, fh, indent=1)
    with open(a.out + ".md", "w") as fh:
        fh.write("# bench/gnn: message passing in plain torch (issue #21)\n\n")
        fh.write("%s, %d CPUs, torch %s, load %s; medians of %d paired rounds (eager, coil alternating, each call after 50 ms of quiet); "
                 "OPENBLAS_NUM_THREADS=1, torch.set_num_threads(T), coil threads=T. Graphs: power-law "
                 "targets (weight 1/rank^0.8), uniform sources, 10 edges per node; features %d -> %d -> %d.\n\n"
                 % (meta["date"], meta["cpus"], meta["torch"], ", ".join("%.2f" % v for v in meta["load_avg"]),
                    a.rounds, F_IN, HID, F_OUT))
        fh.write("| model | nodes | edges | max in-degree | threads | eager ms | coil ms | eager/coil | rel err | "
                 "same bits 1T/2T | compile s |\n|" + " --- |" * 11 + "\n")
        for r in rows:
            fh.write("| %s | %d | %d | %d | %d | %.2f | %.2f | %.2fx | %.1e | %s | %.1f |\n" % (
                r["model"], r["nodes"], r["edges"], r["max_in_degree"], r["threads"], r["eager_ms"], r["coil_ms"],
                r["speedup"], r["rel_err"], "yes" if r.get("same_bits_across_threads") else "NO", r["compile_s"]))
        fh.write("\nGeomean eager/coil: %s.\n" % ", ".join("%dT %.2fx" % (t, v) for t, v in geo.items()))
    print("wrote %s.md and .json" % a.out)


if __name__ == "__main__":
    main()
