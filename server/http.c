/* The HTTP side of coild, on libmicrohttpd: the daemon (internal polling with
 * a thread pool, suspend/resume for requests waiting on a compile), one
 * request's life, JSON responses, the log line, and the pool of cache handles
 * the handler threads borrow.
 *
 * A request's life:
 *   raw target      (the URI log callback) a control character in the
 *                   target, raw or %-encoded, is noted with the connection
 *   first callback  the target (400) and the framing headers (400: more than
 *                   one Content-Length, Transfer-Encoding or Host, both of
 *                   the first two, HTTP/1.1 without Host), answered at once
 *                   and the connection closed; then route by path (404),
 *                   method (405), token (401/403), the key or job id in the
 *                   path (400), Content-Length against --max-body (413),
 *                   Content-Type (415); a 413, or a refusal of a client
 *                   waiting for 100 Continue, is answered at once (and the
 *                   connection closed); other refusals once the body is read
 *                   (see refuse_now)
 *   body callbacks  the body accumulates, or is discarded when refused; one
 *                   that passes --max-body (chunked: no length to refuse
 *                   early on) is answered in mid-body and cut (see cut)
 *   last callback   the handler runs (answering earlier would cost the
 *                   keep-alive); a synchronous compile that has to wait
 *                   suspends the connection and is called again when its job
 *                   finishes
 *   completed       metrics, one log line, cleanup
 * Every error is answered with a code and the status errors.c maps it to
 * (reply_fail).  Each phase is told to conns.c, whose sweep enforces the
 * header deadline and the body rate; libmicrohttpd enforces
 * --max-conns-per-ip.  No path from a request reaches the file system
 * before the routing has checked it against the key pattern
 * (cache_key_valid). */
#include "server/server.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "codegen/codegen.h"

/* Per-connection memory for MHD's read/write buffers and headers. */
#define CONNECTION_MEMORY (128 * 1024)
#define CONNECTION_TIMEOUT_S 60
#define MAX_CONNECTIONS 4096
/* After answering in mid-body, how much more of the body is read and dropped
 * before the connection closes (see cut). */
#define CUT_LINGER (256 * 1024)

/* ---- cache handles ---- */

coil_cache *cache_get(coild *s, coil_err *err)
{
	coil_cache *c = NULL;
	pthread_mutex_lock(&s->pool_mu);
	if (s->npool > 0)
		c = s->pool[--s->npool];
	pthread_mutex_unlock(&s->pool_mu);
	if (!c && cache_open(s->cfg.cache_dir, s->cfg.budget, &c, err) != 0)
		return NULL;
	return c;
}

void cache_put(coild *s, coil_cache *c)
{
	pthread_mutex_lock(&s->pool_mu);
	if (s->npool == s->cappool) {
		int cap = s->cappool ? 2 * s->cappool : 8;
		coil_cache **p = realloc(s->pool, (size_t)cap * sizeof *p);
		if (!p) {
			pthread_mutex_unlock(&s->pool_mu);
			cache_close(c);
			return;
		}
		s->pool = p;
		s->cappool = cap;
	}
	s->pool[s->npool++] = c;
	pthread_mutex_unlock(&s->pool_mu);
}

/* ---- responses ---- */

enum MHD_Result reply(request *r, unsigned status, struct MHD_Response *resp, uint64_t body_bytes)
{
	if (!resp)
		return MHD_NO;
	if (atomic_load(&r->s->stopping) || r->close)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	MHD_add_response_header(resp, "X-Coil-Node", r->s->node_id);
	r->status = status;
	r->bytes = strcmp(r->method, "HEAD") ? body_bytes : 0;
	conns_phase(&r->s->conns, r->conn, CONN_BUSY);
	enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

enum MHD_Result reply_json(request *r, unsigned status, json_t *obj)
{
	return reply_json_with(r, status, obj, NULL);
}

enum MHD_Result reply_json_with(request *r, unsigned status, json_t *obj,
				void (*decorate)(request *r, struct MHD_Response *resp))
{
	char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
	json_decref(obj);
	if (!text)
		return MHD_NO;
	size_t n = strlen(text);
	char *body = realloc(text, n + 2);
	if (!body) {
		free(text);
		return MHD_NO;
	}
	body[n++] = '\n';
	body[n] = 0;
	struct MHD_Response *resp = MHD_create_response_from_buffer(n, body, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	if (decorate)
		decorate(r, resp);
	return reply(r, status, resp, n);
}

json_t *error_json(int code, const char *node, const char *msg)
{
	/* json_string rejects invalid UTF-8; fall back on a lossy copy */
	json_t *m = json_string(msg);
	if (!m)
		m = json_string("request failed (message was not valid UTF-8)");
	json_t *o = json_pack("{s:o, s:s}", "error", m, "code", err_name(code));
	json_t *n = node && *node ? json_string(node) : NULL;
	if (o && n)
		json_object_set_new(o, "node", n);
	else
		json_decref(n);
	return o;
}

/* The error, for the log line. */
static void note_error(request *r, int code, const char *msg)
{
	size_t n = strlen(r->note);
	snprintf(r->note + n, sizeof r->note - n, "%serror=\"%.180s\" code=%s", n ? " " : "", msg, err_name(code));
}

enum MHD_Result reply_fail(request *r, int code, const char *node, const char *msg, json_t *extra, const char *hdr,
			   const char *val)
{
	note_error(r, code, msg);
	json_t *o = error_json(code, node, msg);
	if (o && extra)
		json_object_update_missing(o, extra);
	json_decref(extra);
	char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	struct MHD_Response *resp = text ? MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE)
					 : NULL;
	if (!resp) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	if (code == ERR_UNAUTHORIZED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"coild\"");
	if (hdr)
		MHD_add_response_header(resp, hdr, val);
	return reply(r, err_status(code), resp, strlen(text));
}

enum MHD_Result reply_error(request *r, int code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return reply_fail(r, code, NULL, msg, NULL, NULL, NULL);
}

enum MHD_Result reply_err(request *r, const coil_err *e)
{
	return reply_fail(r, e->code, e->node, e->msg[0] ? e->msg : "failed (no message)", NULL, NULL, NULL);
}

/* ---- one request ---- */

static enum MHD_Result dispatch(request *r)
{
	switch (r->route) {
	case ROUTE_COMPILE: return route_compile(r);
	case ROUTE_ARTIFACT: return route_artifact(r, !strcmp(r->method, "HEAD"));
	case ROUTE_ARTIFACT_META: return route_artifact_meta(r);
	case ROUTE_ARTIFACT_GRAPH: return route_artifact_graph(r);
	case ROUTE_ARTIFACT_DELETE: return route_artifact_delete(r);
	case ROUTE_JOB: return route_job(r);
	case ROUTE_TARGETS: return route_targets(r);
	case ROUTE_HEALTHZ: return route_healthz(r);
	case ROUTE_METRICS: return route_metrics(r);
	case ROUTE_DECISION: return route_decision(r, !strcmp(r->method, "HEAD"));
	case ROUTE_DECISION_PUT: return route_decision_put(r);
	case ROUTE_UNKNOWN:
	case ROUTE_COUNT: break;
	}
	return reply_error(r, ERR_NOT_FOUND, "no route for %s %s", r->method, r->url);
}

/* Record why a request is refused (answered by answer_refusal); returns code. */
static int refuse(request *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(request *r, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->refusal, sizeof r->refusal, fmt, ap);
	va_end(ap);
	r->refused = code;
	return code;
}

static enum MHD_Result answer_refusal(request *r)
{
	return reply_fail(r, r->refused, NULL, r->refusal, NULL, r->refused == ERR_METHOD ? MHD_HTTP_HEADER_ALLOW : NULL,
			  r->allow);
}

/* Count the framing headers, duplicates included (MHD_lookup_connection_value
 * sees only the first). */
static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	(void)kind;
	framing *f = cls;
	if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) && !f->n_length++)
		f->length = value;
	else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) && !f->n_encoding++)
		f->encoding = value;
	else if (!strcasecmp(key, MHD_HTTP_HEADER_HOST))
		f->n_host++;
	return MHD_YES;
}

/* The first callback: everything that can be decided from the headers.
 * Returns 0 to go on, or the code of a refusal (recorded with refuse). */
static int first_call(request *r, const char *url, const char *version)
{
	coild *s = r->s;
	/* A request that could be read two ways is answered and its connection
	 * closed before anything of its body is read. */
	framing f = {.version = version};
	coil_err e = {0};
	MHD_get_connection_values(r->conn, MHD_HEADER_KIND, count_header, &f);
	if (r->bad_uri || framing_check(&f, &e) != 0) {
		r->close = 1;
		if (r->bad_uri)
			return refuse(r, COIL_E_INPUT, "the request target has a control character (raw or "
						       "percent-encoded, like %%00 or %%0a)");
		return refuse(r, e.code, "%s", e.msg);
	}

	unsigned m = http_method_bit(r->method), allowed = 0;
	int path_known = 0;
	const route_def *hit = route_find(r->method, url, r->param, sizeof r->param, &path_known, &allowed);
	if (!path_known)
		return refuse(r, ERR_NOT_FOUND, "no route for %s; see docs/api.md", r->url);
	if (!hit) {
		route_allow_list(allowed, r->allow, sizeof r->allow);
		return refuse(r, ERR_METHOD, "method %.20s is not allowed on %.80s (allowed: %s)", r->method, r->url, r->allow);
	}
	r->route = hit->route;

	const char *authz = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	int a = auth_check(&s->auth, authz, hit->roles);
	r->token = s->auth.n ? auth_find(&s->auth, authz) : -1;
	r->admin = r->token >= 0 && (s->auth.roles[r->token] & ROLE_ADMIN);
	if (a == 401)
		return refuse(r, ERR_UNAUTHORIZED, "%s", authz ? "the bearer token is not valid"
						  : "this server needs 'Authorization: Bearer TOKEN'");
	if (a == 403) {
		char roles[64];
		auth_roles_text(hit->roles, roles, sizeof roles);
		return refuse(r, ERR_FORBIDDEN, "the token lacks the %s role needed for %s %s", roles, r->method,
			      hit->pattern);
	}

	if (strstr(hit->pattern, "{key}") && !cache_key_valid(r->param))
		return refuse(r, COIL_E_INPUT, "%s key '%.70s' is not 64 lowercase hex digits",
			      hit->route == ROUTE_DECISION || hit->route == ROUTE_DECISION_PUT ? "decision" : "artifact", r->param);
	if (strstr(hit->pattern, "{id}") && !job_id_valid(r->param))
		return refuse(r, COIL_E_INPUT, "job id '%.70s' is not %d lowercase hex digits", r->param, JOB_ID_HEX);

	if (m == M_POST) {
		const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
		unsigned long long n;
		if (content_length_over(cl, s->cfg.max_body, &n))
			return refuse(r, COIL_E_LIMIT, "request body of %llu bytes exceeds this server's limit of %llu bytes",
				      (unsigned long long)n, (unsigned long long)s->cfg.max_body);
		const char *ct = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
		if (!content_type_ok(ct))
			return refuse(r, ERR_MEDIA_TYPE, "Content-Type '%.60s' is not accepted: send the graph as application/json",
				      ct);
	}
	return 0;
}

/* Answer a refusal now, before the body?  Only when the body is not coming
 * (the client waits for 100 Continue) or is over the limit anyway.  Other
 * refusals wait until the body is read: libmicrohttpd closes a connection
 * answered early, and closing a socket with unread data sends a TCP reset,
 * which can reach the client before it has read the answer (curl, still
 * sending, then reports "failed sending data" or "server returned nothing"). */
static int refuse_now(request *r)
{
	const char *expect = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
	return r->close || r->refused == COIL_E_LIMIT || (expect && !strcasecmp(expect, "100-continue"));
}

/* Answer r's refusal in the middle of its body, which libmicrohttpd cannot
 * do: write the response onto the socket ourselves and close our side for
 * writing, then read on and drop at most CUT_LINGER bytes more before the
 * connection closes, so that a client still sending reads the answer
 * rather than a reset.  Nothing else writes to the connection: no response
 * is queued with libmicrohttpd for this request.  Returns MHD_NO if the
 * connection must close now. */
static enum MHD_Result cut(request *r)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	json_t *o = error_json(r->refused, NULL, r->refusal);
	char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	r->cut = 1;
	r->len = 0; /* from here: the bytes dropped after the answer */
	if (!ci || !body) {
		free(body);
		return MHD_NO;
	}
	unsigned status = err_status(r->refused);
	char head[256];
	size_t blen = strlen(body);
	int hn = snprintf(head, sizeof head,
			  "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
			  "Connection: close\r\n\r\n",
			  status, MHD_get_reason_phrase_for(status), blen + 1);
	struct iovec iov[3] = {{head, (size_t)hn}, {body, blen}, {"\n", 1}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 3};
	ssize_t w = sendmsg(ci->connect_fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	shutdown(ci->connect_fd, SHUT_WR);
	free(body);
	r->status = status;
	r->bytes = w > hn ? (uint64_t)w - (uint64_t)hn : 0;
	note_error(r, r->refused, r->refusal);
	snprintf(r->note + strlen(r->note), sizeof r->note - strlen(r->note), " (answered in mid-body, cut)");
	return w == (ssize_t)(hn + blen + 1) ? MHD_YES : MHD_NO;
}

/* The request's target as it came, before percent-decoding (the URI log
 * callback): whether it has control characters is kept with the connection
 * for the first callback, which makes the request (NULL here: a context
 * returned here would make libmicrohttpd report the completion of requests
 * that never reach on_request). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
	coild *s = cls;
	conns_target(&s->conns, conn, uri_clean(uri));
	return NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
				  const char *version, const char *upload_data, size_t *upload_data_size,
				  void **con_cls)
{
	coild *s = cls;
	request *r = *con_cls;
	if (!r) {
		if (!(r = calloc(1, sizeof *r)))
			return MHD_NO;
		*con_cls = r;
		atomic_fetch_add(&s->active, 1);
		r->s = s;
		r->conn = conn;
		r->route = ROUTE_UNKNOWN;
		r->method = method;
		r->start = clock_s();
		r->token = -1;
		r->bad_uri = !conns_target_clean(&s->conns, conn);
		snprintf(r->url, sizeof r->url, "%s", url);
		conns_phase(&s->conns, conn, CONN_BODY);
		if (first_call(r, url, version) && refuse_now(r))
			return answer_refusal(r);
		r->receiving = 1;
		atomic_fetch_add(&s->receiving, 1);
		return MHD_YES; /* the handler (or the refusal) comes on the last callback */
	}
	if (*upload_data_size) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		conns_body(&s->conns, conn, n);
		if (r->cut) {
			r->len += n;
			return r->len > CUT_LINGER ? MHD_NO : MHD_YES;
		}
		if (r->refused) {
			/* Read and dropped, as much as a body we would accept; past
			 * that the refusal is answered in mid-body. */
			r->len += n;
			return r->len > r->s->cfg.max_body ? cut(r) : MHD_YES;
		}
		if (r->len + n > r->s->cfg.max_body) {
			free(r->body);
			r->body = NULL;
			r->len = r->cap = 0;
			refuse(r, COIL_E_LIMIT, "request body exceeds this server's limit of %llu bytes",
			       (unsigned long long)r->s->cfg.max_body);
			return cut(r);
		}
		if (r->len + n + 1 > r->cap) {
			size_t cap = r->cap ? r->cap : 4096;
			while (cap < r->len + n + 1)
				cap *= 2;
			char *p = realloc(r->body, cap);
			if (!p)
				return MHD_NO;
			r->body = p;
			r->cap = cap;
		}
		memcpy(r->body + r->len, upload_data, n);
		r->len += n;
		r->body[r->len] = 0;
		return MHD_YES;
	}
	if (r->receiving) { /* the whole request is in */
		r->receiving = 0;
		atomic_fetch_sub(&s->receiving, 1);
		conns_phase(&s->conns, conn, CONN_BUSY);
	}
	if (r->cut) /* answered already */
		return MHD_NO;
	if (r->refused)
		return answer_refusal(r);
	if (r->job)
		return route_compile_resume(r);
	return dispatch(r);
}

/* One line per request on stderr, written with one write(2). */
void request_client(request *r, char *buf, size_t cap)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	snprintf(buf, cap, "-");
	if (ci && ci->client_addr &&
	    getnameinfo(ci->client_addr,
			ci->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in),
			buf, (socklen_t)cap, NULL, 0, NI_NUMERICHOST) != 0)
		snprintf(buf, cap, "-");
}

static void log_request(request *r)
{
	char when[32], host[64];
	time_t t = time(NULL);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
	request_client(r, host, sizeof host);
	char line[768];
	int n = snprintf(line, sizeof line, "coild: %s %s %s %s %u %lluB %.1fms%s%s\n", when, host, r->method, r->url,
			 r->status, (unsigned long long)r->bytes, (clock_s() - r->start) * 1e3, r->note[0] ? " " : "",
			 r->note);
	if (n > (int)sizeof line - 1)
		n = (int)sizeof line - 1;
	/* The URL (percent-decoded: %0a is a newline) and the messages come
	 * from the request: they must not forge log lines. */
	line[n - 1] = 0;
	one_line(line);
	line[n - 1] = '\n';
	ssize_t w = write(2, line, (size_t)n);
	(void)w;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	coild *s = cls;
	request *r = *con_cls;
	conns_phase(&s->conns, conn, CONN_HEADERS); /* the next request's headers, if any, from now */
	if (!r)
		return;
	*con_cls = NULL;
	if (!r->status) /* the client went away, or MHD gave up on the request */
		snprintf(r->note, sizeof r->note, "terminated=%d", (int)toe);
	metrics_request(&s->metrics, r->route, r->status);
	log_request(r);
	jobs_release(&s->jobs, r->job);
	free(r->body);
	if (r->receiving)
		atomic_fetch_sub(&s->receiving, 1);
	free(r);
	atomic_fetch_sub(&s->active, 1);
}

/* libmicrohttpd's own complaints (malformed requests, mostly), as log lines
 * of ours: prefixed, and on one line whatever the request held. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char msg[512], line[600];
	vsnprintf(msg, sizeof msg, fmt, ap);
	one_line(msg);
	size_t n = strlen(msg);
	while (n && msg[n - 1] == ' ')
		msg[--n] = 0;
	int k = snprintf(line, sizeof line, "coild: mhd: %s\n", msg);
	if (k > (int)sizeof line - 1) {
		k = (int)sizeof line - 1;
		line[k - 1] = '\n';
	}
	ssize_t w = write(2, line, (size_t)k);
	(void)w;
}

/* ---- the daemon ---- */

/* Bind ADDR:PORT ("127.0.0.1:0", "[::1]:8470", "localhost:8470"). */
static int listen_on(const char *spec, int *fd_out, int *port_out, coil_err *err)
{
	char host[256];
	const char *colon = strrchr(spec, ':');
	if (!colon || !colon[1])
		return coil_errf(err, "--listen '%s': want ADDR:PORT", spec);
	const char *h = spec;
	size_t hn = (size_t)(colon - spec);
	if (hn >= 2 && h[0] == '[' && h[hn - 1] == ']')
		h++, hn -= 2;
	if (hn == 0 || hn >= sizeof host)
		return coil_errf(err, "--listen '%s': want ADDR:PORT", spec);
	memcpy(host, h, hn);
	host[hn] = 0;
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
	struct addrinfo *res;
	int rc = getaddrinfo(host, colon + 1, &hints, &res);
	if (rc != 0)
		return coil_errf(err, "--listen '%s': %s", spec, gai_strerror(rc));
	int fd = -1, e = 0;
	for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			e = errno;
			continue;
		}
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
			e = errno;
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0)
		return coil_errf(err, "--listen '%s': %s", spec, strerror(e));
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
		close(fd);
		return coil_errf(err, "--listen '%s': getsockname: %s", spec, strerror(errno));
	}
	*port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						   : ((struct sockaddr_in *)&ss)->sin_port);
	*fd_out = fd;
	return 0;
}

/* Write the port to path atomically (temp file + rename). */
static int write_port_file(const char *path, int port, coil_err *err)
{
	char tmp[4096];
	if (snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid()) >= (int)sizeof tmp)
		return coil_errf(err, "--port-file path too long");
	FILE *f = fopen(tmp, "w");
	if (!f)
		return coil_errf(err, "--port-file %s: %s", tmp, strerror(errno));
	int bad = fprintf(f, "%d\n", port) < 0;
	bad |= fclose(f) != 0;
	if (bad || rename(tmp, path) != 0) {
		unlink(tmp);
		return coil_errf(err, "--port-file %s: cannot write", path);
	}
	return 0;
}

/* What "native" resolves to here. */
static void resolve_native(coild *s)
{
	coil_err err = {0};
	const coil_target *t = target_get("native", &err);
	snprintf(s->native_target, sizeof s->native_target, "%s", t ? t->name : "generic");
}

/* This node's name (--node-id, else 16 random hex digits), and the upstream
 * trust checked once, so that a bad key fails the start, not a miss. */
static int node_name(coild *s, coil_err *err)
{
	if (s->cfg.node_id) {
		snprintf(s->node_id, sizeof s->node_id, "%s", s->cfg.node_id);
	} else {
		unsigned char r[8];
		FILE *f = fopen("/dev/urandom", "rb");
		int ok = f && fread(r, 1, sizeof r, f) == sizeof r;
		if (f)
			fclose(f);
		if (!ok)
			return coil_errc(err, COIL_E_IO, "/dev/urandom: cannot read a node id");
		for (int i = 0; i < 8; i++)
			snprintf(s->node_id + 2 * i, 3, "%02x", r[i]);
	}
	if (s->cfg.trusted_keys[0] || s->cfg.trusted_keys_file) {
		coil_trust *t = NULL;
		if (trust_resolve(s->cfg.trusted_keys[0] ? s->cfg.trusted_keys : NULL, s->cfg.trusted_keys_file, &t, err))
			return -1;
		trust_free(t);
	}
	return 0;
}

int server_start(coild *s, const coild_config *cfg, coil_err *err)
{
	memset(s, 0, sizeof *s);
	s->cfg = *cfg;
	s->listen_fd = -1;
	s->started_ms = clock_ms64();
	pthread_mutex_init(&s->pool_mu, NULL);
	if (cfg->tokens_file && auth_load(&s->auth, cfg->tokens_file, err) != 0)
		return -1;
	if (cfg->sign_key && sign_key_load(cfg->sign_key, &s->signer, err) != 0) {
		auth_free(&s->auth);
		return -1;
	}
	/* Open one handle up front: it creates the directory and reconciles the
	 * index before any request arrives. */
	coil_cache *c = cache_get(s, err);
	if (!c)
		goto fail;
	cache_put(s, c);
	resolve_native(s);
	if (node_name(s, err) != 0)
		goto fail;
	if (jobs_start(&s->jobs, s, err) != 0)
		goto fail;
	if (listen_on(cfg->listen, &s->listen_fd, &s->port, err) != 0)
		goto fail_jobs;
	if (conns_start(&s->conns, cfg, err) != 0)
		goto fail_jobs;
	s->mhd = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0,
				  NULL, NULL, on_request, s,
				  /* first, or MHD's complaints about the options bypass it */
				  MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
				  MHD_OPTION_LISTEN_SOCKET, s->listen_fd,
				  MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->threads,
				  MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONNECTION_MEMORY,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONNECTION_TIMEOUT_S,
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS,
				  MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->max_conns_per_ip,
				  MHD_OPTION_NOTIFY_CONNECTION, conns_notify, &s->conns,
				  MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
				  MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
				  MHD_OPTION_END);
	if (!s->mhd) {
		coil_errf(err, "cannot start the HTTP daemon on %s", cfg->listen);
		goto fail_jobs;
	}
	if (cfg->port_file && write_port_file(cfg->port_file, s->port, err) != 0) {
		MHD_stop_daemon(s->mhd);
		s->mhd = NULL;
		goto fail_jobs;
	}
	return 0;
fail_jobs:
	conns_stop(&s->conns);
	jobs_stop(&s->jobs);
fail:
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	s->listen_fd = -1;
	for (int i = 0; i < s->npool; i++)
		cache_close(s->pool[i]);
	free(s->pool);
	s->pool = NULL;
	s->npool = 0;
	auth_free(&s->auth);
	sign_key_free(s->signer);
	s->signer = NULL;
	return -1;
}

int server_stop(coild *s)
{
	int64_t end = clock_ms64() + (int64_t)s->cfg.grace_s * 1000;
	/* the grace's last second (its last fifth, if short) answers the waiters */
	int64_t answer = s->cfg.grace_s >= 5 ? 1000 : (int64_t)s->cfg.grace_s * 200;
	atomic_store(&s->stopping, 1); /* /healthz 503, new compiles 503 */
	jobs_cancel(&s->jobs);
	int left = jobs_drain(&s->jobs, end - answer);
	if (left)
		jobs_abandon(&s->jobs);
	/* The answers of the requests in progress go out (not those whose body
	 * is still arriving: a client that stalled, or hung up halfway).  New
	 * connections are still taken, and answered 503 where they compile. */
	while (atomic_load(&s->active) - atomic_load(&s->receiving) > 0 && clock_ms64() < end) {
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	MHD_stop_daemon(s->mhd);
	s->mhd = NULL;
	conns_stop(&s->conns);
	close(s->listen_fd);
	s->listen_fd = -1;
	if (left)
		return left;
	jobs_stop(&s->jobs);
	for (int i = 0; i < s->npool; i++)
		cache_close(s->pool[i]);
	free(s->pool);
	s->pool = NULL;
	s->npool = 0;
	auth_free(&s->auth);
	sign_key_free(s->signer);
	s->signer = NULL;
	pthread_mutex_destroy(&s->pool_mu);
	return 0;
}
