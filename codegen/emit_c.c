/* emit_c: renders the scheduled IR as C: one function per distinct kernel
 * (kernels whose text is the same but for their buffers share it; a comment
 * names the graph nodes by index and op, never by user name), OpenMP over
 * the outer loop, and the ABI of include/coil/artifact.h; in one file or in
 * several translation units (emit.h).  The kernels folding runs in
 * coil_model_create (fold.c's create IR) are functions of their own,
 * fold_kfn<N>, static in the ABI's file.  Pointwise primitives render
 * through one table per element type family. */
#include <ctype.h>
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

/* A distinct kernel function: its canonical text is the key. */
typedef struct kfn {
	char *key;
	unsigned long hash;
	char *proto;  /* "void kfn<N>(...)" */
	char *text;   /* the definition */
	size_t size;
	int file;     /* the file it goes in (split layout) */
} kfn;

typedef struct ectx {
	coil_ir *ir;
	coil_arena *a;
	FILE *f;          /* the current kernel's body */
	int k, ntmp, ind;
	emit_memo memo;
	char *used;       /* buffers the kernel touches */
	emit_errs errs;   /* runtime error messages */
	char *may_fail;   /* per kernel: raises runtime errors */
	coil_err *err;
	int bad;
	const vec_isa *isa; /* NULL: scalar */
	kfn *fn;          /* the distinct kernel functions */
	int nfn, capfn;
	int *ht, htcap;   /* canonical text -> function */
	int *fn_of;       /* per kernel: its function */
	char **call;      /* per kernel: its call in run */
	const char *fname;   /* the functions' names: kfn (run), fold_kfn (create) */
	const char *storage; /* COIL_KFN, or static for create's functions (in model.c) */
	struct ectx *fold;   /* the create IR's kernels (fold.c), NULL */
} ectx;


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
		return arena_printf(c->a, "((%s)NAN)", emit_ctype(t));
	if (isinf(v))
		return arena_printf(c->a, "((%s)%sINFINITY)", emit_ctype(t), v < 0 ? "-" : "");
	if (t == COIL_F32 || t == COIL_F64) {
		char *s = arena_printf(c->a, t == COIL_F32 ? "%.9g" : "%.17g", v);
		return arena_printf(c->a, "%s%s%s", s, strpbrk(s, ".e") ? "" : ".0", t == COIL_F32 ? "f" : "");
	}
	return arena_printf(c->a, "((%s)%lld)", emit_ctype(t), (long long)v);
}

static char *bufname(ectx *c, int v)
{
	c->used[v] = 1;
	return emit_buf_name(c->ir, v);
}

static char *key_of(ectx *c, ir_node *n, char **idx)
{
	char *k = "";
	for (int i = 0; i < n->rank; i++)
		k = arena_printf(c->a, "%s,%s", k, idx[i]);
	return k;
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
		return n->sub ? arena_printf(c->a, "((%s)(%s))", emit_ctype(n->dtype), ir_dim_c(c->a, &n->start))
			      : literal(c, n->fill, n->dtype);
	if (n->op == IR_REDUCE && n->kernel == c->k)
		return arena_printf(c->a, "acc%d", v);
	char *key = key_of(c, n, idx), *name = memo_get(&c->memo, v, key);
	if (name)
		return name;
	if (is_buf(c, n)) {
		name = arena_printf(c->a, "t%d", c->ntmp++);
		out(c, "const %s %s = %s[%s];\n", emit_ctype(n->dtype), name, bufname(c, v), ix_linear(c->ir, n, idx));
		return memo_put(&c->memo, c->a, v, key, name);
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
					  : arena_printf(c->a, "(%s)%s", emit_ctype(n->dtype), a[0]);
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
	out(c, "const %s %s = %s;\n", emit_ctype(n->dtype), name, e);
	return memo_put(&c->memo, c->a, v, key, name);
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
	memo_push(&c->memo);
	return nl;
}

static void close_loops(ectx *c, int nl)
{
	memo_pop(&c->memo);
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
			out(c, "%s m%d = 0;\n", emit_ctype(st), v);
		} else {
			if (r->sub == RD_WMEAN || r->sub == RD_WM2) /* Welford: count and running mean, in double */
				out(c, "double acc%d = 0, wn%d = 0, wm%d = 0;\n", v, v, v);
			else
				out(c, "%s acc%d = %s;\n", emit_ctype(r->dtype), v, red_init(r->dtype, r->sub));
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
		emit_kept_index(p, r0, outer, pidx);
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

/* Local names that carry a node number (reductions' accumulators and
 * partials, in emit_c and vec.c): renumbered in a kernel's canonical text so
 * that kernels differing only in the nodes they cover share one function.
 * A name is <prefix><digits> or <prefix><digits>_<rest>. */
static const char *const numbered_locals[] = {"acc", "vacc", "pacc", "pn", "pm", "pq", "pt", "wn",
					      "wm", "wq", "ws", "wmv", "mean", "m", "pos"};

static int is_numbered_local(const char *p, size_t len, size_t *pl, size_t *dl)
{
	size_t a = 0, d;
	while (a < len && p[a] >= 'a' && p[a] <= 'z')
		a++;
	if (!a || a == len || !isdigit((unsigned char)p[a]))
		return 0;
	for (d = a; d < len && isdigit((unsigned char)p[d]); d++)
		;
	if (d < len && p[d] != '_')
		return 0;
	for (size_t i = 0; i < sizeof numbered_locals / sizeof *numbered_locals; i++)
		if (strlen(numbered_locals[i]) == a && !memcmp(numbered_locals[i], p, a)) {
			*pl = a;
			*dl = d;
			return 1;
		}
	return 0;
}

/* The canonical form of a kernel body: the buffers' names (names[0..nn))
 * become the parameters a0, a1, .. in order of first use (param[i], -1 for a
 * name the text never uses) and numbered locals are renumbered in order of
 * first appearance.  Identifiers are rewritten as whole tokens; numbers and
 * string literals are copied. */
static char *canonical(ectx *c, const char *body, size_t blen, char **names, int nn, int *param, int *np)
{
	char *s = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&s, &len);
	if (!f)
		return NULL;
	const char **num = NULL;
	size_t *numlen = NULL;
	int nnum = 0, capnum = 0;
	for (int i = 0; i < nn; i++)
		param[i] = -1;
	*np = 0;
	const char *p = body, *end = body + blen;
	while (p < end) {
		const char *q = p;
		if (*p == '"' || *p == '\'') {
			for (q++; q < end && *q != *p; q++)
				q += *q == '\\' && q + 1 < end;
			q += q < end;
		} else if (isdigit((unsigned char)*p)) {
			while (q < end && (isalnum((unsigned char)*q) || *q == '_' || *q == '.'))
				q++;
		} else if (isalpha((unsigned char)*p) || *p == '_') {
			while (q < end && (isalnum((unsigned char)*q) || *q == '_'))
				q++;
			size_t n = (size_t)(q - p), pl, dl;
			int i = 0;
			while (i < nn && (strlen(names[i]) != n || memcmp(names[i], p, n)))
				i++;
			if (i < nn) {
				if (param[i] < 0)
					param[i] = (*np)++;
				fprintf(f, "a%d", param[i]);
				p = q;
				continue;
			}
			if (is_numbered_local(p, n, &pl, &dl)) {
				int j = 0;
				while (j < nnum && (numlen[j] != dl - pl || memcmp(num[j], p + pl, dl - pl)))
					j++;
				if (j == nnum) {
					if (nnum == capnum) {
						capnum = capnum ? 2 * capnum : 16;
						const char **nnm = arena_alloc(c->a, (size_t)capnum * sizeof *nnm);
						size_t *nl = arena_alloc(c->a, (size_t)capnum * sizeof *nl);
						if (!nnm || !nl)
							break;
						if (nnum) {
							memcpy(nnm, num, (size_t)nnum * sizeof *nnm);
							memcpy(nl, numlen, (size_t)nnum * sizeof *nl);
						}
						num = nnm;
						numlen = nl;
					}
					num[nnum] = p + pl;
					numlen[nnum++] = dl - pl;
				}
				fprintf(f, "%.*s%d%.*s", (int)pl, p, j, (int)(n - dl), p + dl);
				p = q;
				continue;
			}
		} else {
			while (q < end && !isalnum((unsigned char)*q) && *q != '_' && *q != '"' && *q != '\'')
				q++;
		}
		fwrite(p, 1, (size_t)(q - p), f);
		p = q;
	}
	int bad = p < end;
	if (fclose(f) != 0 || bad) {
		free(s);
		return NULL;
	}
	return s;
}

static unsigned long hash_str(const char *s)
{
	unsigned long h = 14695981039346656037ul;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ul;
	return h;
}

/* The function of canonical key key: an existing one, or -1 after noting
 * where a new one goes (*slot). */
static int fn_find(ectx *c, const char *key, unsigned long h, int *slot)
{
	int m = c->htcap - 1, i = (int)(h & (unsigned long)m);
	while (c->ht[i] >= 0) {
		kfn *F = &c->fn[c->ht[i]];
		if (F->hash == h && !strcmp(F->key, key))
			return c->ht[i];
		i = (i + 1) & m;
	}
	*slot = i;
	return -1;
}

static const char *kind_name(const ir_kernel *K)
{
	return K->kind == K_POINTWISE ? "pointwise" : K->kind == K_REDUCE ? "reduction" : "extern";
}

/* One kernel: its body is rendered with the buffers' own names (only those
 * it touches are parameters), put in canonical form, and looked up among the
 * functions so far; a new form becomes a new function kfn<N>.  The kernel's
 * call in run passes its buffers. */
static int emit_kernel(ectx *c, int k)
{
	ir_kernel *K = &c->ir->ks[k];
	char *body = NULL;
	size_t blen = 0;
	c->f = open_memstream(&body, &blen);
	if (!c->f)
		return coil_err_oom(c->err);
	c->k = k;
	c->ntmp = 0;
	c->memo.n = 0;
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
	if (fclose(c->f) != 0 || !body) {
		free(body);
		return coil_err_oom(c->err);
	}
	if (c->bad) {
		free(body);
		return -1;
	}
	/* the buffers: names in the body, types, and how run points at them */
	int nn = 0;
	for (int v = 0; v < c->ir->n; v++)
		nn += c->used[v] != 0;
	char **names = arena_alloc(c->a, (size_t)(nn + 1) * sizeof *names);
	char **decl = arena_alloc(c->a, (size_t)(nn + 1) * sizeof *decl);
	char **ptr = arena_alloc(c->a, (size_t)(nn + 1) * sizeof *ptr);
	int *param = arena_alloc(c->a, (size_t)(nn + 1) * sizeof *param);
	if (!names || !decl || !ptr || !param) {
		free(body);
		return coil_err_oom(c->err);
	}
	nn = 0;
	for (int v = 0; v < c->ir->n; v++) {
		ir_node *n = &c->ir->nodes[v];
		if (!c->used[v])
			continue;
		const char *t = emit_ctype(n->dtype);
		switch (n->op) {
		case IR_INPUT:
			names[nn] = arena_printf(c->a, "in%d", n->index);
			ptr[nn] = arena_printf(c->a, "(const %s *)x.in[%d]", t, n->index);
			break;
		case IR_PARAM:
			names[nn] = arena_printf(c->a, "p%d", n->index);
			ptr[nn] = arena_printf(c->a, "(const %s *)x.par[%d]", t, n->index);
			break;
		case IR_CONST:
			names[nn] = arena_printf(c->a, "c%d", n->index);
			ptr[nn] = names[nn];
			break;
		default:
			if (n->out >= 0) {
				names[nn] = arena_printf(c->a, "o%d", n->out);
				ptr[nn] = arena_printf(c->a, "(%s *)x.out[%d]", t, n->out);
			} else {
				names[nn] = arena_printf(c->a, "b%d", v);
				ptr[nn] = arena_printf(c->a, "(%s *)(x.arena + off[%d])", t, n->slot);
			}
		}
		/* the pair a kernel reads and writes in place (memplan) is not
		 * restrict; being part of the signature, it is part of the key */
		int ro = n->op == IR_INPUT || n->op == IR_PARAM || n->op == IR_CONST;
		int alias = !ro && n->out < 0 && (n->inplace == k + 1 || n->inplace_by == k + 1);
		decl[nn++] = arena_printf(c->a, "%s%s *%s", ro ? "const " : "", t, alias ? "" : "restrict ");
	}
	int np;
	char *canon = canonical(c, body, blen, names, nn, param, &np);
	free(body);
	if (!canon)
		return coil_err_oom(c->err);
	for (int i = 0; i < nn; i++) /* touched but not named in the text: parameters all the same */
		if (param[i] < 0)
			param[i] = np++;
	char **sig = arena_alloc(c->a, (size_t)(np + 1) * sizeof *sig), **arg = arena_alloc(c->a, (size_t)(np + 1) * sizeof *arg);
	if (!sig || !arg) {
		free(canon);
		return coil_err_oom(c->err);
	}
	for (int i = 0; i < nn; i++) {
		sig[param[i]] = decl[i];
		arg[param[i]] = ptr[i];
	}
	char *params = "const coil_ctx *x", *args = "&x";
	for (int i = 0; i < np; i++) {
		params = arena_printf(c->a, "%s, %sa%d", params, sig[i], i);
		args = arena_printf(c->a, "%s, %s", args, arg[i]);
	}
	char *key = arena_printf(c->a, "%s)\n%s", params, canon);
	free(canon);
	if (!key)
		return coil_err_oom(c->err);
	unsigned long h = hash_str(key);
	int slot = 0, fi = fn_find(c, key, h, &slot);
	char *note = arena_printf(c->a, "kernel %d (%s): graph nodes", k, kind_name(K));
	for (int i = 0; i < K->ncover; i++)
		note = arena_printf(c->a, "%s %d:%s", note, K->cover[i], op_name(c->ir->g->nodes[K->cover[i]].op));
	if (fi < 0) {
		if (c->nfn == c->capfn) {
			int cap = c->capfn ? 2 * c->capfn : 64;
			kfn *nf = arena_alloc(c->a, (size_t)cap * sizeof *nf);
			if (!nf)
				return coil_err_oom(c->err);
			if (c->nfn)
				memcpy(nf, c->fn, (size_t)c->nfn * sizeof *nf);
			c->fn = nf;
			c->capfn = cap;
		}
		fi = c->nfn++;
		c->ht[slot] = fi;
		kfn *F = &c->fn[fi];
		F->key = key;
		F->hash = h;
		F->file = 0;
		F->proto = arena_printf(c->a, "void %s%d(%s)", c->fname, fi, params);
		char *syms = "";
		for (int s = 0; s < c->ir->g->syms.n; s++)
			syms = arena_printf(c->a, "%s\tconst int64_t s%d = x->sym[%d];\n", syms, s, s);
		F->text = arena_printf(c->a, "/* first use: %s */\n%s %s\n{\n%s\tconst int nt = x->nt;\n\t(void)nt;\n%s}\n\n",
				       note, c->storage, F->proto, syms, key + strlen(params) + 2);
		if (!F->proto || !F->text)
			return coil_err_oom(c->err);
		F->size = strlen(F->text);
	}
	c->fn_of[k] = fi;
	c->call[k] = arena_printf(c->a, "\t%s%d(%s); /* %s */\n", c->fname, fi, args, note);
	return c->call[k] ? 0 : coil_err_oom(c->err);
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
	"typedef struct coil_ctx {\n\tconst int64_t *sym;\n\tint nt;\n\tconst void *const *in;\n"
	"\tvoid *const *par;\n\tvoid *const *out;\n\tchar *arena;\n\tconst int64_t *off;\n\tcoil_status *st;\n\tstruct coil_dn *dn; /* oneDNN objects, when any */\n} coil_ctx;\n\n";

/* In the file with the ABI. */
static const char pin_openmp[] =
	"/* OpenMP's worker threads outlive parallel regions: keep libgomp loaded\n"
	" * when this artifact is dlclose'd (else they run unmapped code). */\n"
	"__attribute__((constructor)) static void coil_pin_openmp(void)\n{\n"
	"\t(void)dlopen(\"libgomp.so.1\", RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);\n}\n\n";

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
				emit_ctype(v->dtype), (long long)n, i);
			for (size_t e = 0; e < bytes; e++)
				fprintf(f, "%s\\x%02x", e && e % 32 == 0 ? "\"\n\t\"" : "", ((const unsigned char *)v->data)[e]);
			fprintf(f, "\"};\nstatic const %s *const c%d = c%d_.v;\n", emit_ctype(v->dtype), i, i);
			continue;
		}
		fprintf(f, "static const %s c%d[%lld] = {", emit_ctype(v->dtype), i, (long long)(n ? n : 1));
		for (int64_t e = 0; e < n; e++)
			fprintf(f, "%s%s", e ? ", " : "", literal(c, dtype_load(v->dtype, v->data, (size_t)e), v->dtype));
		fprintf(f, "%s};\n", n ? "" : "0");
	}
	fprintf(f, "\n");
}

/* The tables of c's kernels and functions; fname and storage name and
 * qualify its functions. */
static int ectx_init(ectx *c, const char *fname, const char *storage)
{
	coil_ir *ir = c->ir;
	c->fname = fname;
	c->storage = storage;
	c->used = arena_alloc(c->a, (size_t)ir->n + 1);
	c->may_fail = arena_alloc(c->a, (size_t)ir->nk + 1);
	c->fn_of = arena_alloc(c->a, (size_t)(ir->nk + 1) * sizeof(int));
	c->call = arena_alloc(c->a, (size_t)(ir->nk + 1) * sizeof(char *));
	for (c->htcap = 64; c->htcap < 2 * ir->nk + 2; c->htcap *= 2)
		;
	c->ht = arena_alloc(c->a, (size_t)c->htcap * sizeof(int));
	if (!c->used || !c->may_fail || !c->fn_of || !c->call || !c->ht)
		return coil_err_oom(c->err);
	memset(c->may_fail, 0, (size_t)ir->nk + 1);
	for (int i = 0; i < c->htcap; i++)
		c->ht[i] = -1;
	return 0;
}

/* The kernels of fold.c's create IR, as functions of their own
 * (fold_kfn<N>, static, in model.c): coil_model_create calls them once to
 * compute the folded params.  Runtime error codes share run's table. */
static int emit_fold_kernels(ectx *c)
{
	coil_ir *fi = c->ir->fold ? c->ir->fold->create : NULL;
	if (!fi)
		return 0;
	ectx *d = arena_alloc(fi->arena, sizeof *d);
	if (!d)
		return coil_err_oom(c->err);
	*d = (ectx){.ir = fi, .a = fi->arena, .err = c->err, .isa = c->isa, .errs = c->errs};
	if (ectx_init(d, "fold_kfn", "static"))
		return -1;
	for (int k = 0; k < fi->nk; k++)
		if (emit_kernel(d, k))
			return -1;
	c->errs = d->errs;
	c->fold = d;
	return 0;
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
		fprintf(f, "\t%s", c->fold->call[k]);
		if (c->fold->may_fail[k])
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
		   "\\\"kernels\\\": %d, \\\"functions\\\": %d, \\\"folded_bytes\\\": \\\"%lld\\\", "
		   "\\\"folded_params\\\": %d, \\\"folded_constants\\\": %d, \\\"create_kernels\\\": %d}\";\n\n",
		COIL_ABI_VERSION, target, hash, ns, tensors_json(c, g->ninputs, g->inputs),
		tensors_json(c, g->nparams, g->params), tensors_json(c, g->noutputs, g->outputs),
		ir_dim_c(c->a, &ir->arena_bytes), peak_bytes(c), ir->nk, c->nfn, (long long)(fd ? fd->folded_bytes : 0),
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
		fputs(c->call[k], f);
		if (c->may_fail[k])
			fprintf(f, "\tif (st.code)\n\t\treturn fail(coil_errmsg[st.code], st.a, st.b);\n");
	}
	fprintf(f, "\treturn 0;\n}\n");
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
		fprintf(f, "#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <stdio.h>\n%s", prelude);
		vec_prelude(f);
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
			out->name[n] = "model.h";
			out->text[n++] = arena_strdup(ir->arena, head);
			continue;
		}
		int file = split ? u - 1 : 0;
		if (!used_files[file])
			continue;
		if (!(f = open_memstream(&text, &tlen))) {
			bad = 1;
			break;
		}
		if (split)
			fprintf(f, "#include \"model.h\"\n\n");
		else
			fputs(head, f);
		if (file == 0)
			fputs(pin_openmp, f);
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
		out->name[n] = file == 0 ? "model.c" : arena_printf(ir->arena, "k%d.c", n - 1);
		out->light[n] = split && file == 0;
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
