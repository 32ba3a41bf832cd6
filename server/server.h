/* coild, the compile server: what its source files share.
 *
 *   main.c     flags and environment -> config, signals, start, graceful stop
 *   config.c   the configuration: defaults, COILD_* variables, flags
 *   http.c     libmicrohttpd plumbing: one request's life (framing, route,
 *              auth, limits, body, dispatch, suspend/resume), JSON
 *              responses, the log line, the cache handle pool
 *   conns.c    connection deadlines: headers within --header-timeout, a
 *              body at --min-body-rate, swept by a thread
 *   routes.c   the handlers, one per route (docs/api.md)
 *   jobs.c     the compile queue: bounded, single flight by key, worker
 *              threads, the job table behind /v1/jobs/{id}
 *   errors.c   the one table: every error code coild answers with, its
 *              name and its HTTP status
 *   metrics.c  counters and the Prometheus text of /metrics
 *   auth.c     bearer tokens and their roles
 *   upstream.c the tiers above (--upstream): a miss asks them first
 *   parse.c    routing, patterns, headers, query and body of a compile
 *              request: pure functions of strings (fuzzed by
 *              tests/fuzz/fuzz_http.c)
 *
 * Threads: libmicrohttpd's pool runs the handlers; compile workers run
 * compile_plan_run.  Everything mutable lives in one coild struct; a
 * coil_cache handle is used by one thread at a time (workers own one each,
 * handlers borrow from the pool). */
#ifndef COIL_SERVER_H
#define COIL_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>
#include <microhttpd.h>

#include "cache/cache.h"
#include "cache/compile.h"
#include "common/clock.h"
#include "common/error.h"

/* ---- config.c ---- */
#define CONFIG_LIST_MAX 4096 /* bytes of a repeatable setting's values */
typedef struct coild_config {
	const char *listen;      /* ADDR:PORT; port 0 picks a free one */
	const char *cache_dir;   /* NULL: cache_open's default */
	const char *tokens_file; /* NULL: no authentication */
	const char *port_file;   /* written with the bound port once listening */
	int workers;             /* compile worker threads */
	int queue;               /* compile jobs that may wait beyond the running ones */
	int threads;             /* HTTP threads */
	uint64_t max_body;       /* bytes of a request body */
	int max_nodes;           /* nodes of a graph */
	int compile_timeout_s;   /* deadline of a whole compile (sandbox.h) */
	uint64_t compile_mem;    /* its process tree's memory; 0: SANDBOX_DEFAULT_MEM */
	int compile_pids;        /* its processes at once; 0: SANDBOX_DEFAULT_PIDS */
	uint64_t budget;         /* cache size bound in bytes; 0 = unlimited */
	int job_ttl_s;           /* how long a finished job stays readable */
	int max_conns_per_ip;    /* open connections per client address; 0 = no limit */
	int header_timeout_s;    /* to receive a request's headers (and to wait for the next) */
	uint64_t min_body_rate;  /* bytes/s a body must average past header_timeout_s; 0 = none */
	int max_jobs_per_tenant; /* running compiles per tenant; 0 = max(1, workers - 1) */
	int grace_s;             /* SIGTERM: how long running compiles may take to finish */
	int allow_root;          /* run even with uid 0 */
	const char *sign_key;    /* secret key file: sign every artifact built (cache/sign.h) */
	/* The fleet (docs/fleet.md) */
	char upstream[CONFIG_LIST_MAX];     /* --upstream URLs, space-separated, in order */
	char peers[CONFIG_LIST_MAX];        /* --peer URLs: the other nodes of this farm */
	char trusted_keys[CONFIG_LIST_MAX]; /* --trusted-key NAME:BASE64, space-separated */
	const char *trusted_keys_file;      /* a file of them */
	const char *node_id;                /* X-Coil-Node, X-Coil-Via; NULL: a random one */
} coild_config;

/* Fill cfg from defaults, then COILD_* environment variables, then argv.
 * Returns 0 to run, 1 when --help was printed, -1 with err on a bad value. */
int config_load(coild_config *cfg, int argc, char **argv, coil_err *err);
void config_usage(FILE *f);
/* "123", "64k", "16M", "2G" (powers of 1024) into bytes; -1 if malformed. */
int config_parse_size(const char *s, uint64_t *out);

/* ---- auth.c ---- */
enum { ROLE_COMPILE = 1, ROLE_READ = 2, ROLE_ADMIN = 4 };

typedef struct coild_auth {
	int n;
	char **tokens;
	unsigned *roles;
} coild_auth;

/* Read a tokens file: one "TOKEN role,role" per line (roles: compile, read,
 * admin), '#' starts a comment.  err names the line at fault.  A file that
 * its group or others may read or write is refused. */
int auth_load(coild_auth *a, const char *path, coil_err *err);
/* The same from len bytes of text (name is for messages). */
int auth_parse(coild_auth *a, const char *text, size_t len, const char *name, coil_err *err);
void auth_free(coild_auth *a);
/* The index of the token an Authorization header value (may be NULL)
 * carries, or -1. */
int auth_find(const coild_auth *a, const char *authorization);
/* Check an Authorization header value (may be NULL) for one of the roles in
 * need: 0 allowed (also when no tokens are configured), 401 missing or
 * unknown token, 403 a known token with none of them. */
int auth_check(const coild_auth *a, const char *authorization, unsigned need);
/* "'compile' or 'admin'" for a mask of roles. */
void auth_roles_text(unsigned roles, char *buf, size_t cap);

/* ---- errors.c ---- */
/* The codes of coild's answers: common/error.h's coil_code values, then the
 * refusals of the server itself.  A coil_err's code may hold either. */
enum {
	ERR_NOT_FOUND = COIL_NCODES, /* no such route, artifact or job */
	ERR_METHOD,                  /* the path does not take this method */
	ERR_UNAUTHORIZED,            /* no token, or an unknown one */
	ERR_FORBIDDEN,               /* a token without the route's role */
	ERR_MEDIA_TYPE,              /* a Content-Type a compile does not take */
	ERR_TOO_MANY,                /* a tenant over its share of the queue */
	ERR_UNAVAILABLE,             /* the server is stopping */
	ERR_DISK_FULL,               /* COIL_E_RESOURCE on a full cache file system */
	ERR_NCODES
};

/* The HTTP status of a code (500 for one out of range). */
unsigned err_status(int code);
/* Its name in answers and logs: "bad_input", "not_found", ... */
const char *err_name(int code);

/* ---- metrics.c ---- */
#define ROUTES(X)                                                                                    \
	X(COMPILE, "compile") X(ARTIFACT, "artifact") X(ARTIFACT_META, "artifact_meta")             \
	X(ARTIFACT_GRAPH, "artifact_graph") X(ARTIFACT_DELETE, "artifact_delete") X(JOB, "job")     \
	X(TARGETS, "targets") X(HEALTHZ, "healthz") X(METRICS, "metrics") X(DECISION, "decision")       \
	X(DECISION_PUT, "decision_put") X(UNKNOWN, "unknown")

enum route {
#define X(e, n) ROUTE_##e,
	ROUTES(X)
#undef X
	ROUTE_COUNT
};
const char *route_name(enum route r);

/* Upper bounds (seconds) of the compile-time histogram's buckets; +Inf follows. */
#define METRICS_COMPILE_BUCKETS 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300
#define METRICS_NBUCKETS 12

typedef struct coild_metrics {
	_Atomic uint64_t requests[ROUTE_COUNT][600]; /* by route and status code */
	_Atomic uint64_t compile_buckets[METRICS_NBUCKETS + 1];
	_Atomic uint64_t compile_us_sum, compile_count;
	_Atomic uint64_t hits;             /* compile requests answered from the cache */
	_Atomic uint64_t misses;           /* compile requests that needed a job */
	_Atomic uint64_t compiles;         /* builds that ran and stored an artifact */
	_Atomic uint64_t compile_failures; /* jobs that ended in an error */
	_Atomic uint64_t joins;            /* requests that joined an identical job in flight */
	_Atomic uint64_t rejected;         /* compile requests refused: queue full (503), tenant's share (429) */
	_Atomic uint64_t bytes_served;     /* artifact bytes in 200 responses */
	_Atomic uint64_t upstream_fills;   /* misses an upstream tier filled */
	_Atomic uint64_t upstream_misses;  /* misses no upstream tier had */
	_Atomic uint64_t upstream_errors;  /* asks that failed: unreachable, refused, a bad copy */
} coild_metrics;

void metrics_request(coild_metrics *m, enum route r, unsigned status);
void metrics_compile_time(coild_metrics *m, double seconds);

/* ---- jobs.c ---- */
typedef enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE, JOB_FAILED } job_state;

#define JOB_ID_HEX 32

typedef struct job job; /* opaque outside jobs.c */

/* Who a compile is for: "token N", or the client address without tokens. */
#define TENANT_MAX 72

/* What a handler reads of a job (a copy taken under the lock). */
typedef struct job_view {
	char id[JOB_ID_HEX + 1];
	char key[65];
	job_state state;
	compile_result res;  /* JOB_DONE */
	coil_err err;        /* JOB_FAILED: code (a coil_code or an ERR_*), message, node */
	double queued_ms;    /* time spent waiting for a worker */
} job_view;

typedef struct coild coild;

typedef struct jobs {
	coild *s;
	pthread_mutex_t mu;
	pthread_cond_t work;   /* signalled when a job is queued or ends, or on shutdown */
	pthread_cond_t idle;   /* signalled when a job ends (jobs_drain) */
	job *all;              /* every job still in the table, newest first */
	job *head, *tail;      /* FIFO of queued jobs */
	int nqueued, nrunning, njobs;
	int stopping;
	int nworkers;
	int share;             /* jobs one tenant may run at once */
	pthread_t *threads;
	job **running;         /* by worker: its job, or NULL */
	uint64_t seq;          /* mixed into job ids */
	int test_fail_oom;     /* test-only: COILD_TEST_FAIL_COMPILE_OOM=1 */
} jobs;

int jobs_start(jobs *q, coild *s, coil_err *err);
/* Refuse new jobs from now on, and fail every queued one (ERR_UNAVAILABLE):
 * their waiters are resumed and answered 503. */
void jobs_cancel(jobs *q);
/* Wait until no job runs or deadline_ms (clock_ms64's clock) has passed; returns
 * how many jobs still run. */
int jobs_drain(jobs *q, int64_t deadline_ms);
/* Give up the running jobs: they fail (ERR_UNAVAILABLE) and their waiters are
 * resumed now; their workers finish them unwatched (the process is exiting:
 * nothing the workers use may be freed after this). */
void jobs_abandon(jobs *q);
/* Stop the workers (each finishes its job first), join them, free the table. */
void jobs_stop(jobs *q);
/* Take plan (always: it is freed here if not kept) and return a job computing
 * it for tenant, readable by token (-1: no tokens): an in-flight job with the
 * same key (*joined = 1; token may read it from now), or a new queued one.
 * NULL with *refused: COIL_E_RESOURCE (the queue is full, or out of memory),
 * ERR_TOO_MANY (tenant has its share of the queue waiting) or
 * ERR_UNAVAILABLE (stopping).  The caller holds a reference: jobs_release()
 * it. */
job *jobs_submit(jobs *q, compile_plan *plan, const char *tenant, int token, int *joined, int *refused);
/* A referenced job by id that token may read (-1: any job; no tokens, or an
 * admin token), NULL if unknown, expired or another token's. */
job *jobs_find(jobs *q, const char *id, int token);
void jobs_release(jobs *q, job *j);
void jobs_view(jobs *q, job *j, job_view *out);
/* If j is unfinished, suspend conn until it is: returns 1 (conn suspended, it
 * will be resumed), or 0 when j is already finished.  Call from the
 * connection's handler only. */
int jobs_wait(jobs *q, job *j, struct MHD_Connection *conn);
void jobs_depth(jobs *q, int *queued, int *running);
const char *job_state_name(job_state st);

/* ---- conns.c ---- */
/* What a connection is doing: waiting for a request's headers, receiving its
 * body, or being handled (a compile, a response going out: not swept). */
enum conn_phase { CONN_HEADERS, CONN_BODY, CONN_BUSY };

typedef struct conn_rec conn_rec; /* opaque outside conns.c */

typedef struct conns {
	pthread_mutex_t mu;
	pthread_cond_t wake;      /* the sweeper's sleep; signalled to stop */
	conn_rec *all;
	int64_t header_ms;        /* --header-timeout */
	uint64_t min_rate;        /* --min-body-rate */
	int stopping, started;
	pthread_t sweeper;
	_Atomic uint64_t closed_headers, closed_body; /* connections the sweep closed */
} conns;

int conns_start(conns *c, const coild_config *cfg, coil_err *err);
/* Stop the sweeper (after libmicrohttpd has stopped). */
void conns_stop(conns *c);
/* MHD_OPTION_NOTIFY_CONNECTION's callback (cls: the conns). */
void conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
		  enum MHD_ConnectionNotificationCode code);
/* conn enters phase now (its body count starts at 0). */
void conns_phase(conns *c, struct MHD_Connection *conn, enum conn_phase phase);
/* n more bytes of conn's body have come. */
void conns_body(conns *c, struct MHD_Connection *conn, size_t n);
/* Note whether the raw target of conn's request is clean (uri_clean), and
 * read it back (1 when nothing was noted). */
void conns_target(conns *c, struct MHD_Connection *conn, int clean);
int conns_target_clean(conns *c, struct MHD_Connection *conn);

/* ---- http.c ---- */
struct coild {
	coild_config cfg;
	coild_auth auth;
	coild_metrics metrics;
	jobs jobs;
	conns conns;
	struct MHD_Daemon *mhd;
	int listen_fd;
	int port;
	_Atomic int stopping;
	_Atomic int active;        /* requests between their first callback and completion */
	_Atomic int receiving;     /* of those, the ones whose body is still arriving */
	int64_t started_ms;
	char native_target[256];   /* what "native" resolves to here */
	char node_id[40];          /* cfg.node_id, or a random one */
	coil_signer *signer;       /* cfg.sign_key loaded, or NULL */
	pthread_mutex_t pool_mu;   /* the handlers' cache handles */
	coil_cache **pool;
	int npool, cappool;
};

int server_start(coild *s, const coild_config *cfg, coil_err *err);
/* Stop within cfg.grace_s seconds: refuse new compiles (503) and answer
 * /healthz 503, cancel the queued jobs, let the running ones finish until
 * the grace is nearly over, answer every request still waiting, stop.
 * Returns 0 with everything freed, or the number of compiles still running
 * (abandoned): then their workers still use s, which is not freed, and the
 * caller must exit without waiting for them (_exit). */
int server_stop(coild *s);

/* A cache handle for this thread's use until cache_put(); NULL with err. */
coil_cache *cache_get(coild *s, coil_err *err);
void cache_put(coild *s, coil_cache *c);

/* One request, from its first callback to the completion notice. */
typedef struct request {
	coild *s;
	struct MHD_Connection *conn;
	enum route route;
	const char *method;
	char url[256];          /* for messages and the log (truncated) */
	char param[80];         /* the key or job id from the path (validated) */
	double start;
	char *body;
	size_t len, cap;        /* len: also the bytes of a refused body, dropped */
	int bad_uri;            /* the raw target has a control character */
	int close;              /* answer with Connection: close */
	int cut;                /* answered in mid-body; the rest is dropped (counted in len) */
	unsigned status;
	uint64_t bytes;         /* response body bytes */
	job *job;               /* a compile waiting on or answered from a job */
	int token;              /* the request's token (index), -1 if none */
	int admin;              /* its token has the admin role */
	int receiving;          /* counted in coild.receiving */
	int async;
	int refused;            /* a refusal decided from the headers: its code, */
	char refusal[320];      /* message */
	char allow[64];         /* and, for 405, the Allow header */
	char note[320];         /* extra words for the log line */
} request;

/* The client's address, numeric ("-" if unknown). */
void request_client(request *r, char *buf, size_t cap);
/* Queue a JSON response (takes obj's reference); returns MHD_YES/MHD_NO. */
enum MHD_Result reply_json(request *r, unsigned status, json_t *obj);
/* The same, with decorate adding headers to the response before it goes. */
enum MHD_Result reply_json_with(request *r, unsigned status, json_t *obj,
				void (*decorate)(request *r, struct MHD_Response *resp));
/* The body of every error: {"error": msg, "code": err_name(code), "node":
 * node} ("node" only when node is set); NULL when out of memory. */
json_t *error_json(int code, const char *node, const char *msg);
/* Answer an error: error_json plus the fields of extra (taken; may be NULL),
 * with err_status(code), and one more header when hdr is set (Allow,
 * Retry-After; 401 gets WWW-Authenticate on its own). */
enum MHD_Result reply_fail(request *r, int code, const char *node, const char *msg, json_t *extra, const char *hdr,
			   const char *val);
/* reply_fail with a printf-style message. */
enum MHD_Result reply_error(request *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* reply_fail with a coil_err's code, message and node. */
enum MHD_Result reply_err(request *r, const coil_err *e);
/* Queue a prepared response (destroyed here). */
enum MHD_Result reply(request *r, unsigned status, struct MHD_Response *resp, uint64_t body_bytes);

/* ---- parse.c ---- */
enum { M_GET = 1, M_HEAD = 2, M_POST = 4, M_DELETE = 8 };

typedef struct route_def {
	enum route route;
	const char *pattern; /* "{key}" and "{id}" match one path segment */
	unsigned methods;    /* M_* */
	unsigned roles;      /* one of them needed when tokens are configured */
} route_def;


/* M_* for a method name, 0 for any other. */
unsigned http_method_bit(const char *method);
/* Does url match pattern?  The segment under a placeholder is copied into
 * param (truncated to cap - 1; validating it is the caller's business), which
 * is "" for a pattern without one. */
int route_match(const char *pattern, const char *url, char *param, size_t cap);
/* The route for method and url, with its path parameter in param; NULL if
 * none.  *path_known: some route has this path; *allowed: the methods the
 * routes of this path take (for 405 and its Allow header). */
const route_def *route_find(const char *method, const char *url, char *param, size_t cap, int *path_known,
			    unsigned *allowed);
/* "GET, HEAD" for a mask of M_* bits. */
void route_allow_list(unsigned allowed, char *buf, size_t cap);
/* 1 if id is exactly JOB_ID_HEX lowercase hex digits (NULL gives 0). */
int job_id_valid(const char *id);
/* The Content-Types a compile accepts (none, JSON, *+json, text, bytes, form). */
int content_type_ok(const char *ct);
/* A Content-Length header over max: 1 (*n = its value), else 0. */
int content_length_over(const char *cl, uint64_t max, unsigned long long *n);
/* Does an If-None-Match header name this entity tag (or "*")? */
int etag_matches(const char *inm, const char *sha);
/* "1", "true", "yes" and a bare "?async" are true. */
int query_truthy(const char *v);
/* Control characters (newlines included) in s become spaces: what a
 * request puts into a message or the log stays on one line. */
void one_line(char *s);

/* 1 if the raw request target (path and query, before percent-decoding) has
 * no control character (below 0x20, or 0x7f), as it is or percent-encoded
 * (%00 would cut the decoded path short; %0a would start a new log line). */
int uri_clean(const char *raw);

/* The framing a request's headers declare: how many of each header came (all
 * of them, duplicates too) and the first value of each. */
typedef struct framing {
	const char *version;              /* "HTTP/1.1", "HTTP/1.0" */
	int n_length, n_encoding, n_host; /* Content-Length, Transfer-Encoding, Host */
	const char *length, *encoding;    /* the first Content-Length, Transfer-Encoding */
} framing;

/* 0 if the framing has one reading, else -1 with err (COIL_E_INPUT): more
 * than one Content-Length, Transfer-Encoding or Host; a Content-Length that
 * is not a number; Content-Length with Transfer-Encoding; a coding other than
 * chunked; HTTP/1.1 without Host.  A proxy in front of coild that reads such
 * a request another way would let one request hide inside another. */
int framing_check(const framing *f, coil_err *err);

/* A compile request: a raw graph, or the envelope {"graph": {...},
 * "target": "...", "options": {"opt_level": N}, "async": B}.  Query
 * arguments (target, opt_level, async; NULL when absent) apply to both; the
 * envelope's fields win. */
typedef struct compile_request {
	compile_opts opts;    /* target (pointing into target[]) and opt_level */
	char target[256];
	coil_graph *g;        /* the graph, parsed and validated once (owned; NULL once taken) */
	int async;
} compile_request;

/* 0 with cr filled (release with compile_request_free), or -1 with err: its
 * code COIL_E_INPUT (a bad request), COIL_E_LIMIT (more than max_nodes
 * nodes) or COIL_E_RESOURCE (out of memory), its message one line. */
int compile_request_parse(const char *body, size_t len, const char *q_target, const char *q_opt_level,
			  const char *q_async, int max_nodes, compile_request *cr, coil_err *err);
void compile_request_free(compile_request *cr);

/* A module's dynamic decision (docs/api.md): {"version": 1, "symbolic":
 * [[input, dim, name], ...]}, as coil.compile records which dims it made
 * symbolic.  decision_merge validates body (COIL_E_INPUT naming the field
 * at fault) and writes to *out (malloc'd, compact JSON) its union with the
 * stored decision (NULL: none; an unreadable one counts as none): every dim
 * either names, the stored name winning where both do, sorted. */
#define DECISION_MAX_DIMS 64
#define DECISION_MAX_INDEX 64
#define DECISION_NAME_MAX 32
int decision_merge(const char *stored, size_t slen, const char *body, size_t blen, char **out, coil_err *err);

/* ---- upstream.c ---- */
#define UPSTREAM_MAX_HOPS 8
#define UPSTREAM_TIMEOUT_MS 120000L
#define UPSTREAM_CONNECT_TIMEOUT_MS 2000L
/* On a miss: ask the --peer nodes, then the --upstream tiers, in order,
 * for key's artifact, and store the first verified copy in this server's
 * cache.  via is the request's X-Coil-Via (NULL: none).  Peers are asked
 * only for a request no coild has passed on (no via): one hop across a
 * farm.  Upstreams are asked unless the request has passed this node
 * already, or UPSTREAM_MAX_HOPS nodes.  1 when the cache now has it, 0 when
 * nothing asked had it or every ask failed (logged). */
int upstream_fill(coild *s, const char *key, const char *via);

/* ---- routes.c ---- */
enum MHD_Result route_compile(request *r);
enum MHD_Result route_compile_resume(request *r); /* after a job finished */
enum MHD_Result route_artifact(request *r, int head);
enum MHD_Result route_artifact_meta(request *r);
enum MHD_Result route_artifact_graph(request *r);
enum MHD_Result route_artifact_delete(request *r);
enum MHD_Result route_job(request *r);
enum MHD_Result route_targets(request *r);
enum MHD_Result route_healthz(request *r);
enum MHD_Result route_metrics(request *r);
enum MHD_Result route_decision(request *r, int head);
enum MHD_Result route_decision_put(request *r);
/* Render the metrics text into a malloc'd string. */
char *metrics_render(coild *s);

#endif
