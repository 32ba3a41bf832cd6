"""GNN message passing (issue #21): GCN, GraphSAGE (mean) and GAT (edge softmax) written in plain
torch, on synthetic power-law graphs (1e4 and 1e5 nodes, 10x as many edges), coil against
PyTorch eager, paired within each round (eager, coil, eager, coil ...), at 1 and 2 threads.

Every model gathers node features along the edges (index_select), scatters messages into the
targets (scatter_add, scatter_reduce sum/mean/amax) and runs small linear layers. coil's
scatters are deterministic (one thread per column, no atomics): the report checks that the
1- and 2-thread outputs are the same bits, and that coil matches eager.

    /usr/bin/python3 bench/gnn/run.py [--nodes 10000,100000] [--threads 1,2] [--rounds 5]
        [--out bench/results/gnn]
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


def timed(fn, ins):
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
    a = ap.parse_args()
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
        fh.write("%s, %d CPUs, torch %s, load %s; medians of %d paired rounds (eager, coil alternating); "
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
