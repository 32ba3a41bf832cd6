"""The coil CLI end to end: compile through the local cache (a second compile is a
hit and runs no compiler; another target or option is a miss), cache verify catches a
corrupted artifact, a compile killed midway leaves no partial entry, errors are one
line on stderr with a non-zero exit, and --server mode against a real coild."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import Tap  # noqa: E402

COIL = os.environ.get("COIL", "build/coil")
COILD = os.path.join(os.path.dirname(COIL), "coild")
GRAPH = {
    "format": "coil-graph", "version": 1,
    "inputs": [{"name": "x", "dtype": "f32", "shape": ["batch", 8]}],
    "params": [{"name": "w", "dtype": "f32", "shape": [4, 8]}],
    "nodes": [
        {"id": "t", "op": "aten.t", "args": ["w"], "outputs": ["wt"]},
        {"id": "mm", "op": "aten.mm", "args": ["x", "wt"], "outputs": ["y"]},
        {"id": "act", "op": "aten.gelu", "args": ["y"], "outputs": ["z"]},
        {"id": "sm", "op": "aten._softmax", "args": ["z", 1, False], "outputs": ["p"]}],
    "outputs": ["p"]}


def coil(args, env, **kw):
    return subprocess.run([COIL] + args, capture_output=True, text=True, env=env, **kw)


def entries(env):
    r = coil(["cache", "stats"], env)
    return dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)


def main():
    t = Tap()
    tmp = tempfile.mkdtemp(prefix="coil-cli-")
    env = dict(os.environ, COIL_CACHE_DIR=os.path.join(tmp, "cache"))
    env.pop("COIL_SERVER", None)
    g = os.path.join(tmp, "g.json")
    with open(g, "w") as f:
        json.dump(GRAPH, f)

    r1 = coil(["compile", g], env)
    t.ok(r1.returncode == 0 and "compiled in" in r1.stdout, "first compile builds", r1.stdout + r1.stderr)
    r2 = coil(["compile", g], env)
    t.ok(r2.returncode == 0 and "cache hit" in r2.stdout, "second compile is a cache hit", r2.stdout)
    st = entries(env)
    t.ok(st.get("entries") == "1", "one entry after two compiles", st)
    key1 = r1.stdout.split()[1]
    t.ok(r2.stdout.split()[1] == key1, "same key twice")
    r3 = coil(["compile", g, "--target", "generic"], env)  # (native is x86-64-v3 or above)
    t.ok(r3.returncode == 0 and "compiled in" in r3.stdout and r3.stdout.split()[1] != key1,
         "another target is a miss with another key", r3.stdout + r3.stderr)
    r4 = coil(["compile", g, "--opt", "1"], env)
    t.ok(r4.returncode == 0 and "compiled in" in r4.stdout, "another option is a miss", r4.stdout + r4.stderr)
    r = coil(["check", g], env)
    t.ok(r.returncode == 0 and "ok" in r.stdout, "check: compiled matches the interpreter", r.stdout + r.stderr)
    # max-autotune: a key of its own that names the threads it was timed at, the key `coil key` makes
    r = coil(["compile", g, "--mode", "max-autotune", "--threads", "3"], env)
    k = coil(["key", g, "--mode", "max-autotune", "--threads", "3"], env).stdout.strip()
    k1 = coil(["key", g, "--mode", "max-autotune", "--threads", "1"], env).stdout.strip()
    t.ok(r.returncode == 0 and r.stdout.split()[1] == k and k not in (key1, k1) and
         "autotune nothing to time" in r.stdout and "symbolic sizes" in r.stdout,
         "--mode max-autotune: its own key per thread count, as `coil key` makes it; a symbolic batch keeps the heuristics",
         r.stdout + r.stderr)
    r = coil(["compile", g, "--mode", "fastest"], env)
    t.ok(r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and "--mode" in r.stderr,
         "--mode fastest: one line naming --mode", r.stderr)
    out = os.path.join(tmp, "m.so")
    r = coil(["compile", g, "-o", out], env)
    t.ok(r.returncode == 0 and os.path.getsize(out) > 0, "compile -o copies the artifact", r.stderr)
    r = coil(["compile", g, "--dump-after=fuse"], env)
    t.ok(r.returncode == 0 and "kernel" in r.stdout.lower(), "--dump-after=fuse prints the IR", r.stdout[:500])
    # every pass the pipeline names can be dumped, and prints something past its banner
    r = coil(["help"], env)
    for p in ["fold", "dnnl", "decompose", "fuse", "schedule", "memplan", "emit_c", "build"]:
        t.ok(p in r.stdout, "help names the pass " + p)
        for spelling in (["--dump-after", p], ["--dump-after=" + p]):
            d = coil(["compile", g] + spelling, env)
            body = [ln for ln in d.stdout.splitlines() if ln.strip() and ln != "# after " + p]
            t.ok(d.returncode == 0 and d.stdout.startswith("# after " + p) and len(body) > 0,
                 "coil compile %s prints the result of %s" % (" ".join(spelling), p), d.stdout[:300] + d.stderr)
    d = coil(["compile", g, "--dump-after", "nope"], env)
    t.ok(d.returncode != 0 and "unknown pass 'nope'" in d.stderr and len(d.stderr.splitlines()) == 1,
         "an unknown pass is one line naming it", d.stderr)
    d = coil(["compile", g, "--emit-c", os.path.join(tmp, "m.c"), "--opt", "0", "--target", "x86-64-v3"], env)
    t.ok(d.returncode == 0 and "x86-64-v3" in open(os.path.join(tmp, "m.c")).read(),
         "--emit-c takes the other flags of compile (target)", d.stderr)
    d = coil(["compile", g, "--dump-after=fuse", "--bogus"], env)
    t.ok(d.returncode == 2 and "unknown option '--bogus'" in d.stderr, "dumps share the one option parser", d.stderr)
    # each opt level reaches the compiler: the artifact records the flags it was built with
    for lvl in range(4):
        so = os.path.join(tmp, "o%d.so" % lvl)
        d = coil(["compile", g, "--opt=%d" % lvl, "-o", so], env)
        rec = subprocess.run(["readelf", "-p", ".GCC.command.line", so], capture_output=True, text=True).stdout
        t.ok(d.returncode == 0 and (" -O%d" % lvl) in rec.replace("]", " "),
             "--opt %d reaches the compiler (.GCC.command.line)" % lvl, d.stderr + rec[:400])
    d = coil(["compile", g, "--opt", "4"], env)
    t.ok(d.returncode != 0 and "--opt" in d.stderr, "--opt 4 is refused", d.stderr)
    # --precision bf16: autocast's rules (the product in bf16), another key, f32 output
    d = coil(["compile", g, "--precision", "bf16", "--dump-after", "dnnl"], env)
    t.ok(d.returncode == 0 and "matmul" in d.stdout, "--precision bf16 keeps the product on oneDNN", d.stdout + d.stderr)
    # in bf16 on oneDNN with AVX-512; below it, oneDNN 2.6 has no bf16 kernels: f32 between casts
    d = coil(["compile", g, "--precision", "bf16", "--emit-c", os.path.join(tmp, "bf.c"), "--target", "x86-64-v4"], env)
    t.ok(d.returncode == 0 and "dd.dtype = RT_BF16" in open(os.path.join(tmp, "bf.c")).read(),
         "--precision bf16: the product runs in bf16 (x86-64-v4)", d.stderr)
    d = coil(["compile", g, "--precision", "bf16", "--emit-c", os.path.join(tmp, "bf3.c"), "--target", "x86-64-v3"], env)
    c3 = open(os.path.join(tmp, "bf3.c")).read() if d.returncode == 0 else ""
    t.ok("RT_BF16" not in c3 and "rt_matmul_create" in c3,
         "--precision bf16 for x86-64-v3: the product on oneDNN in f32, between casts", d.stderr)
    d = coil(["compile", g, "--precision", "bf16"], env)
    t.ok(d.returncode == 0 and "compiled in" in d.stdout and d.stdout.split()[1] != key1,
         "--precision bf16 is another key", d.stdout + d.stderr)
    d = coil(["check", g, "--precision", "bf16"], env)
    t.ok(d.returncode == 0 and "ok" in d.stdout, "check --precision bf16 (within bf16's tolerance)", d.stdout + d.stderr)
    d = coil(["compile", g, "--precision", "fp8"], env)
    t.ok(d.returncode != 0 and "--precision" in d.stderr and len(d.stderr.splitlines()) == 1,
         "--precision fp8 is refused in one line", d.stderr)

    # verify: corrupt one artifact
    r = coil(["cache", "verify"], env)
    t.ok(r.returncode == 0, "cache verify is clean", r.stdout + r.stderr)
    so = [ln for ln in r1.stdout.splitlines() if ln.startswith("artifact ")][0].split()[1]
    with open(so, "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0xFF]))
    r = coil(["cache", "verify"], env)
    t.ok(r.returncode != 0 and key1 in r.stdout, "cache verify detects the corrupted artifact", r.stdout + r.stderr)
    r = coil(["cache", "verify", "--repair"], env)
    r = coil(["cache", "verify"], env)
    t.ok(r.returncode == 0, "verify --repair removes it", r.stdout + r.stderr)
    r = coil(["compile", g], env)
    t.ok(r.returncode == 0 and "compiled in" in r.stdout, "it recompiles after repair", r.stdout)
    r = coil(["cache", "gc", "--budget", "1"], env)
    t.ok(r.returncode == 0 and entries(env).get("entries") == "0", "gc to a tiny budget evicts everything",
         entries(env))

    # a compile killed midway leaves no partial entry
    big = dict(GRAPH)
    big["nodes"] = list(GRAPH["nodes"])
    prev = "p"
    for i in range(300):
        big["nodes"].append({"id": "e%d" % i, "op": "aten.exp" if i % 2 else "aten.sigmoid", "args": [prev],
                             "outputs": ["v%d" % i]})
        big["nodes"].append({"id": "s%d" % i, "op": "aten.sum.dim_IntList", "args": ["v%d" % i, [1], True],
                             "outputs": ["q%d" % i]})
        big["nodes"].append({"id": "d%d" % i, "op": "aten.div.Tensor", "args": ["v%d" % i, "q%d" % i],
                             "outputs": ["r%d" % i]})
        prev = "r%d" % i
    big["outputs"] = [prev]
    gb = os.path.join(tmp, "big.json")
    with open(gb, "w") as f:
        json.dump(big, f)
    env2 = dict(env, COIL_CACHE_DIR=os.path.join(tmp, "cache2"))
    p = subprocess.Popen([COIL, "compile", gb, "--opt", "3"], env=env2, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    time.sleep(0.6)
    killed = p.poll() is None
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    st = entries(env2)
    r = coil(["cache", "verify"], env2)
    tmpdir = os.path.join(tmp, "cache2", "tmp")
    t.ok(killed and st.get("entries") == "0" and r.returncode == 0,
         "a compile killed midway leaves no entry", "killed=%s %s %s" % (killed, st, r.stdout + r.stderr))
    coil(["cache", "stats"], env2)  # open reconciles: stale build dirs of dead processes go
    left = [f for f in os.listdir(tmpdir)] if os.path.isdir(tmpdir) else []
    t.diag("tmp/ after the kill: %s (removed by reconcile once stale)" % left)

    # errors: one line on stderr, non-zero exit
    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        json.dump(dict(GRAPH, nodes=GRAPH["nodes"][:1] + [dict(GRAPH["nodes"][1], args=["x", "nosuch"])]), f)
    for args in (["validate", bad], ["compile", bad], ["run", bad, "-i", bad], ["check", bad]):
        r = coil(args, env)
        lines = r.stderr.strip().splitlines()
        t.ok(r.returncode != 0 and len(lines) == 1 and "node 'mm'" in lines[0] and "nosuch" in lines[0],
             "coil %s: one line naming the node" % args[0], r.stderr)
    r = coil(["frobnicate"], env)
    t.ok(r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, "unknown command: one line", r.stderr)

    # --server mode against a real coild on loopback
    port_file = os.path.join(tmp, "port")
    d = subprocess.Popen([COILD, "--listen", "127.0.0.1:0", "--port-file", port_file, "--cache-dir",
                          os.path.join(tmp, "srv"), "--workers", "2"] + (["--allow-root"] if os.geteuid() == 0 else []),
                         stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.05)
        url = "http://127.0.0.1:%s" % open(port_file).read().strip()
        env3 = dict(env, COIL_CACHE_DIR=os.path.join(tmp, "client"))
        r = coil(["--server", url, "compile", g], env3)
        t.ok(r.returncode == 0 and "server: compiled" in r.stdout, "--server compile", r.stdout + r.stderr)
        ra = coil(["--server", url, "compile", g, "--mode", "max-autotune", "--threads", "2"], env3)
        ka = coil(["key", g, "--mode", "max-autotune", "--threads", "2"], env).stdout.strip()
        t.ok(ra.returncode == 0 and "server: compiled" in ra.stdout and ra.stdout.split()[1] == ka,
             "--server compile --mode max-autotune: the server tunes, under the key the client makes",
             ra.stdout + ra.stderr)
        import urllib.error
        import urllib.request
        req = urllib.request.Request(url + "/v1/compile", method="POST", data=json.dumps(
            {"graph": GRAPH, "options": {"mode": "fast"}}).encode(), headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=30)
            code, body = 200, ""
        except urllib.error.HTTPError as e:
            code, body = e.code, e.read().decode()
        t.ok(code == 400 and "options.mode" in body, "options.mode 'fast': 400 naming the field", (code, body))
        rb = coil(["--server", url, "compile", g, "--precision", "bf16"], env3)
        t.ok(rb.returncode == 0 and "server: compiled" in rb.stdout and rb.stdout.split()[1] != r.stdout.split()[1],
             "--server compile --precision bf16: another key (options.precision)", rb.stdout + rb.stderr)
        r = coil(["check", g], dict(env3, COIL_SERVER=url))
        t.ok(r.returncode == 0 and "ok" in r.stdout, "COIL_SERVER check: fetched artifact matches the interpreter",
             r.stdout + r.stderr)
        key = [ln for ln in subprocess.run([COIL, "--server", url, "compile", g], capture_output=True, text=True,
                                           env=env3).stdout.splitlines() if ln.startswith("key ")][0].split()[1]
        r = coil(["--server", url, "fetch", key], env3)
        t.ok(r.returncode == 0 and r.stdout.strip().endswith(key + ".so"), "--server fetch KEY", r.stdout + r.stderr)
        r = coil(["--server", url, "fetch", "../../etc/passwd"], env3)
        t.ok(r.returncode != 0, "fetch refuses a malformed key", r.stderr)
    finally:
        d.send_signal(signal.SIGTERM)
        d.wait(timeout=30)
    # symbols: info shows declared ranges and the guards shape inference recorded; a run
    # outside them fails with one line naming the input, dim and assumption
    gs = os.path.join(tmp, "sym.json")
    with open(gs, "w") as f:
        json.dump({"format": "coil-graph", "version": 1, "symbols": {"seq": {"min": 2, "max": 64}},
                   "inputs": [{"name": "x", "dtype": "f32", "shape": ["b", "seq", 8]}],
                   "nodes": [{"id": "pairs", "op": "aten.view", "args": ["x", ["b", "seq//2", 16]],
                              "outputs": ["y"]}], "outputs": ["y"]}, f)
    r = coil(["info", gs], env)
    t.ok(r.returncode == 0 and "symbol  seq" in r.stdout and "2..64" in r.stdout and
         "guard   seq % 2 == 0" in r.stdout and "of node 'pairs'" in r.stdout,
         "info lists the symbol's range and the guard", r.stdout + r.stderr)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python"))
    import struct
    ins = os.path.join(tmp, "sym_in.safetensors")
    hdr = json.dumps({"x": {"dtype": "F32", "shape": [1, 7, 8], "data_offsets": [0, 7 * 8 * 4]}}).encode()
    with open(ins, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)) + hdr + bytes(7 * 8 * 4))
    r = coil(["run", gs, "-i", ins], env)
    lines = r.stderr.strip().splitlines()
    t.ok(r.returncode != 0 and len(lines) == 1 and "input 'x' dim 1 (seq = 7): guard seq % 2 == 0 fails" in lines[0],
         "a run against a guard: one line naming input, dim and guard", r.stderr)
    profile(t, tmp, env)
    subprocess.run(["rm", "-rf", tmp])
    tmp = tempfile.mkdtemp(prefix="coil-cli-rt-")
    rt_object_reuse(t, tmp)
    subprocess.run(["rm", "-rf", tmp])
    t.done()


def profile(t, tmp, env):
    """run --profile: one line a kernel and one for the run's own part, slowest first, the
    user's node ids, the product's flops (2 x 5 x 32 x 64 a call) at a symbolic batch."""
    import struct
    gp = os.path.join(tmp, "prof.json")
    with open(gp, "w") as f:
        json.dump({"format": "coil-graph", "version": 1,
                   "inputs": [{"name": "x", "dtype": "f32", "shape": ["b", 64]}],
                   "params": [{"name": "w", "dtype": "f32", "shape": [32, 64]}],
                   "nodes": [{"id": "wt", "op": "aten.t", "args": ["w"], "outputs": ["w_t"]},
                             {"id": "proj", "op": "aten.mm", "args": ["x", "w_t"], "outputs": ["y"]},
                             {"id": "norm%s", "op": "aten._softmax", "args": ["y", 1, False], "outputs": ["p"]}],
                   "outputs": ["p"]}, f)
    ins, ws = os.path.join(tmp, "prof_in.safetensors"), os.path.join(tmp, "prof_w.safetensors")
    for path, name, shape in ((ins, "x", [5, 64]), (ws, "w", [32, 64])):
        n = shape[0] * shape[1]
        hdr = json.dumps({name: {"dtype": "F32", "shape": shape, "data_offsets": [0, 4 * n]}}).encode()
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(hdr)) + hdr + struct.pack("<%df" % n, *[(i % 7) * 0.1 for i in range(n)]))
    r = coil(["run", gp, "-i", ins, "-w", ws, "--repeat", "5", "--profile"], env)
    lines = r.stdout.splitlines()
    head = [ln for ln in lines if ln.startswith("profile: ")]
    rows = [ln.split() for ln in lines if ln[:6].strip().isdigit()]
    prod = [row for row in rows if row[-2:] == ["extern", "proj:aten.mm.default"]]
    soft = [row for row in rows if row[-3:-1] == ["reduction", "norm%s:aten._softmax.default"]]
    ms = [float(row[1]) for row in rows]
    t.ok(r.returncode == 0 and head and head[0].startswith("profile: 2 kernels") and " over 4 runs" in head[0] and
         len(rows) == 3 and ms == sorted(ms, reverse=True) and len(prod) == 1 and len(soft) == 1 and
         sum(1 for row in rows if "run:" in row) == 1,
         "run --profile: two kernels and the run's part, slowest first, named by the graph's node ids",
         r.stdout + r.stderr)
    # GFLOP/s = flops / s: the product's 20480 flops a call over its ms
    ok = False
    if prod and len(prod[0]) >= 7 and float(prod[0][1]) > 0:
        gflops = float(prod[0][5])
        ok = abs(gflops - 20480 / (float(prod[0][1]) * 1e-3) / 1e9) <= 0.051 + 0.01 * gflops
    t.ok(ok, "the product's GFLOP/s is 2 x 5 x 32 x 64 flops over its time", r.stdout)


def rt_object_reuse(t, tmp):
    """The oneDNN runtime's object is built once per compiler, target and options into the
    cache's rt/, the kernels' header precompiled beside it by the compile after, and both go
    into the next artifacts' builds; a damaged one of either is dropped, not fatal."""
    env = dict(os.environ, COIL_CACHE_DIR=os.path.join(tmp, "rtcache"), COIL_CC_UNITS="1")
    env.pop("COIL_SERVER", None)
    graphs = []
    for act in ("aten.gelu", "aten.relu", "aten.sigmoid", "aten.tanh", "aten.silu", "aten.hardswish",
                "aten.neg", "aten.abs", "aten.exp"):
        g = json.loads(json.dumps(GRAPH))
        g["nodes"][2]["op"] = act
        path = os.path.join(tmp, "rt-%s.json" % act)
        json.dump(g, open(path, "w"))
        graphs.append(path)
    rtdir = os.path.join(env["COIL_CACHE_DIR"], "rt")

    def objs():
        return sorted(os.listdir(rtdir)) if os.path.isdir(rtdir) else []

    def check(i):
        r = coil(["check", graphs[i]], env)
        return r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
    ok, out = check(0)
    first = objs()
    t.ok(ok and len(first) == 1 and first[0].endswith(".o"),
         "the first compile leaves the runtime's object in the cache's rt/", (out, first))
    if len(first) != 1:
        return
    obj = os.path.join(rtdir, first[0])
    gch = obj[:-2] + ".gch"
    ino = os.stat(obj).st_ino
    ok, out = check(1)
    t.ok(ok and objs() == sorted(first + [os.path.basename(gch)]) and os.stat(obj).st_ino == ino,
         "the second links it (not rebuilt) and precompiles the kernels' header beside it", (out, objs()))
    ino = os.stat(obj).st_ino, os.stat(gch).st_ino
    ok, out = check(2)
    t.ok(ok and (os.stat(obj).st_ino, os.stat(gch).st_ino) == ino, "a third uses both, neither rebuilt", out)
    stale, recent = os.path.join(rtdir, "0" * 64 + ".gch"), os.path.join(rtdir, "1" * 64 + ".o")
    for f, days in ((stale, 31), (recent, 29)):
        open(f, "wb").write(b"x")
        os.utime(f, (time.time() - days * 86400,) * 2)
    open(obj, "wb").write(b"not an object file")
    ok, out = check(3)
    t.ok(ok and not os.path.exists(obj) and not os.path.exists(gch),
         "a damaged runtime object is dropped (its header too) and the compile builds its own", out)
    ok, out = check(4)
    t.ok(ok and objs() == sorted([os.path.basename(obj), os.path.basename(recent)]) and
         open(obj, "rb").read(4) == b"\x7fELF",
         "the next compile makes the object again, and drops what was unused for 30 days (not 29)", (out, objs()))
    os.unlink(recent)
    ok, out = check(5)
    t.ok(ok and os.path.exists(gch), "and the one after, its header", (out, objs()))
    data = open(gch, "rb").read()
    open(gch, "wb").write(data[:len(data) // 3])  # a truncated header stops the compiler
    ok, out = check(6)
    t.ok(ok and not os.path.exists(gch), "a truncated precompiled header is dropped and the compile builds "
         "without it", out)
    ok, out = check(7)
    ok2, out2 = check(8)
    t.ok(ok and ok2 and os.path.exists(obj) and os.path.exists(gch), "both made again by the next two compiles",
         (out, out2, objs()))

if __name__ == "__main__":
    main()
