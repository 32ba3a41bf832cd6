/* emit_abi: the artifact around the kernels (include/coil/artifact.h): the
 * shared prelude, the constants, oneDNN's create and prepare, and
 * coil_model_create/run/destroy with the description; then the file layout,
 * one file or several translation units (emit.h), each kernel function
 * spread to a unit.  The kernels themselves are emit_c.c's. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/dnnl.h"
#include "codegen/emit_c.h"
#include "codegen/ir.h"
#include "common/infer.h"
#include "coil/artifact.h"

static const char prelude[] =
	"#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n#include <omp.h>\n\n"
	"#define COIL_EXPORT __attribute__((visibility(\"default\")))\n"
	"#define COIL_MAX(a, b) (((a) > (b) || (a) != (a)) ? (a) : (b))\n"
	"#define COIL_MIN(a, b) (((a) < (b) || (a) != (a)) ? (a) : (b))\n"
	"/* A runtime error raised by a kernel (first one wins); coil_model_run\n"
	" * checks it after the kernel and fails with coil_errmsg[code]. */\n"
	"typedef struct coil_status {\n\tint code;\n\tlong long a, b;\n} coil_status;\n"
	"static inline void coil_raise(coil_status *st, int code, long long a, long long b)\n{\n"
	"\tint z = 0;\n"
	"\tif (__atomic_compare_exchange_n(&st->code, &z, code, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {\n"
	"\t\tst->a = a;\n\t\tst->b = b;\n\t}\n}\n"
	"static inline double coil_floordiv(double a, double b)\n{\n"
	"\tif (b == 0)\n\t\treturn a / b;\n\tdouble m = fmod(a, b), q = (a - m) / b;\n"
	"\tif (m != 0 && ((b < 0) != (m < 0)))\n\t\tq -= 1;\n\treturn q;\n}\n"
	"static inline int64_t coil_floordiv_i(int64_t a, int64_t b, coil_status *st, int code)\n{\n"
	"\tif (__builtin_expect(b == 0, 0)) {\n\t\tcoil_raise(st, code, 0, 0);\n\t\treturn 0;\n\t}\n"
	"\treturn (int64_t)floor((double)a / (double)b);\n}\n"
	"static inline int64_t coil_div_i(int64_t a, int64_t b, coil_status *st, int code)\n{\n"
	"\tif (__builtin_expect(b == 0, 0)) {\n\t\tcoil_raise(st, code, 0, 0);\n\t\treturn 0;\n\t}\n"
	"\treturn b == -1 ? (int64_t)(0 - (uint64_t)a) : a / b;\n}\n"
	"static inline int64_t coil_rem_i(int64_t a, int64_t b, coil_status *st, int code)\n{\n"
	"\tif (__builtin_expect(b == 0, 0)) {\n\t\tcoil_raise(st, code, 0, 0);\n\t\treturn 0;\n\t}\n"
	"\tint64_t m = b == -1 ? 0 : a % b;\n\treturn m != 0 && ((m < 0) != (b < 0)) ? m + b : m;\n}\n"
	"static inline double coil_rem(double a, double b)\n{\n"
	"\tdouble m = fmod(a, b);\n\treturn m != 0 && ((b < 0) != (m < 0)) ? m + b : m;\n}\n"
	"static inline float coil_remf(float a, float b)\n{\n"
	"\tfloat m = fmodf(a, b);\n\treturn m != 0 && ((b < 0) != (m < 0)) ? m + b : m;\n}\n"
	"/* shifts by a count outside [0, 64) give 0 (left) or the sign (right); narrower\n"
	" * types keep the low bits, as a shift in their own width would */\n"
	"static inline int64_t coil_shl(int64_t a, int64_t b) { return b < 0 || b > 63 ? 0 : (int64_t)((uint64_t)a << b); }\n"
	"static inline int64_t coil_shr(int64_t a, int64_t b) { return b < 0 || b > 63 ? (a < 0 ? -1 : 0) : a >> b; }\n"
	"static inline int64_t coil_abs(int64_t a) { return a < 0 ? -a : a; }\n"
	"/* floor(a / b) for b > 0 */\n"
	"static inline int64_t coil_fdiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }\n"
	"static inline int64_t coil_ipow(int64_t a, int64_t b) { return (int64_t)pow((double)a, (double)b); }\n"
	"/* n bytes from s to d (a cat's span): 32 at a time inline, a large span by memcpy */\n"
	"static inline void coil_copy(void *restrict d, const void *restrict s, size_t n)\n{\n"
	"\tchar *o = d;\n\tconst char *i = s;\n"
	"\tif (n >= 4096) {\n\t\tmemcpy(o, i, n);\n\t\treturn;\n\t}\n"
	"\tfor (; n >= 32; n -= 32, o += 32, i += 32)\n\t\t__builtin_memcpy(o, i, 32);\n"
	"\tfor (; n >= 4; n -= 4, o += 4, i += 4)\n\t\t__builtin_memcpy(o, i, 4);\n"
	"\tfor (; n; n--)\n\t\t*o++ = *i++;\n}\n"
	"/* A cat: each of outer rows of dst the nk inputs' spans side by side (span[k]\n"
	" * x inner elements of esz bytes); one function a unit, whatever the count */\n"
	"static __attribute__((unused)) void coil_cat(void *dst, const void *const *src, const int64_t *span, int nk,\n"
	"\t\t\t\t\t     int64_t outer, int64_t inner, size_t esz, int nt)\n{\n"
	"\tint64_t od = 0;\n\tfor (int k = 0; k < nk; k++)\n\t\tod += span[k];\n"
	"\tconst int64_t work = outer * od * inner;\n\t(void)work;\n"
	"\t#pragma omp parallel for num_threads(nt) if (nt > 1 && outer > 1 && work > 32768)\n"
	"\tfor (int64_t a = 0; a < outer; a++) {\n"
	"\t\tchar *o = (char *)dst + (size_t)(a * od * inner) * esz;\n"
	"\t\tfor (int k = 0; k < nk; k++) {\n"
	"\t\t\tconst size_t w = (size_t)(span[k] * inner) * esz;\n"
	"\t\t\tcoil_copy(o, (const char *)src[k] + (size_t)a * w, w);\n\t\t\to += w;\n\t\t}\n\t}\n}\n"
	"/* y[a][c] = the sum over r of x[a][r][c] divided by div (1 for a sum), each\n"
	" * in row order: columns in blocks of up to COIL_CS_W over the threads (where\n"
	" * the blocks are fewer than the threads, the rows cut in parts too, the parts'\n"
	" * sums added in order); up to 64 columns summed in eight vector registers, more\n"
	" * in an array in L1 that four rows at a time are added to */\n"
	"#define COIL_CS_W 2048\n"
	"typedef float coil_cv8 __attribute__((vector_size(32)));\n"
	"static inline __attribute__((always_inline)) void coil_colsum_nv(const float *p, int64_t n, int64_t cols, int nv, float *acc)\n"
	"{\n"
	"\tcoil_cv8 s[8] = {{0}};\n"
	"\tfor (int64_t r = 0; r < n; r++, p += cols)\n"
	"#pragma GCC unroll 8\n"
	"\t\tfor (int j = 0; j < nv; j++) {\n"
	"\t\t\tcoil_cv8 v;\n"
	"\t\t\t__builtin_memcpy(&v, p + 8 * j, sizeof v);\n"
	"\t\t\ts[j] += v;\n"
	"\t\t}\n"
	"\t__builtin_memcpy(acc, s, (size_t)nv * sizeof *s);\n"
	"}\n"
	"static __attribute__((unused)) void coil_colsum_part(const float *p, int64_t n, int64_t cols, int64_t w, float *acc)\n"
	"{\n"
	"\tconst int64_t nv = w / 8;\n"
	"\tint64_t j = 0;\n"
	"\tswitch (nv > 8 ? 0 : nv) {\n"
	"\tcase 8: coil_colsum_nv(p, n, cols, 8, acc); break;\n"
	"\tcase 7: coil_colsum_nv(p, n, cols, 7, acc); break;\n"
	"\tcase 6: coil_colsum_nv(p, n, cols, 6, acc); break;\n"
	"\tcase 5: coil_colsum_nv(p, n, cols, 5, acc); break;\n"
	"\tcase 4: coil_colsum_nv(p, n, cols, 4, acc); break;\n"
	"\tcase 3: coil_colsum_nv(p, n, cols, 3, acc); break;\n"
	"\tcase 2: coil_colsum_nv(p, n, cols, 2, acc); break;\n"
	"\tcase 1: coil_colsum_nv(p, n, cols, 1, acc); break;\n"
	"\tdefault:\n"
	"\t\tmemset(acc, 0, (size_t)w * sizeof *acc);\n"
	"\t\tfor (int64_t r = 0; r < n; r += 4) {\n"
	"\t\t\tconst float *q = p + r * cols;\n"
	"\t\t\tconst int k = n - r < 4 ? (int)(n - r) : 4;\n"
	"\t\t\tfor (j = 0; j + 8 <= w; j += 8) {\n"
	"\t\t\t\tcoil_cv8 a, v[4];\n"
	"\t\t\t\t__builtin_memcpy(&a, acc + j, sizeof a);\n"
	"\t\t\t\tif (k == 4) {\n"
	"\t\t\t\t\t__builtin_memcpy(&v[0], q + j, sizeof a);\n"
	"\t\t\t\t\t__builtin_memcpy(&v[1], q + cols + j, sizeof a);\n"
	"\t\t\t\t\t__builtin_memcpy(&v[2], q + 2 * cols + j, sizeof a);\n"
	"\t\t\t\t\t__builtin_memcpy(&v[3], q + 3 * cols + j, sizeof a);\n"
	"\t\t\t\t\ta = (((a + v[0]) + v[1]) + v[2]) + v[3];\n"
	"\t\t\t\t} else\n"
	"\t\t\t\t\tfor (int i = 0; i < k; i++) {\n"
	"\t\t\t\t\t\t__builtin_memcpy(&v[0], q + i * cols + j, sizeof a);\n"
	"\t\t\t\t\t\ta += v[0];\n"
	"\t\t\t\t\t}\n"
	"\t\t\t\t__builtin_memcpy(acc + j, &a, sizeof a);\n"
	"\t\t\t}\n"
	"\t\t\tfor (int64_t t = j; t < w; t++)\n"
	"\t\t\t\tfor (int i = 0; i < k; i++)\n"
	"\t\t\t\t\tacc[t] += q[i * cols + t];\n"
	"\t\t}\n"
	"\t\treturn;\n"
	"\t}\n"
	"\tfor (j = nv * 8; j < w; j++) {\n"
	"\t\tfloat v = 0;\n"
	"\t\tfor (int64_t r = 0; r < n; r++)\n"
	"\t\t\tv += p[r * cols + j];\n"
	"\t\tacc[j] = v;\n"
	"\t}\n"
	"}\n"
	"static __attribute__((unused)) void coil_colsum(const float *restrict x, float *restrict y, int64_t outer,\n"
	"\t\t\t\t\t\tint64_t rows, int64_t cols, float div, int nt)\n"
	"{\n"
	"\tconst int64_t nb = (cols + COIL_CS_W - 1) / COIL_CS_W, bw = (cols + nb - 1) / nb, units = outer * nb;\n"
	"\tint64_t nrs = nt > 1 && units < nt && rows > 1 ? (nt + units - 1) / units : 1;\n"
	"\tnrs = nrs > rows ? rows : nrs;\n"
	"\tfloat *part = nrs > 1 ? malloc((size_t)(units * nrs * bw) * sizeof(float)) : NULL;\n"
	"\tif (!part)\n"
	"\t\tnrs = 1;\n"
	"\t(void)nt;\n"
	"\t#pragma omp parallel for num_threads(nt) if (nt > 1 && units * nrs > 1 && outer * rows * cols > 32768)\n"
	"\tfor (int64_t t = 0; t < units * nrs; t++) {\n"
	"\t\tconst int64_t u = t / nrs, rs = t % nrs, a = u / nb, c0 = u % nb * bw;\n"
	"\t\tconst int64_t w = cols - c0 < bw ? cols - c0 : bw, r0 = rows * rs / nrs, r1 = rows * (rs + 1) / nrs;\n"
	"\t\tfloat acc[COIL_CS_W];\n"
	"\t\tcoil_colsum_part(x + (a * rows + r0) * cols + c0, r1 - r0, cols, w, acc);\n"
	"\t\tif (nrs > 1) /* (summed on the stack: parts side by side share cache lines) */\n"
	"\t\t\tmemcpy(part + t * bw, acc, (size_t)w * sizeof *acc);\n"
	"\t\telse\n"
	"\t\t\tfor (int64_t j = 0; j < w; j++)\n"
	"\t\t\t\ty[a * cols + c0 + j] = acc[j] / div;\n"
	"\t}\n"
	"\tfor (int64_t u = 0; nrs > 1 && u < units; u++) {\n"
	"\t\tconst int64_t a = u / nb, c0 = u % nb * bw, w = cols - c0 < bw ? cols - c0 : bw;\n"
	"\t\tfor (int64_t j = 0; j < w; j++) {\n"
	"\t\t\tfloat v = part[u * nrs * bw + j];\n"
	"\t\t\tfor (int64_t rs = 1; rs < nrs; rs++)\n"
	"\t\t\t\tv += part[(u * nrs + rs) * bw + j];\n"
	"\t\t\ty[a * cols + c0 + j] = v / div;\n"
	"\t\t}\n"
	"\t}\n"
	"\tfree(part);\n"
	"}\n"
	"\n"
	"typedef struct coil_ctx {\n\tconst int64_t *sym;\n\tint nt;\n\tconst void *const *in;\n"
	"\tvoid *const *par;\n\tvoid *const *out;\n\tchar *arena;\n\tconst int64_t *off;\n\tcoil_status *st;\n\tstruct coil_dn *dn; /* oneDNN objects, when any */\n"
	"\tint64_t mb; /* a microbatched run's chunk */\n} coil_ctx;\n\n";

/* The size of sym[]: the graph's symbols (s0, s1, ...), at least one. */
static int nsym(const coil_graph *g) { return g->syms.n ? g->syms.n : 1; }

/* In the file with the ABI. */
static const char pin_openmp[] =
	"/* OpenMP's worker threads outlive parallel regions: keep libgomp loaded\n"
	" * when this artifact is dlclose'd (else they run unmapped code). */\n"
	"__attribute__((constructor)) static void coil_pin_openmp(void)\n{\n"
	"\t(void)dlopen(\"libgomp.so.1\", RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);\n}\n\n";
/* In the file with the ABI.  A run flushes denormal results to zero and
 * reads denormal operands as zero (MXCSR's FTZ and DAZ) on every thread of
 * its team, oneDNN's included, and gives each thread back its own bits.  On
 * Intel cores each float operation that makes or reads a denormal takes a
 * microcode assist of ~100 cycles: a softmax over Swin's -100 masks makes
 * exp(-100) = 3.7e-44, and the batched matmul after it ran 28x slower than
 * on normal data.  What it changes: values below 2^-126 (1.2e-38) in
 * magnitude read and come out as 0.  COIL_DENORMALS=keep at create keeps
 * IEEE gradual underflow. */
static const char fp_mode[] =
	"#if defined(__x86_64__) || defined(__i386__)\n"
	"static _Thread_local unsigned coil_csr_prev;\n"
	"static _Thread_local int coil_csr_held;\n"
	"static void coil_fp_hold1(void)\n{\n"
	"\tif (coil_csr_held)\n\t\treturn;\n"
	"\tcoil_csr_prev = __builtin_ia32_stmxcsr();\n\tcoil_csr_held = 1;\n"
	"\t__builtin_ia32_ldmxcsr(coil_csr_prev | 0x8040u);\n}\n"
	"static void coil_fp_release1(void)\n{\n"
	"\tif (!coil_csr_held)\n\t\treturn;\n\tcoil_csr_held = 0;\n"
	"\t__builtin_ia32_ldmxcsr((__builtin_ia32_stmxcsr() & ~0x8040u) | (coil_csr_prev & 0x8040u));\n}\n"
	"#else\n"
	"static void coil_fp_hold1(void) {}\nstatic void coil_fp_release1(void) {}\n"
	"#endif\n"
	"/* the caller's thread in the team: a worker the team makes copies its bits\n"
	" * (pthread_create), which must be the caller's own */\n"
	"static void coil_fp_hold(int nt)\n{\n"
	"\tif (nt > 1) {\n#pragma omp parallel num_threads(nt)\n\t\tcoil_fp_hold1();\n\t} else {\n\t\tcoil_fp_hold1();\n\t}\n}\n"
	"static void coil_fp_release(int nt)\n{\n"
	"\tif (nt > 1) {\n#pragma omp parallel num_threads(nt)\n\t\tcoil_fp_release1();\n\t} else {\n\t\tcoil_fp_release1();\n\t}\n}\n\n";

/* Constants: small ones as initializers; from 256 elements on, as the bytes
 * of a string literal, which the C compiler reads about ten times faster
 * (a union gives the bytes their element type; b holds the literal's NUL). */
static void emit_consts(ectx *c, FILE *f)
{
	coil_graph *g = c->ir->g;
	for (int i = 0; i < g->nconsts; i++) {
		coil_value *v = &g->vals[g->consts[i]];
		int64_t n = 1, d;
		for (int j = 0; j < v->rank; j++)
			n *= dim_is_const(&v->shape[j], &d) ? d : 0;
		if (n >= 256) {
			size_t bytes = (size_t)n * dtype_size(v->dtype);
			fprintf(f, "static const union {\n\tunsigned char b[%zu];\n\t%s v[%lld];\n} c%d_ = {.b = \"", bytes + 1,
				emit_ctype(v->dtype), (long long)n, i);
			for (size_t e = 0; e < bytes; e++)
				fprintf(f, "%s\\x%02x", e && e % 32 == 0 ? "\"\n\t\"" : "", ((const unsigned char *)v->data)[e]);
			fprintf(f, "\"};\nstatic const %s *const c%d = c%d_.v;\n", emit_ctype(v->dtype), i, i);
			continue;
		}
		fprintf(f, "static const %s c%d[%lld] = {", emit_ctype(v->dtype), i, (long long)(n ? n : 1));
		for (int64_t e = 0; e < n; e++)
			if (dtype_is_half(v->dtype)) /* the bits */
				fprintf(f, "%s0x%04x", e ? ", " : "", ((const uint16_t *)v->data)[e]);
			else
				fprintf(f, "%s%s", e ? ", " : "",
					ectx_literal(c, dtype_load(v->dtype, v->data, (size_t)e), v->dtype));
		fprintf(f, "%s};\n", n ? "" : "0");
	}
	fprintf(f, "\n");
}
/* An input's or output's dim d as the caller sees it: the whole batch at dim 0 of a
 * microbatched graph (microbatch.c); a cut graph's outputs come from the whole batch */
static coil_dim abi_dim(const coil_ir *ir, const coil_dim *s, int d, int output)
{
	return d == 0 && ir->mb_total && !(output && ir->mb_join >= 0) ? dim_const(ir->mb_total) : s[d];
}

/* describe's JSON: positions, dtypes and shape expressions (symbols s0..),
 * no user names; batch: an input's or output's shape (abi_dim). */
static char *shape_json(ectx *c, const coil_dim *s, int rank, int batch)
{
	char *j = "[";
	for (int i = 0; i < rank; i++) {
		int64_t v;
		const coil_dim ad = batch ? abi_dim(c->ir, s, i, batch == 2) : s[i];
		j = dim_is_const(&ad, &v) ? arena_printf(c->a, "%s%s%lld", j, i ? ", " : "", (long long)v)
					  : arena_printf(c->a, "%s%s\\\"%s\\\"", j, i ? ", " : "", ir_dim_c(c->a, &ad));
	}
	return arena_printf(c->a, "%s]", j);
}

static char *tensors_json(ectx *c, int n, const int *vals, int batch)
{
	char *j = "[";
	for (int i = 0; i < n; i++) {
		coil_value *v = &c->ir->g->vals[vals[i]];
		j = arena_printf(c->a, "%s%s{\\\"dtype\\\": \\\"%s\\\", \\\"shape\\\": %s}", j, i ? ", " : "",
				 dtype_name(v->dtype), shape_json(c, v->shape, v->rank, batch));
	}
	return arena_printf(c->a, "%s]", j);
}

/* Whether create keeps param i (user's, or folded from nparams on): it is
 * read by a run kernel, or by oneDNN's objects, which a graph with symbols
 * rebuilds per binding at run time.  Without symbols, oneDNN reads the
 * caller's params (and the folded ones) once in create and create keeps
 * only what the run reads. */
static int par_kept(const coil_ir *ir, int i)
{
	if (i < ir->g->nparams && ir->fold && !ir->fold->param_live[i])
		return 0; /* only folds read it */
	return (i < ir->npar_run && ir->par_run[i]) || (dn_used(ir) && ir->g->syms.n);
}

/* The graph's symbols as the artifact spells them: s0, s1, ... */
static const coil_symtab *canon_syms(ectx *c)
{
	static const coil_symtab none;
	coil_symtab *t = arena_alloc(c->a, sizeof *t);
	if (!t)
		return &none;
	symtab_canonical(&c->ir->g->syms, t);
	return t;
}

/* A guard over s0, s1, ...: "s1 % 2 == 0". */
static char *guard_text(ectx *c, const coil_guard *gd)
{
	char b[400];
	return arena_strdup(c->a, guard_format(canon_syms(c), gd, b, sizeof b));
}

/* describe's symbol_defs (per symbol s0, s1, ...: itself when free, a derived
 * one's definition over the free ones) and guards, as JSON members inside
 * the C string (over s0, s1, ...: nothing of the graph's to escape). */
static char *symbols_json(ectx *c)
{
	const coil_graph *g = c->ir->g;
	if (!g->syms.n)
		return "";
	const coil_symtab *t = canon_syms(c);
	char b[512];
	char *j = "\\\"symbol_defs\\\": [";
	for (int k = 0; k < t->n; k++) {
		coil_dim d = dim_sym(k);
		j = arena_printf(c->a, "%s%s\\\"%s\\\"", j, k ? ", " : "", dim_format(&d, t, b, sizeof b));
	}
	j = arena_printf(c->a, "%s], \\\"guards\\\": [", j);
	for (int i = 0; i < g->nguards; i++)
		j = arena_printf(c->a, "%s%s\\\"%s\\\"", j, i ? ", " : "", guard_text(c, &g->guards[i]));
	return arena_printf(c->a, "%s], ", j);
}

/* describe's peak_bytes: the arena, the params create keeps (copied or
 * folded) and the outputs, for given symbol values; the arena's expression
 * alone if the sum cannot be formed. */
static char *peak_bytes(ectx *c)
{
	coil_graph *g = c->ir->g;
	const ir_fold *fd = c->ir->fold;
	int64_t folded = 0;
	for (int j = 0; fd && j < fd->nparam; j++)
		folded += par_kept(c->ir, g->nparams + j) ? fd->bytes[j] : 0;
	coil_dim tot = c->ir->arena_bytes, fb = dim_const(folded);
	coil_err e;
	if (c->ir->arena_unknown)
		return "unknown";
	if (dim_add(&tot, &tot, &fb, &e))
		return ir_dim_c(c->a, &c->ir->arena_bytes);
	for (int i = 0; i < g->nparams + g->noutputs; i++) {
		if (i < g->nparams && !par_kept(c->ir, i))
			continue;
		coil_value *v = &g->vals[i < g->nparams ? g->params[i] : g->outputs[i - g->nparams]];
		coil_dim b = dim_const((int64_t)dtype_size(v->dtype));
		for (int j = 0; j < v->rank; j++)
			if (dim_mul(&b, &b, &v->shape[j], &e))
				return ir_dim_c(c->a, &c->ir->arena_bytes);
		if (dim_add(&tot, &tot, &b, &e))
			return ir_dim_c(c->a, &c->ir->arena_bytes);
	}
	return ir_dim_c(c->a, &tot);
}

/* off[] and total, the arena's size: memplan's fixed offsets first, then
 * the symbolic slots, each 64-byte aligned. */
static void emit_offsets(ectx *c, FILE *f, coil_ir *ir, const char *ind)
{
	fprintf(f, "%sint64_t off[%d], total = %lld;\n", ind, ir->nslots + 1, (long long)ir->fixed_bytes);
	for (int j = 0; j < ir->nslots; j++) {
		if (ir->slots[j].at >= 0)
			fprintf(f, "%soff[%d] = %lld;\n", ind, j, (long long)ir->slots[j].at);
		else
			fprintf(f, "%soff[%d] = total;\n%stotal += ((int64_t)(%s) + 63) & ~(int64_t)63;\n", ind, j, ind,
				ir_dim_c(c->a, &ir->slots[j].bytes));
	}
}

/* coil_model_create's folding (fold.c): buffers for the folded params, then
 * the create IR's kernels reading the caller's params, their intermediates
 * in an arena freed right after. */
static void emit_create_folds(ectx *c, FILE *f)
{
	const ir_fold *fd = c->ir->fold;
	coil_ir *fi = fd ? fd->create : NULL;
	int np = c->ir->g->nparams;
	if (!fi)
		return;
	for (int j = 0; j < fd->nparam; j++)
		fprintf(f, "\tif (!(m->par[%d] = malloc(%lld))) {\n\t\tcoil_model_destroy(m);\n\t\treturn fail(\"out of memory\", 0, 0);\n\t}\n",
			np + j, (long long)(fd->bytes[j] ? fd->bytes[j] : 1));
	fprintf(f, "\t{\n\t\tint64_t sym[%d];\n\t\tfor (int i = 0; i < %d; i++)\n\t\t\tsym[i] = 1;\n", nsym(c->ir->g), nsym(c->ir->g));
	emit_offsets(c, f, fi, "\t\t");
	fprintf(f, "\t\tchar *arena = total ? aligned_alloc(64, (size_t)total) : NULL;\n"
		   "\t\tif (total && !arena) {\n\t\t\tcoil_model_destroy(m);\n\t\t\treturn fail(\"out of memory\", 0, 0);\n\t\t}\n");
	fprintf(f, "\t\tcoil_status st = {0, 0, 0};\n");
	fprintf(f, "\t\tcoil_ctx x = {sym, m->nthreads, NULL, (void *const *)params, m->par + %d, arena, off, &st, NULL, 0};\n", np);
	for (int k = 0; k < fi->nk; k++) {
		fprintf(f, "\t%s", c->fold->call[k]);
		if (c->fold->may_fail[k])
			fprintf(f, "\t\tif (st.code) {\n\t\t\tfree(arena);\n\t\t\tcoil_model_destroy(m);\n"
				   "\t\t\treturn fail(coil_errmsg[st.code], st.a, st.b);\n\t\t}\n");
	}
	fprintf(f, "\t\tfree(arena);\n\t}\n");
}

/* bind(): the free symbols from the input shapes (each input's declared dim
 * checked), their ranges, the derived symbols, then every guard; each
 * failure names the input and dim bound to the symbol at fault. */
static void emit_bind(ectx *c, FILE *f)
{
	coil_graph *g = c->ir->g;
	int ns = nsym(g);
	fprintf(f, "static int bind(const int64_t *const *shapes, int64_t *sym)\n{\n\tint bound[%d] = {0};\n", ns);
	fprintf(f, "\tfor (int i = 0; i < %d; i++)\n\t\tsym[i] = 1;\n\t(void)bound;\n\t(void)shapes;\n", ns);
	for (int i = 0; i < g->ninputs; i++) {
		coil_value *v = &g->vals[g->inputs[i]];
		for (int d = 0; d < v->rank; d++) {
			int64_t cst;
			const coil_dim ad = abi_dim(c->ir, v->shape, d, 0);
			if (dim_is_const(&ad, &cst)) {
				fprintf(f, "\tif (shapes[%d][%d] != %lld)\n\t\treturn fail(\"input %d: dim %d is %%lld, expected %%lld\", shapes[%d][%d], %lld);\n",
					i, d, (long long)cst, i, d, i, d, (long long)cst);
				continue;
			}
			int s = 0;
			while (!v->shape[d].t[0].pow[s])
				s++;
			fprintf(f, "\tif (shapes[%d][%d] < 0 || (bound[%d] && sym[%d] != shapes[%d][%d]))\n"
				   "\t\treturn fail(\"input %d: dim %d is %%lld, inconsistent with symbol s%d = %%lld\", shapes[%d][%d], sym[%d]);\n",
				i, d, s, s, i, d, i, d, s, i, d, s);
			fprintf(f, "\tbound[%d] = 1;\n\tsym[%d] = shapes[%d][%d];\n", s, s, i, d);
		}
	}
	/* messages name inputs by position, symbols as s0, s1, ... and nodes by index:
	 * no string of the graph reaches the C (front ends put the names back) */
	const coil_symtab *t = &g->syms;
	for (int k = 0; k < t->n; k++) {
		int d, in = graph_sym_binding(g, k, &d);
		int64_t lo = t->lo[k] > 0 ? t->lo[k] : 0;
		if (t->kind[k] != SYM_FREE || in < 0 || (!lo && !t->hi[k]))
			continue;
		fprintf(f, "\tif (sym[%d] < %lld%s", k, (long long)lo, t->hi[k] ? " || sym[" : ")\n");
		if (t->hi[k])
			fprintf(f, "%d] > %lld)\n", k, (long long)t->hi[k]);
		char hi[32] = "inf";
		if (t->hi[k])
			snprintf(hi, sizeof hi, "%lld", (long long)t->hi[k]);
		fprintf(f, "\t\treturn fail(\"input %d dim %d (s%d = %%lld): outside the range [%lld, %s] of s%d (guard)\", sym[%d], 0);\n",
			in, d, k, (long long)lo, hi, k, k);
	}
	const coil_symtab *gen = symtab_generic();
	char b[512], w[300];
	if (t->n || g->nguards)
		fprintf(f, "\t{\n");
	for (int k = 0; k < t->n; k++) {
		if (t->kind[k] == SYM_FREE) {
			fprintf(f, "\tconst int64_t s%d = sym[%d];\n", k, k);
		} else if (t->kind[k] == SYM_FLOORDIV) {
			fprintf(f, "\tconst int64_t s%d = sym[%d] = coil_fdiv(%s, %lld);\n", k, k,
				dim_format(&t->a[k], gen, b, sizeof b), (long long)t->den[k]);
		} else {
			char b2[512];
			fprintf(f, "\tconst int64_t s%d_a = %s, s%d_b = %s;\n\tconst int64_t s%d = sym[%d] = s%d_a %s s%d_b ? s%d_a : s%d_b;\n",
				k, dim_format(&t->a[k], gen, b, sizeof b), k, dim_format(&t->b[k], gen, b2, sizeof b2), k, k, k,
				t->kind[k] == SYM_MAX ? ">" : "<", k, k, k);
		}
		fprintf(f, "\t(void)s%d;\n", k);
	}
	for (int i = 0; i < g->nguards; i++) {
		const coil_guard *gd = &g->guards[i];
		int r = graph_sym_root(g, &gd->e), d = -1, in = r >= 0 ? graph_sym_binding(g, r, &d) : -1;
		dim_format(&gd->e, gen, b, sizeof b);
		if (gd->kind == GUARD_GE)
			fprintf(f, "\tif (!((%s) >= %lld))\n", b, (long long)gd->c);
		else
			fprintf(f, "\tif ((%s) %% %lld != 0)\n", b, (long long)gd->c);
		const coil_node *n = gd->node >= 0 ? &g->nodes[gd->node] : NULL;
		char *rest = arena_printf(c->a, "): guard %s fails (%s of node %d (%s))", guard_text(c, gd), gd->why,
					  gd->node, n ? op_name(n->op) : "?");
		if (in >= 0)
			snprintf(w, sizeof w, "input %d dim %d (s%d = ", in, d, r);
		fprintf(f, "\t\treturn fail(\"%s%s%s\", %s, 0);\n", in >= 0 ? w : "the inputs (", "%lld", emit_cfmt(c->a, rest),
			r >= 0 ? arena_printf(c->a, "sym[%d]", r) : "0");
	}
	if (t->n || g->nguards)
		fprintf(f, "\t}\n");
	fprintf(f, "\treturn 0;\n}\n\n");
}

/* The profile switch: coil_model_profile(m, acc) with acc of 3 x (kernels + 1)
 * doubles makes each run add, per kernel k, its seconds, the bytes of the
 * buffers it touched and its flops to acc[3k..3k+2]; acc[3 x kernels] gets
 * what precedes the kernels (binding the sizes, the arena, oneDNN's objects
 * for a new shape).  NULL turns it off; either way it returns the kernel
 * count.  coil_model_kernel_name(k) says what kernel k is: its kind and its
 * graph nodes (id:op). */
static void emit_profile(ectx *c, FILE *f)
{
	coil_ir *ir = c->ir;
	fprintf(f, "static void coil_prof_mark(double *p, double *t, double bytes, double flops)\n{\n"
		   "\tconst double now = omp_get_wtime();\n\tp[0] += now - *t;\n\tp[1] += bytes;\n\tp[2] += flops;\n"
		   "\t*t = now;\n}\n\n");
	fprintf(f, "static void coil_prof_lap(double *lap, double *t)\n{\n\tconst double now = omp_get_wtime();\n"
		   "\tif (now - *t < *lap)\n\t\t*lap = now - *t;\n\t*t = now;\n}\n\n");
	fprintf(f, "static const char *const coil_kname[] = {");
	for (int k = 0; k < ir->nk; k++)
		fprintf(f, "%s\n\t\"%s\"", k ? "," : "", c->pname[k]);
	fprintf(f, "%s\"run: sizes, arena, oneDNN objects\"};\n\n", ir->nk ? ",\n\t" : "");
	fprintf(f, "COIL_EXPORT int coil_model_profile(coil_model *m, double *acc)\n{\n\tif (m)\n\t\tm->prof = acc;\n"
		   "\treturn %d;\n}\n\n", ir->nk);
	fprintf(f, "COIL_EXPORT int coil_model_profile_repeat(coil_model *m, int r)\n{\n\tif (m)\n\t\tm->prof_rep = r;\n"
		   "\treturn %d;\n}\n\n", ir->nk);
	fprintf(f, "COIL_EXPORT const char *coil_model_kernel_name(int k)\n{\n\treturn k >= 0 && k <= %d ? coil_kname[k] : NULL;\n}\n\n",
		ir->nk);
}

static void emit_abi(ectx *c, FILE *f, const char *target, const char *hash)
{
	coil_graph *g = c->ir->g;
	coil_ir *ir = c->ir;
	const ir_fold *fd = ir->fold;
	int ns = g->syms.n, npar = g->nparams + (fd ? fd->nparam : 0);
	fprintf(f, "static const char describe_json[] = \"{\\\"abi_version\\\": %d, \\\"target\\\": \\\"%s\\\", "
		   "\\\"graph_hash\\\": \\\"%s\\\", \\\"symbols\\\": %d, %s\\\"inputs\\\": %s, \\\"params\\\": %s, "
		   "\\\"outputs\\\": %s, \\\"arena_bytes\\\": \\\"%s\\\", \\\"peak_bytes\\\": \\\"%s\\\", "
		   "\\\"kernels\\\": %d, \\\"functions\\\": %d, \\\"folded_bytes\\\": \\\"%lld\\\", "
		   "\\\"folded_params\\\": %d, \\\"folded_constants\\\": %d, \\\"create_kernels\\\": %d}\";\n\n",
		COIL_ABI_VERSION, target, hash, ns, symbols_json(c), tensors_json(c, g->ninputs, g->inputs, 1),
		tensors_json(c, g->nparams, g->params, 0), tensors_json(c, g->noutputs, g->outputs, 2),
		ir->arena_unknown ? "unknown" : ir_dim_c(c->a, &ir->arena_bytes), peak_bytes(c), ir->nk, c->nfn, (long long)(fd ? fd->folded_bytes : 0),
		fd ? fd->nparam : 0, fd ? fd->nconst : 0, fd && fd->create ? fd->create->nk : 0);
	fprintf(f, "static _Thread_local char coil_errbuf[256];\n");
	if (c->errs.n > 1) {
		fprintf(f, "static const char *const coil_errmsg[] = {\"\"");
		for (int i = 1; i < c->errs.n; i++)
			fprintf(f, ", \"%s\"", c->errs.msg[i]);
		fprintf(f, "};\n");
	}
	fprintf(f, "static int fail(const char *msg, long long a, long long b)\n{\n"
		   "\tsnprintf(coil_errbuf, sizeof coil_errbuf, msg, a, b);\n\treturn -1;\n}\n\n");
	fprintf(f, "struct coil_model {\n\tint nthreads;\n\tint ftz;\n\tvoid *par[%d];\n\tchar *arena;\n\tint64_t arena_cap;\n"
		   "\tdouble *prof;\n\tint prof_rep;\n%s};\n\n",
		npar + 1, dn_used(ir) ? "\tstruct coil_dn *dn;\n" : "");
	emit_profile(c, f);
	dn_emit_tune(ir, f);
	dn_emit_model(ir, f);
	fprintf(f, "COIL_EXPORT int coil_abi_version(void) { return %d; }\n", COIL_ABI_VERSION);
	fprintf(f, "COIL_EXPORT const char *coil_artifact_describe(void) { return describe_json; }\n");
	fprintf(f, "COIL_EXPORT const char *coil_model_last_error(void) { return coil_errbuf; }\n\n");
	fprintf(f, "COIL_EXPORT int coil_model_memory(const coil_model *m, int64_t *out, int n)\n{\n"
		   "\tint64_t v[6] = {m ? m->arena_cap : 0, 0, 0, 0, 0, 0};\n%s"
		   "\tfor (int i = 0; i < n && i < 6; i++)\n\t\tout[i] = v[i];\n\treturn n < 6 ? n : 6;\n}\n\n",
		dn_used(ir) ? "\tif (m)\n\t\tcoil_dn_memory(m->dn, v);\n" : "");
	/* params: static sizes, copied */
	fprintf(f, "COIL_EXPORT int coil_model_create(const void *const *params, int nparams, int nthreads, coil_model **out)\n{\n");
	fprintf(f, "\t*out = NULL;\n\tif (nparams != %d)\n\t\treturn fail(\"expected %%lld params, got %%lld\", %d, nparams);\n",
		g->nparams, g->nparams);
	fprintf(f, "\tcoil_model *m = calloc(1, sizeof *m);\n\tif (!m)\n\t\treturn fail(\"out of memory\", 0, 0);\n");
	fprintf(f, "\tm->nthreads = nthreads > 0 ? nthreads : omp_get_max_threads();\n");
	fprintf(f, "\tconst char *dn_env = getenv(\"COIL_DENORMALS\");\n\tm->ftz = !(dn_env && !strcmp(dn_env, \"keep\"));\n");
	for (int i = 0; i < g->nparams; i++) {
		coil_value *v = &g->vals[g->params[i]];
		const int64_t n = graph_value_bytes(v);
		if (!par_kept(ir, i)) /* only folds or oneDNN's create read it */
			continue;
		fprintf(f, "\tif (!(m->par[%d] = malloc(%lld))) {\n\t\tcoil_model_destroy(m);\n\t\treturn fail(\"out of memory\", 0, 0);\n\t}\n",
			i, (long long)(n ? n : 1));
		fprintf(f, "\tmemcpy(m->par[%d], params[%d], %lld);\n", i, i, (long long)n);
	}
	emit_create_folds(c, f);
	if (dn_used(ir) && !g->syms.n) { /* oneDNN objects now; with symbols at the first run */
		/* params only oneDNN reads: the caller's, lent to create; folded ones freed after */
		fprintf(f, "\tconst int64_t sym0[1] = {1};\n");
		for (int i = 0; i < g->nparams; i++)
			if (!par_kept(ir, i) && !(fd && !fd->param_live[i]))
				fprintf(f, "\tm->par[%d] = (void *)params[%d];\n", i, i);
		fprintf(f, "\tconst int dn_rc = coil_dn_prepare(m, sym0);\n");
		for (int i = 0; i < npar; i++) {
			if (par_kept(ir, i) || (i < g->nparams && fd && !fd->param_live[i]))
				continue;
			if (i >= g->nparams)
				fprintf(f, "\tfree(m->par[%d]);\n", i);
			fprintf(f, "\tm->par[%d] = NULL;\n", i);
		}
		fprintf(f, "\tif (dn_rc) {\n\t\tcoil_model_destroy(m);\n\t\treturn -1;\n\t}\n");
	}
	fprintf(f, "\t*out = m;\n\treturn 0;\n}\n\n");
	fprintf(f, "COIL_EXPORT void coil_model_destroy(coil_model *m)\n{\n\tif (!m)\n\t\treturn;\n");
	fprintf(f, "\tfor (int i = 0; i < %d; i++)\n\t\tfree(m->par[i]);\n\tfree(m->arena);\n%s\tfree(m);\n}\n\n", npar,
		dn_used(ir) ? "\tcoil_dn_free(m->dn);\n" : "");
	emit_bind(c, f);
	fprintf(f, "COIL_EXPORT int coil_model_output_shape(coil_model *m, const int64_t *const *input_shapes, int output, int64_t *shape)\n{\n");
	fprintf(f, "\tint64_t sym[%d];\n\t(void)m;\n\tif (bind(input_shapes, sym))\n\t\treturn -1;\n", nsym(g));
	for (int s = 0; s < g->syms.n; s++)
		fprintf(f, "\tconst int64_t s%d = sym[%d];\n", s, s);
	fprintf(f, "\tswitch (output) {\n");
	for (int j = 0; j < g->noutputs; j++) {
		coil_value *v = &g->vals[g->outputs[j]];
		fprintf(f, "\tcase %d:\n", j);
		for (int d = 0; d < v->rank; d++) {
			const coil_dim ad = abi_dim(ir, v->shape, d, 1);
			fprintf(f, "\t\tshape[%d] = %s;\n", d, ir_dim_c(c->a, &ad));
		}
		fprintf(f, "\t\treturn %d;\n", v->rank);
	}
	fprintf(f, "\tdefault:\n\t\treturn fail(\"no output %%lld\", output, 0);\n\t}\n}\n\n");
	fprintf(f, "static int coil_run_(coil_model *m, const void *const *inputs, const int64_t *const *input_shapes, void *const *outputs)\n{\n");
	fprintf(f, "\tint64_t sym[%d];\n", nsym(g));
	fprintf(f, "\tif (!m)\n\t\treturn fail(\"no model\", 0, 0);\n");
	fprintf(f, "\tdouble pt = m->prof ? omp_get_wtime() : 0, lap = 1e300;\n");
	fprintf(f, "\tconst int rep = m->prof && m->prof_rep > 1 ? m->prof_rep : 1;\n");
	fprintf(f, "\tif (bind(input_shapes, sym))\n\t\treturn -1;\n");
	for (int s = 0; s < g->syms.n; s++)
		fprintf(f, "\tconst int64_t s%d = sym[%d];\n", s, s);
	emit_offsets(c, f, ir, "\t");
	/* the old arena goes first: it holds nothing between runs, and holding
	 * both made the peak the sum of the two */
	fprintf(f, "\tif (total > m->arena_cap) {\n\t\tfree(m->arena);\n\t\tm->arena = NULL;\n\t\tm->arena_cap = 0;\n"
		   "\t\tchar *a = aligned_alloc(64, (size_t)total);\n"
		   "\t\tif (!a)\n\t\t\treturn fail(\"out of memory for %%lld arena bytes\", total, 0);\n"
		   "\t\tm->arena = a;\n\t\tm->arena_cap = total;\n\t}\n");
	fprintf(f, "\tcoil_status st = {0, 0, 0};\n");
	fprintf(f, "\tcoil_ctx x = {sym, m->nthreads, inputs, m->par, outputs, m->arena, off, &st, NULL, 0};\n");
	if (dn_used(ir))
		fprintf(f, "\tif (coil_dn_prepare(m, sym))\n\t\treturn -1;\n\tx.dn = m->dn;\n");
	fprintf(f, "\tif (m->prof)\n\t\tcoil_prof_mark(m->prof + %d, &pt, 0, 0);\n", 3 * ir->nk);
	if (ir->mb_total) { /* chunk mb: images mb*c .. mb*c + c-1 of each input and output */
		fprintf(f, "\tconst void *mb_in[%d];\n\tvoid *mb_out[%d];\n\tx.in = mb_in;\n\tx.out = mb_out;\n"
			   "\tfor (int64_t mb = 0; mb < %lld; mb++) {\n", g->ninputs + 1, g->noutputs + 1,
			(long long)(ir->mb_total / ir->mb_chunk));
		for (int i = 0; i < g->ninputs; i++)
			fprintf(f, "\tmb_in[%d] = (const char *)inputs[%d] + mb * %lld;\n", i, i,
				(long long)graph_value_bytes(&g->vals[g->inputs[i]]));
		for (int j = 0; j < g->noutputs; j++)
			fprintf(f, "\tmb_out[%d] = (char *)outputs[%d] + mb * %lld;\n", j, j,
				(long long)graph_value_bytes(&g->vals[g->outputs[j]]));
	}
	if (ir->mb_total)
		fprintf(f, "\tx.mb = mb;\n");
	for (int k = 0; k < ir->nk; k++) {
		/* rep > 1 (coil_model_profile_repeat): each kernel runs rep times in a row and its
		 * fastest lap counts, its time with its data in cache; the outputs then mean nothing */
		fprintf(f, "\tfor (int prof_r = 0; prof_r < rep; prof_r++) {\n\t");
		fputs(c->call[k], f);
		if (c->may_fail[k])
			fprintf(f, "\t\tif (st.code)\n\t\t\treturn fail(coil_errmsg[st.code], st.a, st.b);\n");
		fprintf(f, "\t\tif (m->prof)\n\t\t\tcoil_prof_lap(&lap, &pt);\n\t}\n");
		fprintf(f, "\tif (m->prof) {\n\t\tm->prof[%d] += lap;\n\t\tm->prof[%d] += %s;\n\t\tm->prof[%d] += %s;\n"
			   "\t\tlap = 1e300;\n\t}\n", 3 * k, 3 * k + 1, c->bytes[k], 3 * k + 2, c->flops[k]);
		if (ir->mb_total && k == ir->mb_join) /* the chunks end at the join; the rest runs on the batch */
			fprintf(f, "\t}\n\tx.in = inputs;\n\tx.out = outputs;\n");
	}
	if (ir->mb_total && ir->mb_join < 0)
		fprintf(f, "\t}\n");
	fprintf(f, "\treturn 0;\n}\n\n");
	fprintf(f, "COIL_EXPORT int coil_model_run(coil_model *m, const void *const *inputs, const int64_t *const *input_shapes, void *const *outputs)\n{\n"
		   "\tif (!m || !m->ftz)\n\t\treturn coil_run_(m, inputs, input_shapes, outputs);\n"
		   "\tcoil_fp_hold(m->nthreads);\n\tconst int rc = coil_run_(m, inputs, input_shapes, outputs);\n"
		   "\tcoil_fp_release(m->nthreads);\n\treturn rc;\n}\n");
}

/* The split layout's kernel file (1..nfiles) for each function: longest
 * processing time first, largest function to the least loaded file. */
static int spread(ectx *c, int nfiles)
{
	size_t load[EMIT_MAX_UNITS + 1] = {0};
	int *order = arena_alloc(c->a, (size_t)(c->nfn + 1) * sizeof *order);
	if (!order)
		return -1;
	for (int i = 0; i < c->nfn; i++)
		order[i] = i;
	for (int i = 1; i < c->nfn; i++) /* by size, largest first (stable) */
		for (int j = i; j > 0 && c->fn[order[j]].size > c->fn[order[j - 1]].size; j--) {
			int t = order[j];
			order[j] = order[j - 1];
			order[j - 1] = t;
		}
	for (int i = 0; i < c->nfn; i++) {
		int best = 1;
		for (int b = 2; b <= nfiles; b++)
			if (load[b] < load[best])
				best = b;
		c->fn[order[i]].file = best;
		load[best] += c->fn[order[i]].size;
	}
	return 0;
}

/* Appends text to *s (a memstream's buffer through f). */
static char *finish(FILE *f, char **buf)
{
	if (fclose(f) != 0) {
		free(*buf);
		*buf = NULL;
	}
	return *buf;
}

/* What the prelude needs ahead of it, in every text that carries it */
#define PRELUDE_INCLUDES "#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <stdio.h>\n"

char *codegen_kernels_header(void)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	if (!f)
		return NULL;
	fprintf(f, "/* coil's prelude and vmath for generated kernels: the same text for every\n"
		   " * graph (precompiled for each compiler and target flags). */\n"
		   "#define COIL_KERNELS_H\n" PRELUDE_INCLUDES "%s",
		prelude);
	vec_prelude(f);
	return finish(f, &text);
}

int ir_emit_src(coil_ir *ir, const char *target, const char *hash, const emit_layout *lay, codegen_src *out,
		coil_err *err)
{
	ectx c = {.ir = ir, .a = ir->arena, .err = err, .isa = vec_isa_for(target)};
	memset(out, 0, sizeof *out);
	c.errs.arena = ir->arena;
	if (ectx_init(&c, "kfn", "COIL_KFN") || emit_fold_kernels(&c))
		return -1;
	for (int k = 0; k < ir->nk; k++)
		if (emit_kernel(&c, k))
			return -1;
	/* the ABI: constants, oneDNN's create/prepare, create/run/destroy */
	char *abi = NULL;
	size_t alen = 0;
	FILE *f = open_memstream(&abi, &alen);
	if (!f)
		return coil_err_oom(err);
	emit_consts(&c, f);
	emit_abi(&c, f, target, hash);
	if (!finish(f, &abi))
		return coil_err_oom(err);
	/* the layout: one file, or split */
	size_t total = 0;
	for (int i = 0; i < c.nfn; i++)
		total += c.fn[i].size;
	int rt = dn_used(ir), nfiles = lay ? lay->units : 0;
	if (nfiles < 0) { /* automatic */
		int cpus = lay->cpus < 1 ? 1 : lay->cpus;
		size_t k = (total + EMIT_UNIT_BYTES - 1) / EMIT_UNIT_BYTES;
		nfiles = k < 1 ? 1 : k > (size_t)cpus ? cpus : (int)k;
		if (cpus < 2 || (!rt && total + alen < EMIT_UNIT_BYTES))
			nfiles = 0;
	}
	if (nfiles > EMIT_MAX_UNITS)
		nfiles = EMIT_MAX_UNITS;
	if (nfiles > 0 && spread(&c, nfiles) < 0) {
		free(abi);
		return coil_err_oom(err);
	}
	/* files: model.h and model.c (the ABI) when split, then the kernel files
	 * that got functions; model.c alone otherwise */
	int split = nfiles > 0, nf = split ? nfiles + 2 : 1, bad = 0, used_files[EMIT_MAX_UNITS + 1] = {1};
	for (int i = 0; split && i < c.nfn; i++)
		used_files[c.fn[i].file] = 1;
	char *head = NULL;
	size_t hlen = 0;
	/* the shared part: model.h, or the top of model.c */
	if (!(f = open_memstream(&head, &hlen)))
		bad = 1;
	else {
		fprintf(f, "/* Generated by coil codegen (ABI %d) for target %s, graph %s.\n * %d kernels, %d functions. */\n",
			COIL_ABI_VERSION, target, hash, ir->nk, c.nfn);
		/* split, the prelude and vmath are coil_kernels.h (the same for every
		 * graph: precompiled beside the runtime's object, build.c), which the
		 * kernel units include first; the ABI-only model.c has the prelude
		 * alone (immintrin.h is a quarter of a second to parse) */
		if (split)
			fprintf(f, "#ifndef COIL_KERNELS_H\n" PRELUDE_INCLUDES "%s"
				   "#endif\n#ifndef COIL_ABI_UNIT\n", prelude);
		else {
			fprintf(f, PRELUDE_INCLUDES "%s", prelude);
			vec_prelude(f);
		}
		for (int i = 0; i < ir->g->nnodes; i++)
			if (ir->g->nodes[i].op == OP_SDPA) {
				fputs(vec_attn_source(), f);
				break;
			}
		for (int i = 0; i < ir->g->nnodes; i++)
			if (ir->g->nodes[i].op == OP_FFT_R2C || ir->g->nodes[i].op == OP_FFT_C2R ||
			    ir->g->nodes[i].op == OP_FFT_C2C) {
				fputs(vec_fft_source(), f);
				break;
			}
		for (int i = 0; i < ir->g->nnodes; i++)
			if (op_rnn_kind(ir->g->nodes[i].op) >= 0) {
				fputs(vec_rnn_source(), f);
				break;
			}
		for (int i = 0; i < ir->g->nnodes; i++)
			if (ir->g->nodes[i].op == OP_UPSAMPLE_NEAREST2D || ir->g->nodes[i].op == OP_UPSAMPLE_NEAREST2D_VEC ||
			    ir->g->nodes[i].op == OP_UPSAMPLE_BILINEAR2D || ir->g->nodes[i].op == OP_UPSAMPLE_BILINEAR2D_VEC) {
				fputs(vec_upsample_source(), f);
				break;
			}
		if (split)
			fprintf(f, "#endif /* COIL_ABI_UNIT */\n\n");
		fprintf(f, "typedef struct coil_model coil_model;\nvoid coil_model_destroy(coil_model *m);\n\n");
		/* split, the runtime is a unit of its own (its header here);
		 * else model.c includes its source */
		dn_emit_support(ir, f, split);
		if (split) {
			fprintf(f, "#define COIL_KFN\n");
			for (int i = 0; i < c.nfn; i++)
				fprintf(f, "%s;\n", c.fn[i].proto);
			fprintf(f, "\n");
		} else {
			fprintf(f, "#define COIL_KFN static\n\n");
		}
		bad = !finish(f, &head);
	}
	int n = 0;
	for (int u = 0; u < nf && !bad; u++) {
		char *text = NULL;
		size_t tlen = 0;
		if (split && u == 0) {
			char *kh = codegen_kernels_header();
			out->name[n] = "model.h";
			out->text[n++] = arena_strdup(ir->arena, head);
			out->name[n] = CODEGEN_KERNELS_H;
			out->text[n++] = kh ? arena_strdup(ir->arena, kh) : NULL;
			bad = !kh || !out->text[n - 1];
			free(kh);
			continue;
		}
		int file = split ? u - 1 : 0;
		if (!used_files[file])
			continue;
		if (!(f = open_memstream(&text, &tlen))) {
			bad = 1;
			break;
		}
		/* model.c without folding kernels is create-time code and the ABI alone:
		 * built at -O0 (its loops over weights are the runtime's), without
		 * the kernels' part of model.h */
		const int abi_only = split && file == 0 && !(c.fold && c.fold->nfn);
		if (split)
			fprintf(f, "%s#include \"model.h\"\n\n", abi_only ? "#define COIL_ABI_UNIT\n" : "#include \"" CODEGEN_KERNELS_H "\"\n");
		else
			fputs(head, f);
		if (file == 0) {
			fputs(pin_openmp, f);
			fputs(fp_mode, f);
		}
		for (int i = 0; file == 0 && c.fold && i < c.fold->nfn; i++)
			fputs(c.fold->fn[i].text, f);
		for (int i = 0; i < c.nfn; i++)
			if (c.fn[i].file == file)
				fputs(c.fn[i].text, f);
		if (file == 0)
			fputs(abi, f);
		if (!finish(f, &text)) {
			bad = 1;
			break;
		}
		out->name[n] = file == 0 ? "model.c" : arena_printf(ir->arena, "k%d.c", file);
		out->light[n] = abi_only ? 2 : split && file == 0;
		out->text[n] = arena_strdup(ir->arena, text);
		free(text);
		bad = !out->name[n] || !out->text[n];
		n++;
	}
	free(head);
	free(abi);
	if (bad)
		return coil_err_oom(err);
	out->n = n;
	out->rt_unit = split && rt;
	out->nkernels = ir->nk;
	out->nfuncs = c.nfn;
	return 0;
}

char *ir_emit_c(coil_ir *ir, const char *target, const char *hash, coil_err *err)
{
	codegen_src src;
	emit_layout one = {0, 1};
	return ir_emit_src(ir, target, hash, &one, &src, err) ? NULL : src.text[0];
}
