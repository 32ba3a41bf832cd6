/* vec: explicit SIMD for f32 pointwise and reduction kernels (bf16 and f16
 * buffers too: loaded widened to f32, narrowed when stored; vmath.h).
 *
 * One renderer, one table per instruction set (tinygrad style): the walk
 * below is the same for AVX2 (8 lanes) and AVX-512 (16 lanes); the tables
 * say how each primitive, load, store, mask and horizontal reduction is
 * spelled.  The scalar table is emit_c.c's (the fallback for kernels that
 * are not all f32/bool, and for the generic target).  Math functions come
 * from codegen/vmath.h, embedded verbatim into every artifact.
 *
 * Loops.  The innermost non-1 dim of the iteration space is vectorized:
 * full vectors, then one masked tail (never a scalar remainder loop).  A
 * buffer read is classified from its index expressions: contiguous in the
 * vector dim (vector load), invariant (broadcast) or anything else (a gather
 * lane by lane).  A gather whose buffer is contiguous along another loop dim
 * (a transpose or permute) gets 2D tiling of those two dims.
 *
 * Parallelism.  Outer loops (and blocks of the vector dim) are collapsed into
 * one OpenMP loop whose team is coil_team(nt, work): no team below
 * COIL_GRAIN elements, at most one thread per COIL_GRAIN above, so small
 * kernels run on the caller's thread and large ones split evenly.
 *
 * Reductions.  Over the innermost dim: 4 interleaved vector accumulators and
 * a horizontal reduction per row, parallel over rows; passes over a row after
 * the first (it is in cache by then) prefetch a later row.  When there is a
 * single row (a reduction over every dim) each reduction is split across the
 * team and the partial results combined in a fixed order.  Over outer dims
 * (columns, emit_cols): rows in the outer loop, each task accumulating a
 * block of contiguous columns in L1 buffers (or registers when short), row
 * slices combined in order when blocks are fewer than threads.
 * RD_WMEAN/RD_WM2 (layer norm, var): per row, two passes (sum, then squared
 * deviations) in 4 accumulators each; Welford when split across threads or
 * over columns. */
#include <math.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/emit.h"
#include "codegen/ir.h"

/* vmath.h, embedded (the Makefile makes vec.o depend on it). */
__asm__(".section .rodata\n"
	".global coil_vmath_src\n"
	".type coil_vmath_src, @object\n"
	"coil_vmath_src:\n"
	".incbin \"codegen/vmath.h\"\n"
	".byte 0\n"
	".previous\n");
extern const char coil_vmath_src[];

const char *vec_vmath_source(void) { return coil_vmath_src; }

/* attn.h, embedded likewise: the flash-attention kernel (extern.c's sdpa). */
__asm__(".section .rodata\n"
	".global coil_attn_src\n"
	".type coil_attn_src, @object\n"
	"coil_attn_src:\n"
	".incbin \"codegen/attn.h\"\n"
	".byte 0\n"
	".previous\n");
extern const char coil_attn_src[];

const char *vec_attn_source(void) { return coil_attn_src; }

/* common/upsample.h, embedded likewise: resampling's source rows and weights
 * at symbolic sizes (extern.c's upsample2d). */
__asm__(".section .rodata\n"
	".global coil_upsample_src\n"
	".type coil_upsample_src, @object\n"
	"coil_upsample_src:\n"
	".incbin \"common/upsample.h\"\n"
	".byte 0\n"
	".previous\n");
extern const char coil_upsample_src[];

const char *vec_upsample_source(void) { return coil_upsample_src; }

/* codegen/rnn.h, embedded likewise: LSTM and GRU (extern.c's rnn). */
__asm__(".section .rodata\n"
	".global coil_rnn_src\n"
	".type coil_rnn_src, @object\n"
	"coil_rnn_src:\n"
	".incbin \"codegen/rnn.h\"\n"
	".byte 0\n"
	".previous\n");
extern const char coil_rnn_src[];

const char *vec_rnn_source(void) { return coil_rnn_src; }

/* codegen/fft.h, embedded likewise: Fourier transforms (extern.c's fft). */
__asm__(".section .rodata\n"
	".global coil_fft_src\n"
	".type coil_fft_src, @object\n"
	"coil_fft_src:\n"
	".incbin \"codegen/fft.h\"\n"
	".byte 0\n"
	".previous\n");
extern const char coil_fft_src[];

const char *vec_fft_source(void) { return coil_fft_src; }

struct vec_isa {
	const char *name;
	int w;               /* f32 lanes */
	const char *vt, *mt; /* vector and mask types */
	const char *sfx;     /* vmath suffix: "8", "16" */
	const char *op[PR_COUNT];   /* f32 -> f32 */
	const char *cmp[PR_COUNT];  /* f32 x f32 -> mask, and mask ops */
	const char *load, *loadm;   /* (buf, idx) / (mask, buf, idx) */
	const char *store, *storem; /* (buf, idx, v) / (buf, idx, mask, v) */
	const char *set1, *blend;   /* (x) / (mask, a, b): mask ? a : b */
	const char *mtrue, *mfalse, *m2f, *f2m, *lane0, *tail;
	const char *hred[3];        /* RD_SUM, RD_MAX, RD_MIN */
};

#define CMPS(fn, sfx)                                                                                     \
	[PR_LT] = fn "(%s, %s, _CMP_LT_OQ)", [PR_LE] = fn "(%s, %s, _CMP_LE_OQ)",                             \
	[PR_GT] = fn "(%s, %s, _CMP_GT_OQ)", [PR_GE] = fn "(%s, %s, _CMP_GE_OQ)",                             \
	[PR_EQ] = fn "(%s, %s, _CMP_EQ_OQ)", [PR_NE] = fn "(%s, %s, _CMP_NEQ_UQ)"
#define MATH(sfx)                                                                                         \
	[PR_NEG] = "(-%s)", [PR_EXP] = "coil_exp" sfx "(%s)", [PR_LOG] = "coil_log" sfx "(%s)",                \
	[PR_TANH] = "coil_tanh" sfx "(%s)", [PR_ERF] = "coil_erf" sfx "(%s)",                                  \
	[PR_LOG1P] = "coil_lanes1_" sfx "(%s, log1pf)", [PR_SIN] = "coil_lanes1_" sfx "(%s, sinf)",            \
	[PR_COS] = "coil_lanes1_" sfx "(%s, cosf)", [PR_POW] = "coil_lanes2_" sfx "(%s, %s, powf)",            \
	[PR_FLOORDIV] = "coil_lanes2_" sfx "(%s, %s, coil_floordivf)", [PR_REM] = "coil_lanes2_" sfx "(%s, %s, coil_remf)", [PR_MAX] = "coil_max" sfx "(%s, %s)",  \
	[PR_MIN] = "coil_min" sfx "(%s, %s)"

static const vec_isa avx512 = {
	.name = "avx512", .w = 16, .vt = "__m512", .mt = "__mmask16", .sfx = "16",
	.op = {MATH("16"), [PR_ADD] = "_mm512_add_ps(%s, %s)", [PR_SUB] = "_mm512_sub_ps(%s, %s)",
	       [PR_MUL] = "_mm512_mul_ps(%s, %s)", [PR_DIV] = "_mm512_div_ps(%s, %s)",
	       [PR_SQRT] = "_mm512_sqrt_ps(%s)", [PR_RECIP] = "_mm512_div_ps(_mm512_set1_ps(1.0f), %s)",
	       [PR_ABS] = "_mm512_abs_ps(%s)",
	       [PR_FLOOR] = "_mm512_roundscale_ps(%s, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)",
	       [PR_CEIL] = "_mm512_roundscale_ps(%s, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC)",
	       [PR_TRUNC] = "_mm512_roundscale_ps(%s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)",
	       [PR_ROUND] = "_mm512_roundscale_ps(%s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)"},
	.cmp = {CMPS("_mm512_cmp_ps_mask", "16"), [PR_AND] = "(__mmask16)(%s & %s)",
		[PR_OR] = "(__mmask16)(%s | %s)", [PR_NOT] = "(__mmask16)~%s"},
	.load = "_mm512_loadu_ps(&%s[%s])", .loadm = "_mm512_maskz_loadu_ps(%s, &%s[%s])",
	.store = "_mm512_storeu_ps(&%s[%s], %s)", .storem = "_mm512_mask_storeu_ps(&%s[%s], %s, %s)",
	.set1 = "_mm512_set1_ps(%s)", .blend = "_mm512_mask_blend_ps(%s, %s, %s)", /* note: (m, b, a) */
	.mtrue = "((__mmask16)0xffff)", .mfalse = "((__mmask16)0)",
	.m2f = "_mm512_maskz_mov_ps(%s, _mm512_set1_ps(1.0f))",
	.f2m = "_mm512_cmp_ps_mask(%s, _mm512_setzero_ps(), _CMP_NEQ_UQ)", .lane0 = "_mm512_cvtss_f32(%s)",
	.tail = "coil_tail16(%s)", .hred = {"coil_hsum16(%s)", "coil_hmax16(%s)", "coil_hmin16(%s)"},
};

static const vec_isa avx2 = {
	.name = "avx2", .w = 8, .vt = "__m256", .mt = "__m256", .sfx = "8",
	.op = {MATH("8"), [PR_ADD] = "_mm256_add_ps(%s, %s)", [PR_SUB] = "_mm256_sub_ps(%s, %s)",
	       [PR_MUL] = "_mm256_mul_ps(%s, %s)", [PR_DIV] = "_mm256_div_ps(%s, %s)",
	       [PR_SQRT] = "_mm256_sqrt_ps(%s)", [PR_RECIP] = "_mm256_div_ps(_mm256_set1_ps(1.0f), %s)",
	       [PR_ABS] = "_mm256_andnot_ps(_mm256_set1_ps(-0.0f), %s)",
	       [PR_FLOOR] = "_mm256_round_ps(%s, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)",
	       [PR_CEIL] = "_mm256_round_ps(%s, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC)",
	       [PR_TRUNC] = "_mm256_round_ps(%s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)",
	       [PR_ROUND] = "_mm256_round_ps(%s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)"},
	.cmp = {CMPS("_mm256_cmp_ps", "8"), [PR_AND] = "_mm256_and_ps(%s, %s)", [PR_OR] = "_mm256_or_ps(%s, %s)",
		[PR_NOT] = "_mm256_xor_ps(%s, _mm256_castsi256_ps(_mm256_set1_epi32(-1)))"},
	.load = "_mm256_loadu_ps(&%s[%s])", .loadm = "_mm256_maskload_ps(&%2$s[%3$s], _mm256_castps_si256(%1$s))",
	.store = "_mm256_storeu_ps(&%s[%s], %s)",
	.storem = "_mm256_maskstore_ps(&%s[%s], _mm256_castps_si256(%s), %s)",
	.set1 = "_mm256_set1_ps(%s)", .blend = "_mm256_blendv_ps(%2$s, %3$s, %1$s)", /* (m, b, a) */
	.mtrue = "_mm256_castsi256_ps(_mm256_set1_epi32(-1))", .mfalse = "_mm256_setzero_ps()",
	.m2f = "_mm256_and_ps(%s, _mm256_set1_ps(1.0f))",
	.f2m = "_mm256_cmp_ps(%s, _mm256_setzero_ps(), _CMP_NEQ_UQ)", .lane0 = "_mm256_cvtss_f32(%s)",
	.tail = "coil_tail8(%s)", .hred = {"coil_hsum8(%s)", "coil_hmax8(%s)", "coil_hmin8(%s)"},
};

const vec_isa *vec_isa_for(const char *target)
{
	coil_err err;
	const coil_target *t = target ? target_get(target, &err) : NULL;
	if (!t || !t->features)
		return NULL; /* generic */
	/* the AVX-512 targets (x86-64-v4 and after), else AVX2 (x86-64-v3, avx_vnni) */
	return t->features & F_AVX512 ? &avx512 : &avx2;
}

int vec_width(const vec_isa *isa) { return isa ? isa->w : 1; }

/* Shared by every artifact after emit_c's prelude: vmath, the team size
 * heuristic and the float floordiv used lane by lane. */
void vec_prelude(FILE *f)
{
	fputs(coil_vmath_src, f);
	fputs("\n/* Elements per thread below which a kernel runs on the caller's thread. */\n"
	      "#define COIL_GRAIN 32768\n"
	      "/* Output bytes from which pointwise kernels store with streaming (non-temporal)\n"
	      " * stores: about half the L3 of the machines measured, as such an output leaves the\n"
	      " * cache before its reader comes, and the stores then skip reading each line first;\n"
	      " * tiled transposes from the size of L2, as their rows of stores conflict in it\n"
	      " * (those of full-line vectors: AVX-512). */\n"
	      "#define COIL_NT_BYTES (16 << 20)\n"
	      "#define COIL_NT_TR_BYTES (1 << 20)\n"
	      "static inline int coil_team(int nt, int64_t work)\n{\n"
	      "\tint64_t t = work / COIL_GRAIN;\n\treturn t < 1 ? 1 : t < nt ? (int)t : nt;\n}\n"
	      "static inline float coil_floordivf(float a, float b) { return (float)coil_floordiv(a, b); }\n"
	      "/* Chan's merge of Welford partials (count, mean, M2), lane by lane. */\n"
	      "static inline void coil_welford_merge(const float *n, const float *m, const float *q, int w, float *cnt,\n"
	      "\t\t\t\t      float *mean, float *m2)\n{\n"
	      "\tfor (int l = 0; l < w; l++) {\n"
	      "\t\tif (n[l] == 0)\n\t\t\tcontinue;\n"
	      "\t\tfloat nn = *cnt + n[l], d = m[l] - *mean;\n"
	      "\t\t*mean += d * (n[l] / nn);\n"
	      "\t\t*m2 += q[l] + d * d * (*cnt * n[l] / nn);\n"
	      "\t\t*cnt = nn;\n\t}\n}\n\n",
	      f);
}

/* --- the walk ------------------------------------------------------------ */

typedef struct vctx {
	coil_ir *ir;
	coil_arena *a;
	const vec_isa *I;
	FILE *f;
	int k, ntmp, ind;
	emit_memo memo;
	char *used;
	int vd;          /* the vectorized dim of the iteration space */
	char vv[16];     /* its loop variable */
	int tail;        /* rendering the masked tail (mask "tm") */
	int red_vec;     /* in-kernel reductions are vectors (kept dim vectorized) */
	int bad;         /* not vectorizable: fall back to scalar */
	/* Row cache: the source of a row's last reduction, stored per element
	 * into a thread-local row while reducing and read back by the epilogue
	 * (softmax's exp(x - max) is computed once). */
	int cache_v;     /* node cached, -1 none */
	char *cache_key; /* at this (full) index */
	int cache_mode;  /* 1: store while reducing, 2: load in the epilogue */
	int ui;          /* vloop_u: which of the unrolled vectors the body renders */
	int unroll;      /* nest: vectors per vloop_u block (0, 1: plain vloop) */
	int uacc;        /* red_body: accumulate into vacc%d_<ui> */
	/* Prefetch (a row epilogue, which runs from cache): each contiguous
	 * read indexed by row variable pf_var also touches row pf_var + pf_d. */
	char *pf_var;
	int pf_d;
	/* Tiled transposes: f32 reads contiguous along the tile dim come from
	 * blocks transposed through registers (coil_tr##w into tb<i>, row r_). */
	int ntr, tr_on;
	int tstep;       /* nest: the tile loop's step */
	int nts;         /* pointwise stores may stream (runtime flag nts_, coil_st##w) */
	struct {
		int v;
		char *key, *buf, *lin0, *lin1; /* lin0: at ib_ (tile) and vv; lin1: at vv + 1 */
	} tr[8];
} vctx;

/* Pointwise 2D tiles (a gathered read contiguous along another loop dim):
 * TILE_T of that dim by TILE_B of the vector dim.  A transpose through
 * registers whose source rows are short (the tile dim at most TR_SHORT long)
 * takes one block (w rows) of the tile dim by TR_B of the vector dim instead,
 * on AVX2 always, on AVX-512 where its rows of stores lie TR_FAR floats or more
 * apart.  AVX2's 8-float streaming stores fill half a line, and 32 rows of
 * half-filled lines outnumber the write-combining buffers.  On AVX-512, rows
 * of stores far apart are as many streams of pages, and fewer at once go
 * faster; rows close together are one region either way, and 32 of them are
 * the faster there.  Measured (A/B, 1 and 2 threads): AVX2 64x64x64 ->
 * (2,0,1) 3.3x, 256x256x64 -> (2,0,1) 2.9-3.7x, NCHW <-> NHWC at 56x56x64
 * 1.6-3.0x; AVX-512 (2,0,1) of 256x256x64, 128x1024x64, 64x4096x48 1.13-1.36x,
 * of 64^3, 512x512x32, 1024x16x64 0.99-1.10x, and with rows closer than
 * TR_FAR (NCHW <-> NHWC, 197x64 attention transposes) 0.79-1.01x, so those
 * keep TILE_T.  Rows of 96 floats or more gained nothing. */
#define TILE_T 32
#define TILE_B 64
#define TR_SHORT 64
#define TR_B 256
#define TR_FAR 4096

static void out(vctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(vctx *c, const char *fmt, ...)
{
	va_list ap;
	fprintf(c->f, "%*s", c->ind * 8, "");
	va_start(ap, fmt);
	vfprintf(c->f, fmt, ap);
	va_end(ap);
}

#define P(...) arena_printf(c->a, __VA_ARGS__)

static char *bufname(vctx *c, int v)
{
	c->used[v] = 1;
	return emit_buf_name(c->ir, v);
}

static int is_buf(vctx *c, const ir_node *n)
{
	return n->op == IR_INPUT || n->op == IR_PARAM || n->op == IR_CONST || n->op == IR_EXTERN ||
	       (n->mat && n->kernel != c->k) || (n->op == IR_REDUCE && n->kernel != c->k);
}

/* Does expression s mention loop variable var (a whole token)? */
static int mentions(const char *s, const char *var)
{
	size_t n = strlen(var);
	for (const char *p = strstr(s, var); p; p = strstr(p + 1, var)) {
		char b = p == s ? ' ' : p[-1], e = p[n];
		if (!(b == '_' || (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z')) && !(e >= '0' && e <= '9') && e != '_')
			return 1;
	}
	return 0;
}

enum { ACC_INV, ACC_CONTIG, ACC_GATHER };

/* How buffer node n read at idx varies along the vector variable. */
static int access_kind(vctx *c, const ir_node *n, char **idx)
{
	int last = -1, any = 0;
	for (int d = 0; d < n->rank; d++)
		if (!dim_eq_const(&n->shape[d], 1))
			last = d;
	for (int d = 0; d < n->rank; d++)
		if (mentions(idx[d], c->vv))
			any |= 1 << d;
	if (!any)
		return ACC_INV;
	if (any != 1 << last)
		return ACC_GATHER;
	const char *s = idx[last];
	size_t l = strlen(c->vv);
	if (!strcmp(s, c->vv))
		return ACC_CONTIG;
	/* "(vv + start)" from a unit-step slice */
	if (s[0] == '(' && !strncmp(s + 1, c->vv, l) && !strncmp(s + 1 + l, " + ", 3) && !mentions(s + 1 + l, c->vv))
		return ACC_CONTIG;
	/* "(... + (vv))" from a reshape that merges dims (index.c) */
	char *tail = P(" + (%s))", c->vv);
	size_t ls = strlen(s), lt = strlen(tail);
	if (s[0] == '(' && ls > lt && !strcmp(s + ls - lt, tail) && !mentions(P("%.*s", (int)(ls - lt), s), c->vv))
		return ACC_CONTIG;
	return ACC_GATHER;
}

/* A gather of g interleaved runs: the last dim read at "(((E % g))*S + ((E
 * / g)))" (index.c's form of a view that splits the dim as [.., S, g] after a
 * permute from [.., g, S]: ShuffleNet's channel shuffle in NHWC), only that
 * dim moving with the vector, E the vector variable plus a term without it,
 * g of 2 or 4 dividing the lanes.  Where E is a multiple of g at lane 0, lane
 * l reads run l % g (S apart) at l / g: vmath's coil_ilv8 / coil_ilv16 load
 * the runs whole and interleave them in registers.  Fills e, g, s.
 * COIL_ILV=0 in the compiler's environment turns it off. */
static int ilv_of(vctx *c, const ir_node *n, char **idx, char **e, int *g, long long *s)
{
	int last = -1;
	for (int d = 0; d < n->rank; d++)
		if (!dim_eq_const(&n->shape[d], 1))
			last = d;
	const char *off = getenv("COIL_ILV"); /* COIL_ILV=0: lane by lane (measurement switch) */
	if (last < 0 || c->tail || n->dtype != COIL_F32 || (off && !strcmp(off, "0")))
		return 0;
	for (int d = 0; d < n->rank; d++)
		if (d != last && mentions(idx[d], c->vv))
			return 0;
	const char *x = idx[last], *m = strstr(x, " % ");
	size_t len = strlen(x);
	if (len < 12 || strncmp(x, "(((", 3) || strcmp(x + len - 3, ")))") || !m || m - x < 4)
		return 0;
	char *ex = P("%.*s", (int)(m - x - 3), x + 3);
	int used = 0;
	if (sscanf(m, " %% %d))*%lld + ((%n", g, s, &used) != 2 || !used || *s < 1 || (*g != 2 && *g != 4) ||
	    c->I->w % *g || strcmp(m + used, P("%s / %d)))", ex, *g)))
		return 0;
	/* ex: vv, or vv + a term without it, in parentheses or not */
	const char *t = ex;
	size_t tl = strlen(t), vl = strlen(c->vv);
	for (;;) { /* strip parentheses that enclose the whole of t */
		size_t close = 0;
		for (int depth = 0; close < tl; close++)
			if ((depth += t[close] == '(' ? 1 : t[close] == ')' ? -1 : 0) == 0)
				break;
		if (tl < 2 || t[0] != '(' || close != tl - 1)
			break;
		t++, tl -= 2;
	}
	char *core = P("%.*s", (int)tl, t);
	if (strcmp(core, c->vv) &&
	    (strncmp(core, c->vv, vl) || strncmp(core + vl, " + ", 3) || mentions(core + vl, c->vv)))
		return 0;
	*e = ex;
	return 1;
}

static char *idx_key(vctx *c, const ir_node *n, char **idx)
{
	char *k = "";
	for (int i = 0; i < n->rank; i++)
		k = P("%s,%s", k, idx[i]);
	return k;
}

static char *key_of(vctx *c, const ir_node *n, char **idx)
{
	char *k = c->tail ? "T" : "";
	for (int i = 0; i < n->rank; i++)
		k = P("%s,%s", k, idx[i]);
	return k;
}

static char *vlit(vctx *c, double v)
{
	char *s;
	if (v != v)
		s = "NAN";
	else if (v == 1.0 / 0.0 || v == -1.0 / 0.0)
		s = v < 0 ? "-INFINITY" : "INFINITY";
	else {
		s = P("%.9g", v);
		s = P("%s%sf", s, strpbrk(s, ".en") ? "" : ".0");
	}
	return P(c->I->set1, s);
}

static char *tmp(vctx *c, int v, char *key, int mask, char *e)
{
	char *name = P("v%d", c->ntmp++);
	out(c, "const %s %s = %s;\n", mask ? c->I->mt : c->I->vt, name, e);
	return memo_put(&c->memo, c->a, v, key, name);
}

static int is_fill(coil_ir *ir, int v, double x)
{
	ir_node *n = &ir->nodes[v];
	return n->op == IR_FILL && !n->sub && n->fill == x;
}

static int is_prim(coil_ir *ir, int v, enum ir_op op, int sub)
{
	return ir->nodes[v].op == op && ir->nodes[v].sub == sub && ir->nodes[v].dtype == COIL_F32;
}

/* decompose's exact gelu, (0.5*x) * (1 + erf(x*sqrt(1/2))), at v: x's node
 * (and its index in xidx), or -1.  It becomes one coil_gelu call (vmath.h). */
static int gelu_of(vctx *c, int v, char **idx, char **xidx)
{
	coil_ir *ir = c->ir;
	ir_node *n = &ir->nodes[v];
	if (!is_prim(ir, v, IR_BINARY, PR_MUL))
		return -1;
	int h = n->src[0], o = n->src[1];
	if (!is_prim(ir, h, IR_BINARY, PR_MUL) || !is_fill(ir, ir->nodes[h].src[0], 0.5) ||
	    !is_prim(ir, o, IR_BINARY, PR_ADD) || !is_fill(ir, ir->nodes[o].src[0], 1))
		return -1;
	int e = ir->nodes[o].src[1];
	if (!is_prim(ir, e, IR_UNARY, PR_ERF))
		return -1;
	int m = ir->nodes[e].src[0], x = ir->nodes[h].src[1];
	if (!is_prim(ir, m, IR_BINARY, PR_MUL) || ir->nodes[m].src[0] != x || !is_fill(ir, ir->nodes[m].src[1], M_SQRT1_2))
		return -1;
	char *i1[COIL_MAX_RANK], *i2[COIL_MAX_RANK], *i3[COIL_MAX_RANK], *i4[COIL_MAX_RANK];
	ix_operand(ir, n, 0, idx, i1);
	ix_operand(ir, &ir->nodes[h], 1, i1, xidx);
	ix_operand(ir, n, 1, idx, i1);
	ix_operand(ir, &ir->nodes[o], 1, i1, i2);
	ix_operand(ir, &ir->nodes[e], 0, i2, i3);
	ix_operand(ir, &ir->nodes[m], 0, i3, i4);
	return strcmp(key_of(c, &ir->nodes[x], xidx), key_of(c, &ir->nodes[x], i4)) ? -1 : x;
}

/* u8 and i8 (quantized values) ride in f32 lanes on AVX-512 (vmath's coil_ld_u8_16, ...). */
static int narrow8(const vctx *c, coil_dtype t) { return (t == COIL_U8 || t == COIL_I8) && c->I->w == 16; }

/* The name vmath's lane helpers give a storage type computed in f32. */
static const char *lane_type(coil_dtype t)
{
	return t == COIL_U8 ? "u8" : t == COIL_I8 ? "i8" : emit_half(t);
}

/* The value of node v at index idx as a vector (f32) or mask (bool). */
static char *vrv(vctx *c, int v, char **idx)
{
	ir_node *n = &c->ir->nodes[v];
	const vec_isa *I = c->I;
	if (c->bad)
		return "0";
	if ((n->dtype != COIL_F32 && n->dtype != COIL_BOOL && !dtype_is_half(n->dtype) && !narrow8(c, n->dtype)) ||
	    (narrow8(c, n->dtype) && (n->op == IR_UNARY || n->op == IR_BINARY || n->op == IR_WHERE || n->op == IR_REDUCE))) {
		/* u8/i8 arithmetic wraps at each step: only their loads, casts and stores are lanes */
		c->bad = 1;
		return "0";
	}
	int mask = n->dtype == COIL_BOOL, half = dtype_is_half(n->dtype) || narrow8(c, n->dtype);
	const char *h = lane_type(n->dtype);
	if (n->op == IR_FILL) {
		if (mask)
			return n->fill != 0 ? (char *)I->mtrue : (char *)I->mfalse;
		if (n->sub)
			return P(I->set1, P("(float)(%s)", ir_dim_c(c->a, &n->start)));
		return vlit(c, n->fill);
	}
	if (n->op == IR_REDUCE && n->kernel == c->k)
		return c->red_vec ? P("vacc%d", v) : P(I->set1, P("acc%d", v));
	char *key = key_of(c, n, idx), *name = memo_get(&c->memo, v, key);
	if (name)
		return name;
	if (c->cache_mode == 2 && v == c->cache_v && !strcmp(key + c->tail, c->cache_key))
		return tmp(c, v, key, 0, c->tail ? P(I->loadm, "tm", "row_", c->vv) : P(I->load, "row_", c->vv));
	if (is_buf(c, n)) {
		char *b = bufname(c, v), *lin = ix_linear(c->ir, n, idx);
		int kind = access_kind(c, n, idx);
		if (kind == ACC_INV) {
			char *s = half ? P("coil_%s_f32(%s[%s])", h, b, lin) : P("%s[%s]", b, lin);
			return tmp(c, v, key, mask, mask ? P("(%s ? %s : %s)", s, I->mtrue, I->mfalse) : P(I->set1, s));
		}
		if (kind == ACC_CONTIG && !mask) {
			char *pidx[COIL_MAX_RANK];
			int pf = c->pf_var && !c->tail;
			for (int d = 0; d < n->rank; d++) {
				pidx[d] = idx[d];
				if (!c->pf_var || !mentions(idx[d], c->pf_var))
					continue;
				if (strcmp(idx[d], c->pf_var))
					pf = 0;
				pidx[d] = P("(%s + %d)", c->pf_var, c->pf_d);
			}
			if (pf && strcmp(ix_linear(c->ir, n, pidx), lin))
				out(c, "_mm_prefetch((const char *)&%s[%s], _MM_HINT_T0);\n", b, ix_linear(c->ir, n, pidx));
			if (half)
				return tmp(c, v, key, 0, c->tail ? P("coil_ldm_%s_%s(tm, &%s[%s])", h, I->sfx, b, lin)
								 : P("coil_ld_%s_%s(&%s[%s])", h, I->sfx, b, lin));
			return tmp(c, v, key, 0, c->tail ? P(I->loadm, "tm", b, lin) : P(I->load, b, lin));
		}
		if (c->tr_on) {
			char *k = idx_key(c, n, idx);
			for (int i = 0; i < c->ntr; i++)
				if (c->tr[i].v == v && !strcmp(c->tr[i].key, k))
					return tmp(c, v, key, 0, P(I->load, P("tb%d[r_]", i), "0"));
		}
		/* gather lane by lane (converted to float), unrolled whole: at -O2
		 * (the default opt_level) gcc kept the loop, and Swin's masked
		 * softmax, two such gathers an element, ran 2.7x slower (5.1 ->
		 * 2.3 ms a call on an AVX2 EPYC; 1.5 at -O3) */
		char *ie;
		int ig;
		long long is;
		if (!mask && !half && ilv_of(c, n, idx, &ie, &ig, &is)) {
			/* interleaved runs (ilv_of): whole loads where lane 0 starts a
			 * group, else lane by lane */
			char *r = P("g%d", c->ntmp++);
			out(c, "%s %s;\n{\n        const int64_t %s = %s0;\n", I->vt, r, c->vv, c->vv);
			out(c, "        if ((%s) %% %d == 0)\n                %s = coil_ilv%s(&%s[%s], %lld, %d);\n", ie, ig, r,
			    I->sfx, b, lin, is, ig);
			out(c, "        else {\n                float t_[%d];\n                for (int64_t l_ = 0; l_ < %d; l_++) {\n"
			       "                        const int64_t %s = %s0 + l_;\n                        t_[l_] = %s[%s];\n"
			       "                }\n                %s = %s;\n        }\n}\n",
			    I->w, I->w, c->vv, c->vv, b, lin, r, P(I->load, "t_", "0"));
			return tmp(c, v, key, 0, r);
		}
		char *g = P("g%d", c->ntmp++);
		out(c, "float %s[%d] = {0};\n", g, I->w);
		if (!c->tail)
			out(c, "_Pragma(\"GCC unroll 16\")\n");
		out(c, "for (int64_t l_ = 0; l_ < %s; l_++) {\n", c->tail ? "tn" : P("%d", I->w));
		out(c, "        const int64_t %s = %s0 + l_;\n", c->vv, c->vv);
		if (half)
			out(c, "        %s[l_] = coil_%s_f32(%s[%s]);\n", g, h, b, lin);
		else
			out(c, "        %s[l_] = (float)%s[%s];\n", g, b, lin);
		out(c, "}\n");
		char *e = P(I->load, g, "0");
		return tmp(c, v, key, mask, mask ? P(I->f2m, e) : e);
	}
	char *xidx[COIL_MAX_RANK];
	int gx = mask ? -1 : gelu_of(c, v, idx, xidx);
	if (gx >= 0) {
		char *xv = vrv(c, gx, xidx);
		return c->bad ? "0" : tmp(c, v, key, 0, P("coil_gelu%s(%s)", I->sfx, xv));
	}
	char *a[3] = {0};
	for (int i = 0; i < n->nsrc; i++) {
		char *sidx[COIL_MAX_RANK];
		ix_operand(c->ir, n, i, idx, sidx);
		a[i] = vrv(c, n->src[i], sidx);
	}
	if (c->bad)
		return "0";
	if (n->op == IR_VIEW)
		return a[0];
	char *e = NULL;
	switch (n->op) {
	case IR_CAST: {
		int from_mask = c->ir->nodes[n->src[0]].dtype == COIL_BOOL;
		e = from_mask == mask ? a[0] : mask ? P(I->f2m, a[0]) : P(I->m2f, a[0]);
		if (half) /* to bf16 or f16: the float it rounds to (from one, a[0] is already that) */
			e = P("coil_rnd_%s_%s(%s)", h, I->sfx, e);
		break;
	}
	case IR_WHERE:
		if (mask) {
			c->bad = 1;
			return "0";
		}
		e = P(I->blend, a[0], a[2], a[1]);
		break;
	case IR_UNARY: case IR_BINARY: {
		int from_mask = c->ir->nodes[n->src[0]].dtype == COIL_BOOL;
		const char *fmt = mask ? I->cmp[n->sub] : I->op[n->sub];
		if (!fmt || (from_mask && n->sub != PR_AND && n->sub != PR_OR && n->sub != PR_NOT) ||
		    (!from_mask && (n->sub == PR_AND || n->sub == PR_OR || n->sub == PR_NOT))) {
			c->bad = 1;
			return "0";
		}
		ir_node *dv = &c->ir->nodes[n->src[1]];
		if (n->sub == PR_DIV && !mask && dv->op == IR_REDUCE && dv->kernel == c->k && !c->red_vec)
			e = P(I->op[PR_MUL], a[0], P(I->set1, P("(1.0f / acc%d)", n->src[1])));
		else
			e = P(fmt, a[0], a[1]);
		break;
	}
	default:
		c->bad = 1;
		return "0";
	}
	return tmp(c, v, key, mask, e);
}

/* Stores node v (f32) at idx: the vector dim must be its contiguous dim. */
static void vstore(vctx *c, int v, char **idx)
{
	ir_node *n = &c->ir->nodes[v];
	if (n->dtype != COIL_F32 && !dtype_is_half(n->dtype) && !narrow8(c, n->dtype)) {
		c->bad = 1;
		return;
	}
	char *x = vrv(c, v, idx), *b = bufname(c, v), *lin = ix_linear(c->ir, n, idx);
	if (c->bad)
		return;
	int kind = access_kind(c, n, idx);
	if (dtype_is_half(n->dtype) || narrow8(c, n->dtype)) {
		const char *h = lane_type(n->dtype), *w = c->I->sfx;
		if (kind == ACC_INV)
			out(c, "%s[%s] = coil_f32_%s(%s);\n", b, lin, h, P(c->I->lane0, x));
		else if (kind == ACC_CONTIG)
			out(c, "%s;\n", c->tail ? P("coil_stm_%s_%s(&%s[%s], tm, %s)", h, w, b, lin, x)
						: P("coil_st_%s_%s(&%s[%s], %s)", h, w, b, lin, x));
		else
			c->bad = 1;
		return;
	}
	if (kind == ACC_INV)
		out(c, "%s[%s] = %s;\n", b, lin, P(c->I->lane0, x));
	else if (kind == ACC_CONTIG && c->nts && !c->tail)
		out(c, "coil_st%s(&%s[%s], %s, nts_);\n", c->I->sfx, b, lin, x);
	else if (kind == ACC_CONTIG)
		out(c, "%s;\n", c->tail ? P(c->I->storem, b, lin, "tm", x) : P(c->I->store, b, lin, x));
	else
		c->bad = 1;
}

/* --- loop nests ---------------------------------------------------------- */

typedef void (*body_fn)(vctx *c, void *arg);

/* for vv in [lo, hi): full vectors then a masked tail, each with body. */
static void vloop(vctx *c, const char *lo, const char *hi, body_fn body, void *arg)
{
	int w = c->I->w;
	out(c, "{\n");
	c->ind++;
	out(c, "int64_t %s = %s;\n", c->vv, lo);
	out(c, "for (; %s + %d <= %s; %s += %d) {\n", c->vv, w, hi, c->vv, w);
	c->ind++;
	out(c, "const int64_t %s0 = %s;\n", c->vv, c->vv);
	out(c, "(void)%s0;\n", c->vv);
	memo_push(&c->memo);
	body(c, arg);
	memo_pop(&c->memo);
	c->ind--;
	out(c, "}\n");
	out(c, "if (%s < %s) {\n", c->vv, hi);
	c->ind++;
	out(c, "const int64_t %s0 = %s, tn = %s - %s;\n", c->vv, c->vv, hi, c->vv);
	out(c, "const %s tm = %s;\n", c->I->mt, P(c->I->tail, "tn"));
	out(c, "(void)%s0;\n", c->vv);
	out(c, "(void)tm;\n");
	c->tail = 1;
	memo_push(&c->memo);
	body(c, arg);
	memo_pop(&c->memo);
	c->tail = 0;
	c->ind--;
	out(c, "}\n");
	c->ind--;
	out(c, "}\n");
}

/* vloop, unrolled: blocks of U vectors (the body renders each with c->ui =
 * 0..U-1 and its own shadowing copy of the loop variable), then single
 * vectors and the masked tail with c->ui = 0. */
static void vloop_u(vctx *c, const char *lo, const char *hi, int U, body_fn body, void *arg)
{
	int w = c->I->w;
	out(c, "{\n");
	c->ind++;
	out(c, "int64_t %s_u = %s;\n", c->vv, lo);
	out(c, "for (; %s_u + %d <= %s; %s_u += %d) {\n", c->vv, U * w, hi, c->vv, U * w);
	c->ind++;
	for (int k = 0; k < U; k++) {
		out(c, "{\n");
		c->ind++;
		out(c, "const int64_t %s = %s_u + %d, %s0 = %s_u + %d;\n", c->vv, c->vv, k * w, c->vv, c->vv, k * w);
		out(c, "(void)%s;\n(void)%s0;\n", c->vv, c->vv);
		c->ui = k;
		memo_push(&c->memo);
		body(c, arg);
		memo_pop(&c->memo);
		c->ui = 0;
		c->ind--;
		out(c, "}\n");
	}
	c->ind--;
	out(c, "}\n");
	vloop(c, P("%s_u", c->vv), hi, body, arg);
	c->ind--;
	out(c, "}\n");
}

static char *dimc(vctx *c, const coil_dim *d) { return P("(%s)", ir_dim_c(c->a, d)); }

static void loopvars(vctx *c, const ir_node *n, char **idx, unsigned zero)
{
	for (int d = 0; d < n->rank; d++)
		idx[d] = zero >> d & 1 || dim_eq_const(&n->shape[d], 1) ? "0" : P("i%d", d);
}

/* A nest over the dims of shape in `which` (size-1 dims skipped): plain
 * loops over all but the vector dim c->vd, then blocks of `block` elements of
 * the vector dim (block 0: one block), each a vloop.  With par, every loop
 * but the vloop is collapsed into one parallel loop of team "nte".  tile >= 0:
 * that dim is tiled by TILE_T, the tile loop just outside the block loop (a
 * slab of the other outer dims is read while it is in cache: both the
 * source's and the destination's contiguous dims are swept in tiles) and the
 * inner loop inside it. */
static int nest(vctx *c, const coil_dim *shape, int rank, unsigned which, int par, int block, int tile, body_fn body,
		void *arg)
{
	int nl = 0;
	char *vsz = dimc(c, &shape[c->vd]);
	for (int d = 0; d < rank; d++)
		nl += which >> d & 1 && d != c->vd && !dim_eq_const(&shape[d], 1);
	if (par && c->nts) { /* each thread fences its streaming stores */
		out(c, "#pragma omp parallel num_threads(nte) if (nte > 1)\n");
		out(c, "{\n");
		out(c, "#pragma omp for collapse(%d) schedule(static) nowait\n", nl + (block > 0));
	} else if (par) {
		out(c, "#pragma omp parallel for collapse(%d) num_threads(nte) if (nte > 1) schedule(static)\n",
		    nl + (block > 0));
	}
	int opened = 0;
	for (int d = 0; d < rank; d++) {
		if (!(which >> d & 1) || d == c->vd || dim_eq_const(&shape[d], 1))
			continue;
		if (d == tile)
			continue;
		out(c, "for (int64_t i%d = 0; i%d < %s; i%d++) {\n", d, d, dimc(c, &shape[d]), d);
		c->ind++;
		opened++;
	}
	if (tile >= 0) {
		out(c, "for (int64_t t%d = 0; t%d < %s; t%d += %d) {\n", tile, tile, dimc(c, &shape[tile]), tile, c->tstep);
		c->ind++;
		opened++;
	}
	char *lo = "0", *hi = vsz;
	if (block > 0) {
		out(c, "for (int64_t j%d = 0; j%d < %s; j%d += %d) {\n", c->vd, c->vd, vsz, c->vd, block);
		c->ind++;
		opened++;
		lo = P("j%d", c->vd);
		hi = P("COIL_MIN(j%d + %d, %s)", c->vd, block, vsz);
	}
	if (tile >= 0 && !c->ntr) {
		out(c, "for (int64_t i%d = t%d; i%d < COIL_MIN(t%d + %d, %s); i%d++) {\n", tile, tile, tile, tile, c->tstep,
		    dimc(c, &shape[tile]), tile);
		c->ind++;
		opened++;
	}
	memo_push(&c->memo);
	if (c->unroll > 1)
		vloop_u(c, lo, hi, c->unroll, body, arg);
	else
		vloop(c, lo, hi, body, arg);
	memo_pop(&c->memo);
	while (opened--) {
		c->ind--;
		out(c, "}\n");
	}
	if (par && c->nts) {
		out(c, "if (nts_)\n");
		out(c, "        _mm_sfence();\n");
		out(c, "}\n");
	}
	return 0;
}

/* --- pointwise ----------------------------------------------------------- */

typedef struct pw_arg {
	ir_kernel *K;
	char **idx;
} pw_arg;

static void pw_body(vctx *c, void *arg)
{
	pw_arg *p = arg;
	for (int i = 0; i < p->K->nouts && !c->bad; i++)
		vstore(c, p->K->outs[i], p->idx);
}

/* Innermost non-1 dim of a shape, -1 if none. */
static int inner_dim(const coil_dim *shape, int rank)
{
	for (int d = rank - 1; d >= 0; d--)
		if (!dim_eq_const(&shape[d], 1))
			return d;
	return -1;
}

static char *work_expr(vctx *c, const ir_node *n)
{
	char *w = "(int64_t)1";
	for (int d = 0; d < n->rank; d++)
		w = P("%s*%s", w, dimc(c, &n->shape[d]));
	return w;
}

/* A loop dim along which a gathered read of v is contiguous (a transpose):
 * found with a probe walk that records gathers. */
static int find_tile(vctx *c, int v, char **idx, int depth)
{
	ir_node *n = &c->ir->nodes[v];
	if (depth > 64 || n->op == IR_FILL || (n->op == IR_REDUCE && n->kernel == c->k))
		return -1;
	if (is_buf(c, n)) {
		if (access_kind(c, n, idx) != ACC_GATHER)
			return -1;
		int last = inner_dim(n->shape, n->rank);
		for (int d = 0; last >= 0 && d < COIL_MAX_RANK; d++)
			if (d != c->vd && !strcmp(idx[last], P("i%d", d)))
				return d;
		return -1;
	}
	for (int i = 0; i < n->nsrc; i++) {
		char *sidx[COIL_MAX_RANK];
		ix_operand(c->ir, n, i, idx, sidx);
		int t = find_tile(c, n->src[i], sidx, depth + 1);
		if (t >= 0)
			return t;
	}
	return -1;
}

/* Records v's gathered reads for tiled transposes (c->tr); -1 if one is not a
 * unit-stride f32 read contiguous along i<tile> (the kernel then gathers). */
static int collect_tr(vctx *c, int v, char **idx, int depth, int tile)
{
	ir_node *n = &c->ir->nodes[v];
	if (n->op == IR_FILL)
		return 0;
	if (depth > 64 || (n->op == IR_REDUCE && n->kernel == c->k))
		return -1;
	if (is_buf(c, n)) {
		if (access_kind(c, n, idx) != ACC_GATHER)
			return 0;
		int last = inner_dim(n->shape, n->rank);
		char *tv = P("i%d", tile), *k = idx_key(c, n, idx), *s0[COIL_MAX_RANK], *s1[COIL_MAX_RANK];
		if (n->dtype != COIL_F32 || last < 0 || strcmp(idx[last], tv))
			return -1;
		for (int d = 0; d < n->rank; d++) {
			if ((mentions(idx[d], c->vv) && strcmp(idx[d], c->vv)) || (mentions(idx[d], tv) && strcmp(idx[d], tv)))
				return -1;
			s0[d] = !strcmp(idx[d], tv) ? "ib_" : idx[d];
			s1[d] = !strcmp(idx[d], c->vv) ? P("(%s + 1)", c->vv) : s0[d];
		}
		for (int i = 0; i < c->ntr; i++)
			if (c->tr[i].v == v && !strcmp(c->tr[i].key, k))
				return 0;
		if (c->ntr == (int)(sizeof c->tr / sizeof *c->tr))
			return -1;
		c->tr[c->ntr].v = v;
		c->tr[c->ntr].key = k;
		c->tr[c->ntr].buf = bufname(c, v);
		c->tr[c->ntr].lin0 = ix_linear(c->ir, n, s0);
		c->tr[c->ntr++].lin1 = ix_linear(c->ir, n, s1);
		return 0;
	}
	for (int i = 0; i < n->nsrc; i++) {
		char *sidx[COIL_MAX_RANK];
		ix_operand(c->ir, n, i, idx, sidx);
		if (collect_tr(c, n->src[i], sidx, depth + 1, tile) < 0)
			return -1;
	}
	return 0;
}

typedef struct tr_arg {
	pw_arg *pw;
	int tile;
	char *ext; /* the tile dim's extent */
} tr_arg;

/* One block of rn rows of the tile dim (rn: a constant w, or the variable rn_):
 * the transposed reads' blocks, then the rows one by one. */
static void tr_block(vctx *c, tr_arg *t, const char *rn)
{
	int w = c->I->w;
	/* the blocks live in this scope only: once the row loop is unrolled, GCC keeps
	 * them in registers and drops the stores (declared outside, it did not) */
	out(c, "{\n");
	c->ind++;
	for (int i = 0; i < c->ntr; i++)
		out(c, "float tb%d[%d][%d] __attribute__((aligned(64)));\n", i, w, w);
	for (int i = 0; i < c->ntr; i++)
		out(c, "coil_tr%d(&%s[%s], &%s[%s] - &%s[%s], %s, %s, tb%d);\n", w, c->tr[i].buf, c->tr[i].lin0,
		    c->tr[i].buf, c->tr[i].lin1, c->tr[i].buf, c->tr[i].lin0, c->tail ? "(int)tn" : P("%d", w), rn, i);
	if (isdigit((unsigned char)rn[0]))
		out(c, "_Pragma(\"GCC unroll 16\")\n");
	out(c, "for (int r_ = 0; r_ < %s; r_++) {\n", rn);
	c->ind++;
	out(c, "const int64_t i%d = ib_ + r_;\n", t->tile);
	c->tr_on = 1;
	memo_push(&c->memo);
	pw_body(c, t->pw);
	memo_pop(&c->memo);
	c->tr_on = 0;
	c->ind--;
	out(c, "}\n");
	c->ind--;
	out(c, "}\n");
}

/* The vloop body of a tiled transpose: blocks of w rows of the tile dim, full
 * ones with constant bounds (unrolled, the blocks kept in registers), then
 * the last, partial one. */
static void tr_body(vctx *c, void *arg)
{
	tr_arg *t = arg;
	int w = c->I->w;
	char *hi = P("COIL_MIN(t%d + %d, %s)", t->tile, c->tstep, t->ext);
	out(c, "for (int64_t ib_ = t%d; ib_ < %s; ib_ += %d) {\n", t->tile, hi, w);
	c->ind++;
	out(c, "if (%s - ib_ >= %d) {\n", hi, w);
	c->ind++;
	tr_block(c, t, P("%d", w));
	c->ind--;
	out(c, "} else {\n");
	c->ind++;
	out(c, "const int rn_ = (int)(%s - ib_);\n", hi);
	tr_block(c, t, "rn_");
	c->ind--;
	out(c, "}\n");
	c->ind--;
	out(c, "}\n");
}

static void emit_pw(vctx *c, ir_kernel *K)
{
	ir_node *n = &c->ir->nodes[K->outs[0]];
	char *idx[COIL_MAX_RANK];
	for (int i = 1; i < K->nouts; i++) {
		ir_node *o = &c->ir->nodes[K->outs[i]];
		if (o->rank != n->rank || !dims_equal(o->shape, n->shape, n->rank))
			c->bad = 1;
	}
	if ((c->vd = inner_dim(n->shape, n->rank)) < 0) {
		c->bad = 1;
		return;
	}
	snprintf(c->vv, sizeof c->vv, "i%d", c->vd);
	loopvars(c, n, idx, 0);
	int tile = -1;
	for (int i = 0; i < K->nouts && tile < 0; i++)
		tile = find_tile(c, K->outs[i], idx, 0);
	out(c, "const int64_t work = %s;\n", work_expr(c, n));
	out(c, "const int nte = coil_team(nt, work);\n");
	out(c, "(void)nte;\n");
	pw_arg p = {K, idx};
	int tr = tile >= 0;
	c->ntr = 0;
	for (int i = 0; i < K->nouts && tr; i++)
		tr = collect_tr(c, K->outs[i], idx, 0, tile) == 0;
	tr = tr && c->ntr;
	if (!tr)
		c->ntr = 0; /* tiles (if any), with reads gathered lane by lane */
	c->nts = 1;
	/* a transpose's streaming stores write a line in two halves at different
	 * times where vectors are 32 bytes (AVX2), which the write-combining
	 * buffers do not hold together: none there (convnext_tiny's layer scale,
	 * permute and residual at 96x56x56 on an AVX2 EPYC 0.95 -> 0.20-0.30 ms) */
	if (tr && c->I->w * 4 < 64)
		out(c, "const int nts_ = 0;\n");
	else
		out(c, "const int nts_ = work * %d >= %s;\n", 4 * K->nouts, tr ? "COIL_NT_TR_BYTES" : "COIL_NT_BYTES");
	if (tr) {
		tr_arg t = {&p, tile, dimc(c, &n->shape[tile])};
		int64_t ext, far = 1, e;
		for (int d = tile + 1; d < n->rank && far > 0; d++)
			far = dim_is_const(&n->shape[d], &e) ? far * e : 0;
		int shrt = dim_is_const(&n->shape[tile], &ext) && ext <= TR_SHORT && (c->I->w == 8 || far >= TR_FAR);
		c->tstep = shrt ? c->I->w : TILE_T;
		nest(c, n->shape, n->rank, ~0u, 1, shrt ? TR_B : TILE_B, tile, tr_body, &t);
		c->tstep = TILE_T;
	} else {
		nest(c, n->shape, n->rank, ~0u, 1, tile >= 0 ? TILE_B : 64 * c->I->w, tile, pw_body, &p);
	}
	c->ntr = 0;
	c->nts = 0;
}

/* --- reductions ---------------------------------------------------------- */

typedef struct red_arg {
	int v, v2;        /* reduction node; v2: its RD_WM2 twin for a Welford pair (or -1) */
	char **full;
} red_arg;

static const char *comb(vctx *c, int kind, const char *acc, const char *x)
{
	const vec_isa *I = c->I;
	return kind == RD_SUM ? P(I->op[PR_ADD], acc, x) : P(I->op[kind == RD_MAX ? PR_MAX : PR_MIN], x, acc);
}

static void red_body(vctx *c, void *arg)
{
	red_arg *r = arg;
	ir_node *n = &c->ir->nodes[r->v];
	const vec_isa *I = c->I;
	char *x = vrv(c, n->src[0], r->full);
	if (c->bad)
		return;
	if (n->sub == RD_WMEAN || n->sub == RD_WM2) {
		int v = r->v;
		char *one = P(I->set1, "1.0f");
		out(c, "{\n");
		c->ind++;
		out(c, "const %s n_ = %s;\n", I->vt, P(I->op[PR_ADD], P("wn%d", v), one));
		out(c, "const %s d_ = %s;\n", I->vt, P(I->op[PR_SUB], x, P("wm%d", v)));
		out(c, "const %s m_ = %s;\n", I->vt, P(I->op[PR_ADD], P("wm%d", v), P(I->op[PR_DIV], "d_", "n_")));
		out(c, "const %s q_ = %s;\n", I->vt,
		    P(I->op[PR_ADD], P("wq%d", v), P(I->op[PR_MUL], "d_", P(I->op[PR_SUB], x, "m_"))));
		if (c->tail) {
			out(c, "wn%d = %s;\n", v, P(I->blend, "tm", P("wn%d", v), "n_"));
			out(c, "wm%d = %s;\n", v, P(I->blend, "tm", P("wm%d", v), "m_"));
			out(c, "wq%d = %s;\n", v, P(I->blend, "tm", P("wq%d", v), "q_"));
		} else {
			out(c, "wn%d = n_;\nwm%d = m_;\nwq%d = q_;\n", v, v, v);
		}
		c->ind--;
		out(c, "}\n");
		return;
	}
	if (c->cache_mode == 1 && n->src[0] == c->cache_v)
		out(c, "%s;\n", c->tail ? P(I->storem, "row_", c->vv, "tm", x) : P(I->store, "row_", c->vv, x));
	char *acc = c->uacc ? P("vacc%d_%d", r->v, c->ui) : P("vacc%d", r->v);
	const char *e = comb(c, n->sub, acc, x);
	if (c->tail && !c->red_vec)
		e = P(I->blend, "tm", acc, e);
	out(c, "%s = %s;\n", acc, e);
}

static const char *red_init(int kind)
{
	return kind == RD_SUM ? "0.0f" : kind == RD_MAX ? "-INFINITY" : "INFINITY";
}

/* Mean and M2 of a row (RD_WMEAN/RD_WM2, not split across threads): two
 * passes over the row, which is in cache by the second: the sum, then the sum
 * of squared deviations from the mean, each in 4 interleaved accumulators (no
 * serial chain through a division, and more accurate than Welford). */
typedef struct tp_arg {
	int v, pass;
	char **full;
} tp_arg;

#define TP_U 4

static void tp_body(vctx *c, void *arg)
{
	tp_arg *t = arg;
	const vec_isa *I = c->I;
	char *x = vrv(c, c->ir->nodes[t->v].src[0], t->full);
	if (c->bad)
		return;
	char *acc = P("%s%d_%d", t->pass == 1 ? "ws" : "wq", t->v, c->ui);
	const char *e;
	if (t->pass == 1) {
		e = P(I->op[PR_ADD], acc, x);
	} else {
		out(c, "const %s d_ = %s;\n", I->vt, P(I->op[PR_SUB], x, P("wmv%d", t->v)));
		e = P(I->op[PR_ADD], acc, P(I->op[PR_MUL], "d_", "d_"));
	}
	if (c->tail)
		e = P(I->blend, "tm", acc, e);
	out(c, "%s = %s;\n", acc, e);
}

static void emit_twopass(vctx *c, ir_node *s0, unsigned M, int v, int v2, char **full, char *pf_var)
{
	const vec_isa *I = c->I;
	char *z = P(I->set1, "0.0f"), *cnt = "(int64_t)1";
	for (int d = 0; d < s0->rank; d++)
		if (M >> d & 1)
			cnt = P("%s*%s", cnt, dimc(c, &s0->shape[d]));
	for (int pass = 1; pass <= 2 && !c->bad; pass++) {
		const char *nm = pass == 1 ? "ws" : "wq";
		out(c, "%s %s%d_0 = %s, %s%d_1 = %s, %s%d_2 = %s, %s%d_3 = %s;\n", I->vt, nm, v, z, nm, v, z, nm, v, z,
		    nm, v, z);
		tp_arg ta = {v, pass, full};
		c->unroll = TP_U;
		c->pf_var = pass == 2 ? pf_var : NULL;
		nest(c, s0->shape, s0->rank, M, 0, 0, -1, tp_body, &ta);
		c->pf_var = NULL;
		c->unroll = 0;
		char *tot = P(I->hred[RD_SUM], P(I->op[PR_ADD], P(I->op[PR_ADD], P("%s%d_0", nm, v), P("%s%d_1", nm, v)),
					      P(I->op[PR_ADD], P("%s%d_2", nm, v), P("%s%d_3", nm, v))));
		if (pass == 1) {
			out(c, "const float mean%d_ = %s / (float)(%s);\n", v, tot, cnt);
			out(c, "const %s wmv%d = %s;\n", I->vt, v, P(I->set1, P("mean%d_", v)));
		} else {
			out(c, "const float m2%d_ = %s;\n", v, tot);
		}
	}
	out(c, "acc%d = %s%d_;\n", v, c->ir->nodes[v].sub == RD_WMEAN ? "mean" : "m2", v);
	if (v2 >= 0)
		out(c, "acc%d = m2%d_;\n", v2, v);
}

/* The Welford twin (RD_WM2 over the same source) of reduction i, or -1. */
static int welford_twin(coil_ir *ir, ir_kernel *K, int i)
{
	ir_node *r = &ir->nodes[K->reds[i]];
	if (r->sub != RD_WMEAN)
		return -1;
	for (int j = i + 1; j < K->nreds; j++) {
		ir_node *q = &ir->nodes[K->reds[j]];
		if (q->sub == RD_WM2 && q->src[0] == r->src[0])
			return j;
	}
	return -1;
}

/* Declares the Welford accumulators (count, mean, M2) of reduction v; the
 * others accumulate in uacc_begin's registers. */
static void wf_decl(vctx *c, int v)
{
	char *z = P(c->I->set1, "0.0f");
	out(c, "%s wn%d = %s, wm%d = %s, wq%d = %s;\n", c->I->vt, v, z, v, z, v, z);
}

/* Reduction v accumulates in TP_U interleaved registers vacc<v>_<u> (no chain
 * through one register) over an unrolled vector loop; uacc_end combines them
 * into vacc<v>. */
static void uacc_begin(vctx *c, int v)
{
	for (int u = 0; u < TP_U; u++)
		out(c, "%s vacc%d_%d = %s;\n", c->I->vt, v, u, P(c->I->set1, red_init(c->ir->nodes[v].sub)));
	c->unroll = TP_U;
	c->uacc = 1;
}

static void uacc_end(vctx *c, int v)
{
	int k = c->ir->nodes[v].sub;
	c->uacc = 0;
	c->unroll = 0;
	out(c, "const %s vacc%d = %s;\n", c->I->vt, v,
	    comb(c, k, comb(c, k, P("vacc%d_0", v), P("vacc%d_1", v)), comb(c, k, P("vacc%d_2", v), P("vacc%d_3", v))));
}

/* Horizontal: the vector accumulator(s) of v into scalars (acc%d, and
 * acc%d of the Welford twin v2).  With part, into slot "tid_" of partials. */
static void acc_fold(vctx *c, int v, int v2, int part)
{
	ir_node *r = &c->ir->nodes[v];
	const vec_isa *I = c->I;
	int w = I->w;
	if (r->sub == RD_WMEAN || r->sub == RD_WM2) {
		out(c, "{\n");
		c->ind++;
		out(c, "float n_[%d], m_[%d], q_[%d], cn_ = 0, cm_ = 0, cq_ = 0;\n", w, w, w);
		out(c, "%s;\n%s;\n%s;\n", P(I->store, "n_", "0", P("wn%d", v)), P(I->store, "m_", "0", P("wm%d", v)),
		    P(I->store, "q_", "0", P("wq%d", v)));
		out(c, "coil_welford_merge(n_, m_, q_, %d, &cn_, &cm_, &cq_);\n", w);
		if (part)
			out(c, "pn%d[tid_] = cn_;\npm%d[tid_] = cm_;\npq%d[tid_] = cq_;\n", v, v, v);
		else {
			out(c, "acc%d = %s;\n", v, r->sub == RD_WMEAN ? "cm_" : "cq_");
			if (v2 >= 0)
				out(c, "acc%d = cq_;\n", v2);
		}
		c->ind--;
		out(c, "}\n");
		return;
	}
	char *h = P(I->hred[r->sub], P("vacc%d", v));
	if (part)
		out(c, "pacc%d[tid_] = %s;\n", v, h);
	else
		out(c, "acc%d = %s;\n", v, h);
}

typedef struct ep_arg {
	ir_kernel *K;
	ir_node *s0;
	char **full;
} ep_arg;

static void ep_full_body(vctx *c, void *arg)
{
	ep_arg *e = arg;
	for (int i = 0; i < e->K->nouts && !c->bad; i++) {
		ir_node *p = &c->ir->nodes[e->K->outs[i]];
		if (p->rank == e->s0->rank && dims_equal(p->shape, e->s0->shape, p->rank))
			vstore(c, e->K->outs[i], e->full);
	}
}

/* Outer-shaped epilogue outputs, at the kept index. */
static void ep_outer(vctx *c, ir_kernel *K, ir_node *s0, ir_node *r0, char **outer)
{
	for (int i = 0; i < K->nouts && !c->bad; i++) {
		ir_node *p = &c->ir->nodes[K->outs[i]];
		if (p->rank == s0->rank && dims_equal(p->shape, s0->shape, p->rank) && r0->mask)
			continue;
		char *pidx[COIL_MAX_RANK];
		emit_kept_index(p, r0, outer, pidx);
		vstore(c, K->outs[i], pidx);
	}
}

static int has_full(vctx *c, ir_kernel *K, ir_node *s0)
{
	for (int i = 0; i < K->nouts; i++) {
		ir_node *p = &c->ir->nodes[K->outs[i]];
		if (p->rank == s0->rank && dims_equal(p->shape, s0->shape, p->rank))
			return 1;
	}
	return 0;
}

/* Reduction over dims including the innermost one: rows. */
static void emit_rows(vctx *c, ir_kernel *K, ir_node *s0, ir_node *r0)
{
	unsigned M = r0->mask;
	char *full[COIL_MAX_RANK], *outer[COIL_MAX_RANK];
	loopvars(c, s0, full, 0);
	loopvars(c, s0, outer, M);
	int nkept = 0;
	for (int d = 0; d < s0->rank; d++)
		nkept += !(M >> d & 1) && !dim_eq_const(&s0->shape[d], 1);
	int split = nkept == 0; /* one row: split each reduction across the team */
	/* Passes over a row after the first run from cache: they prefetch the
	 * row pf_d ahead (about 8 KiB on) of the innermost kept dim. */
	char *pf_var = NULL;
	int64_t rlen = 1, sz;
	for (int d = 0; d < s0->rank; d++)
		if (M >> d & 1)
			rlen = dim_is_const(&s0->shape[d], &sz) && rlen > 0 ? rlen * sz : -1;
	for (int d = 0; d < s0->rank && !split; d++)
		if (!(M >> d & 1) && !dim_eq_const(&s0->shape[d], 1))
			pf_var = P("i%d", d);
	c->pf_d = rlen > 0 && rlen < 2048 ? (int)(2048 / rlen) : 1;
	out(c, "const int64_t work = %s;\n", work_expr(c, s0));
	out(c, "const int nte = coil_team(nt, work) < 64 ? coil_team(nt, work) : 64;\n");
	out(c, "(void)nte;\n");
	/* full-size outputs (layer norm, softmax) stream when large, as pointwise ones do */
	int nfull = 0;
	for (int i = 0; i < K->nouts; i++)
		nfull += c->ir->nodes[K->outs[i]].rank == s0->rank && dims_equal(c->ir->nodes[K->outs[i]].shape, s0->shape, s0->rank);
	out(c, "const int nts_ = work * %d >= COIL_NT_BYTES;\n", 4 * (nfull ? nfull : 1));
	out(c, "(void)nts_;\n");
	int opened = 0;
	if (!split) {
		out(c, "#pragma omp parallel num_threads(nte) if (nte > 1)\n");
		out(c, "{\n");
		c->ind++;
		opened++;
		out(c, "#pragma omp for collapse(%d) schedule(static) nowait\n", nkept);
		for (int d = 0; d < s0->rank; d++) {
			if (M >> d & 1 || dim_eq_const(&s0->shape[d], 1))
				continue;
			out(c, "for (int64_t i%d = 0; i%d < %s; i%d++) {\n", d, d, dimc(c, &s0->shape[d]), d);
			c->ind++;
			opened++;
		}
	} else {
		out(c, "{\n");
		c->ind++;
		opened++;
	}
	memo_push(&c->memo);
	/* row cache: one reduced dim (the vector dim) of static length */
	int nred = 0, last = K->reds[K->nreds - 1];
	int64_t rowlen = 0;
	for (int d = 0; d < s0->rank; d++)
		nred += M >> d & 1 && !dim_eq_const(&s0->shape[d], 1);
	ir_node *rl = &c->ir->nodes[last];
	if (!split && nred == 1 && dim_is_const(&s0->shape[c->vd], &rowlen) && rowlen <= 16384 && has_full(c, K, s0) &&
	    rl->sub <= RD_MIN && !is_buf(c, &c->ir->nodes[rl->src[0]]) && c->ir->nodes[rl->src[0]].op != IR_FILL) {
		c->cache_v = rl->src[0];
		c->cache_key = key_of(c, &c->ir->nodes[rl->src[0]], full);
		out(c, "float row_[%lld] __attribute__((aligned(64)));\n", (long long)rowlen);
	}
	char *done = arena_alloc(c->a, (size_t)K->nreds + 1);
	for (int i = 0; i < K->nreds && !c->bad; i++) {
		if (done[i])
			continue;
		c->cache_mode = c->cache_v >= 0 && K->reds[i] == last;
		int v = K->reds[i], t = welford_twin(c->ir, K, i), v2 = t >= 0 ? K->reds[t] : -1;
		ir_node *r = &c->ir->nodes[v];
		if (r->sub == RD_ARGMAX || r->dtype != COIL_F32) {
			c->bad = 1;
			break;
		}
		if (t >= 0)
			done[t] = 1;
		out(c, "float acc%d;\n", v);
		if (v2 >= 0)
			out(c, "float acc%d;\n", v2);
		red_arg ra = {v, v2, full};
		if (!split) {
			out(c, "{\n");
			c->ind++;
			if (r->sub == RD_WMEAN || r->sub == RD_WM2) {
				emit_twopass(c, s0, M, v, v2, full, pf_var);
			} else {
				c->pf_var = i ? pf_var : NULL;
				uacc_begin(c, v);
				nest(c, s0->shape, s0->rank, M, 0, 0, -1, red_body, &ra);
				uacc_end(c, v);
				c->pf_var = NULL;
				acc_fold(c, v, v2, 0);
			}
			c->ind--;
			out(c, "}\n");
		} else {
			/* partials per thread, combined in thread order */
			int wf = r->sub == RD_WMEAN || r->sub == RD_WM2;
			if (wf)
				out(c, "float pn%d[64] = {0}, pm%d[64] = {0}, pq%d[64] = {0};\n", v, v, v);
			else
				out(c, "float pacc%d[64];\n", v);
			out(c, "int pt%d = 1;\n", v);
			out(c, "#pragma omp parallel num_threads(nte) if (nte > 1)\n");
			out(c, "{\n");
			c->ind++;
			out(c, "const int tid_ = omp_get_thread_num(), T_ = omp_get_num_threads();\n");
			out(c, "if (tid_ == 0)\n        pt%d = T_;\n", v);
			if (wf)
				wf_decl(c, v);
			/* the first reduced dim is split; if it is the vector dim, in whole vectors */
			int sd = -1;
			for (int d = 0; d < s0->rank && sd < 0; d++)
				if (M >> d & 1 && !dim_eq_const(&s0->shape[d], 1))
					sd = d;
			char *sz = dimc(c, &s0->shape[sd]);
			if (sd == c->vd) {
				int w = c->I->w;
				out(c, "const int64_t nb_ = (%s + %d) / %d;\n", sz, w - 1, w);
				out(c, "const int64_t lo_ = nb_ * tid_ / T_ * %d, hi_ = COIL_MIN(nb_ * (tid_ + 1) / T_ * %d, %s);\n",
				    w, w, sz);
			} else {
				out(c, "const int64_t lo_ = %s * tid_ / T_, hi_ = %s * (tid_ + 1) / T_;\n", sz, sz);
			}
			if (!wf)
				uacc_begin(c, v);
			int opened2 = 0;
			for (int d = 0; d < s0->rank; d++) {
				if (!(M >> d & 1) || d == c->vd || dim_eq_const(&s0->shape[d], 1))
					continue;
				if (d == sd)
					out(c, "for (int64_t i%d = lo_; i%d < hi_; i%d++) {\n", d, d, d);
				else
					out(c, "for (int64_t i%d = 0; i%d < %s; i%d++) {\n", d, d, dimc(c, &s0->shape[d]), d);
				c->ind++;
				opened2++;
			}
			memo_push(&c->memo);
			const char *vlo = sd == c->vd ? "lo_" : "0", *vhi = sd == c->vd ? "hi_" : dimc(c, &s0->shape[c->vd]);
			if (wf)
				vloop(c, vlo, vhi, red_body, &ra);
			else
				vloop_u(c, vlo, vhi, TP_U, red_body, &ra);
			memo_pop(&c->memo);
			while (opened2--) {
				c->ind--;
				out(c, "}\n");
			}
			if (!wf)
				uacc_end(c, v);
			acc_fold(c, v, v2, 1);
			c->ind--;
			out(c, "}\n");
			if (wf) {
				out(c, "{\n");
				out(c, "        float cn_ = 0, cm_ = 0, cq_ = 0;\n");
				out(c, "        coil_welford_merge(pn%d, pm%d, pq%d, pt%d, &cn_, &cm_, &cq_);\n", v, v, v, v);
				out(c, "        acc%d = %s;\n", v, r->sub == RD_WMEAN ? "cm_" : "cq_");
				if (v2 >= 0)
					out(c, "        acc%d = cq_;\n", v2);
				out(c, "}\n");
			} else {
				out(c, "acc%d = pacc%d[0];\n", v, v);
				out(c, "for (int t_ = 1; t_ < pt%d; t_++)\n", v);
				out(c, "        acc%d = %s;\n", v,
				    r->sub == RD_SUM ? P("acc%d + pacc%d[t_]", v, v)
						     : P("COIL_%s(pacc%d[t_], acc%d)", r->sub == RD_MAX ? "MAX" : "MIN", v, v));
			}
		}
	}
	if (!c->bad) {
		for (int i = 0; i < K->nreds; i++) {
			ir_node *r = &c->ir->nodes[K->reds[i]];
			if (r->mat)
				out(c, "%s[%s] = acc%d;\n", bufname(c, K->reds[i]), ix_linear(c->ir, r, outer), K->reds[i]);
		}
		ep_outer(c, K, s0, r0, outer);
		if (has_full(c, K, s0) && M) {
			ep_arg e = {K, s0, full};
			c->cache_mode = c->cache_v >= 0 ? 2 : 0;
			c->pf_var = pf_var;
			c->nts = nfull > 0;
			nest(c, s0->shape, s0->rank, M, split, split ? 64 * c->I->w : 0, -1, ep_full_body, &e);
			c->nts = 0;
			c->cache_mode = 0;
			c->pf_var = NULL;
		}
	}
	memo_pop(&c->memo);
	while (opened-- > !split) {
		c->ind--;
		out(c, "}\n");
	}
	if (!split) { /* each thread fences its streaming stores */
		out(c, "if (nts_)\n");
		out(c, "        _mm_sfence();\n");
		c->ind--;
		out(c, "}\n");
	}
}

/* Column reductions: the reduced dims lie outside the kept contiguous inner
 * dims (sum over dim 0 of [R, C]).  Rows are the outer loop: a task owns a
 * block of contiguous columns (the blocking dim b and every dim inside it,
 * CB_FLOATS in all across its buffers) and, for each row, reads the block's
 * segment of the row in one contiguous sweep, accumulating into a buffer per
 * reduction that stays in L1 (Welford: mean and M2 buffers, the row count
 * shared by all columns).  Tasks are (outer kept index, column block), in
 * one parallel loop; when they are fewer than the team and the kernel has a
 * single pass, the first reduced dim is split too (nrs_ row slices) into
 * partial buffers, combined in slice order by a second loop.  A reduction
 * whose source reads an earlier one of the kernel (softmax over dim 0: max,
 * then the sum of exp(x - max)) starts a new pass over the rows. */
#define CB_FLOATS 4096

enum { CB_INIT, CB_ACC, CB_OUT, CB_FULL, CB_COMB, CB_REGROW };

typedef struct cb_arg {
	ir_kernel *K;
	ir_node *s0, *r0;
	char **full, **outer;
	int b, phase, pass;
	int rd, ru;         /* the innermost reduced dim and the rows of it per step (CB_ACC) */
	int anywf;
	int64_t regn;       /* register mode: the block's length (0: buffer mode) */
	int *lead, *passof; /* per reduction: its group's leader (Welford twin), its pass */
	int64_t cb;         /* floats per buffer */
	char *bo;           /* the current vector's offset in the buffers */
	char *rcnt;         /* rows per slice but the first dim (Welford combine) */
} cb_arg;

static int is_wf(const ir_node *r) { return r->sub == RD_WMEAN || r->sub == RD_WM2; }

/* Does v (inside the kernel) read a reduction computed by the kernel? */
static int reads_red(vctx *c, int v, char *seen)
{
	ir_node *n = &c->ir->nodes[v];
	if (seen[v])
		return 0;
	seen[v] = 1;
	if (n->op == IR_REDUCE && n->kernel == c->k)
		return 1;
	if (is_buf(c, n))
		return 0;
	for (int i = 0; i < n->nsrc; i++)
		if (reads_red(c, n->src[i], seen))
			return 1;
	return 0;
}

static char *cb_ld(vctx *c, const char *buf, const char *off)
{
	return c->tail ? P(c->I->loadm, "tm", buf, off) : P(c->I->load, buf, off);
}

static void cb_st(vctx *c, const char *buf, const char *off, const char *x)
{
	out(c, "%s;\n", c->tail ? P(c->I->storem, buf, off, "tm", x) : P(c->I->store, buf, off, x));
}

/* vacc%d of every reduction whose pass is before `upto`, from the buffers. */
static void cb_vaccs(vctx *c, cb_arg *a, int upto)
{
	for (int i = 0; i < a->K->nreds; i++) {
		int v = a->K->reds[i], l = a->K->reds[a->lead[i]];
		if (a->passof[i] >= upto)
			continue;
		const char *buf = !is_wf(&c->ir->nodes[v]) ? P("cb%d_", l) : c->ir->nodes[v].sub == RD_WMEAN ? P("cm%d_", l) : P("cq%d_", l);
		out(c, "const %s vacc%d = %s;\n(void)vacc%d;\n", c->I->vt, v, cb_ld(c, buf, a->bo), v);
	}
}

/* One row into accumulator a<sfx> (Welford: m<sfx>, q<sfx>; ri: 1/count).
 * Every column has seen the same rows: m += (x - m)/n, q += (x - m_old)(x - m_new). */
static void cb_step(vctx *c, ir_node *r, const char *sfx, const char *x, const char *ri)
{
	const vec_isa *I = c->I;
	char *m = P("m%s", sfx), *q = P("q%s", sfx), *acc = P("a%s", sfx);
	if (!is_wf(r)) {
		out(c, "%s = %s;\n", acc, comb(c, r->sub, acc, x));
		return;
	}
	out(c, "{\n");
	out(c, "        const %s d_ = %s;\n", I->vt, P(I->op[PR_SUB], x, m));
	out(c, "        %s = %s;\n", m, P(I->op[PR_ADD], m, P(I->op[PR_MUL], "d_", P(I->set1, ri))));
	out(c, "        %s = %s;\n", q, P(I->op[PR_ADD], q, P(I->op[PR_MUL], "d_", P(I->op[PR_SUB], x, m))));
	out(c, "}\n");
}

/* Register mode (a block of at most CB_REG floats along the vector dim alone,
 * whose rows are adjacent): accumulators a<v>_<k> per vector k of the block,
 * loaded from (io 0) or stored to (io 1) the buffers around the rows loop. */
#define CB_REG 64

static void cb_reg_io(vctx *c, cb_arg *a, int io)
{
	int w = c->I->w, nv = (int)((a->regn + w - 1) / w);
	for (int k = 0; k < nv; k++) {
		c->tail = k == nv - 1 && a->regn % w;
		char *bo = P("%d", k * w);
		for (int i = 0; i < a->K->nreds; i++) {
			int v = a->K->reds[i];
			ir_node *r = &c->ir->nodes[v];
			if (a->lead[i] != i || a->passof[i] != a->pass)
				continue;
			for (int j = 0; j < 1 + is_wf(r); j++) {
				char *buf = P("%s%d_", is_wf(r) ? (j ? "cq" : "cm") : "cb", v);
				char *acc = P("%s%d_%d", is_wf(r) ? (j ? "q" : "m") : "a", v, k);
				if (io)
					cb_st(c, buf, bo, acc);
				else
					out(c, "%s %s = %s;\n", c->I->vt, acc, cb_ld(c, buf, bo));
			}
		}
	}
	c->tail = 0;
}

/* Register mode: one row of the block, every vector of it. */
static void cb_regrow(vctx *c, cb_arg *a, int anywf)
{
	int w = c->I->w, nv = (int)((a->regn + w - 1) / w);
	if (anywf)
		out(c, "wn_%d += 1;\nconst float ri0_ = (float)(1.0 / wn_%d);\n", a->pass, a->pass);
	for (int k = 0; k < nv && !c->bad; k++) {
		out(c, "{\n");
		c->ind++;
		memo_push(&c->memo);
		c->tail = k == nv - 1 && a->regn % w;
		out(c, "const int64_t %s = %d, %s0 = %d;\n(void)%s;\n(void)%s0;\n", c->vv, k * w, c->vv, k * w, c->vv, c->vv);
		a->bo = P("%d", k * w);
		cb_vaccs(c, a, a->pass);
		for (int i = 0; i < a->K->nreds && !c->bad; i++) {
			int v = a->K->reds[i];
			ir_node *r = &c->ir->nodes[v];
			if (a->lead[i] != i || a->passof[i] != a->pass)
				continue;
			char *x = vrv(c, r->src[0], a->full);
			if (!c->bad)
				cb_step(c, r, P("%d_%d", v, k), x, "ri0_");
		}
		c->tail = 0;
		memo_pop(&c->memo);
		c->ind--;
		out(c, "}\n");
	}
}

static void cb_body(vctx *c, void *arg)
{
	cb_arg *a = arg;
	ir_kernel *K = a->K;
	const vec_isa *I = c->I;
	char *z = P(I->set1, "0.0f");
	if (a->phase == CB_OUT || a->phase == CB_FULL) {
		cb_vaccs(c, a, 1 << 30);
		if (a->phase == CB_FULL) {
			ep_arg e = {K, a->s0, a->full};
			ep_full_body(c, &e);
			return;
		}
		for (int i = 0; i < K->nreds && !c->bad; i++)
			if (c->ir->nodes[K->reds[i]].mat)
				vstore(c, K->reds[i], a->outer);
		ep_outer(c, K, a->s0, a->r0, a->outer);
		return;
	}
	if (a->phase == CB_ACC)
		cb_vaccs(c, a, a->pass);
	for (int i = 0; i < K->nreds && !c->bad; i++) {
		int v = K->reds[i];
		ir_node *r = &c->ir->nodes[v];
		if (a->lead[i] != i || (a->phase == CB_ACC && a->passof[i] != a->pass))
			continue;
		char *cb = P("cb%d_", v), *cm = P("cm%d_", v), *cq = P("cq%d_", v);
		if (a->phase == CB_INIT) {
			if (is_wf(r)) {
				cb_st(c, cm, a->bo, z);
				cb_st(c, cq, a->bo, z);
			} else {
				cb_st(c, cb, a->bo, P(I->set1, red_init(r->sub)));
			}
			continue;
		}
		out(c, "{\n");
		c->ind++;
		memo_push(&c->memo);
		if (a->phase == CB_ACC) {
			/* ru rows a step: the buffers loaded and stored once */
			char *fk[COIL_MAX_RANK];
			memcpy(fk, a->full, sizeof fk);
			if (is_wf(r))
				out(c, "%s m_ = %s, q_ = %s;\n", I->vt, cb_ld(c, cm, a->bo), cb_ld(c, cq, a->bo));
			else
				out(c, "%s a_ = %s;\n", I->vt, cb_ld(c, cb, a->bo));
			for (int k = 0; k < a->ru && !c->bad; k++) {
				fk[a->rd] = k ? P("(i%d + %d)", a->rd, k) : P("i%d", a->rd);
				char *x = vrv(c, r->src[0], fk);
				if (c->bad)
					return;
				cb_step(c, r, "_", x, P("ri%d_", k));
			}
			if (is_wf(r)) {
				cb_st(c, cm, a->bo, "m_");
				cb_st(c, cq, a->bo, "q_");
			} else {
				cb_st(c, cb, a->bo, "a_");
			}
		} else { /* CB_COMB: the slices' partials, in slice order, into the buffers */
			char *o0 = P("task_ * %lld + %s", (long long)a->cb, a->bo),
			     *os = P("(task_ + s_) * %lld + %s", (long long)a->cb, a->bo);
			if (is_wf(r)) {
				out(c, "%s m_ = %s, q_ = %s;\n", I->vt, cb_ld(c, P("pm%d_", v), o0), cb_ld(c, P("pq%d_", v), o0));
				out(c, "double na_ = (double)(rn0_ / nrs_) * %s;\n", a->rcnt);
				out(c, "for (int64_t s_ = 1; s_ < nrs_; s_++) {\n");
				c->ind++;
				out(c, "const double nb_ = (double)(rn0_ * (s_ + 1) / nrs_ - rn0_ * s_ / nrs_) * %s, nn_ = na_ + nb_;\n",
				    a->rcnt);
				out(c, "if (nb_ == 0)\n        continue;\n");
				out(c, "const %s d_ = %s;\n", I->vt, P(I->op[PR_SUB], cb_ld(c, P("pm%d_", v), os), "m_"));
				out(c, "m_ = %s;\n", P(I->op[PR_ADD], "m_", P(I->op[PR_MUL], "d_", P(I->set1, "(float)(nb_ / nn_)"))));
				out(c, "q_ = %s;\n",
				    P(I->op[PR_ADD], P(I->op[PR_ADD], "q_", cb_ld(c, P("pq%d_", v), os)),
				      P(I->op[PR_MUL], P(I->op[PR_MUL], "d_", "d_"), P(I->set1, "(float)(na_ * nb_ / nn_)"))));
				out(c, "na_ = nn_;\n");
				c->ind--;
				out(c, "}\n");
				cb_st(c, cm, a->bo, "m_");
				cb_st(c, cq, a->bo, "q_");
			} else {
				out(c, "%s a_ = %s;\n", I->vt, cb_ld(c, P("pb%d_", v), o0));
				out(c, "for (int64_t s_ = 1; s_ < nrs_; s_++)\n");
				out(c, "        a_ = %s;\n", comb(c, r->sub, "a_", cb_ld(c, P("pb%d_", v), os)));
				cb_st(c, cb, a->bo, "a_");
			}
		}
		memo_pop(&c->memo);
		c->ind--;
		out(c, "}\n");
	}
}

/* The task's block of columns: dims b (from blo_ to bhi_) to the vector dim,
 * the body once per vector with a->bo its offset in the buffers. */
static void cb_regrow(vctx *c, cb_arg *a, int anywf);

static void cb_cols(vctx *c, cb_arg *a, int phase)
{
	ir_node *s0 = a->s0;
	if (phase == CB_REGROW) {
		cb_regrow(c, a, a->anywf);
		return;
	}
	int opened = 0;
	a->phase = phase;
	char *bo = "0";
	int64_t stride = 1;
	for (int d = c->vd; d >= a->b; d--) {
		int64_t sz = 1;
		if (dim_eq_const(&s0->shape[d], 1))
			continue;
		bo = P("%s + (i%d%s) * %lld", bo, d, d == a->b ? " - blo_" : "", (long long)stride);
		if (d > a->b && dim_is_const(&s0->shape[d], &sz))
			stride *= sz;
	}
	a->bo = P("(%s)", bo);
	for (int d = a->b; d < c->vd; d++) {
		if (dim_eq_const(&s0->shape[d], 1))
			continue;
		if (d == a->b)
			out(c, "for (int64_t i%d = blo_; i%d < bhi_; i%d++) {\n", d, d, d);
		else
			out(c, "for (int64_t i%d = 0; i%d < %s; i%d++) {\n", d, d, dimc(c, &s0->shape[d]), d);
		c->ind++;
		opened++;
	}
	memo_push(&c->memo);
	if (a->b == c->vd)
		vloop(c, "blo_", "bhi_", cb_body, a);
	else
		vloop(c, "0", dimc(c, &s0->shape[c->vd]), cb_body, a);
	memo_pop(&c->memo);
	while (opened--) {
		c->ind--;
		out(c, "}\n");
	}
}

/* Loops over the reduced dims (the first from rlo_ to rhi_ when split), the
 * block of columns inside.  CB_ACC: RU rows of the innermost reduced dim a
 * step (then one), the Welford counter wn_<pass> kept. */
#define CB_RU 4

static void cb_rows(vctx *c, cb_arg *a, int split, int phase, int anywf)
{
	int opened = 0, first = 1;
	if (a->rd < 0) { /* only size-1 dims reduced: one row */
		out(c, "{\n");
		if (anywf && phase == CB_ACC)
			out(c, "        const float ri0_ = 1.0f;\n");
		a->ru = 1;
		cb_cols(c, a, phase);
		out(c, "}\n");
		return;
	}
	for (int d = 0; d < a->s0->rank; d++) {
		if (!(a->r0->mask >> d & 1) || dim_eq_const(&a->s0->shape[d], 1))
			continue;
		char *lo = split && first ? "rlo_" : "0", *hi = split && first ? "rhi_" : dimc(c, &a->s0->shape[d]);
		first = 0;
		if (d == a->rd && phase == CB_ACC) {
			out(c, "{\n");
			c->ind++;
			out(c, "int64_t i%d = %s;\n", d, lo);
			for (int ru = CB_RU; ru >= 1; ru /= CB_RU) {
				if (ru > 1)
					out(c, "for (; i%d + %d <= %s; i%d += %d) {\n", d, ru, hi, d, ru);
				else
					out(c, "for (; i%d < %s; i%d++) {\n", d, hi, d);
				c->ind++;
				memo_push(&c->memo);
				if (anywf) {
					out(c, "const double w0_ = wn_%d;\n", a->pass);
					for (int k = 0; k < ru; k++)
						out(c, "const float ri%d_ = (float)(1.0 / (w0_ + %d));\n(void)ri%d_;\n", k, k + 1, k);
					out(c, "wn_%d += %d;\n", a->pass, ru);
				}
				a->ru = ru;
				cb_cols(c, a, phase);
				memo_pop(&c->memo);
				c->ind--;
				out(c, "}\n");
			}
			c->ind--;
			out(c, "}\n");
			break;
		}
		out(c, "for (int64_t i%d = %s; i%d < %s; i%d++) {\n", d, lo, d, hi, d);
		c->ind++;
		opened++;
		if (d == a->rd)
			cb_cols(c, a, phase);
	}
	while (opened--) {
		c->ind--;
		out(c, "}\n");
	}
}

static void emit_cols(vctx *c, ir_kernel *K, ir_node *s0, ir_node *r0)
{
	unsigned M = r0->mask;
	const vec_isa *I = c->I;
	int w = I->w, nr = K->nreds, np = 0, nbuf = 0, anywf = 0;
	char *full[COIL_MAX_RANK], *outer[COIL_MAX_RANK];
	loopvars(c, s0, full, 0);
	loopvars(c, s0, outer, M);
	c->red_vec = 1;
	cb_arg a = {.K = K, .s0 = s0, .r0 = r0, .full = full, .outer = outer};
	a.lead = arena_alloc(c->a, (size_t)nr * sizeof(int));
	a.passof = arena_alloc(c->a, (size_t)nr * sizeof(int));
	for (int i = 0; i < nr; i++) {
		ir_node *r = &c->ir->nodes[K->reds[i]];
		if (r->sub == RD_ARGMAX || r->dtype != COIL_F32) {
			c->bad = 1;
			return;
		}
		a.lead[i] = i;
		for (int j = 0; j < i; j++)
			if (welford_twin(c->ir, K, j) == i)
				a.lead[i] = j;
		if (a.lead[i] != i) {
			a.passof[i] = a.passof[a.lead[i]];
			continue;
		}
		if (!np || reads_red(c, r->src[0], arena_alloc(c->a, (size_t)c->ir->n)))
			np++;
		a.passof[i] = np - 1;
		nbuf += is_wf(r) ? 2 : 1;
		anywf |= is_wf(r);
	}
	/* the blocking dim: outward from the vector dim while the block fits */
	int lastr = -1;
	for (int d = 0; d < s0->rank; d++)
		if (M >> d & 1 && !dim_eq_const(&s0->shape[d], 1))
			lastr = d;
	a.rd = lastr;
	int64_t budget = CB_FLOATS / nbuf / w * w, P = 1, sz;
	if (budget < 4 * w)
		budget = 4 * w;
	a.b = c->vd;
	for (;;) {
		int d = a.b - 1;
		while (d > lastr && dim_eq_const(&s0->shape[d], 1))
			d--;
		if (d <= lastr || !dim_is_const(&s0->shape[a.b], &sz) || P * sz > budget)
			break;
		P *= sz;
		a.b = d;
	}
	int64_t nb = a.b == c->vd ? budget : budget / P > 1 ? budget / P : 1;
	if (dim_is_const(&s0->shape[a.b], &sz) && nb > (a.b == c->vd ? (sz + w - 1) / w * w : sz))
		nb = a.b == c->vd ? (sz + w - 1) / w * w : sz;
	a.cb = (nb * P + 15) / 16 * 16 + 16;
	/* register mode: the block is the whole of a short vector dim (rows adjacent) */
	a.anywf = anywf;
	if (a.b == c->vd && dim_is_const(&s0->shape[a.b], &sz) && sz <= CB_REG && sz <= nb)
		a.regn = sz;
	/* outer kept dims, the unit index, the first reduced dim and the rest */
	char *rn0 = "(int64_t)1", *rest = "(int64_t)1", *unit = "(int64_t)0", *nunits = "nbk_";
	int nouter = 0, rd0 = -1;
	for (int d = 0; d < s0->rank && rd0 < 0; d++)
		if (M >> d & 1 && !dim_eq_const(&s0->shape[d], 1))
			rd0 = d;
	for (int d = 0; d < s0->rank; d++) {
		if (dim_eq_const(&s0->shape[d], 1))
			continue;
		if (M >> d & 1) {
			if (d == rd0)
				rn0 = dimc(c, &s0->shape[d]);
			else
				rest = P("%s*%s", rest, dimc(c, &s0->shape[d]));
		} else if (d < a.b) {
			unit = P("(%s*%s + i%d)", unit, dimc(c, &s0->shape[d]), d);
			nunits = P("%s*%s", nunits, dimc(c, &s0->shape[d]));
			nouter++;
		}
	}
	a.rcnt = rest;
	unit = P("(%s*nbk_ + jb_)", unit);
	char *bsz = dimc(c, &s0->shape[a.b]);
	/* row slices: one pass, and tasks possibly fewer than a team (64 at most) */
	int64_t su = 1;
	for (int d = 0; d <= a.b && su > 0; d++)
		if (d == a.b)
			su = dim_is_const(&s0->shape[d], &sz) ? su * ((sz + nb - 1) / nb) : -1;
		else if (!(M >> d & 1))
			su = dim_is_const(&s0->shape[d], &sz) ? su * sz : -1;
	int split = np == 1 && !(su >= 64);
	out(c, "const int64_t work = %s;\n", work_expr(c, s0));
	out(c, "const int nte = coil_team(nt, work);\n");
	out(c, "(void)nte;\n");
	out(c, "const int64_t nbk_ = (%s + %lld) / %lld, rn0_ = %s;\n", bsz, (long long)nb - 1, (long long)nb, rn0);
	out(c, "(void)rn0_;\n");
	if (split) {
		out(c, "int64_t nrs_ = 1;\n");
		out(c, "const int64_t units_ = %s;\n", nunits);
		out(c, "if (units_ < nte && rn0_ > 1)\n        nrs_ = COIL_MIN((nte + units_ - 1) / units_, rn0_);\n");
	}
	for (int i = 0; i < nr; i++) {
		int v = K->reds[i];
		if (a.lead[i] != i || !split)
			continue;
		if (is_wf(&c->ir->nodes[v]))
			out(c, "float *pm%d_ = NULL, *pq%d_ = NULL;\n", v, v);
		else
			out(c, "float *pb%d_ = NULL;\n", v);
	}
	if (split) {
		/* partial buffers (each task's own; on failure, no split) */
		out(c, "if (nrs_ > 1) {\n");
		c->ind++;
		out(c, "const size_t pz_ = (size_t)(units_ * nrs_ * %lld) * sizeof(float);\n", (long long)a.cb);
		char *ok = "1";
		for (int i = 0; i < nr; i++) {
			int v = K->reds[i];
			if (a.lead[i] != i)
				continue;
			if (is_wf(&c->ir->nodes[v])) {
				out(c, "pm%d_ = malloc(pz_);\npq%d_ = malloc(pz_);\n", v, v);
				ok = P("%s && pm%d_ && pq%d_", ok, v, v);
			} else {
				out(c, "pb%d_ = malloc(pz_);\n", v);
				ok = P("%s && pb%d_", ok, v);
			}
		}
		out(c, "if (!(%s))\n        nrs_ = 1;\n", ok);
		c->ind--;
		out(c, "}\n");
	}
	for (int pass2 = 0; pass2 < 1 + split && !c->bad; pass2++) {
		/* pass2 0: the tasks; 1: the combine of the slices */
		if (pass2) {
			out(c, "if (nrs_ > 1) {\n");
			c->ind++;
		}
		out(c, "#pragma omp parallel for collapse(%d) num_threads(nte) if (nte > 1) schedule(static)\n",
		    nouter + 1 + (split && !pass2));
		int opened = 0;
		for (int d = 0; d < a.b; d++) {
			if (M >> d & 1 || dim_eq_const(&s0->shape[d], 1))
				continue;
			out(c, "for (int64_t i%d = 0; i%d < %s; i%d++) {\n", d, d, dimc(c, &s0->shape[d]), d);
			c->ind++;
			opened++;
		}
		out(c, "for (int64_t jb_ = 0; jb_ < nbk_; jb_++) {\n");
		c->ind++;
		opened++;
		if (!pass2 && split) {
			out(c, "for (int64_t rs_ = 0; rs_ < nrs_; rs_++) {\n");
			c->ind++;
			opened++;
		}
		memo_push(&c->memo);
		out(c, "const int64_t blo_ = jb_ * %lld, bhi_ = COIL_MIN(blo_ + %lld, %s);\n", (long long)nb, (long long)nb, bsz);
		if (split)
			out(c, "const int64_t task_ = %s * nrs_%s;\n(void)task_;\n", unit, pass2 ? "" : " + rs_");
		if (!pass2 && split)
			out(c, "const int64_t rlo_ = rn0_ * rs_ / nrs_, rhi_ = rn0_ * (rs_ + 1) / nrs_;\n(void)rlo_;\n(void)rhi_;\n");
		for (int i = 0; i < nr; i++) {
			int v = K->reds[i];
			if (a.lead[i] != i)
				continue;
			int wf = is_wf(&c->ir->nodes[v]);
			for (int j = 0; j < 1 + wf; j++) {
				const char *nm = wf ? (j ? "cq" : "cm") : "cb", *pn = wf ? (j ? "pq" : "pm") : "pb";
				out(c, "float %sl%d_[%lld] __attribute__((aligned(64)));\n", nm, v, (long long)a.cb);
				if (split && !pass2)
					out(c, "float *const %s%d_ = nrs_ > 1 ? %s%d_ + task_ * %lld : %sl%d_;\n", nm, v, pn, v,
					    (long long)a.cb, nm, v);
				else
					out(c, "float *const %s%d_ = %sl%d_;\n", nm, v, nm, v);
			}
		}
		if (!pass2) {
			cb_cols(c, &a, CB_INIT);
			for (int p = 0; p < np && !c->bad; p++) {
				if (anywf)
					out(c, "double wn_%d = 0;\n", p);
				a.pass = p;
				if (a.regn) {
					int w = I->w;
					out(c, "{\n");
					c->ind++;
					if (a.regn % w)
						out(c, "const int64_t tn = %lld;\nconst %s tm = %s;\n(void)tn;\n", (long long)(a.regn % w),
						    I->mt, P(I->tail, "tn"));
					cb_reg_io(c, &a, 0);
					cb_rows(c, &a, split, CB_REGROW, anywf);
					cb_reg_io(c, &a, 1);
					c->ind--;
					out(c, "}\n");
				} else {
					cb_rows(c, &a, split, CB_ACC, anywf);
				}
			}
			out(c, split ? "if (nrs_ == 1) {\n" : "{\n");
			c->ind++;
		} else {
			cb_cols(c, &a, CB_COMB);
		}
		cb_cols(c, &a, CB_OUT);
		if (has_full(c, K, s0)) {
			cb_rows(c, &a, 0, CB_FULL, 0);
		}
		if (!pass2) {
			c->ind--;
			out(c, "}\n");
		}
		memo_pop(&c->memo);
		while (opened--) {
			c->ind--;
			out(c, "}\n");
		}
		if (pass2) {
			c->ind--;
			out(c, "}\n");
		}
	}
	for (int i = 0; i < nr && split; i++) {
		int v = K->reds[i];
		if (a.lead[i] != i)
			continue;
		if (is_wf(&c->ir->nodes[v]))
			out(c, "free(pm%d_);\nfree(pq%d_);\n", v, v);
		else
			out(c, "free(pb%d_);\n", v);
	}
}

static void emit_red(vctx *c, ir_kernel *K)
{
	ir_node *r0 = &c->ir->nodes[K->reds[0]], *s0 = &c->ir->nodes[r0->src[0]];
	if ((c->vd = inner_dim(s0->shape, s0->rank)) < 0) {
		c->bad = 1;
		return;
	}
	snprintf(c->vv, sizeof c->vv, "i%d", c->vd);
	if (r0->mask >> c->vd & 1)
		emit_rows(c, K, s0, r0);
	else
		emit_cols(c, K, s0, r0);
}

int vec_emit_kernel(coil_ir *ir, const vec_isa *isa, FILE *f, int k, char *used, coil_err *err)
{
	ir_kernel *K = &ir->ks[k];
	if (!isa || K->kind == K_EXTERN)
		return 0;
	char *body = NULL;
	size_t len = 0;
	vctx c = {.ir = ir, .a = ir->arena, .I = isa, .k = k, .ind = 1, .cache_v = -1, .tstep = TILE_T};
	c.used = arena_alloc(ir->arena, (size_t)ir->n + 1);
	if (!c.used || !(c.f = open_memstream(&body, &len)))
		return coil_err_oom(err);
	if (K->kind == K_POINTWISE)
		emit_pw(&c, K);
	else
		emit_red(&c, K);
	fclose(c.f);
	if (!c.bad) {
		fwrite(body, 1, len, f);
		for (int v = 0; v < ir->n; v++)
			used[v] |= c.used[v];
	}
	free(body);
	return c.bad ? 0 : 1;
}
