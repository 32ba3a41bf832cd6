/* libcoil: the client of coild and the loader of compiled artifacts.
 *
 *   coil_client_create   a connection to a coild (URL, optional bearer token)
 *   coil_compile         POST a graph, get its cache key, artifact SHA-256, URL
 *   coil_fetch           bring an artifact into the local cache (the same
 *                        cache/ module and directory layout the server uses),
 *                        verifying its SHA-256
 *   coil_module_open     verify, refuse a target this CPU cannot run, dlopen,
 *                        check the ABI version (include/coil/artifact.h)
 *   coil_instance_*      create a model from params and run it
 *
 * Every fallible call returns 0 on success and -1 on failure, with a one-line
 * message in a thread-local string read by coil_last_error().  A coil_client
 * is used by one thread at a time; modules and instances follow the artifact
 * ABI (one instance runs one call at a time).  Requests time out, and 503
 * answers and connection failures are retried with exponential backoff. */
#ifndef COIL_COIL_H
#define COIL_COIL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The last failure of a libcoil call on this thread: a thread-local string,
 * valid until the thread's next failing call.  (An artifact exports a
 * function of the same name for its own errors; libcoil reads that one
 * through the module and copies its message here.) */
const char *coil_last_error(void);

typedef struct coil_client coil_client;

typedef struct coil_client_opts {
	const char *cache_dir;   /* local artifact cache; NULL: $COIL_CACHE_DIR, else ~/.cache/coil */
	uint64_t cache_budget;   /* bytes; 0 = unlimited */
	long timeout_ms;         /* per request, compiles included; 0: 600000 */
	long connect_timeout_ms; /* 0: 5000 */
	int retries;             /* extra attempts on 503 / 429 / connection errors; 0: 4, -1: none */
	long backoff_ms;         /* first wait, doubled each retry (with jitter, at most 10 s); 0: 100 */
	/* Trusted public keys ("name:base64", coil keygen): when any is set, every
	 * artifact must carry a signature by one of them over its key, sha256,
	 * target and ABI version (docs/abi.md), checked before it is stored or
	 * loaded.  A list separated by spaces, and/or a file of them; when both
	 * are NULL, $COIL_TRUSTED_KEYS and $COIL_TRUSTED_KEYS_FILE; none at all:
	 * signatures are not checked. */
	const char *trusted_keys;
	const char *trusted_keys_file;
	/* CA certificates (PEM) for https:// servers, e.g. a farm's nginx with a
	 * private CA; NULL: $COIL_CA_FILE, else the system's. */
	const char *ca_file;
} coil_client_opts;

/* A client of the coild at url ("http://127.0.0.1:8470"); token is a bearer
 * token or NULL; opts may be NULL.  Strings are copied.  Free with
 * coil_client_destroy().  url may be a tier list, "URL URL ..." (spaces or
 * commas, at most 8), nearest first: coil_fetch asks each tier in order (one
 * that lacks the artifact or fails is passed over), coil_compile asks every
 * tier but the last for the key this client makes of the graph with its own
 * build identity, and compiles on the last.  Every compile sends that key as
 * X-Coil-Key, so that a farm's proxy routes it to the key's owner. */
int coil_client_create(const char *url, const char *token, const coil_client_opts *opts, coil_client **out);
void coil_client_destroy(coil_client *c); /* accepts NULL */

/* The compiler's optimisation level: 0..3 (-O0..-O3), or this for the
 * server's default (2). */
#define COIL_OPT_DEFAULT (-1)

typedef struct coil_compile_opts {
	const char *target; /* NULL or "native": this client's own CPU, resolved here (cpuid) before
	                     * the server is asked */
	int opt_level;      /* 0..3, or COIL_OPT_DEFAULT; a zeroed struct asks for -O0 */
	const char *precision; /* NULL or "f32": as the graph says; "bf16": autocast's rules
	                        * (convolutions and matrix products in bf16) */
	const char *mode;   /* NULL or "default"; "max-autotune": where more than one lowering is
	                     * valid, the compiling machine times them and builds in the fastest
	                     * (a key of its own; the machine must run the target) */
	int tune_threads;   /* max-autotune: the threads the artifact will run on, which it is
	                     * timed at (part of the key); 0: this client's CPUs */
} coil_compile_opts;

/* A signature "name:base64" fits in this (with its NUL). */
#define COIL_SIG_MAX 200

typedef struct coil_compile_info {
	char key[65];        /* the cache key: 64 lowercase hex digits */
	char sha256[65];     /* of the artifact's bytes */
	char graph_hash[65];
	char target[64];     /* the resolved target, e.g. "x86-64-v4" */
	char url[1024];      /* absolute URL of the artifact */
	uint64_t size;       /* bytes */
	int hit;             /* 1: the server had it cached */
	double compile_ms;   /* server-side compile time (0 on a hit) */
	char signature[COIL_SIG_MAX]; /* the server's signature, "" if it signs nothing */
} coil_compile_info;

/* Compile graph_json[0..len) (a coil graph, docs/graph-format.md) on the
 * server, synchronously.  o may be NULL.  The answer is checked: its graph
 * hash must be the one computed here for this graph, its target the one
 * asked for, and its key the one compile_key makes of them, the options and
 * the build identity the server reports; else it is refused. */
int coil_compile(coil_client *c, const char *graph_json, size_t len, const coil_compile_opts *o,
		 coil_compile_info *out);
/* The same with the graph read from a file. */
int coil_compile_file(coil_client *c, const char *path, const coil_compile_opts *o, coil_compile_info *out);

/* Make the artifact of key present and verified in the local cache, and
 * write its path (cap bytes; 4096 always fit) to path_out.  A local copy is
 * rehashed and used if it matches; otherwise (and if absent) it is
 * downloaded, its SHA-256 checked against the server's ETag and metadata
 * (and against sha256 when given, e.g. from coil_compile), and stored with
 * the server's canonical graph text and metadata.  A copy that fails any
 * check is refused and never stored.  With trusted keys, the signature in
 * the metadata must verify too (a local copy that fails is dropped and
 * downloaded again). */
int coil_fetch(coil_client *c, const char *key, const char *sha256, char *path_out, size_t cap);

/* ---- loading and running ---- */

/* 1 if this CPU (cpuid, and the OS's register state, less the features
 * $COIL_CPU_MASK names) can run code built for the named target ("generic",
 * "x86-64-v3", "avx_vnni", "x86-64-v4", "avx512_vnni", "avx512_bf16",
 * "avx512_fp16", "amx"), 0 if not, -1 for a name libcoil does not know. */
int coil_target_supported(const char *target);

typedef struct coil_module coil_module;

/* Load the artifact at path.  In order: if target is given (from the server's
 * /meta, or the local cache's metadata), this CPU must support it; if sha256
 * is given, the file's bytes are copied into sealed memory and must hash to
 * it there, and that very copy is what is loaded (nothing can change it
 * between the check and the load); then dlopen, the ABI version
 * must be COIL_ABI_VERSION, and the target in coil_artifact_describe() (a
 * function that uses no target features) must be known and supported here.
 * An artifact failing a check is refused (never run: no SIGILL).  Before
 * dlopen the target its description names (read from its bytes) is checked
 * too.  With $COIL_TRUSTED_KEYS or $COIL_TRUSTED_KEYS_FILE set, path needs a
 * signature file beside it, PATH.sig (coil compile -o writes one), whose
 * signature a trusted key made over these very bytes; else it is refused.
 * Free with coil_module_close(). */
int coil_module_open(const char *path, const char *sha256, const char *target, coil_module **out);
void coil_module_close(coil_module *m); /* accepts NULL; instances must be destroyed first */
/* The artifact's description JSON (owned by the module). */
const char *coil_module_describe(const coil_module *m);
/* Its target name (owned by the module). */
const char *coil_module_target(const coil_module *m);

/* coil_fetch, then coil_module_open with the cached SHA-256 and target (and,
 * with trusted keys, the cached signature verified first). */
int coil_client_load(coil_client *c, const char *key, coil_module **out);

typedef struct coil_instance coil_instance;

/* A model from params[nparams] (graph order; copied by the artifact).
 * nthreads <= 0: OpenMP's default.  Free with coil_instance_destroy(). */
int coil_instance_create(coil_module *m, const void *const *params, int nparams, int nthreads, coil_instance **out);
/* The shape of output `output` for these input shapes; returns its rank, or
 * -1 on failure. */
int coil_instance_output_shape(coil_instance *in, const int64_t *const *input_shapes, int output, int64_t *shape);
int coil_instance_run(coil_instance *in, const void *const *inputs, const int64_t *const *input_shapes,
		      void *const *outputs);
void coil_instance_destroy(coil_instance *in); /* accepts NULL */

#ifdef __cplusplus
}
#endif

#endif
