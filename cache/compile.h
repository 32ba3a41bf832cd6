/* Compiling through the cache: the one path by which the CLI (embedded mode)
 * and coild turn a graph into a cached artifact.
 *
 *   compile_plan_make   parse + validate the graph, resolve the target, derive
 *                       the cache key (cheap; no compiler runs)
 *   compile_plan_run    look the key up; on a miss take the per-key lock, look
 *                       again (another process may have finished it), build
 *                       with codegen, store, unlock
 *
 * The key is SHA-256 over: the canonical graph hash, the resolved target
 * feature set (never the word "native"), the compiler identity (its full
 * version and the exact flags), coil's codegen version, oneDNN's version,
 * and the options (compile_key: the one function that makes keys, which a
 * client runs too, with the build identity a server reports, to check that
 * the key it was answered is its graph's).
 *
 * With a signer (compile_opts.signer) every artifact built is signed
 * (cache/sign.h) and its signature stored in its metadata ("signature"). */
#ifndef COIL_CACHE_COMPILE_H
#define COIL_CACHE_COMPILE_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "cache/cache.h"
#include "cache/sign.h"
#include "codegen/sandbox.h"
#include "common/graph.h"

#define COMPILE_OPT_DEFAULT 2

typedef struct compile_opts {
	const char *target;   /* "native" (NULL) or a named target, see codegen_targets() */
	int opt_level;        /* 0..3 (-O0..-O3), as given: each front end sets its
	                       * default (COMPILE_OPT_DEFAULT); part of the key */
	int timeout_s;        /* deadline of the whole compile, code generation and C compiler,
	                       * wall clock; 0 = BUILD_DEFAULT_TIMEOUT_S */
	int max_nodes;        /* reject larger graphs; 0 = COIL_MAX_NODES */
	coil_dtype precision; /* COIL_F32 (0): as the graph says; COIL_BF16: autocast's rules applied
	                       * (graph_autocast: convolutions and matrix products in bf16);
	                       * part of the key */
	/* The compile's sandbox (codegen/sandbox.h), its budgets for the whole
	 * process tree; 0 = the defaults */
	uint64_t sandbox_mem_bytes; /* memory; SANDBOX_DEFAULT_MEM (4 GiB) */
	int sandbox_pids;           /* processes at once; SANDBOX_DEFAULT_PIDS (256) */
	int sandbox_cpu_s;          /* CPU seconds; SANDBOX_CPU_PER_DEADLINE (4) x the deadline */
	const coil_signer *signer;  /* sign what is built (NULL: unsigned); not part of the key */
	int mode;                   /* COMPILE_MODE_*; part of the key */
	int tune_threads;           /* max-autotune: threads to time at, 1..1024 (0: this machine's CPUs);
	                             * part of its key */
} compile_opts;

/* How hard a compile tries: "default" (the lowering heuristics choose), or
 * "max-autotune" (codegen/autotune.c: where more than one lowering is valid
 * they are timed on this machine, which must run the target, and the
 * fastest are built into the artifact: every machine of that CPU kind that
 * fetches it runs them without tuning). */
enum { COMPILE_MODE_DEFAULT = 0, COMPILE_MODE_MAX_AUTOTUNE = 1 };
/* "default" or "max-autotune" as COMPILE_MODE_*, -1 for anything else. */
int compile_mode_parse(const char *s);
const char *compile_mode_name(int mode);

typedef struct compile_plan {
	coil_graph *g;
	const char *canon;    /* canonical graph text (in g's arena) */
	size_t canon_len;
	char graph_hash[65];
	char key[65];
	char target[256];     /* resolved feature list, e.g. "x86-64-v4,avx512_bf16" */
	int opt_level, timeout_s;
	coil_dtype precision;
	int mode, tune_threads;
	sandbox_limits limits; /* the compile's budgets and deadline (timeout_s) */
	const coil_signer *signer;
} compile_plan;

typedef struct compile_result {
	char key[65];
	char graph_hash[65];
	char sha256[65];
	char target[256];
	char path[CACHE_PATH_MAX]; /* the artifact inside the cache */
	uint64_t size;
	int hit;                   /* 1: found in the cache, nothing compiled */
	double compile_ms;         /* time spent compiling (0 on a hit) */
	int64_t arena_bytes;       /* from the artifact's description, -1 if unknown */
	char signature[SIGN_STR_MAX]; /* "name:base64" from its metadata, "" if unsigned */
	int built;                 /* 1: built by this call (sha256 taken from the bytes it built) */
	char autotune[256];        /* max-autotune: what it chose ("" otherwise), from its metadata */
} compile_result;

/* This build's identity, the parts of a key besides the graph, target and
 * options: the C compiler's full version ("cc -v", read once), the codegen
 * version (a digest of codegen's sources), oneDNN's version. */
const char *compile_compiler_identity(void);
const char *compile_codegen_version(void);
const char *compile_dnnl_version(void);

/* The cache key of graph_hash built for target t with this identity and
 * these options, into key (65 bytes). */
int compile_key(const char *graph_hash, const char *target, const char *compiler, const char *codegen,
		const char *dnnl, int opt_level, coil_dtype precision, int mode, int tune_threads, char key[65],
		coil_err *err);

/* The graph hash a compile of json with precision would key on (after
 * autocast for bf16): what a client checks a server's answer against. */
int compile_graph_hash(const char *json, size_t len, coil_dtype precision, char hash[65], coil_err *err);

int compile_plan_make(const char *json, size_t len, const compile_opts *o, compile_plan **out, coil_err *err);
/* The same for a graph already parsed (graph_parse, graph_from_json); the
 * plan owns g from here on, also when this fails. */
int compile_plan_graph(coil_graph *g, const compile_opts *o, compile_plan **out, coil_err *err);
void compile_plan_free(compile_plan *p);
int compile_plan_run(coil_cache *c, compile_plan *p, compile_result *res, coil_err *err);
/* Inspection: p through the pipeline with codegen's --dump-after (into
 * dump_file) and --emit-c (the C into emit_c, a file or a directory), up to
 * emit_c, or through the build into a temporary directory when dump_after is
 * "build".  Nothing is stored. */
struct codegen_result;
int compile_plan_inspect(compile_plan *p, const char *dump_after, FILE *dump_file, const char *emit_c,
			 struct codegen_result *res, coil_err *err);

/* Both steps at once. */
int cache_compile(coil_cache *c, const char *json, size_t len, const compile_opts *o, compile_result *res,
		  coil_err *err);

#endif
