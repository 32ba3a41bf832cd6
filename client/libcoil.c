/* libcoil (include/coil/coil.h): talking to coild over libcurl, the local
 * artifact cache (cache/), and loading artifacts (include/coil/artifact.h).
 *
 * Trust: nothing from the network is used unverified.  Keys are checked with
 * cache_key_valid before they reach a URL or a path; a compile's answer must
 * name this graph's hash, the target asked for (native resolved here) and
 * the key compile_key makes of them; downloaded bytes must hash to the
 * SHA-256 the server announced (ETag and /meta) and the caller expects; with
 * trusted keys, the signature over key, SHA-256, target and ABI version must
 * verify before bytes are stored or loaded; a module is opened only after
 * its file hashes right and its target is one this CPU runs. */
#include "coil/coil.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "cache/cache.h"
#include "cache/compile.h"
#include "cache/sign.h"
#include "client/artifact.h"
#include "client/fleet.h"
#include "codegen/codegen.h"

#define DEFAULT_TIMEOUT_MS 600000L
#define DEFAULT_CONNECT_TIMEOUT_MS 5000L
#define DEFAULT_RETRIES 4
#define DEFAULT_BACKOFF_MS 100L
#define MAX_BACKOFF_MS 10000L
#define MAX_RETRY_AFTER_S 30
/* Largest response body accepted (an artifact, a graph, a JSON answer). */
#define MAX_RESPONSE ((size_t)1 << 31)

/* ---- errors ---- */

static _Thread_local char last_error[1024];

const char *coil_last_error(void)
{
	return last_error;
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_error, sizeof last_error, fmt, ap);
	va_end(ap);
	return -1;
}

/* ---- the client ---- */

struct coil_client {
	char *tier[COIL_MAX_TIERS]; /* server URLs, nearest first, no trailing slash */
	int ntier;
	int last_tier;       /* the tier the last compile or fetch was answered by */
	char *via_header;    /* "X-Coil-Via: ..." (coild asking its upstreams), or NULL */
	char *ca_file;       /* CURLOPT_CAINFO, or NULL: the system's */
	char *auth_header;   /* "Authorization: Bearer ..." or NULL */
	char *cache_dir;
	uint64_t cache_budget;
	long timeout_ms, connect_timeout_ms, backoff_ms;
	int retries;
	CURL *curl;          /* reused: keeps the connection alive */
	coil_cache *cache;   /* opened on first use */
	coil_trust *trust;   /* trusted keys, or NULL: signatures not checked */
	unsigned seed;       /* backoff jitter */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* The URLs of a tier list: separated by spaces or commas, each http(s). */
static int parse_tiers(coil_client *c, const char *list)
{
	const char *p = list;
	for (;;) {
		p += strspn(p, " ,\t");
		if (!*p)
			break;
		size_t n = strcspn(p, " ,\t");
		if (strncmp(p, "http://", 7) && strncmp(p, "https://", 8))
			return fail("coil_client_create: server URL '%.*s' must start with http:// or https://", (int)(n > 200 ? 200 : n), p);
		if (c->ntier == COIL_MAX_TIERS)
			return fail("coil_client_create: more than %d server URLs", COIL_MAX_TIERS);
		if (!(c->tier[c->ntier] = strndup(p, n)))
			return fail("coil_client_create: out of memory");
		for (char *t = c->tier[c->ntier]; n > 0 && t[n - 1] == '/'; n--)
			t[n - 1] = 0;
		c->ntier++;
		p += n;
	}
	return c->ntier ? 0 : fail("coil_client_create: no server URL given");
}

int coil_client_create(const char *url, const char *token, const coil_client_opts *opts, coil_client **out)
{
	*out = NULL;
	if (!url)
		return fail("coil_client_create: no server URL given");
	if (token && strpbrk(token, "\r\n"))
		return fail("coil_client_create: the token contains a line break");
	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK)
		return fail("coil_client_create: curl_global_init: %s", curl_easy_strerror(curl_init_rc));
	coil_client *c = calloc(1, sizeof *c);
	if (!c)
		return fail("coil_client_create: out of memory");
	coil_client_opts d = {0};
	if (!opts)
		opts = &d;
	if (parse_tiers(c, url) != 0) {
		coil_client_destroy(c);
		return -1;
	}
	int oom = 0;
	const char *ca = opts->ca_file ? opts->ca_file : getenv("COIL_CA_FILE");
	if (ca && *ca && !(c->ca_file = strdup(ca)))
		oom = 1;
	if (token && *token && asprintf(&c->auth_header, "Authorization: Bearer %s", token) < 0) {
		c->auth_header = NULL;
		oom = 1;
	}
	const char *dir = opts->cache_dir ? opts->cache_dir : getenv("COIL_CACHE_DIR");
	c->cache_dir = dir ? strdup(dir) : NULL;
	c->cache_budget = opts->cache_budget;
	c->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : DEFAULT_TIMEOUT_MS;
	c->connect_timeout_ms = opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
	c->retries = opts->retries < 0 ? 0 : opts->retries ? opts->retries : DEFAULT_RETRIES;
	c->backoff_ms = opts->backoff_ms > 0 ? opts->backoff_ms : DEFAULT_BACKOFF_MS;
	c->seed = (unsigned)time(NULL) ^ (unsigned)(uintptr_t)c;
	c->curl = curl_easy_init();
	coil_err terr = {0};
	if (!oom && trust_resolve(opts->trusted_keys, opts->trusted_keys_file, &c->trust, &terr) != 0) {
		coil_client_destroy(c);
		return fail("coil_client_create: %s", terr.msg);
	}
	if (oom || !c->curl || (dir && !c->cache_dir)) {
		coil_client_destroy(c);
		return fail("coil_client_create: out of memory");
	}
	*out = c;
	return 0;
}

void coil_client_destroy(coil_client *c)
{
	if (!c)
		return;
	if (c->curl)
		curl_easy_cleanup(c->curl);
	cache_close(c->cache);
	trust_free(c->trust);
	if (c->auth_header)
		memset(c->auth_header, 0, strlen(c->auth_header));
	free(c->auth_header);
	free(c->via_header);
	free(c->ca_file);
	for (int i = 0; i < c->ntier; i++)
		free(c->tier[i]);
	free(c->cache_dir);
	free(c);
}

int coil_client_set_via(coil_client *c, const char *via)
{
	if (strpbrk(via, "\r\n"))
		return fail("coil_client_set_via: a line break in '%.80s'", via);
	free(c->via_header);
	if (asprintf(&c->via_header, "X-Coil-Via: %s", via) < 0) {
		c->via_header = NULL;
		return fail("out of memory");
	}
	return 0;
}

const char *coil_client_tier_used(const coil_client *c)
{
	return c->tier[c->last_tier];
}

static coil_cache *local_cache(coil_client *c)
{
	coil_err err = {0};
	if (!c->cache && cache_open(c->cache_dir, c->cache_budget, &c->cache, &err) != 0)
		fail("local cache: %s", err.msg);
	return c->cache;
}

/* ---- HTTP ---- */

typedef struct membuf {
	char *p;
	size_t len, cap;
	int too_big;
} membuf;

static size_t on_body(char *data, size_t size, size_t n, void *ud)
{
	membuf *b = ud;
	size_t add = size * n;
	if (b->len + add + 1 > MAX_RESPONSE) {
		b->too_big = 1;
		return 0;
	}
	if (b->len + add + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 16384;
		while (cap < b->len + add + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p)
			return 0;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, add);
	b->len += add;
	b->p[b->len] = 0;
	return add;
}

typedef struct headers {
	char etag[72];      /* the entity tag without quotes */
	long retry_after;   /* seconds, -1 if absent */
} headers;

static size_t on_header(char *data, size_t size, size_t n, void *ud)
{
	headers *h = ud;
	size_t len = size * n;
	char line[256];
	if (len >= sizeof line)
		return len;
	memcpy(line, data, len);
	line[len] = 0;
	line[strcspn(line, "\r\n")] = 0;
	if (!strncasecmp(line, "ETag:", 5)) {
		const char *v = line + 5;
		while (*v == ' ' || *v == '"' || *v == 'W' || *v == '/')
			v++;
		snprintf(h->etag, sizeof h->etag, "%.*s", (int)strcspn(v, "\""), v);
	} else if (!strncasecmp(line, "Retry-After:", 12)) {
		h->retry_after = strtol(line + 12, NULL, 10);
	} else if (!strncasecmp(line, "HTTP/", 5)) {
		h->etag[0] = 0; /* a new response (after a 100 Continue or a retry) */
		h->retry_after = -1;
	}
	return len;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Failures worth another attempt: the server was not reachable or hung up. */
static int transient(CURLcode rc)
{
	return rc == CURLE_COULDNT_CONNECT || rc == CURLE_SEND_ERROR || rc == CURLE_RECV_ERROR ||
	       rc == CURLE_GOT_NOTHING || rc == CURLE_PARTIAL_FILE;
}

/* method path (relative to the URL of tier), with one more header line
 * extra if given: *status and the body into
 * resp.  Retries 503, 429 and transient failures.  Returns 0 when an HTTP answer
 * arrived (any status), -1 with the error set otherwise. */
static int http(coil_client *c, int tier, const char *method, const char *path, const char *extra, const char *body,
		size_t blen, long *status, membuf *resp, headers *h)
{
	char url[2048];
	if (snprintf(url, sizeof url, "%s%s", c->tier[tier], path) >= (int)sizeof url)
		return fail("URL too long");
	long backoff = c->backoff_ms;
	for (int attempt = 0;; attempt++) {
		CURL *e = c->curl;
		curl_easy_reset(e);
		struct curl_slist *hl = NULL;
		if (c->auth_header)
			hl = curl_slist_append(hl, c->auth_header);
		if (c->via_header)
			hl = curl_slist_append(hl, c->via_header);
		if (extra)
			hl = curl_slist_append(hl, extra);
		if (body)
			hl = curl_slist_append(hl, "Content-Type: application/json");
		hl = curl_slist_append(hl, "Expect:"); /* no 100-continue round trip */
		free(resp->p);
		memset(resp, 0, sizeof *resp);
		memset(h, 0, sizeof *h);
		h->retry_after = -1;
		curl_easy_setopt(e, CURLOPT_URL, url);
		curl_easy_setopt(e, CURLOPT_HTTPHEADER, hl);
		curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(e, CURLOPT_WRITEDATA, resp);
		curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
		curl_easy_setopt(e, CURLOPT_HEADERDATA, h);
		curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, c->timeout_ms);
		curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
		curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
		if (c->ca_file)
			curl_easy_setopt(e, CURLOPT_CAINFO, c->ca_file);
		if (!strcmp(method, "HEAD"))
			curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
		else if (strcmp(method, "GET"))
			curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
		if (body) {
			curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
			curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)blen);
		}
		CURLcode rc = curl_easy_perform(e);
		curl_slist_free_all(hl);
		*status = 0;
		if (rc == CURLE_OK)
			curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, status);
		/* 503 (queue full, stopping) and 429 (this tenant's share is taken:
		 * not now) are worth sending again after Retry-After */
		int busy = rc == CURLE_OK && (*status == 503 || *status == 429);
		int again = busy || transient(rc);
		if (!again || attempt >= c->retries) {
			if (rc != CURLE_OK)
				return fail("%s %s: %s%s", method, url, curl_easy_strerror(rc),
					    resp->too_big ? " (response too large)" : "");
			return 0;
		}
		/* Wait: the server's Retry-After if it gave one, else the backoff,
		 * with jitter so that refused clients do not return in step. */
		long wait = backoff / 2 + (long)(rand_r(&c->seed) % (unsigned)(backoff + 1));
		if (busy && h->retry_after >= 0)
			wait = (h->retry_after > MAX_RETRY_AFTER_S ? MAX_RETRY_AFTER_S : h->retry_after) * 1000L;
		sleep_ms(wait);
		backoff = backoff * 2 > MAX_BACKOFF_MS ? MAX_BACKOFF_MS : backoff * 2;
	}
}

/* Set the error from a non-2xx answer: the server's {"error": ...} if any,
 * with its code: "compile: HTTP 422 (unsupported): node 'x': ...". */
static int http_fail(const char *what, long status, const membuf *resp)
{
	json_t *o = resp->p ? json_loadb(resp->p, resp->len, 0, NULL) : NULL;
	const char *msg = json_string_value(json_object_get(o, "error"));
	const char *code = json_string_value(json_object_get(o, "code"));
	char tag[48] = "";
	if (code)
		snprintf(tag, sizeof tag, " (%.32s)", code);
	fail("%s: HTTP %ld%s: %s", what, status, tag, msg ? msg : "(no error message)");
	json_decref(o);
	return -1;
}

static int hex64(const char *s)
{
	return cache_key_valid(s);
}

static void copy_str(char *dst, size_t cap, json_t *v)
{
	snprintf(dst, cap, "%s", json_is_string(v) ? json_string_value(v) : "");
}

/* ---- compile ---- */

/* A tier's metadata of key, if it has the artifact this client would build
 * (its graph hash, target and key): 1 (out filled, a hit), 0 otherwise. */
static int tier_has(coil_client *c, int t, const char *key, const char *graph_hash, const char *target,
		    coil_compile_info *out)
{
	char path[128];
	long status;
	headers h;
	membuf meta = {0};
	snprintf(path, sizeof path, "/v1/artifacts/%s/meta", key);
	int rc = http(c, t, "GET", path, NULL, NULL, 0, &status, &meta, &h);
	json_t *m = rc == 0 && status == 200 ? json_loadb(meta.p, meta.len, 0, NULL) : NULL;
	free(meta.p);
	copy_str(out->key, sizeof out->key, json_object_get(m, "key"));
	copy_str(out->sha256, sizeof out->sha256, json_object_get(m, "sha256"));
	copy_str(out->graph_hash, sizeof out->graph_hash, json_object_get(m, "graph_hash"));
	copy_str(out->target, sizeof out->target, json_object_get(m, "target"));
	copy_str(out->signature, sizeof out->signature, json_object_get(m, "signature"));
	out->size = (uint64_t)json_integer_value(json_object_get(m, "size"));
	json_decref(m);
	if (!m || strcmp(out->key, key) || !hex64(out->sha256) || strcmp(out->graph_hash, graph_hash) ||
	    strcmp(out->target, target)) {
		memset(out, 0, sizeof *out);
		return 0;
	}
	out->hit = 1;
	snprintf(out->url, sizeof out->url, "%s/v1/artifacts/%s", c->tier[t], key);
	c->last_tier = t;
	return 1;
}

int coil_compile(coil_client *c, const char *graph_json, size_t len, const coil_compile_opts *o,
		 coil_compile_info *out)
{
	memset(out, 0, sizeof *out);
	char path[512] = "/v1/compile";
	if (o && o->opt_level != COIL_OPT_DEFAULT && (o->opt_level < 0 || o->opt_level > 3))
		return fail("coil_compile: opt_level %d is not in 0..3 (or COIL_OPT_DEFAULT)", o->opt_level);
	/* The target goes in the query string, resolved here: "native" is this
	 * client's CPU, not the server's. */
	coil_err err = {0};
	const coil_target *tg = target_get(o && o->target ? o->target : "native", &err);
	if (!tg)
		return fail("coil_compile: %s", err.msg);
	snprintf(path + strlen(path), sizeof path - strlen(path), "?target=%s", tg->name);
	int precision = o && o->precision && !strcmp(o->precision, "bf16") ? COIL_BF16 : COIL_F32;
	int opt = o && o->opt_level != COIL_OPT_DEFAULT ? o->opt_level : COMPILE_OPT_DEFAULT;
	if (o && o->precision && strcmp(o->precision, "f32") && strcmp(o->precision, "bf16"))
		return fail("coil_compile: precision '%.20s' is not f32 or bf16", o->precision);
	int mode = compile_mode_parse(o ? o->mode : NULL);
	if (mode < 0)
		return fail("coil_compile: mode '%.20s' is not default or max-autotune", o->mode);
	int tune_threads = o && o->tune_threads > 0 ? o->tune_threads : build_cpus();
	if (o && (o->tune_threads < 0 || o->tune_threads > 1024))
		return fail("coil_compile: tune_threads %d is not in 1..1024", o->tune_threads);

	if (o && o->opt_level != COIL_OPT_DEFAULT)
		snprintf(path + strlen(path), sizeof path - strlen(path), "%copt_level=%d", strchr(path, '?') ? '&' : '?',
			 o->opt_level);
	/* What the answer must name: this graph's hash, as the server hashes it
	 * (a graph this client cannot hash is still sent: the server names
	 * what is wrong with it).  With this client's own build identity it
	 * makes the key this client expects: the nearer tiers are asked for it,
	 * and the compile carries it (X-Coil-Key) so that a farm's proxy routes
	 * the compile to the key's owner. */
	char graph_hash[65], mine[65] = "", key_header[96] = "";
	coil_err herr = {0};
	int hashed = compile_graph_hash(graph_json, len, (coil_dtype)precision, graph_hash, &herr) == 0;
	if (hashed && compile_key(graph_hash, tg->name, compile_compiler_identity(), compile_codegen_version(),
				  compile_dnnl_version(), opt, (coil_dtype)precision, mode, tune_threads, mine, &err) == 0) {
		snprintf(key_header, sizeof key_header, "X-Coil-Key: %s", mine);
		for (int t = 0; t + 1 < c->ntier; t++)
			if (tier_has(c, t, mine, graph_hash, tg->name, out))
				return 0;
	}
	/* a precision or mode goes in the request's envelope, around the graph */
	char *body = NULL;
	size_t blen = 0;
	if (precision == COIL_BF16 || mode != COMPILE_MODE_DEFAULT) {
		char pre[128];
		static const char post[] = "}";
		char md[80] = "";
		if (mode != COMPILE_MODE_DEFAULT)
			snprintf(md, sizeof md, "\"mode\": \"max-autotune\", \"tune_threads\": %d", tune_threads);
		int n = snprintf(pre, sizeof pre, "{\"options\": {%s%s%s}, \"graph\": ",
				 precision == COIL_BF16 ? "\"precision\": \"bf16\"" : "",
				 precision == COIL_BF16 && mode != COMPILE_MODE_DEFAULT ? ", " : "", md);
		if (!(body = malloc((size_t)n + len + sizeof post)))
			return fail("coil_compile: out of memory");
		memcpy(body, pre, (size_t)n);
		memcpy(body + n, graph_json, len);
		memcpy(body + n + len, post, sizeof post);
		blen = (size_t)n + len + sizeof post - 1;
	}
	/* the last tier compiles */
	int t = c->ntier - 1;
	long status;
	membuf resp = {0};
	headers h;
	const char *kh = key_header[0] ? key_header : NULL;
	int hrc = body ? http(c, t, "POST", path, kh, body, blen, &status, &resp, &h)
		       : http(c, t, "POST", path, kh, graph_json, len, &status, &resp, &h);
	free(body);
	if (hrc != 0) {
		free(resp.p);
		return -1;
	}
	if (status != 200) {
		http_fail("compile", status, &resp);
		free(resp.p);
		return -1;
	}
	if (!hashed) {
		free(resp.p);
		return fail("compile: the server accepted a graph this client cannot hash (%s); refusing its answer",
			    herr.msg);
	}
	json_error_t je;
	json_t *r = json_loadb(resp.p, resp.len, 0, &je);
	free(resp.p);
	copy_str(out->key, sizeof out->key, json_object_get(r, "key"));
	copy_str(out->sha256, sizeof out->sha256, json_object_get(r, "sha256"));
	copy_str(out->graph_hash, sizeof out->graph_hash, json_object_get(r, "graph_hash"));
	copy_str(out->target, sizeof out->target, json_object_get(r, "target"));
	out->size = (uint64_t)json_integer_value(json_object_get(r, "size"));
	out->hit = json_is_true(json_object_get(r, "hit"));
	out->compile_ms = json_number_value(json_object_get(r, "compile_ms"));
	copy_str(out->signature, sizeof out->signature, json_object_get(r, "signature"));
	json_t *b = json_object_get(r, "build");
	const char *bc = json_string_value(json_object_get(b, "compiler")), *bg = json_string_value(json_object_get(b, "codegen"));
	const char *bd = json_string_value(json_object_get(b, "dnnl"));
	char want[65] = "";
	int made = bc && bg && bd &&
		   compile_key(graph_hash, tg->name, bc, bg, bd, opt, (coil_dtype)precision, mode, tune_threads, want, &err) == 0;
	json_decref(r);
	if (!hex64(out->key) || !hex64(out->sha256))
		return fail("compile: the server's answer lacks a valid key and sha256");
	if (strcmp(out->graph_hash, graph_hash))
		return fail("compile: the server answered for graph hash %.64s, not this graph's %s; refusing it",
			    out->graph_hash, graph_hash);
	if (strcmp(out->target, tg->name))
		return fail("compile: the server built for target '%.63s', not the '%s' asked for; refusing it", out->target,
			    tg->name);
	if (!made)
		return fail("compile: the server's answer does not say how its key was made (no build identity); "
			    "refusing key %s", out->key);
	if (strcmp(out->key, want))
		return fail("compile: the server answered key %s, not %s, the key of this graph, target and options "
			    "for its build; refusing it", out->key, want);
	snprintf(out->url, sizeof out->url, "%s/v1/artifacts/%s", c->tier[t], out->key);
	c->last_tier = t;
	return 0;
}

int coil_compile_file(coil_client *c, const char *path, const coil_compile_opts *o, coil_compile_info *out)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return fail("%s: %s", path, strerror(errno));
	membuf b = {0};
	char chunk[65536];
	size_t n;
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
		if (on_body(chunk, 1, n, &b) != n) {
			fclose(f);
			free(b.p);
			return fail("%s: out of memory", path);
		}
	int bad = ferror(f);
	fclose(f);
	if (bad) {
		free(b.p);
		return fail("%s: read error", path);
	}
	int rc = coil_compile(c, b.p ? b.p : "", b.len, o, out);
	free(b.p);
	return rc;
}

/* ---- fetch ---- */

/* Is key's local copy present and intact (and equal to want, if given)?
 * 1 yes (path filled), 0 no (a bad copy is removed), -1 on error. */
static int local_copy(coil_client *c, coil_cache *lc, const char *key, const char *want, char *path, size_t cap)
{
	coil_err err = {0};
	char sha[65], so[CACHE_PATH_MAX], actual[65], target[64], sig[SIGN_STR_MAX];
	int rc = cache_entry_verify(lc, c->trust, key, sha, target, sig, &err);
	if (rc < 0 && err.code != COIL_E_INPUT)
		return fail("local cache: %s", err.msg);
	if (rc == 0)
		return 0;
	if (cache_entry_paths(lc, key, so, NULL, sizeof so, &err) != 0)
		return fail("local cache: %s", err.msg);
	/* a copy its signature does not cover is as bad as a tampered one */
	int good = rc == 1 && cache_sha256_file(so, actual, &err) == 0 && !strcmp(actual, sha) &&
		   (!want || !strcmp(sha, want));
	if (!good) {
		/* tampered, truncated or stale: drop it and download again */
		if (cache_remove(lc, key, &err) != 0)
			return fail("local cache: %s", err.msg);
		return 0;
	}
	if (strlen(so) >= cap)
		return fail("coil_fetch: path buffer of %zu bytes is too small", cap);
	memcpy(path, so, strlen(so) + 1);
	return 1;
}

/* The artifact of key from tier t into the local cache lc: 1 stored (its
 * path in path_out), 0 the tier does not have it (404), -1 any other failure
 * (the error set). */
static int fetch_from(coil_client *c, int t, coil_cache *lc, const char *key, const char *sha256, char *path_out,
		      size_t cap)
{
	char path[256], announced[65];
	long status;
	headers h;
	membuf meta = {0}, graph = {0}, so = {0};
	int rc = -1;

	/* What the server says the artifact is. */
	snprintf(path, sizeof path, "/v1/artifacts/%s/meta", key);
	if (http(c, t, "GET", path, NULL, NULL, 0, &status, &meta, &h) != 0)
		goto out;
	if (status == 404) {
		rc = 0;
		goto out;
	}
	if (status != 200) {
		http_fail("fetch meta", status, &meta);
		goto out;
	}
	json_t *m = json_loadb(meta.p, meta.len, 0, NULL);
	char mkey[72], mtarget[64], msig[SIGN_STR_MAX];
	copy_str(announced, sizeof announced, json_object_get(m, "sha256"));
	copy_str(mkey, sizeof mkey, json_object_get(m, "key"));
	copy_str(mtarget, sizeof mtarget, json_object_get(m, "target"));
	copy_str(msig, sizeof msig, json_object_get(m, "signature"));
	json_int_t size = json_integer_value(json_object_get(m, "size"));
	json_decref(m);
	if (!hex64(announced)) {
		fail("fetch %s: the server's metadata has no valid sha256", key);
		goto out;
	}
	if (strcmp(mkey, key)) {
		fail("fetch %s: the server's metadata is for key %.64s; refusing it", key, mkey);
		goto out;
	}
	/* Signed: what the bytes must hash to (checked below) is what a trusted
	 * key vouched for, for this key and target. */
	coil_err serr = {0};
	if (trust_count(c->trust) && trust_verify(c->trust, key, announced, mtarget, msig, &serr) != 0) {
		fail("fetch: %s", serr.msg);
		goto out;
	}
	if (sha256 && strcmp(announced, sha256)) {
		fail("fetch %s: the server now has an artifact with sha256 %s, not the expected %s; refusing it", key,
		     announced, sha256);
		goto out;
	}

	snprintf(path, sizeof path, "/v1/artifacts/%s/graph", key);
	if (http(c, t, "GET", path, NULL, NULL, 0, &status, &graph, &h) != 0)
		goto out;
	if (status != 200) {
		http_fail("fetch graph", status, &graph);
		goto out;
	}

	snprintf(path, sizeof path, "/v1/artifacts/%s", key);
	if (http(c, t, "GET", path, NULL, NULL, 0, &status, &so, &h) != 0)
		goto out;
	if (status != 200) {
		http_fail("fetch artifact", status, &so);
		goto out;
	}
	/* The bytes must be what was announced, twice over. */
	char actual[65];
	coil_err err = {0};
	if (cache_sha256_bytes(so.p ? so.p : "", so.len, actual, &err) != 0) {
		fail("fetch %s: %s", key, err.msg);
		goto out;
	}
	if (strcmp(actual, announced) || strcmp(h.etag, announced) || (json_int_t)so.len != size) {
		fail("fetch %s: the downloaded artifact (%zu bytes, sha256 %s) does not match what the server announced "
		     "(%lld bytes, sha256 %s, ETag %s); refusing it",
		     key, so.len, actual, (long long)size, announced, h.etag[0] ? h.etag : "none");
		goto out;
	}
	if (cache_store_bytes(lc, key, so.p ? so.p : "", so.len, graph.p ? graph.p : "", graph.len, meta.p, &err) != 0) {
		fail("fetch %s: storing in the local cache: %s", key, err.msg);
		goto out;
	}
	char p[CACHE_PATH_MAX];
	if (cache_entry_paths(lc, key, p, NULL, sizeof p, &err) != 0) {
		fail("fetch %s: %s", key, err.msg);
		goto out;
	}
	if (strlen(p) >= cap) {
		fail("coil_fetch: path buffer of %zu bytes is too small", cap);
		goto out;
	}
	memcpy(path_out, p, strlen(p) + 1);
	rc = 1;
out:
	free(meta.p);
	free(graph.p);
	free(so.p);
	if (rc < 0 && c->ntier > 1) {
		char m[sizeof last_error];
		snprintf(m, sizeof m, "%s", last_error);
		fail("%s: %s", c->tier[t], m);
	}
	return rc;
}

int coil_fetch(coil_client *c, const char *key, const char *sha256, char *path_out, size_t cap)
{
	if (!hex64(key))
		return fail("coil_fetch: '%.80s' is not a cache key (64 lowercase hex digits)", key ? key : "");
	if (sha256 && !hex64(sha256))
		return fail("coil_fetch: '%.80s' is not a SHA-256 (64 lowercase hex digits)", sha256);
	coil_cache *lc = local_cache(c);
	if (!lc)
		return -1;
	int have = local_copy(c, lc, key, sha256, path_out, cap);
	if (have != 0)
		return have > 0 ? 0 : -1;
	/* The tiers in order, nearest first: one that lacks it or fails is
	 * passed over; the first failure is what is reported if none has it. */
	char first[sizeof last_error] = "";
	for (int t = 0; t < c->ntier; t++) {
		int rc = fetch_from(c, t, lc, key, sha256, path_out, cap);
		if (rc > 0) {
			c->last_tier = t;
			return 0;
		}
		if (rc < 0 && !first[0])
			snprintf(first, sizeof first, "%s", last_error);
	}
	if (first[0])
		return fail("%s", first);
	return fail("fetch %s: HTTP 404 (not_found): no artifact with this key at %s%s", key, c->tier[0],
		    c->ntier > 1 ? " or any later tier" : "");
}

/* ---- targets ---- */

int coil_target_supported(const char *target)
{
	coil_err err = {0};
	/* an artifact names a resolved target, never "native" */
	if (!target || !strcmp(target, "native") || !target_get(target, &err))
		return -1;
	return target_runs_here(target) ? 1 : 0;
}

/* 0 if this CPU runs target, else -1 with the error naming what is missing. */
static int check_target(const char *path, const char *target)
{
	coil_err err = {0};
	return artifact_target_check(path, target, &err) ? fail("%s", err.msg) : 0;
}

/* ---- modules ---- */

struct coil_module {
	coil_artifact *a; /* client/artifact.h: dlopen, ABI version, describe, target check */
	char *describe;
};

struct coil_instance {
	coil_module *m;
	coil_model *model;
};

/* coil_module_open without the environment's trust (the caller checked). */
static int module_open(const char *path, const char *sha256, const char *target, coil_module **out);

int coil_module_open(const char *path, const char *sha256, const char *target, coil_module **out)
{
	*out = NULL;
	coil_err err = {0};
	coil_trust *t = NULL;
	if (trust_from_env(&t, &err) != 0)
		return fail("%s: %s", path, err.msg);
	if (!t)
		return module_open(path, sha256, target, out);
	/* Trusted keys: the signature file beside it says what it must be. */
	char key[65], ssha[65], starget[64], sig[SIGN_STR_MAX];
	int rc = artifact_sig_read(path, key, ssha, starget, sig, &err) ||
		 trust_verify(t, key, ssha, starget, sig, &err);
	trust_free(t);
	if (rc)
		return fail("%s", err.msg);
	if ((sha256 && strcmp(sha256, ssha)) || (target && strcmp(target, starget)))
		return fail("%s: its signature is for sha256 %.12s... and target '%s', not the ones given; refusing it",
			    path, ssha, starget);
	return module_open(path, ssha, starget, out);
}

static int module_open(const char *path, const char *sha256, const char *target, coil_module **out)
{
	*out = NULL;
	coil_err err = {0};
	if (sha256 && !hex64(sha256))
		return fail("%s: '%.80s' is not a SHA-256 (64 lowercase hex digits)", path, sha256);
	/* Before dlopen: the target the metadata names.  artifact_open checks
	 * the one the artifact itself describes before running anything else. */
	if (target && check_target(path, target) != 0)
		return -1;
	coil_module *m = calloc(1, sizeof *m);
	if (!m)
		return fail("out of memory");
	/* With a digest: the bytes checked are the bytes loaded (a sealed copy). */
	if ((sha256 ? artifact_open_verified(path, sha256, &m->a, &err) : artifact_open(path, &m->a, &err)) != 0) {
		free(m);
		return fail("%s", err.msg);
	}
	if (target && strcmp(target, m->a->target)) {
		fail("%s: the artifact says target '%s', its metadata said '%s'; refusing it", path, m->a->target, target);
		coil_module_close(m);
		return -1;
	}
	if (!(m->describe = strdup(m->a->describe()))) {
		coil_module_close(m);
		return fail("out of memory");
	}
	*out = m;
	return 0;
}

void coil_module_close(coil_module *m)
{
	if (!m)
		return;
	artifact_close(m->a);
	free(m->describe);
	free(m);
}

const char *coil_module_describe(const coil_module *m)
{
	return m->describe;
}

const char *coil_module_target(const coil_module *m)
{
	return m->a->target;
}

int coil_client_load(coil_client *c, const char *key, coil_module **out)
{
	*out = NULL;
	char path[CACHE_PATH_MAX], sha[65], target[64] = "", sig[SIGN_STR_MAX];
	if (coil_fetch(c, key, NULL, path, sizeof path) != 0)
		return -1;
	coil_err err = {0};
	/* The metadata the module is opened by, checked again (signed) here. */
	if (cache_entry_verify(c->cache, c->trust, key, sha, target, sig, &err) != 1)
		return fail("load %s: %s", key, err.msg[0] ? err.msg : "local cache: entry vanished");
	return module_open(path, sha, target[0] ? target : NULL, out);
}

/* ---- instances ---- */

static int artifact_fail(coil_module *m, const char *what)
{
	const char *e = m->a->last_error();
	return fail("%s: %s", what, e && *e ? e : "failed");
}

int coil_instance_create(coil_module *m, const void *const *params, int nparams, int nthreads, coil_instance **out)
{
	*out = NULL;
	coil_instance *in = calloc(1, sizeof *in);
	if (!in)
		return fail("out of memory");
	in->m = m;
	if (m->a->create(params, nparams, nthreads, &in->model) != 0) {
		free(in);
		return artifact_fail(m, "coil_model_create");
	}
	*out = in;
	return 0;
}

int coil_instance_output_shape(coil_instance *in, const int64_t *const *input_shapes, int output, int64_t *shape)
{
	int rank = in->m->a->output_shape(in->model, input_shapes, output, shape);
	if (rank < 0)
		return artifact_fail(in->m, "coil_model_output_shape");
	return rank;
}

int coil_instance_run(coil_instance *in, const void *const *inputs, const int64_t *const *input_shapes,
		      void *const *outputs)
{
	if (in->m->a->run(in->model, inputs, input_shapes, outputs) != 0)
		return artifact_fail(in->m, "coil_model_run");
	return 0;
}

void coil_instance_destroy(coil_instance *in)
{
	if (!in)
		return;
	in->m->a->destroy(in->model);
	free(in);
}
