/* emit_c: renders the scheduled IR as one C file: one function per kernel
 * (a comment names the graph nodes it covers by index and op, never by user
 * name), OpenMP over the outer loop, and the ABI of include/coil/artifact.h.
 * Pointwise primitives render through one table per element type family. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/dnnl.h"
#include "codegen/emit.h"
#include "codegen/ir.h"
#include "common/infer.h"
#include "coil/artifact.h"

typedef struct memo {
	int v, depth;
	char *key, *name;
} memo;

typedef struct ectx {
	coil_ir *ir;
	coil_arena *a;
	FILE *f;          /* the current kernel's body */
	int k, ntmp, depth, ind;
	memo *m;
	int nm, capm;
	char *used;       /* buffers the kernel touches */
	emit_errs errs;   /* runtime error messages */
	char *may_fail;   /* per kernel: raises runtime errors */
	coil_err *err;
	int bad;
	const vec_isa *isa; /* NULL: scalar */
	char *fold_may_fail; /* per kernel of the create IR (fold.c) */
} ectx;

static const char *ctype(coil_dtype t)
{
	switch (t) {
	case COIL_F32: return "float";
	case COIL_F64: return "double";
	case COIL_I64: return "int64_t";
	case COIL_I32: return "int32_t";
	case COIL_I8: return "int8_t";
	default: return "uint8_t"; /* u8, bool */
	}
}

static void out(ectx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(ectx *c, const char *fmt, ...)
{
	va_list ap;
	fprintf(c->f, "%*s", c->ind * 8, "");
	va_start(ap, fmt);
	vfprintf(c->f, fmt, ap);
	va_end(ap);
}

/* How each primitive renders: float, double and integer tables. */
static const char *const rf32[PR_COUNT] = {
	[PR_NEG] = "(-%s)", [PR_EXP] = "coil_expf(%s)", [PR_LOG] = "coil_logf(%s)", [PR_LOG1P] = "log1pf(%s)",
	[PR_SQRT] = "sqrtf(%s)", [PR_RECIP] = "(1.0f / %s)", [PR_ABS] = "fabsf(%s)", [PR_FLOOR] = "floorf(%s)",
	[PR_CEIL] = "ceilf(%s)", [PR_TRUNC] = "truncf(%s)", [PR_SIN] = "sinf(%s)", [PR_COS] = "cosf(%s)",
	[PR_ERF] = "coil_erff(%s)", [PR_TANH] = "coil_tanhf(%s)", [PR_NOT] = "(!%s)", [PR_POW] = "powf(%s, %s)",
	[PR_FLOORDIV] = "(float)coil_floordiv(%s, %s)",
};
static const char *const rf64[PR_COUNT] = {
	[PR_NEG] = "(-%s)", [PR_EXP] = "exp(%s)", [PR_LOG] = "log(%s)", [PR_LOG1P] = "log1p(%s)",
	[PR_SQRT] = "sqrt(%s)", [PR_RECIP] = "(1.0 / %s)", [PR_ABS] = "fabs(%s)", [PR_FLOOR] = "floor(%s)",
	[PR_CEIL] = "ceil(%s)", [PR_TRUNC] = "trunc(%s)", [PR_SIN] = "sin(%s)", [PR_COS] = "cos(%s)",
	[PR_ERF] = "erf(%s)", [PR_TANH] = "tanh(%s)", [PR_NOT] = "(!%s)", [PR_POW] = "pow(%s, %s)",
	[PR_FLOORDIV] = "coil_floordiv(%s, %s)",
};
static const char *const rint_[PR_COUNT] = {
	[PR_NEG] = "(-%s)", [PR_ABS] = "coil_abs(%s)", [PR_NOT] = "(!%s)", [PR_POW] = "coil_ipow(%s, %s)",
	[PR_RECIP] = "(1 / %s)", /* PR_DIV, PR_FLOORDIV: see rv() */
};
static const char *const rcommon[PR_COUNT] = {
	[PR_ADD] = "(%s + %s)", [PR_SUB] = "(%s - %s)", [PR_MUL] = "(%s * %s)", [PR_DIV] = "(%s / %s)",
	[PR_MAX] = "COIL_MAX(%s, %s)", [PR_MIN] = "COIL_MIN(%s, %s)", [PR_LT] = "(%s < %s)", [PR_LE] = "(%s <= %s)",
	[PR_GT] = "(%s > %s)", [PR_GE] = "(%s >= %s)", [PR_EQ] = "(%s == %s)", [PR_NE] = "(%s != %s)",
	[PR_AND] = "(%s && %s)", [PR_OR] = "(%s || %s)",
};

static const char *render_op(int prim, coil_dtype t)
{
	const char *const *tab = t == COIL_F32 ? rf32 : t == COIL_F64 ? rf64 : rint_;
	return tab[prim] ? tab[prim] : rcommon[prim];
}

static char *literal(ectx *c, double v, coil_dtype t)
{
	if (isnan(v))
		return arena_printf(c->a, "((%s)NAN)", ctype(t));
	if (isinf(v))
		return arena_printf(c->a, "((%s)%sINFINITY)", ctype(t), v < 0 ? "-" : "");
	if (t == COIL_F32 || t == COIL_F64) {
		char *s = arena_printf(c->a, t == COIL_F32 ? "%.9g" : "%.17g", v);
		return arena_printf(c->a, "%s%s%s", s, strpbrk(s, ".e") ? "" : ".0", t == COIL_F32 ? "f" : "");
	}
	return arena_printf(c->a, "((%s)%lld)", ctype(t), (long long)v);
}

static char *bufname(ectx *c, int v)
{
	ir_node *n = &c->ir->nodes[v];
	c->used[v] = 1;
	switch (n->op) {
	case IR_INPUT: return arena_printf(c->a, "in%d", n->index);
	case IR_PARAM: return arena_printf(c->a, "p%d", n->index);
	case IR_CONST: return arena_printf(c->a, "c%d", n->index);
	default: return n->out >= 0 ? arena_printf(c->a, "o%d", n->out) : arena_printf(c->a, "b%d", v);
	}
}

static char *key_of(ectx *c, ir_node *n, char **idx)
{
	char *k = "";
	for (int i = 0; i < n->rank; i++)
		k = arena_printf(c->a, "%s,%s", k, idx[i]);
	return k;
}

static char *memo_get(ectx *c, int v, const char *key)
{
	for (int i = c->nm - 1; i >= 0; i--)
		if (c->m[i].v == v && !strcmp(c->m[i].key, key))
			return c->m[i].name;
	return NULL;
}

static char *memo_put(ectx *c, int v, char *key, char *name)
{
	if (c->nm == c->capm) {
		c->capm = c->capm ? 2 * c->capm : 256;
		memo *m = arena_alloc(c->a, (size_t)c->capm * sizeof *m);
		if (c->nm)
			memcpy(m, c->m, (size_t)c->nm * sizeof *m);
		c->m = m;
	}
	c->m[c->nm++] = (memo){v, c->depth, key, name};
	return name;
}

static void scope_push(ectx *c) { c->depth++; }
static void scope_pop(ectx *c)
{
	while (c->nm && c->m[c->nm - 1].depth >= c->depth)
		c->nm--;
	c->depth--;
}

static int is_buf(ectx *c, ir_node *n)
{
	return n->op == IR_INPUT || n->op == IR_PARAM || n->op == IR_CONST || n->op == IR_EXTERN ||
	       (n->mat && n->kernel != c->k) || (n->op == IR_REDUCE && n->kernel != c->k);
}

/* The value of node v at index idx, as a C expression (a temp or literal). */
static char *rv(ectx *c, int v, char **idx)
{
	ir_node *n = &c->ir->nodes[v];
	if (n->op == IR_FILL)
		return n->sub ? arena_printf(c->a, "((%s)(%s))", ctype(n->dtype), ir_dim_c(c->a, &n->start))
			      : literal(c, n->fill, n->dtype);
	if (n->op == IR_REDUCE && n->kernel == c->k)
		return arena_printf(c->a, "acc%d", v);
	char *key = key_of(c, n, idx), *name = memo_get(c, v, key);
	if (name)
		return name;
	if (is_buf(c, n)) {
		name = arena_printf(c->a, "t%d", c->ntmp++);
		out(c, "const %s %s = %s[%s];\n", ctype(n->dtype), name, bufname(c, v), ix_linear(c->ir, n, idx));
		return memo_put(c, v, key, name);
	}
	char *a[3] = {0};
	for (int i = 0; i < n->nsrc; i++) {
		char *sidx[COIL_MAX_RANK];
		ix_operand(c->ir, n, i, idx, sidx);
		a[i] = rv(c, n->src[i], sidx);
	}
	if (n->op == IR_VIEW)
		return a[0];
	char *e;
	switch (n->op) {
	case IR_CAST:
		e = n->dtype == COIL_BOOL ? arena_printf(c->a, "(%s != 0)", a[0])
					  : arena_printf(c->a, "(%s)%s", ctype(n->dtype), a[0]);
		break;
	case IR_WHERE: e = arena_printf(c->a, "(%s ? %s : %s)", a[0], a[1], a[2]); break;
	default: {
		/* the operands' dtype picks the table (comparisons yield bool) */
		coil_dtype t = c->ir->nodes[n->src[0]].dtype;
		if (!dtype_is_float(t) && (n->sub == PR_DIV || n->sub == PR_FLOORDIV)) {
			/* integer division by zero fails the run, as in the interpreter */
			int code = emit_err_code(&c->errs, c->ir, n->gnode, "integer division by zero");
			c->may_fail[c->k] = 1;
			e = arena_printf(c->a, "coil_%s_i(%s, %s, x->st, %d)", n->sub == PR_DIV ? "div" : "floordiv", a[0],
					 a[1], code);
		} else {
			e = arena_printf(c->a, render_op(n->sub, t), a[0], a[1]);
		}
	}
	}
	name = arena_printf(c->a, "t%d", c->ntmp++);
	out(c, "const %s %s = %s;\n", ctype(n->dtype), name, e);
	return memo_put(c, v, key, name);
}

/* Opens loops over the dims of shape whose bit is set in which (size-1 dims
 * are skipped); the first loop is parallel when par.  Returns loops opened. */
static int open_loops(ectx *c, const coil_dim *shape, int rank, unsigned which, int par)
{
	int nl = 0;
	for (int d = 0; d < rank; d++) {
		if (!(which >> d & 1) || dim_eq_const(&shape[d], 1))
			continue;
		char *sz = ir_dim_c(c->a, &shape[d]);
		if (par && nl == 0)
			out(c, "#pragma omp parallel for num_threads(nt) if (nt > 1 && work > 32768)\n");
		out(c, "for (int64_t i%d = 0; i%d < %s; i%d++) {\n", d, d, sz, d);
		c->ind++;
		nl++;
	}
	scope_push(c);
	return nl;
}

static void close_loops(ectx *c, int nl)
{
	scope_pop(c);
	while (nl--) {
		c->ind--;
		out(c, "}\n");
	}
}

static char *work_expr(ectx *c, const ir_node *n)
{
	char *w = "1";
	for (int d = 0; d < n->rank; d++)
		w = arena_printf(c->a, "%s*(%s)", w, ir_dim_c(c->a, &n->shape[d]));
	return w;
}

static void loopvars(ectx *c, const ir_node *n, char **idx, unsigned zero)
{
	for (int d = 0; d < n->rank; d++)
		idx[d] = zero >> d & 1 || dim_eq_const(&n->shape[d], 1) ? "0" : arena_printf(c->a, "i%d", d);
}

static void store(ectx *c, int v, char **idx)
{
	ir_node *n = &c->ir->nodes[v];
	char *val = rv(c, v, idx);
	out(c, "%s[%s] = %s;\n", bufname(c, v), ix_linear(c->ir, n, idx), val);
}

static void emit_pointwise(ectx *c, ir_kernel *K)
{
	ir_node *n = &c->ir->nodes[K->outs[0]];
	char *idx[COIL_MAX_RANK];
	out(c, "const int64_t work = %s;\n", work_expr(c, n));
	out(c, "(void)work;\n");
	int nl = open_loops(c, n->shape, n->rank, ~0u, 1);
	loopvars(c, n, idx, 0);
	for (int i = 0; i < K->nouts; i++)
		store(c, K->outs[i], idx);
	close_loops(c, nl);
}

static const char *red_init(coil_dtype t, int kind)
{
	static const char *const mx[] = {[COIL_F32] = "-INFINITY", [COIL_F64] = "-INFINITY", [COIL_I64] = "INT64_MIN",
					 [COIL_I32] = "INT32_MIN", [COIL_I8] = "INT8_MIN", [COIL_U8] = "0", [COIL_BOOL] = "0"};
	static const char *const mn[] = {[COIL_F32] = "INFINITY", [COIL_F64] = "INFINITY", [COIL_I64] = "INT64_MAX",
					 [COIL_I32] = "INT32_MAX", [COIL_I8] = "INT8_MAX", [COIL_U8] = "255", [COIL_BOOL] = "1"};
	return kind == RD_SUM || kind == RD_WMEAN || kind == RD_WM2 ? "0" : kind == RD_MIN ? mn[t] : mx[t];
}

static void emit_reduce(ectx *c, ir_kernel *K)
{
	ir_node *r0 = &c->ir->nodes[K->reds[0]], *s0 = &c->ir->nodes[r0->src[0]];
	char *full[COIL_MAX_RANK], *outer[COIL_MAX_RANK];
	unsigned M = r0->mask;
	out(c, "const int64_t work = %s;\n", work_expr(c, s0));
	out(c, "(void)work;\n");
	int no = open_loops(c, s0->shape, s0->rank, ~M, 1);
	loopvars(c, s0, full, 0);
	loopvars(c, s0, outer, M);
	for (int i = 0; i < K->nreds; i++) {
		int v = K->reds[i];
		ir_node *r = &c->ir->nodes[v];
		coil_dtype st = c->ir->nodes[r->src[0]].dtype;
		if (r->sub == RD_ARGMAX) {
			out(c, "int64_t acc%d = 0, pos%d = 0;\n", v, v);
			out(c, "%s m%d = 0;\n", ctype(st), v);
		} else {
			if (r->sub == RD_WMEAN || r->sub == RD_WM2) /* Welford: count and running mean, in double */
				out(c, "double acc%d = 0, wn%d = 0, wm%d = 0;\n", v, v, v);
			else
				out(c, "%s acc%d = %s;\n", ctype(r->dtype), v, red_init(r->dtype, r->sub));
		}
		int nl = open_loops(c, s0->shape, s0->rank, M, 0);
		char *x = rv(c, r->src[0], full);
		switch (r->sub) {
		case RD_SUM: out(c, "acc%d += %s;\n", v, x); break;
		case RD_MAX: out(c, "acc%d = COIL_MAX(%s, acc%d);\n", v, x, v); break;
		case RD_MIN: out(c, "acc%d = COIL_MIN(%s, acc%d);\n", v, x, v); break;
		case RD_WMEAN: case RD_WM2:
			out(c, "{\n");
			out(c, "        const double d_ = (double)%s - wm%d;\n", x, v);
			out(c, "        wn%d += 1;\n", v);
			out(c, "        wm%d += d_ / wn%d;\n", v, v);
			if (r->sub == RD_WMEAN)
				out(c, "        acc%d = wm%d;\n", v, v);
			else
				out(c, "        acc%d += d_ * (%s - wm%d);\n", v, x, v);
			out(c, "}\n");
			break;
		default:
			out(c, "if (pos%d == 0 || (m%d == m%d && (%s != %s || %s > m%d))) {\n", v, v, v, x, x, x, v);
			out(c, "        m%d = %s;\n", v, x);
			out(c, "        acc%d = pos%d;\n", v, v);
			out(c, "}\n");
			out(c, "pos%d++;\n", v);
		}
		close_loops(c, nl);
		if (r->mat)
			out(c, "%s[%s] = acc%d;\n", bufname(c, v), ix_linear(c->ir, r, outer), v);
	}
	/* epilogue: outer-shaped outputs, then full-shaped ones in one loop */
	int anyfull = 0;
	for (int i = 0; i < K->nouts; i++) {
		ir_node *p = &c->ir->nodes[K->outs[i]];
		if (p->rank == s0->rank && dims_equal(p->shape, s0->shape, p->rank) && M) {
			anyfull = 1;
			continue;
		}
		char *pidx[COIL_MAX_RANK];
		int j = 0;
		for (int d = 0; d < p->rank; d++) {
			if (dim_eq_const(&p->shape[d], 1)) {
				pidx[d] = "0";
				continue;
			}
			while (j < r0->rank && dim_eq_const(&r0->shape[j], 1))
				j++;
			pidx[d] = outer[j++];
		}
		store(c, K->outs[i], pidx);
	}
	if (anyfull) {
		int nl = open_loops(c, s0->shape, s0->rank, M, 0);
		for (int i = 0; i < K->nouts; i++) {
			ir_node *p = &c->ir->nodes[K->outs[i]];
			if (p->rank == s0->rank && dims_equal(p->shape, s0->shape, p->rank))
				store(c, K->outs[i], full);
		}
		close_loops(c, nl);
	}
	close_loops(c, no);
}

/* One kernel function; its body is rendered first so that only the buffers
 * it touches are declared. */
static int emit_kernel(ectx *c, FILE *f, int k)
{
	ir_kernel *K = &c->ir->ks[k];
	char *body = NULL;
	size_t blen = 0;
	c->f = open_memstream(&body, &blen);
	if (!c->f)
		return coil_errf(c->err, "out of memory");
	c->k = k;
	c->ntmp = 0;
	c->nm = 0;
	c->ind = 1;
	memset(c->used, 0, (size_t)c->ir->n);
	int vr = K->kind == K_EXTERN ? 0 : vec_emit_kernel(c->ir, c->isa, c->f, k, c->used, c->err);
	if (vr < 0)
		c->bad = 1;
	else if (vr > 0)
		; /* rendered with the target's SIMD table */
	else if (K->kind == K_POINTWISE)
		emit_pointwise(c, K);
	else if (K->kind == K_REDUCE)
		emit_reduce(c, K);
	else {
		int *u = arena_alloc(c->a, (size_t)c->ir->n * sizeof(int)), nerr = c->errs.uses;
		emit_extern(c->ir, c->f, k, u, &c->errs, c->err, &c->bad);
		if (c->errs.uses != nerr)
			c->may_fail[k] = 1;
		for (int v = 0; v < c->ir->n; v++)
			c->used[v] = (char)u[v];
	}
	fclose(c->f);
	fprintf(f, "/* kernel %d (%s): graph nodes", k,
		K->kind == K_POINTWISE ? "pointwise" : K->kind == K_REDUCE ? "reduction" : "extern");
	for (int i = 0; i < K->ncover; i++)
		fprintf(f, " %d:%s", K->cover[i], op_name(c->ir->g->nodes[K->cover[i]].op));
	fprintf(f, " */\nstatic void kernel%d(const coil_ctx *x)\n{\n", k);
	for (int s = 0; s < c->ir->g->syms.n; s++)
		fprintf(f, "\tconst int64_t s%d = x->sym[%d];\n", s, s);
	fprintf(f, "\tconst int nt = x->nt;\n\t(void)nt;\n");
	for (int v = 0; v < c->ir->n; v++) {
		ir_node *n = &c->ir->nodes[v];
		if (!c->used[v])
			continue;
		const char *t = ctype(n->dtype);
		switch (n->op) {
		case IR_INPUT: fprintf(f, "\tconst %s *restrict in%d = x->in[%d];\n", t, n->index, n->index); break;
		case IR_PARAM: fprintf(f, "\tconst %s *restrict p%d = x->par[%d];\n", t, n->index, n->index); break;
		case IR_CONST: break;
		default:
			if (n->out >= 0)
				fprintf(f, "\t%s *restrict o%d = x->out[%d];\n", t, n->out, n->out);
			else
				fprintf(f, "\t%s *%sb%d = (%s *)(x->arena + x->off[%d]);\n", t,
					n->inplace == k + 1 ? "" : "restrict ", v, t, n->slot);
		}
	}
	fwrite(body, 1, blen, f);
	fprintf(f, "}\n\n");
	free(body);
	return c->bad ? -1 : 0;
}

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
	"static inline int64_t coil_abs(int64_t a) { return a < 0 ? -a : a; }\n"
	"/* floor(a / b) for b > 0 */\n"
	"static inline int64_t coil_fdiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }\n"
	"static inline int64_t coil_ipow(int64_t a, int64_t b) { return (int64_t)pow((double)a, (double)b); }\n\n"
	"/* OpenMP's worker threads outlive parallel regions: keep libgomp loaded\n"
	" * when this artifact is dlclose'd (else they run unmapped code). */\n"
	"__attribute__((constructor)) static void coil_pin_openmp(void)\n{\n"
	"\t(void)dlopen(\"libgomp.so.1\", RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);\n}\n\n"
	"typedef struct coil_ctx {\n\tconst int64_t *sym;\n\tint nt;\n\tconst void *const *in;\n"
	"\tvoid *const *par;\n\tvoid *const *out;\n\tchar *arena;\n\tconst int64_t *off;\n\tcoil_status *st;\n\tstruct coil_dn *dn; /* oneDNN objects, when any */\n} coil_ctx;\n\n";

int emit_err_code(emit_errs *e, coil_ir *ir, int gnode, const char *fmt)
{
	const char *op = gnode >= 0 ? op_name(ir->g->nodes[gnode].op) : "coil";
	char *m = arena_printf(e->arena, "%s: %s", op, fmt);
	e->uses++;
	for (int i = 1; i < e->n; i++)
		if (!strcmp(e->msg[i], m))
			return i;
	if (e->n + 1 >= e->cap) {
		int cap = e->cap ? 2 * e->cap : 8;
		char **nm = arena_alloc(e->arena, (size_t)cap * sizeof *nm);
		if (!nm)
			return 0;
		if (e->n)
			memcpy(nm, e->msg, (size_t)e->n * sizeof *nm);
		else
			nm[e->n++] = "";
		e->msg = nm;
		e->cap = cap;
	}
	e->msg[e->n] = m;
	return e->n++;
}

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
				ctype(v->dtype), (long long)n, i);
			for (size_t e = 0; e < bytes; e++)
				fprintf(f, "%s\\x%02x", e && e % 32 == 0 ? "\"\n\t\"" : "", ((const unsigned char *)v->data)[e]);
			fprintf(f, "\"};\nstatic const %s *const c%d = c%d_.v;\n", ctype(v->dtype), i, i);
			continue;
		}
		fprintf(f, "static const %s c%d[%lld] = {", ctype(v->dtype), i, (long long)(n ? n : 1));
		for (int64_t e = 0; e < n; e++)
			fprintf(f, "%s%s", e ? ", " : "", literal(c, dtype_load(v->dtype, v->data, (size_t)e), v->dtype));
		fprintf(f, "%s};\n", n ? "" : "0");
	}
	fprintf(f, "\n");
}

/* The kernels of fold.c's create IR, renamed fold_kernelK: coil_model_create
 * runs them once to compute the folded params. */
static int emit_fold_kernels(ectx *c, FILE *f)
{
	coil_ir *fi = c->ir->fold ? c->ir->fold->create : NULL;
	if (!fi)
		return 0;
	ectx d = {.ir = fi, .a = fi->arena, .err = c->err, .isa = c->isa, .errs = c->errs};
	d.used = arena_alloc(fi->arena, (size_t)fi->n + 1);
	d.may_fail = c->fold_may_fail = arena_alloc(fi->arena, (size_t)fi->nk + 1);
	if (!d.used || !d.may_fail)
		return coil_errf(c->err, "out of memory");
	int rc = 0;
	for (int k = 0; k < fi->nk; k++)
		fprintf(f, "#define kernel%d fold_kernel%d\n", k, k);
	for (int k = 0; k < fi->nk && !rc; k++)
		rc = emit_kernel(&d, f, k);
	for (int k = 0; k < fi->nk; k++)
		fprintf(f, "#undef kernel%d\n", k);
	fprintf(f, "\n");
	c->errs = d.errs;
	return rc;
}

/* describe's JSON: positions, dtypes and shape expressions (symbols s0..),
 * no user names. */
static char *shape_json(ectx *c, const coil_dim *s, int rank)
{
	char *j = "[";
	for (int i = 0; i < rank; i++) {
		int64_t v;
		j = dim_is_const(&s[i], &v) ? arena_printf(c->a, "%s%s%lld", j, i ? ", " : "", (long long)v)
					    : arena_printf(c->a, "%s%s\\\"%s\\\"", j, i ? ", " : "", ir_dim_c(c->a, &s[i]));
	}
	return arena_printf(c->a, "%s]", j);
}

static char *tensors_json(ectx *c, int n, const int *vals)
{
	char *j = "[";
	for (int i = 0; i < n; i++) {
		coil_value *v = &c->ir->g->vals[vals[i]];
		j = arena_printf(c->a, "%s%s{\\\"dtype\\\": \\\"%s\\\", \\\"shape\\\": %s}", j, i ? ", " : "",
				 dtype_name(v->dtype), shape_json(c, v->shape, v->rank));
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
	fprintf(f, "\t{\n\t\tconst int64_t sym[8] = {1, 1, 1, 1, 1, 1, 1, 1};\n");
	emit_offsets(c, f, fi, "\t\t");
	fprintf(f, "\t\tchar *arena = total ? aligned_alloc(64, (size_t)total) : NULL;\n"
		   "\t\tif (total && !arena) {\n\t\t\tcoil_model_destroy(m);\n\t\t\treturn fail(\"out of memory\", 0, 0);\n\t\t}\n");
	fprintf(f, "\t\tcoil_status st = {0, 0, 0};\n");
	fprintf(f, "\t\tcoil_ctx x = {sym, m->nthreads, NULL, (void *const *)params, m->par + %d, arena, off, &st, NULL};\n", np);
	for (int k = 0; k < fi->nk; k++) {
		fprintf(f, "\t\tfold_kernel%d(&x);\n", k);
		if (c->fold_may_fail[k])
			fprintf(f, "\t\tif (st.code) {\n\t\t\tfree(arena);\n\t\t\tcoil_model_destroy(m);\n"
				   "\t\t\treturn fail(coil_errmsg[st.code], st.a, st.b);\n\t\t}\n");
	}
	fprintf(f, "\t\tfree(arena);\n\t}\n");
}

static void emit_abi(ectx *c, FILE *f, const char *target, const char *hash)
{
	coil_graph *g = c->ir->g;
	coil_ir *ir = c->ir;
	const ir_fold *fd = ir->fold;
	int ns = g->syms.n, npar = g->nparams + (fd ? fd->nparam : 0);
	fprintf(f, "static const char describe_json[] = \"{\\\"abi_version\\\": %d, \\\"target\\\": \\\"%s\\\", "
		   "\\\"graph_hash\\\": \\\"%s\\\", \\\"symbols\\\": %d, \\\"inputs\\\": %s, \\\"params\\\": %s, "
		   "\\\"outputs\\\": %s, \\\"arena_bytes\\\": \\\"%s\\\", \\\"peak_bytes\\\": \\\"%s\\\", "
		   "\\\"kernels\\\": %d, \\\"folded_bytes\\\": \\\"%lld\\\", \\\"folded_params\\\": %d, "
		   "\\\"folded_constants\\\": %d, \\\"create_kernels\\\": %d}\";\n\n",
		COIL_ABI_VERSION, target, hash, ns, tensors_json(c, g->ninputs, g->inputs),
		tensors_json(c, g->nparams, g->params), tensors_json(c, g->noutputs, g->outputs),
		ir_dim_c(c->a, &ir->arena_bytes), peak_bytes(c), ir->nk, (long long)(fd ? fd->folded_bytes : 0),
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
	fprintf(f, "struct coil_model {\n\tint nthreads;\n\tvoid *par[%d];\n\tchar *arena;\n\tint64_t arena_cap;\n%s};\n\n",
		npar + 1, dn_used(ir) ? "\tstruct coil_dn *dn;\n" : "");
	dn_emit_model(ir, f);
	fprintf(f, "COIL_EXPORT int coil_abi_version(void) { return %d; }\n", COIL_ABI_VERSION);
	fprintf(f, "COIL_EXPORT const char *coil_artifact_describe(void) { return describe_json; }\n");
	fprintf(f, "COIL_EXPORT const char *coil_model_last_error(void) { return coil_errbuf; }\n\n");
	/* params: static sizes, copied */
	fprintf(f, "COIL_EXPORT int coil_model_create(const void *const *params, int nparams, int nthreads, coil_model **out)\n{\n");
	fprintf(f, "\t*out = NULL;\n\tif (nparams != %d)\n\t\treturn fail(\"expected %%lld params, got %%lld\", %d, nparams);\n",
		g->nparams, g->nparams);
	fprintf(f, "\tcoil_model *m = calloc(1, sizeof *m);\n\tif (!m)\n\t\treturn fail(\"out of memory\", 0, 0);\n");
	fprintf(f, "\tm->nthreads = nthreads > 0 ? nthreads : omp_get_max_threads();\n");
	for (int i = 0; i < g->nparams; i++) {
		coil_value *v = &g->vals[g->params[i]];
		int64_t n = (int64_t)dtype_size(v->dtype), d;
		if (!par_kept(ir, i)) /* only folds or oneDNN's create read it */
			continue;
		for (int j = 0; j < v->rank; j++)
			n *= dim_is_const(&v->shape[j], &d) ? d : 0;
		fprintf(f, "\tif (!(m->par[%d] = malloc(%lld))) {\n\t\tcoil_model_destroy(m);\n\t\treturn fail(\"out of memory\", 0, 0);\n\t}\n",
			i, (long long)(n ? n : 1));
		fprintf(f, "\tmemcpy(m->par[%d], params[%d], %lld);\n", i, i, (long long)n);
	}
	emit_create_folds(c, f);
	if (dn_used(ir) && !g->syms.n) { /* oneDNN objects now; with symbols at the first run */
		/* params only oneDNN reads: the caller's, lent to create; folded ones freed after */
		fprintf(f, "\tconst int64_t sym0[8] = {1, 1, 1, 1, 1, 1, 1, 1};\n");
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
	/* symbol binding */
	fprintf(f, "static int bind(const int64_t *const *shapes, int64_t *sym)\n{\n\tint bound[8] = {0};\n");
	fprintf(f, "\tfor (int i = 0; i < 8; i++)\n\t\tsym[i] = 1;\n\t(void)bound;\n\t(void)shapes;\n");
	for (int i = 0; i < g->ninputs; i++) {
		coil_value *v = &g->vals[g->inputs[i]];
		for (int d = 0; d < v->rank; d++) {
			int64_t cst;
			if (dim_is_const(&v->shape[d], &cst)) {
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
	fprintf(f, "\treturn 0;\n}\n\n");
	fprintf(f, "COIL_EXPORT int coil_model_output_shape(coil_model *m, const int64_t *const *input_shapes, int output, int64_t *shape)\n{\n");
	fprintf(f, "\tint64_t sym[8];\n\t(void)m;\n\tif (bind(input_shapes, sym))\n\t\treturn -1;\n");
	for (int s = 0; s < g->syms.n; s++)
		fprintf(f, "\tconst int64_t s%d = sym[%d];\n", s, s);
	fprintf(f, "\tswitch (output) {\n");
	for (int j = 0; j < g->noutputs; j++) {
		coil_value *v = &g->vals[g->outputs[j]];
		fprintf(f, "\tcase %d:\n", j);
		for (int d = 0; d < v->rank; d++)
			fprintf(f, "\t\tshape[%d] = %s;\n", d, ir_dim_c(c->a, &v->shape[d]));
		fprintf(f, "\t\treturn %d;\n", v->rank);
	}
	fprintf(f, "\tdefault:\n\t\treturn fail(\"no output %%lld\", output, 0);\n\t}\n}\n\n");
	fprintf(f, "COIL_EXPORT int coil_model_run(coil_model *m, const void *const *inputs, const int64_t *const *input_shapes, void *const *outputs)\n{\n");
	fprintf(f, "\tint64_t sym[8];\n");
	fprintf(f, "\tif (!m)\n\t\treturn fail(\"no model\", 0, 0);\n\tif (bind(input_shapes, sym))\n\t\treturn -1;\n");
	for (int s = 0; s < g->syms.n; s++)
		fprintf(f, "\tconst int64_t s%d = sym[%d];\n", s, s);
	emit_offsets(c, f, ir, "\t");
	fprintf(f, "\tif (total > m->arena_cap) {\n\t\tchar *a = aligned_alloc(64, (size_t)total);\n"
		   "\t\tif (!a)\n\t\t\treturn fail(\"out of memory for %%lld arena bytes\", total, 0);\n"
		   "\t\tfree(m->arena);\n\t\tm->arena = a;\n\t\tm->arena_cap = total;\n\t}\n");
	fprintf(f, "\tcoil_status st = {0, 0, 0};\n");
	fprintf(f, "\tcoil_ctx x = {sym, m->nthreads, inputs, m->par, outputs, m->arena, off, &st, NULL};\n");
	if (dn_used(ir))
		fprintf(f, "\tif (coil_dn_prepare(m, sym))\n\t\treturn -1;\n\tx.dn = m->dn;\n");
	for (int k = 0; k < ir->nk; k++) {
		fprintf(f, "\tkernel%d(&x);\n", k);
		if (c->may_fail[k])
			fprintf(f, "\tif (st.code)\n\t\treturn fail(coil_errmsg[st.code], st.a, st.b);\n");
	}
	fprintf(f, "\treturn 0;\n}\n");
}

char *ir_emit_c(coil_ir *ir, const char *target, const char *hash, coil_err *err)
{
	ectx c = {.ir = ir, .a = ir->arena, .err = err, .isa = vec_isa_for(target)};
	char *src = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&src, &len);
	c.used = arena_alloc(ir->arena, (size_t)ir->n + 1);
	c.may_fail = arena_alloc(ir->arena, (size_t)ir->nk + 1);
	c.errs.arena = ir->arena;
	if (!f || !c.used || !c.may_fail) {
		if (f)
			fclose(f);
		free(src);
		coil_errf(err, "out of memory");
		return NULL;
	}
	fprintf(f, "/* Generated by coil codegen (ABI %d) for target %s, graph %s.\n * %d kernels. */\n",
		COIL_ABI_VERSION, target, hash, ir->nk);
	fprintf(f, "#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <stdio.h>\n%s", prelude);
	vec_prelude(f);
	fprintf(f, "typedef struct coil_model coil_model;\nvoid coil_model_destroy(coil_model *m);\n\n");
	emit_consts(&c, f);
	dn_emit_support(ir, f);
	int rc = emit_fold_kernels(&c, f);
	for (int k = 0; k < ir->nk && !rc; k++)
		rc = emit_kernel(&c, f, k);
	if (!rc)
		emit_abi(&c, f, target, hash);
	fclose(f);
	if (rc) {
		free(src);
		return NULL;
	}
	char *s = arena_strdup(ir->arena, src);
	free(src);
	return s;
}
