/* What coild reads from a request, as pure functions of strings: routing,
 * the key and job id patterns, headers, query arguments and the compile
 * request's body.  No I/O and no libmicrohttpd here, so that tests and the
 * fuzzer (tests/fuzz/fuzz_http.c) drive exactly the code the server runs. */
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

static const route_def routes[] = {
	{ROUTE_COMPILE, "/v1/compile", M_POST, ROLE_COMPILE},
	{ROUTE_ARTIFACT, "/v1/artifacts/{key}", M_GET | M_HEAD, ROLE_READ},
	{ROUTE_ARTIFACT_DELETE, "/v1/artifacts/{key}", M_DELETE, ROLE_ADMIN},
	{ROUTE_ARTIFACT_META, "/v1/artifacts/{key}/meta", M_GET | M_HEAD, ROLE_READ},
	{ROUTE_ARTIFACT_GRAPH, "/v1/artifacts/{key}/graph", M_GET | M_HEAD, ROLE_READ},
	{ROUTE_JOB, "/v1/jobs/{id}", M_GET | M_HEAD, ROLE_COMPILE | ROLE_ADMIN},
	{ROUTE_TARGETS, "/v1/targets", M_GET | M_HEAD, ROLE_READ},
	{ROUTE_HEALTHZ, "/healthz", M_GET | M_HEAD, 0},
	{ROUTE_METRICS, "/metrics", M_GET | M_HEAD, ROLE_READ},
	{ROUTE_DECISION, "/v1/decisions/{key}", M_GET | M_HEAD, ROLE_READ},
	{ROUTE_DECISION_PUT, "/v1/decisions/{key}", M_POST, ROLE_COMPILE},
};
#define NROUTES (sizeof routes / sizeof routes[0])

unsigned http_method_bit(const char *m)
{
	if (!m)
		return 0;
	if (!strcmp(m, "GET"))
		return M_GET;
	if (!strcmp(m, "HEAD"))
		return M_HEAD;
	if (!strcmp(m, "POST"))
		return M_POST;
	if (!strcmp(m, "DELETE"))
		return M_DELETE;
	return 0;
}

int route_match(const char *pattern, const char *url, char *param, size_t cap)
{
	const char *p = pattern, *u = url;
	if (cap) /* a pattern without a placeholder matches with an empty parameter */
		param[0] = 0;
	while (*p) {
		if (*p == '{') {
			const char *close = strchr(p, '}');
			size_t n = strcspn(u, "/");
			if (!close || n == 0)
				return 0;
			if (cap)
				snprintf(param, cap, "%.*s", (int)(n < 4096 ? n : 4096), u);
			u += n;
			p = close + 1;
			continue;
		}
		if (*p++ != *u++)
			return 0;
	}
	return *u == 0;
}

const route_def *route_find(const char *method, const char *url, char *param, size_t cap, int *path_known,
			    unsigned *allowed)
{
	unsigned m = http_method_bit(method);
	char tmp[sizeof ((request *)0)->param] = "";
	*path_known = 0;
	*allowed = 0;
	if (cap)
		param[0] = 0;
	for (size_t i = 0; url && i < NROUTES; i++) {
		if (!route_match(routes[i].pattern, url, tmp, sizeof tmp))
			continue;
		*path_known = 1;
		*allowed |= routes[i].methods;
		if (routes[i].methods & m) {
			if (cap)
				snprintf(param, cap, "%s", tmp);
			return &routes[i];
		}
	}
	return NULL;
}

void route_allow_list(unsigned allowed, char *buf, size_t cap)
{
	static const char *const names[] = {"GET", "HEAD", "POST", "DELETE"};
	size_t used = 0;
	buf[0] = 0;
	for (int b = 0; b < 4; b++)
		if (allowed & (1u << b)) {
			int n = snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", names[b]);
			if (n < 0 || (size_t)n >= cap - used)
				return;
			used += (size_t)n;
		}
}

int job_id_valid(const char *id)
{
	if (!id)
		return 0;
	size_t i = 0;
	for (; id[i]; i++)
		if (i >= JOB_ID_HEX || !((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
			return 0;
	return i == JOB_ID_HEX;
}

int content_type_ok(const char *ct)
{
	static const char *const ok[] = {"application/json", "text/plain", "application/octet-stream",
					 "application/x-www-form-urlencoded" /* curl --data-binary's default */};
	if (!ct || !*ct)
		return 1;
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		size_t n = strlen(ok[i]);
		if (!strncasecmp(ct, ok[i], n) && (ct[n] == 0 || ct[n] == ';'))
			return 1;
	}
	const char *semi = strchr(ct, ';');
	size_t n = semi ? (size_t)(semi - ct) : strlen(ct);
	return n >= 5 && !strncasecmp(ct + n - 5, "+json", 5);
}

int content_length_over(const char *cl, uint64_t max, unsigned long long *n)
{
	*n = 0;
	if (!cl)
		return 0;
	char *end;
	unsigned long long v = strtoull(cl, &end, 10);
	if (end == cl)
		return 0;
	*n = v;
	return v > max;
}

int etag_matches(const char *inm, const char *sha)
{
	if (!inm || !sha || !*sha)
		return 0;
	if (!strcmp(inm, "*"))
		return 1;
	return strstr(inm, sha) != NULL;
}

int query_truthy(const char *v)
{
	return v && (!*v || !strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes"));
}

void one_line(char *s)
{
	for (; s && *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = ' ';
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int uri_clean(const char *raw)
{
	for (const char *p = raw; p && *p; p++) {
		int c = (unsigned char)*p;
		if (c == '%' && hexval(p[1]) >= 0 && hexval(p[2]) >= 0)
			c = hexval(p[1]) * 16 + hexval(p[2]);
		if (c < 0x20 || c == 0x7f)
			return 0;
	}
	return 1;
}

/* 1 if s is one or more decimal digits and nothing else. */
static int all_digits(const char *s)
{
	if (!s || !*s)
		return 0;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return 0;
	return 1;
}

int framing_check(const framing *f, coil_err *err)
{
	int v11 = f->version && !strcmp(f->version, "HTTP/1.1");
	if (f->n_length > 1)
		return coil_err_input(err, "the request has %d Content-Length headers; send one", f->n_length);
	if (f->n_length == 1 && !all_digits(f->length))
		return coil_err_input(err, "Content-Length '%.40s' is not a number of bytes", f->length);
	if (f->n_encoding > 1)
		return coil_err_input(err, "the request has %d Transfer-Encoding headers; send one", f->n_encoding);
	if (f->n_encoding && f->n_length)
		return coil_err_input(err, "the request has both Content-Length and Transfer-Encoding; send one");
	if (f->n_encoding && strcasecmp(f->encoding ? f->encoding : "", "chunked"))
		return coil_err_input(err, "Transfer-Encoding '%.40s' is not supported (only chunked)",
				      f->encoding ? f->encoding : "");
	if (f->n_encoding && !v11)
		return coil_err_input(err, "Transfer-Encoding needs HTTP/1.1");
	if (f->n_host > 1)
		return coil_err_input(err, "the request has %d Host headers; send one", f->n_host);
	if (v11 && f->n_host == 0)
		return coil_err_input(err, "an HTTP/1.1 request needs a Host header");
	return 0;
}

void compile_request_free(compile_request *cr)
{
	graph_free(cr->g);
	cr->g = NULL;
}

/* The envelope's fields into cr; -1 with err on a bad one. */
static int read_envelope(json_t *doc, compile_request *cr, coil_err *err)
{
	const char *k;
	json_t *v;
	json_object_foreach(doc, k, v) {
		if (!strcmp(k, "graph")) {
			if (!json_is_object(v))
				return coil_err_input(err, "\"graph\" must be a JSON object");
		} else if (!strcmp(k, "target")) {
			if (!json_is_string(v) || !*json_string_value(v))
				return coil_err_input(err, "\"target\" must be a non-empty string");
			snprintf(cr->target, sizeof cr->target, "%s", json_string_value(v));
			cr->opts.target = cr->target;
		} else if (!strcmp(k, "async")) {
			if (!json_is_boolean(v))
				return coil_err_input(err, "\"async\" must be true or false");
			cr->async = json_is_true(v);
		} else if (!strcmp(k, "options")) {
			if (!json_is_object(v))
				return coil_err_input(err, "\"options\" must be an object");
			const char *ok;
			json_t *ov;
			json_object_foreach(v, ok, ov) {
				if (!strcmp(ok, "precision")) {
					const char *pv = json_is_string(ov) ? json_string_value(ov) : "";
					if (strcmp(pv, "f32") && strcmp(pv, "bf16"))
						return coil_err_input(err, "\"options.precision\" must be \"f32\" or \"bf16\"");
					cr->opts.precision = !strcmp(pv, "bf16") ? COIL_BF16 : COIL_F32;
					continue;
				}
				if (!strcmp(ok, "tune_threads")) {
					if (!json_is_integer(ov) || json_integer_value(ov) < 1 || json_integer_value(ov) > 1024)
						return coil_err_input(err, "\"options.tune_threads\" must be an integer in 1..1024");
					cr->opts.tune_threads = (int)json_integer_value(ov);
					continue;
				}
				if (!strcmp(ok, "mode")) {
					int mv = json_is_string(ov) ? compile_mode_parse(json_string_value(ov)) : -1;
					if (mv < 0)
						return coil_err_input(err, "\"options.mode\" must be \"default\" or \"max-autotune\"");
					cr->opts.mode = mv;
					continue;
				}
				if (strcmp(ok, "opt_level"))
					return coil_err_input(err, "unknown option \"options.%.60s\" (known: opt_level, precision, mode, tune_threads)",
							      ok);
				if (!json_is_integer(ov) || json_integer_value(ov) < 0 || json_integer_value(ov) > 3)
					return coil_err_input(err, "\"options.opt_level\" must be an integer in 0..3");
				cr->opts.opt_level = (int)json_integer_value(ov);
			}
		} else {
			return coil_err_input(err,
					      "unknown field \"%.60s\" in the request (known: graph, target, options, async)",
					      k);
		}
	}
	return 0;
}

/* The request's JSON, parsed once (duplicate keys refused, as for a graph
 * file), its envelope read, and its graph built from the same JSON. */
static int parse_request(const char *body, size_t len, const char *q_target, const char *q_opt_level,
			 const char *q_async, int max_nodes, compile_request *cr, coil_err *err)
{
	memset(cr, 0, sizeof *cr);
	cr->async = query_truthy(q_async);
	cr->opts.opt_level = COMPILE_OPT_DEFAULT;
	if (q_target && *q_target) {
		snprintf(cr->target, sizeof cr->target, "%s", q_target);
		cr->opts.target = cr->target;
	}
	if (q_opt_level) {
		char *end;
		long v = strtol(q_opt_level, &end, 10);
		if (!*q_opt_level || *end || v < 0 || v > 3)
			return coil_err_input(err, "query argument opt_level='%.20s' is not an integer in 0..3",
					      q_opt_level);
		cr->opts.opt_level = (int)v;
	}
	if (!body || len == 0)
		return coil_err_input(err, "empty body: POST a coil graph (JSON) or {\"graph\": {...}}");
	json_t *doc = graph_json_load(body, len, err);
	if (!doc)
		return coil_err_prefix(err, "request body");
	int ret = -1;
	json_t *graph = doc;
	if (!json_is_object(doc)) {
		coil_err_input(err, "request body must be a JSON object (a coil graph or {\"graph\": {...}})");
		goto out;
	}
	if (json_object_get(doc, "graph")) {
		if (read_envelope(doc, cr, err) != 0)
			goto out;
		graph = json_object_get(doc, "graph");
	}
	/* The node limit is checked before the graph is parsed in earnest. */
	json_t *nodes = json_object_get(graph, "nodes");
	if (json_is_array(nodes) && json_array_size(nodes) > (size_t)max_nodes) {
		coil_errc(err, COIL_E_LIMIT, "graph has %zu nodes; this server accepts at most %d",
			  json_array_size(nodes), max_nodes);
		goto out;
	}
	if ((cr->g = graph_from_json(graph, err)))
		ret = 0;
out:
	json_decref(doc);
	return ret;
}

int compile_request_parse(const char *body, size_t len, const char *q_target, const char *q_opt_level,
			  const char *q_async, int max_nodes, compile_request *cr, coil_err *err)
{
	int rc = parse_request(body, len, q_target, q_opt_level, q_async, max_nodes, cr, err);
	if (rc && err)
		one_line(err->msg); /* jansson quotes the offending text, newlines and all */
	return rc;
}

/* ---- dynamic decisions ---- */

/* Reads a decision document into v[0..*n) (sorted by input, dim; a dim
 * named twice keeps its first name).  who: "the request" or "the stored
 * decision", for messages. */
typedef struct decision_dim {
	int input, dim;
	char name[DECISION_NAME_MAX + 1];
} decision_dim;

static int ident_ok(const char *s)
{
	if (!s || !*s || strlen(s) > DECISION_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
		return 0;
	for (const char *p = s; *p; p++)
		if (!(*p == '_' || (*p >= '0' && *p <= '9') || ((*p | 32) >= 'a' && (*p | 32) <= 'z')))
			return 0;
	return 1;
}

static int dd_cmp(const void *a, const void *b)
{
	const decision_dim *x = a, *y = b;
	return x->input != y->input ? x->input - y->input : x->dim - y->dim;
}

static int decision_read(const char *text, size_t len, decision_dim *v, int *n, coil_err *err)
{
	json_error_t je;
	json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	int rc = -1;
	if (!doc) {
		coil_err_input(err, "the decision is not JSON: %.80s (line %d)", je.text, je.line);
		one_line(err->msg); /* jansson quotes the text at fault */
		return -1;
	}
	const char *k;
	json_t *x;
	if (!json_is_object(doc)) {
		coil_err_input(err, "the decision must be a JSON object");
		goto out;
	}
	json_object_foreach(doc, k, x) {
		if (strcmp(k, "version") && strcmp(k, "symbolic") && strcmp(k, "module")) {
			coil_err_input(err, "unknown field \"%.40s\" in the decision (known: version, symbolic, module)", k);
			goto out;
		}
	}
	x = json_object_get(doc, "version");
	if (!json_is_integer(x) || json_integer_value(x) != 1) {
		coil_err_input(err, "\"version\" must be 1");
		goto out;
	}
	x = json_object_get(doc, "module");
	if (x && (!json_is_string(x) || json_string_length(x) > 200)) {
		coil_err_input(err, "\"module\" must be a string of at most 200 bytes");
		goto out;
	}
	json_t *sy = json_object_get(doc, "symbolic");
	if (!json_is_array(sy) || json_array_size(sy) > DECISION_MAX_DIMS) {
		coil_err_input(err, "\"symbolic\" must be an array of at most %d [input, dim, name] entries",
			       DECISION_MAX_DIMS);
		goto out;
	}
	*n = 0;
	for (size_t i = 0; i < json_array_size(sy); i++) {
		json_t *e = json_array_get(sy, i), *a = json_array_get(e, 0), *b = json_array_get(e, 1),
		       *s = json_array_get(e, 2);
		if (!json_is_array(e) || json_array_size(e) != 3 || !json_is_integer(a) || !json_is_integer(b) ||
		    json_integer_value(a) < 0 || json_integer_value(a) >= DECISION_MAX_INDEX || json_integer_value(b) < 0 ||
		    json_integer_value(b) >= DECISION_MAX_INDEX) {
			coil_err_input(err, "\"symbolic[%zu]\" must be [input, dim, name] with input and dim in 0..%d", i,
				       DECISION_MAX_INDEX - 1);
			goto out;
		}
		if (!ident_ok(json_string_value(s))) {
			coil_err_input(err, "\"symbolic[%zu][2]\" must be an identifier of at most %d characters", i,
				       DECISION_NAME_MAX);
			goto out;
		}
		decision_dim d = {(int)json_integer_value(a), (int)json_integer_value(b), ""};
		snprintf(d.name, sizeof d.name, "%s", json_string_value(s));
		int dup = 0;
		for (int j = 0; j < *n; j++)
			dup |= v[j].input == d.input && v[j].dim == d.dim;
		if (!dup)
			v[(*n)++] = d;
	}
	rc = 0;
out:
	json_decref(doc);
	return rc;
}

int decision_merge(const char *stored, size_t slen, const char *body, size_t blen, char **out, coil_err *err)
{
	decision_dim v[2 * DECISION_MAX_DIMS];
	int n = 0, m = 0;
	*out = NULL;
	if (decision_read(body, blen, v, &n, err))
		return -1;
	if (stored) {
		decision_dim old[DECISION_MAX_DIMS];
		coil_err ignore = {0};
		if (decision_read(stored, slen, old, &m, &ignore) == 0) {
			/* the stored names win for dims both name; the union stays bounded */
			for (int i = 0; i < m; i++) {
				int j = 0;
				while (j < n && !(v[j].input == old[i].input && v[j].dim == old[i].dim))
					j++;
				if (j < n)
					v[j] = old[i];
				else
					v[n++] = old[i];
			}
		}
	}
	if (n > DECISION_MAX_DIMS)
		return coil_err_input(err, "the decision would name more than %d symbolic dims", DECISION_MAX_DIMS);
	qsort(v, (size_t)n, sizeof *v, dd_cmp);
	json_t *arr = json_array(), *doc = json_pack("{s:i, s:o}", "version", 1, "symbolic", arr);
	for (int i = 0; doc && i < n; i++)
		json_array_append_new(arr, json_pack("[i, i, s]", v[i].input, v[i].dim, v[i].name));
	*out = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_decref(doc);
	return *out ? 0 : coil_err_oom(err);
}
