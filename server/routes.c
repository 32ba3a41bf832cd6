/* coild's routes, one handler each (docs/api.md is their contract).  They run
 * on libmicrohttpd's threads after http.c has checked the path, the method,
 * the token and the key or job id in the path. */
#include "server/server.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "codegen/codegen.h"

static const char *arg(request *r, const char *name)
{
	return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

/* This server's build identity: with the graph hash, target and options, all
 * a key is made of (compile_key), so that a client can check a key. */
static json_t *build_json(void)
{
	return json_pack("{s:s, s:s, s:s}", "compiler", compile_compiler_identity(), "codegen",
			 compile_codegen_version(), "dnnl", compile_dnnl_version());
}

/* The answer to a compile: where the artifact is and how it came about. */
static json_t *result_json(const compile_result *res, const char *job_id)
{
	char url[128];
	snprintf(url, sizeof url, "/v1/artifacts/%s", res->key);
	json_t *o = json_pack("{s:s, s:s, s:I, s:b, s:f, s:s, s:s, s:s}", "key", res->key, "sha256", res->sha256,
			      "size", (json_int_t)res->size, "hit", res->hit, "compile_ms", round(res->compile_ms * 1e3) / 1e3, "target",
			      res->target, "graph_hash", res->graph_hash, "url", url);
	if (!o)
		return NULL;
	snprintf(url, sizeof url, "/v1/artifacts/%s/meta", res->key);
	json_object_set_new(o, "meta_url", json_string(url));
	if (res->signature[0])
		json_object_set_new(o, "signature", json_string(res->signature));
	json_object_set_new(o, "build", build_json());
	if (job_id)
		json_object_set_new(o, "job", json_string(job_id));
	return o;
}

static json_t *job_json(const job_view *v)
{
	char url[64];
	snprintf(url, sizeof url, "/v1/jobs/%s", v->id);
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:f}", "id", v->id, "status", job_state_name(v->state), "key", v->key,
			      "url", url, "queued_ms", v->queued_ms);
	if (!o)
		return NULL;
	if (v->state == JOB_DONE)
		json_object_set_new(o, "result", result_json(&v->res, NULL));
	if (v->state == JOB_FAILED) {
		json_t *e = error_json(v->err.code, v->err.node, v->err.msg);
		json_object_update(o, e);
		json_decref(e);
		json_object_set_new(o, "http_status", json_integer(err_status(v->err.code)));
	}
	return o;
}

/* Seconds a client refused for a full queue should wait: the queue ahead of
 * it at the average compile time, spread over the workers; 1..60. */
static int retry_after(coild *s)
{
	uint64_t n = atomic_load(&s->metrics.compile_count);
	double avg = n ? (double)atomic_load(&s->metrics.compile_us_sum) / 1e6 / (double)n : 1.0;
	int queued, running;
	jobs_depth(&s->jobs, &queued, &running);
	double t = ceil(avg * (queued + 1) / s->cfg.workers);
	return t < 1 ? 1 : t > 60 ? 60 : (int)t;
}

/* The fast path: a plan whose key is already cached is answered on this
 * thread, without a job.  Returns 1 on a hit (res filled), 0 otherwise. */
static int try_hit(request *r, compile_plan *p, compile_result *res)
{
	coil_err err = {0};
	coil_cache *c = cache_get(r->s, &err);
	if (!c)
		return 0;
	int hit = 0;
	uint64_t size;
	char sha[65], *meta = NULL;
	if (cache_get_meta(c, p->key, &meta, sha, &size, &err) == 1 &&
	    cache_lookup(c, p->key, p->canon, p->canon_len, res->path, sizeof res->path, &err) == 1) {
		memcpy(res->key, p->key, sizeof res->key);
		memcpy(res->graph_hash, p->graph_hash, sizeof res->graph_hash);
		memcpy(res->sha256, sha, sizeof res->sha256);
		snprintf(res->target, sizeof res->target, "%s", p->target);
		res->size = size;
		res->hit = 1;
		res->compile_ms = 0;
		res->arena_bytes = -1;
		json_t *m = meta ? json_loads(meta, 0, NULL) : NULL;
		const char *sig = json_string_value(json_object_get(m, "signature"));
		snprintf(res->signature, sizeof res->signature, "%s", sig && strlen(sig) < SIGN_STR_MAX ? sig : "");
		json_decref(m);
		hit = 1;
	}
	free(meta);
	cache_put(r->s, c);
	return hit;
}

/* 503 for a full queue, 429 for a tenant over its share: with Retry-After. */
static enum MHD_Result reply_busy(request *r, int code, const char *msg)
{
	char secs[16];
	snprintf(secs, sizeof secs, "%d", retry_after(r->s));
	return reply_fail(r, code, NULL, msg, NULL, MHD_HTTP_HEADER_RETRY_AFTER, secs);
}

enum MHD_Result route_compile(request *r)
{
	coild *s = r->s;
	compile_request cr;
	coil_err err = {0};
	if (compile_request_parse(r->body, r->len, arg(r, "target"), arg(r, "opt_level"), arg(r, "async"),
				  s->cfg.max_nodes, &cr, &err) != 0)
		return reply_err(r, &err);
	cr.opts.timeout_s = s->cfg.compile_timeout_s;
	cr.opts.sandbox_mem_bytes = s->cfg.compile_mem;
	cr.opts.sandbox_pids = s->cfg.compile_pids;
	cr.opts.max_nodes = s->cfg.max_nodes;
	cr.opts.signer = s->signer;
	int async = cr.async;

	compile_plan *plan = NULL;
	int rc = compile_plan_graph(cr.g, &cr.opts, &plan, &err); /* takes the graph */
	cr.g = NULL;
	if (rc != 0)
		return reply_err(r, &err);
	snprintf(r->note, sizeof r->note, "key=%s", plan->key);

	compile_result *res = calloc(1, sizeof *res);
	if (!res) {
		compile_plan_free(plan);
		return reply_error(r, COIL_E_RESOURCE, "out of memory");
	}
	if (try_hit(r, plan, res)) {
		compile_plan_free(plan);
		atomic_fetch_add(&s->metrics.hits, 1);
		snprintf(r->note, sizeof r->note, "key=%s hit=1", res->key);
		enum MHD_Result ret = reply_json(r, 200, result_json(res, NULL));
		free(res);
		return ret;
	}
	free(res);
	atomic_fetch_add(&s->metrics.misses, 1);

	int joined, refused;
	char tenant[TENANT_MAX];
	if (r->token >= 0)
		snprintf(tenant, sizeof tenant, "token %d", r->token);
	else
		request_client(r, tenant, sizeof tenant);
	job *j = jobs_submit(&s->jobs, plan, tenant, r->token, &joined, &refused); /* takes plan */
	if (!j) {
		if (refused == ERR_UNAVAILABLE)
			return reply_error(r, ERR_UNAVAILABLE, "the server is shutting down");
		atomic_fetch_add(&s->metrics.rejected, 1);
		if (refused == ERR_TOO_MANY)
			return reply_busy(r, ERR_TOO_MANY, "this tenant already has its share of the compile queue waiting;"
						       " retry later");
		return reply_busy(r, COIL_E_RESOURCE, "the compile queue is full; retry later");
	}
	if (joined)
		atomic_fetch_add(&s->metrics.joins, 1);
	r->job = j;
	r->async = async;
	if (async) {
		job_view v;
		jobs_view(&s->jobs, j, &v);
		snprintf(r->note, sizeof r->note, "key=%s job=%s", v.key, v.id);
		char loc[64];
		snprintf(loc, sizeof loc, "/v1/jobs/%s", v.id);
		json_t *o2 = job_json(&v);
		char *t = o2 ? json_dumps(o2, JSON_COMPACT) : NULL;
		json_decref(o2);
		struct MHD_Response *resp = t ? MHD_create_response_from_buffer(strlen(t), t, MHD_RESPMEM_MUST_FREE) : NULL;
		if (!resp) {
			free(t);
			return MHD_NO;
		}
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
		MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, loc);
		return reply(r, 202, resp, strlen(t));
	}
	if (jobs_wait(&s->jobs, j, r->conn))
		return MHD_YES; /* resumed when the job finishes */
	return route_compile_resume(r);
}

enum MHD_Result route_compile_resume(request *r)
{
	job_view v;
	jobs_view(&r->s->jobs, r->job, &v);
	switch (v.state) {
	case JOB_DONE:
		snprintf(r->note, sizeof r->note, "key=%s hit=%d job=%s", v.key, v.res.hit, v.id);
		return reply_json(r, 200, result_json(&v.res, v.id));
	case JOB_FAILED:
		snprintf(r->note, sizeof r->note, "key=%s job=%s", v.key, v.id);
		return reply_fail(r, v.err.code, v.err.node, v.err.msg, json_pack("{s:s, s:s}", "key", v.key, "job", v.id),
				  NULL, NULL);
	default:
		return reply_json(r, 202, job_json(&v));
	}
}

/* Metadata of the path's key: 1 present, 0 absent (404 queued), -1 (500
 * queued).  *ret holds the queued response when not 1. */
static int lookup(request *r, char **meta, char sha[65], uint64_t *size, char *so, char *graph,
		  enum MHD_Result *ret)
{
	coil_err err = {0};
	coil_cache *c = cache_get(r->s, &err);
	if (!c) {
		*ret = reply_err(r, &err);
		return -1;
	}
	int rc = cache_get_meta(c, r->param, meta, sha, size, &err);
	/* a fetch that misses asks the tiers above (a delete does not) */
	if (rc == 0 && r->route != ROUTE_ARTIFACT_DELETE &&
	    upstream_fill(r->s, r->param, MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Coil-Via"))) {
		snprintf(r->note, sizeof r->note, "key=%s upstream=1", r->param);
		rc = cache_get_meta(c, r->param, meta, sha, size, &err);
	}
	if (rc == 1 && cache_entry_paths(c, r->param, so, graph, CACHE_PATH_MAX, &err) != 0)
		rc = -1;
	cache_put(r->s, c);
	if (rc < 0)
		*ret = reply_err(r, &err);
	else if (rc == 0)
		*ret = reply_error(r, ERR_NOT_FOUND, "no artifact with key %s", r->param);
	return rc;
}

/* A response that streams the file at path, which must be size bytes. */
static struct MHD_Response *file_response(request *r, const char *path, uint64_t size, enum MHD_Result *ret)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0) {
		*ret = errno == ENOENT ? reply_error(r, ERR_NOT_FOUND, "artifact %s was removed", r->param)
				       : reply_error(r, COIL_E_IO, "artifact %s cannot be opened: %s", r->param,
						     strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size) {
		close(fd);
		*ret = reply_error(r, COIL_E_IO, "artifact %s: the file does not match its index entry", r->param);
		return NULL;
	}
	struct MHD_Response *resp = MHD_create_response_from_fd((uint64_t)size, fd);
	if (!resp) {
		close(fd);
		*ret = MHD_NO;
	}
	return resp;
}

/* An artifact, its metadata and its graph never change under their key (a
 * key names one graph, target, build and options; a deleted entry rebuilt
 * is the same), so HTTP caches may keep them: shared caches (nginx's
 * proxy_cache) only when no token guards them. */
static void immutable(request *r, struct MHD_Response *resp)
{
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL,
				r->s->auth.n ? "private, max-age=31536000, immutable" : "public, max-age=31536000, immutable");
}

/* The "signature" of stored metadata into sig ("" if none). */
static void meta_signature(const char *meta, char sig[SIGN_STR_MAX])
{
	json_t *m = meta ? json_loads(meta, 0, NULL) : NULL;
	const char *v = json_string_value(json_object_get(m, "signature"));
	snprintf(sig, SIGN_STR_MAX, "%s", v && strlen(v) < SIGN_STR_MAX && !strpbrk(v, "\r\n") ? v : "");
	json_decref(m);
}

enum MHD_Result route_artifact(request *r, int head)
{
	char sha[65], *so = malloc(CACHE_PATH_MAX), *meta = NULL, sig[SIGN_STR_MAX];
	uint64_t size;
	enum MHD_Result ret;
	if (!so)
		return reply_error(r, COIL_E_RESOURCE, "out of memory");
	if (lookup(r, &meta, sha, &size, so, NULL, &ret) != 1) {
		free(so);
		return ret;
	}
	meta_signature(meta, sig);
	free(meta);
	char etag[72];
	snprintf(etag, sizeof etag, "\"%s\"", sha);
	snprintf(r->note, sizeof r->note, "key=%s", r->param);
	const char *inm = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
	if (etag_matches(inm, sha)) {
		free(so);
		struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
		if (!resp)
			return MHD_NO;
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag);
		return reply(r, 304, resp, 0);
	}
	struct MHD_Response *resp = file_response(r, so, size, &ret);
	free(so);
	if (!resp)
		return ret;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag);
	immutable(r, resp);
	if (sig[0])
		MHD_add_response_header(resp, "X-Coil-Signature", sig);
	if (!head)
		atomic_fetch_add(&r->s->metrics.bytes_served, size);
	return reply(r, 200, resp, size);
}

enum MHD_Result route_artifact_meta(request *r)
{
	char sha[65], *meta = NULL;
	uint64_t size;
	enum MHD_Result ret;
	if (lookup(r, &meta, sha, &size, NULL, NULL, &ret) != 1)
		return ret;
	/* The stored metadata's fields, then the index's facts over them. */
	json_t *o = meta ? json_loads(meta, 0, NULL) : NULL;
	free(meta);
	if (!json_is_object(o)) {
		json_decref(o);
		o = json_object();
	}
	char url[128];
	json_object_set_new(o, "key", json_string(r->param));
	json_object_set_new(o, "sha256", json_string(sha));
	json_object_set_new(o, "size", json_integer((json_int_t)size));
	snprintf(url, sizeof url, "/v1/artifacts/%s", r->param);
	json_object_set_new(o, "url", json_string(url));
	snprintf(url, sizeof url, "/v1/artifacts/%s/graph", r->param);
	json_object_set_new(o, "graph_url", json_string(url));
	return reply_json_with(r, 200, o, immutable);
}

enum MHD_Result route_artifact_graph(request *r)
{
	char sha[65], *graph = malloc(CACHE_PATH_MAX);
	uint64_t size;
	enum MHD_Result ret;
	if (!graph)
		return reply_error(r, COIL_E_RESOURCE, "out of memory");
	if (lookup(r, NULL, sha, &size, NULL, graph, &ret) != 1) {
		free(graph);
		return ret;
	}
	struct stat st;
	if (stat(graph, &st) != 0) {
		free(graph);
		return reply_error(r, ERR_NOT_FOUND, "artifact %s was removed", r->param);
	}
	struct MHD_Response *resp = file_response(r, graph, (uint64_t)st.st_size, &ret);
	free(graph);
	if (!resp)
		return ret;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	immutable(r, resp);
	return reply(r, 200, resp, (uint64_t)st.st_size);
}

enum MHD_Result route_artifact_delete(request *r)
{
	char sha[65];
	uint64_t size;
	enum MHD_Result ret;
	if (lookup(r, NULL, sha, &size, NULL, NULL, &ret) != 1)
		return ret;
	coil_err err = {0};
	coil_cache *c = cache_get(r->s, &err);
	if (!c || cache_remove(c, r->param, &err) != 0) {
		if (c)
			cache_put(r->s, c);
		return reply_err(r, &err);
	}
	cache_put(r->s, c);
	snprintf(r->note, sizeof r->note, "key=%s deleted", r->param);
	return reply_json(r, 200, json_pack("{s:s, s:b}", "key", r->param, "deleted", 1));
}

enum MHD_Result route_job(request *r)
{
	/* A token reads the jobs it submitted (an admin token any job): another
	 * token's is answered as unknown. */
	job *j = jobs_find(&r->s->jobs, r->param, r->admin ? -1 : r->token);
	if (!j)
		return reply_error(r, ERR_NOT_FOUND, "no job %s (unknown, or finished more than %d seconds ago)", r->param,
				   r->s->cfg.job_ttl_s);
	job_view v;
	jobs_view(&r->s->jobs, j, &v);
	jobs_release(&r->s->jobs, j);
	return reply_json(r, 200, job_json(&v));
}

/* The named targets (codegen/target.c), most portable first, and which one
 * "native" means on this server. */
enum MHD_Result route_targets(request *r)
{
	json_t *list = json_array();
	for (int i = 0; i < target_count(); i++) {
		const coil_target *t = target_at(i);
		char feats[256];
		target_feature_list(t, feats, sizeof feats);
		json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:b}", "name", t->name, "flags", t->flags,
						      "features", feats, "runs_here", target_runs_here(t->name)));
	}
	json_t *o = json_pack("{s:s, s:o, s:o}", "native", r->s->native_target, "targets", list, "build", build_json());
	if (o && r->s->signer)
		json_object_set_new(o, "signing_key", json_string(sign_key_public(r->s->signer)));
	return reply_json(r, 200, o);
}

enum MHD_Result route_healthz(request *r)
{
	coild *s = r->s;
	int queued, running;
	jobs_depth(&s->jobs, &queued, &running);
	if (atomic_load(&s->stopping))
		return reply_fail(r, ERR_UNAVAILABLE, NULL, "the server is shutting down",
				  json_pack("{s:s}", "status", "stopping"), NULL, NULL);
	return reply_json(r, 200, json_pack("{s:s, s:f, s:i, s:i, s:i}", "status", "ok", "uptime_s",
					    (double)(clock_ms64() - s->started_ms) / 1e3, "workers", s->cfg.workers,
					    "queue_depth", queued, "running", running));
}

enum MHD_Result route_metrics(request *r)
{
	char *text = metrics_render(r->s);
	if (!text)
		return reply_error(r, COIL_E_RESOURCE, "out of memory");
	size_t n = strlen(text);
	struct MHD_Response *resp = MHD_create_response_from_buffer(n, text, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
	return reply(r, 200, resp, n);
}

/* ---- dynamic decisions (docs/api.md): small JSON files beside the cache's
 * artifacts, DIR/decisions/KEY.json, merged under the directory's flock ---- */

#define DECISION_FILE_MAX 65536

/* The decisions directory of the server's cache, created as needed (0), or
 * -1 with a reply queued in *ret. */
static int decisions_dir(request *r, char *dir, size_t cap, enum MHD_Result *ret)
{
	coil_err err = {0};
	coil_cache *c = cache_get(r->s, &err);
	if (!c) {
		*ret = reply_err(r, &err);
		return -1;
	}
	snprintf(dir, cap, "%s/decisions", cache_dir(c));
	cache_put(r->s, c);
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		*ret = reply_error(r, COIL_E_RESOURCE, "cannot create the decisions directory: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* The stored decision of key (malloc'd, NUL-terminated; *len its length),
 * or NULL when there is none. */
static char *decision_load(const char *dir, const char *key, size_t *len)
{
	char path[CACHE_PATH_MAX + 96];
	snprintf(path, sizeof path, "%s/%s.json", dir, key);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return NULL;
	char *buf = malloc(DECISION_FILE_MAX + 1);
	ssize_t n = buf ? read(fd, buf, DECISION_FILE_MAX + 1) : -1;
	close(fd);
	if (n < 0 || n > DECISION_FILE_MAX) {
		free(buf);
		return NULL;
	}
	buf[n] = 0;
	*len = (size_t)n;
	return buf;
}

enum MHD_Result route_decision(request *r, int head)
{
	char dir[CACHE_PATH_MAX];
	enum MHD_Result ret;
	(void)head; /* reply() sends no body for HEAD */
	if (decisions_dir(r, dir, sizeof dir, &ret))
		return ret;
	size_t len = 0;
	char *text = decision_load(dir, r->param, &len);
	json_t *o = text ? json_loadb(text, len, 0, NULL) : NULL;
	free(text);
	if (!json_is_object(o)) {
		json_decref(o);
		return reply_error(r, ERR_NOT_FOUND, "no decision %s", r->param);
	}
	return reply_json(r, 200, o);
}

enum MHD_Result route_decision_put(request *r)
{
	char dir[CACHE_PATH_MAX], path[CACHE_PATH_MAX + 96], tmp[CACHE_PATH_MAX + 128];
	enum MHD_Result ret;
	coil_err err = {0};
	if (decisions_dir(r, dir, sizeof dir, &ret))
		return ret;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || flock(dfd, LOCK_EX) != 0) {
		if (dfd >= 0)
			close(dfd);
		return reply_error(r, COIL_E_RESOURCE, "cannot lock the decisions directory: %s", strerror(errno));
	}
	size_t slen = 0;
	char *stored = decision_load(dir, r->param, &slen), *merged = NULL;
	int rc = decision_merge(stored, slen, r->body ? r->body : "", r->len, &merged, &err);
	free(stored);
	if (rc != 0) {
		close(dfd); /* the lock goes with it */
		return reply_err(r, &err);
	}
	snprintf(path, sizeof path, "%s/%s.json", dir, r->param);
	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	errno = 0;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	size_t n = strlen(merged);
	int ok = fd >= 0 && write(fd, merged, n) == (ssize_t)n && fsync(fd) == 0;
	int saved = errno;
	if (fd >= 0)
		close(fd);
	ok = ok && rename(tmp, path) == 0;
	if (!ok) {
		saved = saved ? saved : errno;
		unlink(tmp);
		close(dfd);
		free(merged);
		return reply_error(r, saved == ENOSPC ? ERR_DISK_FULL : COIL_E_RESOURCE, "cannot store the decision: %s",
				   strerror(saved));
	}
	close(dfd);
	json_t *o = json_loads(merged, 0, NULL);
	free(merged);
	return o ? reply_json(r, 200, o) : reply_error(r, COIL_E_RESOURCE, "out of memory");
}
