/* coil's code generator: graph -> C -> shared object with the ABI of
 * include/coil/artifact.h.  The pipeline (pipeline.c) is
 *   fold -> dnnl -> decompose -> fuse -> schedule -> memplan -> emit_c -> build
 * and `--dump-after=PASS` prints the result of any of them. */
#ifndef COIL_CODEGEN_H
#define COIL_CODEGEN_H

#include <stdio.h>

#include "common/graph.h"

/* The CPU features a target may need (coil_target.features). */
enum {
	F_AVX2 = 1 << 0,        /* the x86-64-v3 level: AVX, AVX2, FMA, BMI1/2, MOVBE (and OS YMM state) */
	F_AVX512 = 1 << 1,      /* the x86-64-v4 level: AVX-512 F, BW, CD, DQ, VL (and OS ZMM state) */
	F_AVX512_VNNI = 1 << 2,
	F_AVX512_BF16 = 1 << 3,
	F_AVX512_FP16 = 1 << 4,
	F_AVX_VNNI = 1 << 5,    /* VEX-encoded VNNI (Alder Lake and later, also without AVX-512) */
	F_AMX = 1 << 6,         /* AMX-TILE, AMX-BF16, AMX-INT8 (and OS tile state) */
};

/* A CPU feature set; the target alone decides the compiler's -m flags. */
typedef struct coil_target {
	const char *name;  /* "generic", "x86-64-v3", "avx_vnni", "x86-64-v4", "avx512_vnni",
	                    * "avx512_bf16", "avx512_fp16", "amx" */
	const char *flags; /* e.g. "-march=x86-64-v4 -mavx512bf16" */
	unsigned features; /* what a CPU needs to run it (F_* bits) */
} coil_target;

/* Resolves a target name; "native" picks the best named target this CPU
 * supports (cpuid, less COIL_CPU_MASK), never -march=native.  NULL with err
 * when unknown. */
const coil_target *target_get(const char *name, coil_err *err);
/* 1 if code built for the named target runs on this CPU. */
int target_runs_here(const char *name);
/* The first feature the named target needs that this CPU lacks ("avx512_bf16",
 * "amx", ...), or NULL when it has them all (or the name is unknown). */
const char *target_missing(const char *name);
/* This CPU's features (cpuid less COIL_CPU_MASK's), as F_* bits. */
unsigned target_cpu_features(void);
/* 1 when this CPU has the named feature and COIL_CPU_MASK hides it. */
int target_feature_masked(const char *feature);
/* t's features by name, comma-separated ("avx2,avx512,avx512_vnni"). */
void target_feature_list(const coil_target *t, char *buf, size_t cap);
/* The named targets, from the most portable to the most demanding. */
int target_count(void);
const coil_target *target_at(int i);

typedef struct codegen_opts {
	const char *target;      /* a resolved target name (compile_plan's); NULL: "native" */
	const char *graph_hash;  /* the graph's hash, as the caller computed it; NULL: computed here */
	const char *dump_after;  /* NULL, or a pass name: prints the IR to dump_file after it */
	FILE *dump_file;         /* NULL: stdout */
	const char *cc;          /* NULL: "cc" */
	const char *opt;         /* NULL: "-O3" */
	int timeout_s;           /* compiler timeout; 0: 120 */
	int werror;              /* build the C with -Wall -Wextra -Werror */
	const char *keep_c;      /* if set, write the generated C there too: the files
	                          * into it when it is a directory, else one after
	                          * another into one file */
	int units;               /* translation units: 0 automatic ($COIL_CC_UNITS
	                          * when set, else by size and CPUs), -1 one file,
	                          * N > 0 split into up to N (emit.h) */
	int jobs;                /* compilers at once; 0: the CPUs */
	size_t max_c_bytes;      /* most bytes of C for one graph; 0: CODEGEN_MAX_C_BYTES */
	/* The oneDNN runtime's object (dnnl_rt.c compiled) is the same for every
	 * model built with the same compiler, flags and coil: rt_in, if set, is
	 * one built before for these (build_rt_object), linked instead of
	 * compiling dnnl_rt.c again. */
	const char *rt_in;
	/* mode "max-autotune" (autotune.c): the artifact built is timed with each
	 * valid lowering of its oneDNN fusions, on tune_threads threads (0: the
	 * CPUs), and built again with the fastest as its table */
	int autotune;
	int tune_threads;
	/* microbatch.c: images a run of the compiled graph: 0 the rule's choice (COIL_MICROBATCH in
	 * the environment when set: 0 never, c that many), -1 never, c > 0 that many */
	int microbatch;
} codegen_opts;

/* Fusion keeps the C linear in the graph (fuse.c): a few KiB a node at most,
 * after the fixed prelude.  This bounds what one graph may make the compiler
 * read: 100,000 nodes (COIL_MAX_NODES) of the worst kind stay under it. */
#define CODEGEN_MAX_C_BYTES ((size_t)256 << 20)

typedef struct codegen_result {
	int nkernels;
	int nfuncs;              /* distinct kernel functions */
	int nunits;              /* translation units compiled */
	size_t c_bytes;          /* generated C */
	double compile_s;        /* seconds spent in the C compiler (the whole build) */
	char target[32];
	char cflags[256];        /* what the compiler was given: the opt level and the target's flags */
	char arena_bytes[128];   /* expression over s0..s7 */
	int tune_sites;          /* autotune: fusions with a choice, */
	int tune_changed;        /* those that left the heuristics' lowering, */
	double tune_gain_ms;     /* the time per run that saved (their kernels, as timed), */
	double tune_s;           /* and the seconds it took (the second build not counted) */
	char tune_note[160];     /* why nothing was timed, when the artifact did not run ("" else) */
} codegen_result;

/* g as torch.autocast("cpu", dtype=t) would have traced it (autocast.c):
 * convolutions and matrix products in t, softmax, norms, reductions,
 * adaptive pooling and upsampling in f32, float outputs in their own dtype.  A new
 * graph (g is left as it was), or NULL with err. */
coil_graph *graph_autocast(coil_graph *g, coil_dtype t, coil_err *err);

/* The passes by position (0 first), NULL past the last. */
const char *codegen_pass_name(int i);

/* Compiles g into the shared object out_so (out_so NULL: stop after emit_c,
 * useful with dump_after).  0 on success, -1 with err. */
int codegen_compile(coil_graph *g, const codegen_opts *o, const char *out_so, codegen_result *res, coil_err *err);

/* Generated C in files (emit_c's layouts, emit.h): model.c alone, or
 * model.h, model.c, k1.c, ..; every .c is a translation unit, and with
 * rt_unit the oneDNN runtime's dnnl_rt.c too (build writes it).  A light
 * unit holds no hot loops: light 1 is built at -Og (a model.c with folding
 * kernels), light 2 at -O0 (create-time code and the ABI alone, their loops
 * over weights in the runtime: resnet50's model.c 0.42 s against 0.78 at -Og
 * with the kernels' header part, 1.31 at -O1). */
#define CODEGEN_MAX_FILES 16
/* Split, the kernel units (and a model.c with folding kernels) include this
 * header first: coil's prelude and vmath, the same text for every graph
 * (codegen_kernels_header(): malloc'd, NULL when out of memory).  Built
 * beside the runtime's object (build_rt_object) as a precompiled header, which
 * build_files puts beside it when rt_in has one (RT_IN with .gch for .o). */
#define CODEGEN_KERNELS_H "coil_kernels.h"
char *codegen_kernels_header(void);
typedef struct codegen_src {
	int n;
	const char *name[CODEGEN_MAX_FILES];
	char *text[CODEGEN_MAX_FILES];
	unsigned char light[CODEGEN_MAX_FILES];
	int rt_unit;
	int nkernels, nfuncs;
} codegen_src;

/* Runs the C compiler cc (NULL: "cc", searched in PATH) on src producing
 * out_so, sandboxed (see build.c): a private temp dir beside out_so, a clean
 * environment, the limits below, and killed with its whole process group
 * after timeout_s (0: BUILD_DEFAULT_TIMEOUT_S).  A compiler that fails, dies
 * or runs away is an error in err; *secs is the time it ran. */
#define BUILD_DEFAULT_TIMEOUT_S 120
#define BUILD_CPU_SLACK_S 5                     /* RLIMIT_CPU = timeout + this */
#define BUILD_AS_BYTES ((unsigned long long)8 << 30) /* RLIMIT_AS */
#define BUILD_FSIZE_BYTES ((unsigned long long)512 << 20) /* RLIMIT_FSIZE */
#define BUILD_NPROC 1024                        /* RLIMIT_NPROC (per user) */
int build_so(const char *src, const char *cc, const char *opt, const char *tflags, int werror, int timeout_s,
	     const char *out_so, double *secs, coil_err *err);
/* The same for files: one unit is compiled and linked in one run of cc;
 * several are compiled to objects, up to jobs at once (0: one per CPU this
 * thread may run on, at most BUILD_MAX_JOBS), then linked (with rt_in, the
 * runtime's object built before, instead of compiling dnnl_rt.c; rt_out:
 * for build_rt_object).  The timeout is
 * the whole build's; the first unit that fails ends it (the others are
 * killed) and names its file.  out_so appears only when all went well. */
#define BUILD_MAX_JOBS 8
int build_files(const codegen_src *src, const char *cc, const char *opt, const char *tflags, int werror,
		int timeout_s, int jobs, const char *rt_in, const char *rt_out, const char *out_so, double *secs,
		coil_err *err);
/* The oneDNN runtime's object alone (what build_files compiles dnnl_rt.c
 * into, with the same flags: byte for byte the same object) into out_o, for
 * codegen_opts.rt_in.  Its source is coil's own, never a request's. */
int build_rt_object(const char *cc, const char *opt, const char *tflags, int werror, int timeout_s, const char *out_o,
		    coil_err *err);
/* The kernels' header (CODEGEN_KERNELS_H) precompiled with the kernel units'
 * flags into out_gch, to go beside the runtime's object (pch_path). */
int build_kernels_pch(const char *cc, const char *opt, const char *tflags, int werror, int timeout_s,
		      const char *out_gch, coil_err *err);
/* The precompiled kernels' header that goes with the runtime's object at
 * rt_o (x.o: x.gch) into out; 0, or -1 when rt_o does not end in .o. */
int pch_path(const char *rt_o, char *out, size_t cap);
/* Copy the file from into to (created 0644); 0 or -1. */
int build_copy_file(const char *from, const char *to);
/* CPUs this thread may run on (sched_getaffinity), at least 1. */
int build_cpus(void);
/* The directory part of path into buf (cap bytes): "." when it has none,
 * relative when path is.  0, or -1 when it does not fit. */
int build_dir_of(const char *path, char *buf, size_t cap);
/* rm -rf dir, without following symbolic links. */
void build_rm_tree(const char *dir);

#endif
