"""Real coilds behind a real nginx on loopback, for tests/py/test_farm.py and bench/farm.

    nodes = [Coild(tmp, "n%d" % i, ["--sign-key", sec]) for i in range(3)]
    ngx = Nginx(tmp, [n.port for n in nodes])      # deploy/nginx/coil-maps.conf + coil-proxy.conf
    ...
    ngx.stop(); [n.stop() for n in nodes]

The nginx configuration includes the very files deploy/nginx/ installs, with only the
environment-specific parts (ports, the upstream block, temp and cache paths) written here.
"""
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
COIL = os.path.abspath(os.environ.get("COIL", os.path.join(ROOT, "build", "coil")))
COILD = os.path.join(os.path.dirname(COIL), "coild")
NGINX = next((p for p in ("/usr/sbin/nginx", "/usr/bin/nginx") if os.access(p, os.X_OK)), None)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, timeout=10.0, proc=None):
    end = time.time() + timeout
    while time.time() < end and (proc is None or proc.poll() is None):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


class Coild:
    """One coild on a free loopback port, with its own cache directory and log."""

    def __init__(self, tmp, name, extra=(), env=None, workers=2, port=0):
        self.name = name
        self.cache = os.path.join(tmp, name + "-cache")
        self.log_path = os.path.join(tmp, name + ".log")
        port_file = os.path.join(tmp, name + ".port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        args = [COILD, "--listen", "127.0.0.1:%d" % port, "--port-file", port_file, "--cache-dir", self.cache,
                "--workers", str(workers), "--node-id", name, "--max-conns-per-ip", "0"] + list(extra)
        if os.geteuid() == 0:
            args.append("--allow-root")
        self.proc = subprocess.Popen(args, stderr=open(self.log_path, "a"), stdout=subprocess.DEVNULL,
                                     env=env or os.environ)
        for _ in range(400):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            if self.proc.poll() is not None:
                raise RuntimeError("coild %s exited: %s" % (name, self.log()))
            time.sleep(0.025)
        self.port = int(open(port_file).read())
        self.url = "http://127.0.0.1:%d" % self.port

    def log(self):
        return open(self.log_path).read()

    def metrics(self):
        return parse_metrics(http_get(self.url + "/metrics")[2].decode())

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self):
        stop(self.proc)


def stop(proc):
    """SIGTERM, then SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def parse_metrics(text):
    """Prometheus text into {"name{labels}": value}."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, v = line.rpartition(" ")
            out[name] = float(v)
    return out


def http_get(url, method="GET", headers=None, data=None, cafile=None):
    """(status, headers, body) of one request; never raises for an HTTP status."""
    req = urllib.request.Request(url, method=method, headers=headers or {}, data=data)
    ctx = None
    if cafile:
        import ssl
        ctx = ssl.create_default_context(cafile=cafile)
    try:
        with urllib.request.urlopen(req, timeout=60, context=ctx) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


class Nginx:
    """nginx in front of coilds: deploy/nginx's maps and locations, consistent hashing on the
    cache key over `ports`, a proxy_cache, and optionally TLS (cert, key) on a second port."""

    def __init__(self, tmp, ports, tls=None, fail_timeout=5, weight=8):
        if not NGINX:
            raise RuntimeError("nginx is not installed (deploy/install-deps.sh installs it)")
        self.dir = os.path.join(tmp, "nginx")
        os.makedirs(os.path.join(self.dir, "cache"), exist_ok=True)
        os.chmod(tmp, 0o755)
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.tls_port = free_port() if tls else None
        d = self.dir
        # weight w: 160 w points per node on nginx's ring (an even split, within a few %)
        servers = "".join("\t\tserver 127.0.0.1:%d weight=%d max_fails=1 fail_timeout=%ds;\n"
                          % (p, weight, fail_timeout) for p in ports)
        tls_server = ""
        if tls:
            tls_server = ("\tserver {\n\t\tlisten 127.0.0.1:%d ssl;\n\t\tssl_certificate %s;\n"
                          "\t\tssl_certificate_key %s;\n\t\tinclude %s/deploy/nginx/coil-proxy.conf;\n\t}\n"
                          % (self.tls_port, tls[0], tls[1], ROOT))
        conf = """daemon off;
worker_processes 2;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
{user}
events {{ worker_connections 4096; }}
http {{
	log_format coil '$request_method $uri $status $upstream_addr $upstream_cache_status $coil_route_key';
	access_log {d}/access.log coil;
	client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fastcgi;
	uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
	include {root}/deploy/nginx/coil-maps.conf;
	proxy_cache_path {d}/cache levels=1:2 keys_zone=coil_cache:4m max_size=1g inactive=1d use_temp_path=off;
	upstream coil_farm {{
		hash $coil_route_key consistent;
{servers}		keepalive 32;
	}}
	server {{
		listen 127.0.0.1:{port};
		include {root}/deploy/nginx/coil-proxy.conf;
	}}
{tls_server}}}
""".format(d=d, root=ROOT, servers=servers, port=self.port, tls_server=tls_server,
           user="user root;" if os.geteuid() == 0 else "")
        self.conf = os.path.join(d, "nginx.conf")
        open(self.conf, "w").write(conf)
        self.proc = subprocess.Popen([NGINX, "-c", self.conf, "-p", d], stderr=open(os.path.join(d, "stderr"), "a"))
        if not wait_port(self.port, proc=self.proc) or (tls and not wait_port(self.tls_port, proc=self.proc)):
            raise RuntimeError("nginx did not start: " + self.errors())

    def errors(self):
        out = ""
        for f in ("stderr", "error.log"):
            p = os.path.join(self.dir, f)
            if os.path.exists(p):
                out += open(p).read()
        return out

    def access(self):
        """The access log's lines as (method, uri, status, upstream_addr, cache_status, route_key)."""
        p = os.path.join(self.dir, "access.log")
        return [tuple(line.split()) for line in open(p)] if os.path.exists(p) else []

    def stop(self):
        stop(self.proc)


def variant(dst, k):
    """tests/graphs/server/pointwise.json with its constant made 0.5 + k/1000: a distinct graph
    (and key) for each k, each as quick to compile."""
    text = open(os.path.join(ROOT, "tests", "graphs", "server", "pointwise.json")).read()
    text = text.replace('"data": [0.5]', '"data": [%r]' % (0.5 + k / 1000.0))
    open(dst, "w").write(text)
    return dst
