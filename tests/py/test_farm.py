"""The fleet on loopback (docs/fleet.md): three signing coilds behind a real nginx with
deploy/nginx's routing (consistent hashing on the cache key), an edge coild filling from the
farm, client tier lists, coil prefetch, TLS in nginx, and make install.

  - 32 concurrent identical compiles through nginx: one compile fleet-wide, on the key's owner
  - every key compiled on exactly one node, keys spread over the nodes, artifacts through
    nginx's cache (a second GET is a cache HIT)
  - the owner of keys killed (SIGKILL): every key still compiles and fetches through nginx; the
    dead node's keys are compiled once more elsewhere, the others are hits (no compile)
  - an edge coild with --upstream nginx: a compile there is filled from the farm (no compile),
    a fetch of a key it lacks too, an unknown key is 404; an edge trusting another key refuses
    the farm's copy (nothing stored from it) and compiles its own
  - a client tier list: the nearer tier asked first, the last one compiles
  - coil prefetch: keys and graphs into an empty cache; a bad line named by number
  - signature refusal through nginx's cache; TLS terminated in nginx (curl and libcoil)
  - make install DESTDIR=...: binaries, headers, the unit and the nginx files
"""
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from farm import COIL, NGINX, ROOT, Coild, Nginx, free_port, http_get, variant  # noqa: E402
from tap import Tap  # noqa: E402


def coil(args, env=None, cache=None):
    e = dict(env or os.environ)
    if cache:
        e["COIL_CACHE_DIR"] = cache
    return subprocess.run([COIL] + args, capture_output=True, text=True, env=e, timeout=300)


def field(out, name):
    for line in out.splitlines():
        if line.startswith(name + " "):
            return line.split()[1]
    return ""


def total(nodes, name):
    return sum(n.metrics().get(name, 0) for n in nodes if n.proc.poll() is None)


def compiles(nodes):
    return {n.name: n.metrics().get("coild_compiles_total", 0) for n in nodes if n.proc.poll() is None}


def main():
    t = Tap()
    if not NGINX:
        t.skip("farm", "nginx is not installed (deploy/install-deps.sh installs nginx-light)")
        t.done()
    tmp = tempfile.mkdtemp(prefix="coil-farm-")
    procs = []
    try:
        t.run("farm", run, t, tmp, procs)
    finally:
        for p in procs:
            p.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    t.done()


def run(t, tmp, procs):
    def keygen(name):
        sec, pub = os.path.join(tmp, name + ".sec"), os.path.join(tmp, name + ".pub")
        r = coil(["keygen", name, sec, pub])
        assert r.returncode == 0, r.stderr
        return sec, open(pub).read().strip()

    fleet_sec, fleet = keygen("fleet")
    _, other = keygen("other")
    # three nodes, each the others' --peer
    ports = [free_port() for _ in range(3)]
    nodes = [Coild(tmp, "n%d" % i, ["--sign-key", fleet_sec, "--trusted-key", fleet] +
                   sum([["--peer", "http://127.0.0.1:%d" % p] for p in ports if p != ports[i]], []), port=ports[i])
             for i in range(3)]
    procs.extend(nodes)
    # TLS in nginx: a self-signed certificate for 127.0.0.1
    cert, tls_key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    tls = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", tls_key, "-out", cert,
                          "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                         capture_output=True, text=True)
    ngx = Nginx(tmp, [n.port for n in nodes], tls=(cert, tls_key) if tls.returncode == 0 else None)
    procs.append(ngx)
    graphs = [variant(os.path.join(tmp, "g%d.json" % k), k) for k in range(13)]

    # 32 identical compiles at once, each a client with its own cache: one compile fleet-wide
    def one(i, g=graphs[0]):
        return coil(["--server", ngx.url, "compile", g], cache=os.path.join(tmp, "c32-%d" % i))
    with concurrent.futures.ThreadPoolExecutor(32) as ex:
        rs = list(ex.map(one, range(32)))
    keys = {field(r.stdout, "key") for r in rs}
    t.ok(all(r.returncode == 0 for r in rs) and len(keys) == 1 and "" not in keys,
         "32 concurrent identical compiles through nginx all answered, one key",
         "\n".join(r.stderr for r in rs if r.returncode)[:2000])
    k0 = keys.pop()
    c = compiles(nodes)
    owner = [n for n in nodes if c[n.name] == 1]
    t.ok(sum(c.values()) == 1 and len(owner) == 1, "one compile fleet-wide for 32 identical requests", c)
    owner = owner[0] if owner else nodes[0]
    others = [n for n in nodes if n is not owner]
    t.ok(all(n.metrics().get('coild_requests_total{route="compile",code="200"}', 0) == 0 for n in others),
         "the other nodes never saw the compile (routed by X-Coil-Key)")

    # 12 more keys: each compiled on exactly one node, spread over the nodes
    key_of, owner_of = {0: k0}, {k0: owner.name}
    before = compiles(nodes)
    for k in range(1, 13):
        r = coil(["--server", ngx.url, "compile", graphs[k]], cache=os.path.join(tmp, "ck%d" % k))
        key_of[k] = field(r.stdout, "key")
        s, h, _ = http_get(ngx.url + "/v1/artifacts/%s/meta" % key_of[k])
        owner_of[key_of[k]] = h.get("X-Coil-Node", "?")
    after = compiles(nodes)
    new = {n: after[n] - before[n] for n in after}
    t.ok(sum(new.values()) == 12, "12 distinct graphs: 12 compiles in all", new)
    t.ok(all(new[owner_of[key_of[k]]] >= 1 for k in range(1, 13)),
         "each key's artifact is served by the node that compiled it", (owner_of, new))
    t.ok(len({owner_of[key_of[k]] for k in range(13)}) >= 2, "keys spread over the nodes", owner_of)
    s1, h1, b1 = http_get(ngx.url + "/v1/artifacts/" + key_of[1])
    s2, h2, b2 = http_get(ngx.url + "/v1/artifacts/" + key_of[1])
    t.ok(s1 == s2 == 200 and b1 == b2 and h2.get("X-Cache-Status") == "HIT" and
         h1.get("Cache-Control", "").startswith("public") and "immutable" in h1.get("Cache-Control", "") and
         h2.get("X-Coil-Signature", "").startswith("fleet:"),
         "an artifact through nginx's cache: immutable, a HIT the second time, signature kept", (h1, h2))
    # compiles without X-Coil-Key (plain curl) land on any node; the key's owner finds it on its peer
    fills0 = total(nodes, 'coild_upstream_total{outcome="filled"}')
    moved, ok = 0, True
    for k in range(20, 26):
        g = variant(os.path.join(tmp, "curl%d.json" % k), k)
        s, h, body = http_get(ngx.url + "/v1/compile", method="POST", data=open(g, "rb").read())
        key = json.loads(body).get("key", "") if s == 200 else ""
        s2, h2, _ = http_get(ngx.url + "/v1/artifacts/%s/meta" % key)
        ok = ok and s == 200 and s2 == 200
        moved += h.get("X-Coil-Node") != h2.get("X-Coil-Node")
    fills = total(nodes, 'coild_upstream_total{outcome="filled"}') - fills0
    t.ok(ok and fills == moved, "6 plain compiles without X-Coil-Key: each fetched by key through nginx; the %d "
         "answered off their owner were filled from a peer in one hop" % moved, (ok, moved, fills))

    # signature refusal through nginx's cache, on the CLI's fetch path
    c_other = os.path.join(tmp, "c-other")
    r = coil(["--server", ngx.url, "fetch", key_of[1], "--trusted-key", other], cache=c_other)
    t.ok(r.returncode != 0 and "not trusted" in r.stderr and len(r.stderr.strip().splitlines()) == 1 and
         not os.path.exists(os.path.join(c_other, "objects", key_of[1][:2], key_of[1] + ".so")),
         "through nginx's cache, a client trusting another key refuses the farm's artifact, stores nothing",
         r.stderr)
    r = coil(["--server", ngx.url, "fetch", key_of[1], "--trusted-key", fleet], cache=c_other)
    t.ok(r.returncode == 0, "the same fetch trusting the fleet key succeeds", r.stderr)

    # TLS terminated in nginx: curl with the CA, and libcoil with COIL_CA_FILE
    if ngx.tls_port:
        turl = "https://127.0.0.1:%d" % ngx.tls_port
        s, h, body = http_get(turl + "/v1/artifacts/%s/meta" % key_of[3], cafile=cert)
        t.ok(s == 200 and key_of[3].encode() in body, "TLS in nginx: a fetch over https", s)
        r = coil(["--server", turl, "compile", graphs[3]], env=dict(os.environ, COIL_CA_FILE=cert),
                 cache=os.path.join(tmp, "c-tls"))
        t.ok(r.returncode == 0 and "cache hit" in r.stdout, "TLS in nginx: coil --server https://... with "
             "COIL_CA_FILE", r.stdout + r.stderr)
        r = coil(["--server", turl, "compile", graphs[3]], cache=os.path.join(tmp, "c-tls2"))
        t.ok(r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1,
             "TLS in nginx: an unknown CA is refused in one line", r.stderr)
    else:
        t.skip("TLS in nginx", "openssl could not make a certificate: " + tls.stderr)

    # an edge coild filling from the farm
    edge = Coild(tmp, "edge", ["--upstream", ngx.url, "--trusted-key", fleet])
    procs.append(edge)
    r = coil(["--server", edge.url, "compile", graphs[4], "--trusted-key", fleet], cache=os.path.join(tmp, "ce"))
    m = edge.metrics()
    t.ok(r.returncode == 0 and field(r.stdout, "key") == key_of[4] and m["coild_compiles_total"] == 0 and
         m['coild_upstream_total{outcome="filled"}'] == 1 and field(r.stdout, "signature").startswith("fleet:"),
         "edge: a compile is filled from the farm (signed, verified), nothing compiled", (r.stdout, r.stderr, m))
    s, h, _ = http_get(edge.url + "/v1/artifacts/%s/meta" % key_of[5])
    m = edge.metrics()
    t.ok(s == 200 and m['coild_upstream_total{outcome="filled"}'] == 2,
         "edge: a fetch of a key it lacks is filled from the farm", (s, m))
    s, h, _ = http_get(edge.url + "/v1/artifacts/" + "ab" * 32)
    m = edge.metrics()
    t.ok(s == 404 and m['coild_upstream_total{outcome="miss"}'] == 1, "edge: an unknown key is 404 after asking",
         (s, m))
    before = edge.metrics()
    s, h, _ = http_get(edge.url + "/v1/artifacts/%s/meta" % key_of[7], headers={"X-Coil-Via": "hop" * 120})
    after = edge.metrics()
    t.ok(s == 404 and all(after['coild_upstream_total{outcome="%s"}' % o] == before['coild_upstream_total{outcome="%s"}' % o]
                          for o in ("filled", "miss", "error")),
         "edge: a fetch whose X-Coil-Via is too long to append its name to is not passed on", (s, after))
    r = coil(["--server", edge.url, "compile", graphs[4]], cache=os.path.join(tmp, "ce2"))
    t.ok(r.returncode == 0 and "cache hit" in r.stdout and edge.metrics()['coild_upstream_total{outcome="filled"}'] == 2,
         "edge: the second compile is a local hit", r.stdout)
    wary = Coild(tmp, "wary", ["--upstream", ngx.url, "--trusted-key", other])
    procs.append(wary)
    r = coil(["--server", wary.url, "compile", graphs[6]], cache=os.path.join(tmp, "cw"))
    m = wary.metrics()
    t.ok(r.returncode == 0 and field(r.stdout, "key") == key_of[6] and m['coild_upstream_total{outcome="error"}'] == 1
         and m["coild_compiles_total"] == 1 and "not trusted" in wary.log() and not field(r.stdout, "signature"),
         "an edge trusting another key refuses the farm's copy and compiles its own", (r.stdout, m, wary.log()[-600:]))

    # client tier lists: nearest first, the last compiles
    mirror = Coild(tmp, "mirror", [])
    procs.append(mirror)
    r = coil(["--server", "%s %s" % (mirror.url, ngx.url), "compile", graphs[7]], cache=os.path.join(tmp, "ct1"))
    mm = mirror.metrics()
    t.ok(r.returncode == 0 and "cache hit" in r.stdout and mm["coild_compiles_total"] == 0 and
         mm.get('coild_requests_total{route="artifact_meta",code="404"}', 0) >= 1,
         "tiers 'mirror farm': the mirror lacks it (asked first), the farm answers", (r.stdout, r.stderr, mm))
    r = coil(["--server", "%s %s" % (ngx.url, mirror.url), "compile", graphs[8]], cache=os.path.join(tmp, "ct2"))
    mm = mirror.metrics()
    t.ok(r.returncode == 0 and mm["coild_cache_misses_total"] == 0 and mm["coild_cache_hits_total"] == 0,
         "tiers 'farm mirror': the farm has it, the mirror is never asked to compile", (r.stdout, r.stderr, mm))

    # coil prefetch: keys (as `coil cache ls` prints them) and a graph into an empty cache
    man = os.path.join(tmp, "manifest")
    open(man, "w").write("# warm-up\n%s\n%s 16928 0\n\ng9.json opt=2\n" % (key_of[1], key_of[2]))
    pre = os.path.join(tmp, "pre")
    r = coil(["--server", ngx.url, "prefetch", man, "--trusted-key", fleet], cache=pre)
    ls = coil(["cache", "ls"], cache=pre).stdout
    t.ok(r.returncode == 0 and all(key_of[k] in ls for k in (1, 2, 9)) and len(r.stdout.splitlines()) == 3,
         "prefetch: two keys and a graph, verified, into an empty cache", (r.stdout, r.stderr, ls))
    open(man, "a").write("nosuch.json\n" + "cd" * 32 + "\n")
    r = coil(["--server", ngx.url, "prefetch", man], cache=pre)
    t.ok(r.returncode == 1 and "manifest:6:" in r.stderr and "manifest:7:" in r.stderr and
         "3 ready, 2 failed" in r.stderr, "prefetch: failing lines named by number, the rest still done", r.stderr)
    shutil.copytree(pre, os.path.join(tmp, "warm-cache"))
    warm = Coild(tmp, "warm", [], workers=1)
    procs.append(warm)
    r = coil(["--server", warm.url, "compile", graphs[9]], cache=os.path.join(tmp, "cwarm"))
    t.ok(r.returncode == 0 and "cache hit" in r.stdout, "a coild started on a prefetched cache answers a hit",
         r.stdout + r.stderr)

    # a node killed: everything still served; only its keys compile again, elsewhere
    victim = owner
    dead_keys = [key_of[k] for k in range(13) if owner_of[key_of[k]] == victim.name]
    victim.kill()
    alive = [n for n in nodes if n is not victim]
    before = compiles(alive)
    fills0 = total(alive, 'coild_upstream_total{outcome="filled"}')
    bad = []
    for k in range(13):
        r = coil(["--server", ngx.url, "compile", graphs[k]], cache=os.path.join(tmp, "ckill%d" % k))
        if r.returncode != 0 or field(r.stdout, "key") != key_of[k]:
            bad.append((k, r.stderr))
    after = compiles(alive)
    fills = total(alive, 'coild_upstream_total{outcome="filled"}') - fills0
    t.ok(not bad, "%s killed: all 13 keys still compile through nginx" % victim.name, bad)
    t.ok(sum(after.values()) - sum(before.values()) + fills == len(dead_keys),
         "only the dead node's %d keys were compiled again (or found on a peer) elsewhere" % len(dead_keys),
         (before, after, fills, owner_of))

    # the deployed site file itself: nginx -t with its paths pointed here
    if ngx.tls_port:
        site = open(os.path.join(ROOT, "deploy", "nginx", "coil-farm.conf")).read()
        site = (site.replace("/etc/nginx/coil/", os.path.join(ROOT, "deploy", "nginx") + "/")
                .replace("/etc/ssl/coil/fullchain.pem", cert).replace("/etc/ssl/coil/privkey.pem", tls_key)
                .replace("/var/cache/nginx/coil", os.path.join(tmp, "site-cache")))
        open(os.path.join(tmp, "site.conf"), "w").write(site)
        d = os.path.join(tmp, "site")
        os.makedirs(d)
        open(os.path.join(d, "nginx.conf"), "w").write(
            "pid %s/pid;\nerror_log %s/error.log;\nevents {}\nhttp {\n\tclient_body_temp_path %s;\n"
            "\tproxy_temp_path %s;\n\tinclude %s/site.conf;\n}\n" % (d, d, d, d, tmp))
        r = subprocess.run([NGINX, "-t", "-c", os.path.join(d, "nginx.conf"), "-p", d], capture_output=True, text=True)
        t.ok(r.returncode == 0, "deploy/nginx/coil-farm.conf passes nginx -t", r.stderr)

    # make install
    dest = os.path.join(tmp, "dest")
    r = subprocess.run(["make", "-s", "install", "DESTDIR=" + dest, "PREFIX=/usr/local", "B=" + os.path.dirname(COIL)],
                       cwd=ROOT, capture_output=True, text=True)
    want = ["usr/local/bin/coil", "usr/local/bin/coild", "usr/local/include/coil/coil.h", "usr/local/lib/libcoil.a",
            "usr/local/share/coil/nginx/coil-maps.conf", "usr/local/share/coil/nginx/coil-proxy.conf",
            "usr/local/share/coil/nginx/coil-farm.conf", "usr/local/lib/systemd/system/coild.service"]
    missing = [w for w in want if not os.path.exists(os.path.join(dest, w))]
    h = subprocess.run([os.path.join(dest, "usr/local/bin/coil"), "help"], capture_output=True, text=True) \
        if not missing else None
    t.ok(r.returncode == 0 and not missing and h.returncode == 0 and "prefetch" in h.stdout,
         "make install DESTDIR: binaries, header, library, unit and nginx files", (r.stderr, missing))


main()
