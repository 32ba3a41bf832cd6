"""Signed artifacts and target safety through the coil CLI and the Python package:
coil keygen; in-process builds signed with --sign-key and refused (unsigned, untrusted,
tampered in the local cache) when trusted keys are configured; key rotation through
COIL_TRUSTED_KEYS_FILE; --server against a signing coild and against a fake server that
answers another key or graph hash; coil.compile and coil.load checking signatures (PATH.sig)
and COIL_CPU_MASK before anything is loaded."""
import http.server
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import Tap  # noqa: E402

COIL = os.environ.get("COIL", "build/coil")
COILD = os.path.join(os.path.dirname(COIL), "coild")
GRAPH = {
    "format": "coil-graph", "version": 1,
    "inputs": [{"name": "x", "dtype": "f32", "shape": [4, 8]}],
    "nodes": [{"id": "a", "op": "aten.tanh", "args": ["x"], "outputs": ["y"]}],
    "outputs": ["y"]}
GRAPH2 = dict(GRAPH, nodes=[{"id": "a", "op": "aten.neg", "args": ["x"], "outputs": ["y"]}])
TRUST_VARS = ("COIL_TRUSTED_KEYS", "COIL_TRUSTED_KEYS_FILE", "COIL_SIGN_KEY_FILE", "COIL_CPU_MASK",
              "COIL_SERVER")


def coil(args, env):
    return subprocess.run([COIL] + args, capture_output=True, text=True, env=env)


def field(out, name):
    for line in out.splitlines():
        if line.startswith(name + " "):
            return line.split(" ", 1)[1]
    return None


def one_line(r, want):
    """A refusal: non-zero exit, one line on stderr containing want."""
    lines = r.stderr.strip().splitlines()
    return r.returncode != 0 and len(lines) == 1 and want in lines[0]


def forge_entry(cache, key, so_bytes):
    """key's artifact in cache replaced by so_bytes, the index's size and sha256 made to agree
    (what a writer of the cache could do); its signed metadata kept."""
    import hashlib
    path = os.path.join(cache, "objects", key[:2], key + ".so")
    with open(path, "wb") as f:
        f.write(so_bytes)
    db = sqlite3.connect(os.path.join(cache, "index.sqlite"))
    db.execute("UPDATE entries SET size = ?, sha256 = ? WHERE key = ?",
               (len(so_bytes), hashlib.sha256(so_bytes).hexdigest(), key))
    db.commit()
    db.close()


class FakeServer(http.server.BaseHTTPRequestHandler):
    """Answers every compile with self.server.answer (a JSON object)."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps(self.server.answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def maps_memfds():
    with open("/proc/self/maps") as f:
        return sum("memfd:coil-artifact" in line for line in f)


def main():
    t = Tap()
    tmp = tempfile.mkdtemp(prefix="coil-trust-")
    env = {k: v for k, v in os.environ.items() if k not in TRUST_VARS}
    env["COIL_CACHE_DIR"] = os.path.join(tmp, "cache")
    for k in TRUST_VARS:
        os.environ.pop(k, None)
    g, g2 = os.path.join(tmp, "g.json"), os.path.join(tmp, "g2.json")
    with open(g, "w") as f:
        json.dump(GRAPH, f)
    with open(g2, "w") as f:
        json.dump(GRAPH2, f)

    # keygen: the public key printed and written, the secret 0600
    k = {}
    for name in ("old", "new"):
        sec, pub = os.path.join(tmp, name + ".sec"), os.path.join(tmp, name + ".pub")
        r = coil(["keygen", "fleet-" + name, sec, pub], env)
        k[name] = r.stdout.strip()
        k[name + "_sec"] = sec
        t.ok(r.returncode == 0 and k[name].startswith("fleet-%s:" % name) and open(pub).read().strip() == k[name]
             and os.stat(sec).st_mode & 0o777 == 0o600, "coil keygen fleet-%s: public key printed, secret 0600" % name,
             r.stdout + r.stderr)
    r = coil(["keygen", "fleet-old", k["old_sec"], os.path.join(tmp, "x.pub")], env)
    t.ok(one_line(r, "already exists"), "keygen never overwrites a secret", r.stderr)
    secret = open(k["old_sec"]).read().split(":", 1)[1].strip()

    # in-process builds, signed with the old key, trusted
    signed = dict(env, COIL_SIGN_KEY_FILE=k["old_sec"])
    r = coil(["compile", g, "--trusted-key", k["old"]], signed)
    sig = field(r.stdout, "signature")
    t.ok(r.returncode == 0 and sig and sig.startswith("fleet-old:"), "a local build is signed with --sign-key's key",
         r.stdout + r.stderr)
    t.ok(secret not in r.stdout + r.stderr, "the secret is not in the CLI's output")
    r = coil(["compile", g, "--trusted-key", k["old"]], env)
    t.ok(r.returncode == 0 and "cache hit" in r.stdout, "a signed hit is loaded with its key trusted", r.stderr)
    key = field(r.stdout, "key")
    # an unsigned build: fine without trust (as before), refused as a hit once keys are trusted
    r = coil(["compile", g2], env)
    t.ok(r.returncode == 0 and field(r.stdout, "signature") is None, "without keys, builds are unsigned and load",
         r.stderr)
    key2 = field(r.stdout, "key")
    r = coil(["compile", g2], dict(env, COIL_TRUSTED_KEYS=k["old"]))
    t.ok(one_line(r, "is unsigned, and trusted keys are configured; refusing it"),
         "an unsigned hit is refused with trusted keys", r.stderr)
    # rotation through a trusted keys file: both keys, then the new one alone
    kf = os.path.join(tmp, "trusted")
    with open(kf, "w") as f:
        f.write("# rotation\n%s\n%s\n" % (k["old"], k["new"]))
    r = coil(["compile", g], dict(env, COIL_TRUSTED_KEYS_FILE=kf))
    t.ok(r.returncode == 0 and "cache hit" in r.stdout, "old key's artifact accepted while both keys are trusted",
         r.stderr)
    with open(kf, "w") as f:
        f.write(k["new"] + "\n")
    r = coil(["compile", g], dict(env, COIL_TRUSTED_KEYS_FILE=kf))
    t.ok(one_line(r, "signed by key 'fleet-old', which is not trusted (trusted: 'fleet-new')"),
         "refused once the old key is dropped", r.stderr)
    r = coil(["compile", g, "--trusted-keys-file", kf, "--trusted-key", k["old"]], env)
    t.ok(r.returncode == 0, "--trusted-keys-file and --trusted-key together trust both", r.stderr)
    r = coil(["compile", g, "--trusted-key", "fleet-x:bm90IGEga2V5"], env)
    t.ok(one_line(r, "is not a public key"), "a malformed trusted key is one line", r.stderr)
    r = coil(["compile", g, "--trusted-key", open(k["old_sec"]).read().strip()], env)
    t.ok(one_line(r, "the key named 'fleet-old'") and secret not in r.stderr,
         "a secret key given as a trusted key is refused without quoting it", r.stderr)
    os.environ["COIL_TRUSTED_KEYS"] = open(k["old_sec"]).read().strip()
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python"))
    from coil import _sign
    try:
        _sign.trusted_keys()
        t.ok(False, "Python refuses a secret key given as a trusted key")
    except Exception as e:  # noqa: BLE001
        t.ok("fleet-old" in str(e) and secret not in str(e),
             "Python refuses a secret key given as a trusted key without quoting it", str(e))
    del os.environ["COIL_TRUSTED_KEYS"]
    # the local cache tampered with: key's bytes swapped for key2's, the index agreeing
    cache = env["COIL_CACHE_DIR"]
    with open(os.path.join(cache, "objects", key2[:2], key2 + ".so"), "rb") as f:
        other = f.read()
    forge_entry(cache, key, other)
    r = coil(["compile", g, "--trusted-key", k["old"]], env)
    t.ok(one_line(r, "bad signature by key 'fleet-old'"), "a swapped artifact in the local cache is refused",
         r.stderr)
    r = coil(["check", g, "--trusted-key", k["old"]], env)
    t.ok(one_line(r, "bad signature"), "coil check refuses it too", r.stderr)
    r = coil(["cache", "verify"], env)
    t.ok(r.returncode == 0, "cache verify without keys: sizes and sha256 agree", r.stdout + r.stderr)
    r = coil(["cache", "verify", "--trusted-key", k["old"]], env)
    t.ok(r.returncode != 0 and "%s: artifact %s: bad signature" % (key, key) in r.stdout
         and "%s: artifact %s is unsigned" % (key2, key2) in r.stdout and "2 bad entries" in r.stderr,
         "cache verify with a trusted key names the swapped and the unsigned entries", r.stdout + r.stderr)
    shutil.rmtree(cache)

    # --server against a signing coild, and a fake server answering for something else
    port_file = os.path.join(tmp, "port")
    log = open(os.path.join(tmp, "coild.log"), "w")
    d = subprocess.Popen([COILD, "--listen", "127.0.0.1:0", "--port-file", port_file, "--cache-dir",
                          os.path.join(tmp, "srv"), "--workers", "2", "--sign-key", k["old_sec"]]
                         + (["--allow-root"] if os.geteuid() == 0 else []), stderr=log, env=env)
    try:
        for _ in range(200):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.05)
        url = "http://127.0.0.1:%s" % open(port_file).read().strip()
        env3 = dict(env, COIL_CACHE_DIR=os.path.join(tmp, "client"))
        r = coil(["--server", url, "compile", g, "--trusted-key", k["old"]], env3)
        t.ok(r.returncode == 0 and field(r.stdout, "signature", ).startswith("fleet-old:"),
             "--server: coild signed it, the client verified it", r.stdout + r.stderr)
        good = json.loads(subprocess.run(["curl", "-s", "--data-binary", "@" + g,
                                          url + "/v1/compile?target=" + field(r.stdout, "target")],
                                         capture_output=True, text=True).stdout)
        shutil.rmtree(env3["COIL_CACHE_DIR"])
        r = coil(["--server", url, "compile", g, "--trusted-key", k["new"]], env3)
        t.ok(one_line(r, "which is not trusted"), "--server: an untrusted signer is refused", r.stderr)
        t.ok(not os.path.exists(os.path.join(env3["COIL_CACHE_DIR"], "objects", key[:2], key + ".so")),
             "nothing refused was stored in the local cache")
        fake = http.server.HTTPServer(("127.0.0.1", 0), FakeServer)
        threading.Thread(target=fake.serve_forever, daemon=True).start()
        furl = "http://127.0.0.1:%d" % fake.server_address[1]
        for what, change, want in (
                ("another key", {"key": "0" * 64}, "not %s, the key of this graph" % good["key"]),
                ("another graph hash", {"graph_hash": "1" * 64}, "not this graph's"),
                ("another target", {"target": "generic"}, "not the '%s' asked for" % good["target"]),
                ("no build identity", {"build": None}, "does not say how its key was made")):
            fake.answer = dict(good, **change)
            r = coil(["--server", furl, "compile", g], env3)
            t.ok(one_line(r, want), "a server answering %s is refused" % what, r.stderr)
        fake.shutdown()
    finally:
        d.send_signal(signal.SIGTERM)
        d.wait(timeout=30)
        log.close()
    t.ok(secret not in open(os.path.join(tmp, "coild.log")).read(), "coild's log does not hold the secret")

    # Python: coil.compile with trusted keys (a signed local build), coil.load with PATH.sig
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python"))
    os.environ["COIL"] = COIL
    os.environ["COIL_CACHE_DIR"] = os.path.join(tmp, "pycache")
    import torch
    import coil as pycoil
    m = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Tanh()).eval()
    x = torch.randn(2, 8)
    os.environ["COIL_SIGN_KEY_FILE"] = k["old_sec"]
    os.environ["COIL_TRUSTED_KEYS"] = k["old"]
    f = pycoil.compile_artifact(m, (x,))
    t.ok(torch.allclose(f(x)[0] if isinstance(f(x), (list, tuple)) else f(x), m(x), atol=1e-5)
         and f.info.get("signature", "").startswith("fleet-old:"), "coil.compile: signed, verified and run",
         f.info)
    os.environ["COIL_TRUSTED_KEYS"] = k["new"]
    try:
        pycoil.compile_artifact(m, (x,))
        t.ok(False, "coil.compile refuses an artifact its keys did not sign")
    except pycoil.CoilError as e:
        t.ok("not trusted" in str(e), "coil.compile refuses an artifact its keys did not sign", str(e))
    # coil.load: the artifact copied by hand with its signature file
    os.environ["COIL_TRUSTED_KEYS"] = k["old"]
    so = os.path.join(tmp, "m.so")
    gpath = os.path.join(tmp, "pyg")
    pycoil.compile_artifact(m, (x,), workdir=gpath)
    r = coil(["compile", os.path.join(gpath, "graph.json"), "-o", so], dict(os.environ))
    t.ok(r.returncode == 0 and os.path.exists(so + ".sig"), "coil compile -o writes PATH.sig", r.stderr)
    params = list(m.state_dict().values())
    t.ok(torch.allclose(pycoil.load(so, params)(x), m(x), atol=1e-5), "coil.load: PATH.sig verified, loaded")
    before = maps_memfds()
    sigdoc = json.load(open(so + ".sig"))
    for what, edit, want in (
            ("another sha256", {"sha256": "2" * 64}, "bad signature"),
            ("another target", {"target": "generic"}, "bad signature"),
            ("no signature", {"signature": ""}, "is unsigned"),
            ("another signer", {"signature": "fleet-new:" + sigdoc["signature"].split(":", 1)[1]}, "not trusted")):
        with open(so + ".sig", "w") as fh:
            json.dump(dict(sigdoc, **edit), fh)
        try:
            pycoil.load(so, params)
            t.ok(False, "coil.load refuses a signature file with %s" % what)
        except pycoil.CoilError as e:
            t.ok(want in str(e), "coil.load refuses a signature file with %s" % what, str(e))
    with open(so + ".sig", "w") as fh:
        json.dump(sigdoc, fh)
    with open(so, "r+b") as fh:
        fh.seek(os.path.getsize(so) // 2)
        b = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([b[0] ^ 1]))
    try:
        pycoil.load(so, params)
        t.ok(False, "coil.load refuses changed bytes")
    except pycoil.CoilError as e:
        t.ok("sha256 mismatch" in str(e), "coil.load refuses changed bytes", str(e))
    os.remove(so + ".sig")
    try:
        pycoil.load(so, params)
        t.ok(False, "coil.load refuses an artifact without PATH.sig")
    except pycoil.CoilError as e:
        t.ok("no readable signature file" in str(e), "coil.load refuses an artifact without PATH.sig", str(e))
    t.ok(maps_memfds() == before, "nothing refused was mapped (no new coil-artifact memfd in /proc/self/maps)")
    for v in ("COIL_TRUSTED_KEYS", "COIL_SIGN_KEY_FILE"):
        del os.environ[v]

    # COIL_CPU_MASK: the Python loader refuses, before dlopen, what needs a masked feature
    art = f.artifact_path
    target = f.target
    from coil import _targets
    for mask in ("", "avx2", "avx512", "avx512_bf16", "amx", "avx512_vnni,avx_vnni"):
        os.environ["COIL_CPU_MASK"] = mask
        lack = _targets.missing(target)
        before = maps_memfds()
        try:
            y = pycoil.load(art, params)(x)
            t.ok(lack is None and torch.allclose(y, m(x), atol=1e-5),
                 "mask '%s': the %s artifact loads and runs" % (mask, target))
        except pycoil.CoilError as e:
            t.ok(lack is not None and ("needs %s: this CPU lacks it" % lack) in str(e)
                 and maps_memfds() == before,
                 "mask '%s': the %s artifact is refused before dlopen, naming %s" % (mask, target, lack), str(e))
    del os.environ["COIL_CPU_MASK"]
    shutil.rmtree(tmp, ignore_errors=True)
    t.done()


main()
