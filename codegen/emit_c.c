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
#include "codegen/emit_c.h"
#include "codegen/ir.h"
#include "common/infer.h"
#include "coil/artifact.h"

void ectx_out(ectx *c, const char *fmt, ...)
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
	[PR_CEIL] = "ceilf(%s)", [PR_TRUNC] = "truncf(%s)", [PR_ROUND] = "rintf(%s)", [PR_SIN] = "sinf(%s)", [PR_COS] = "cosf(%s)",
	[PR_ERF] = "coil_erff(%s)", [PR_TANH] = "coil_tanhf(%s)", [PR_NOT] = "(!%s)", [PR_POW] = "powf(%s, %s)",
	[PR_FLOORDIV] = "(float)coil_floordiv(%s, %s)", [PR_REM] = "coil_remf(%s, %s)",
};
static const char *const rf64[PR_COUNT] = {
	[PR_NEG] = "(-%s)", [PR_EXP] = "exp(%s)", [PR_LOG] = "log(%s)", [PR_LOG1P] = "log1p(%s)",
	[PR_SQRT] = "sqrt(%s)", [PR_RECIP] = "(1.0 / %s)", [PR_ABS] = "fabs(%s)", [PR_FLOOR] = "floor(%s)",
	[PR_CEIL] = "ceil(%s)", [PR_TRUNC] = "trunc(%s)", [PR_ROUND] = "rint(%s)", [PR_SIN] = "sin(%s)", [PR_COS] = "cos(%s)",
	[PR_ERF] = "erf(%s)", [PR_TANH] = "tanh(%s)", [PR_NOT] = "(!%s)", [PR_POW] = "pow(%s, %s)",
	[PR_FLOORDIV] = "coil_floordiv(%s, %s)", [PR_REM] = "coil_rem(%s, %s)",
};
static const char *const rint_[PR_COUNT] = {
	[PR_NEG] = "(-%s)", [PR_ABS] = "coil_abs(%s)", [PR_NOT] = "(!%s)", [PR_POW] = "coil_ipow(%s, %s)",
	[PR_RECIP] = "(1 / %s)", /* PR_DIV, PR_FLOORDIV, PR_REM: see rv() */
	[PR_BNOT] = "(~%s)", [PR_BAND] = "(%s & %s)", [PR_BOR] = "(%s | %s)", [PR_BXOR] = "(%s ^ %s)",
	[PR_SHL] = "coil_shl(%s, %s)", [PR_SHR] = "coil_shr(%s, %s)",
};
static const char *const rcommon[PR_COUNT] = {
	[PR_ADD] = "(%s + %s)", [PR_SUB] = "(%s - %s)", [PR_MUL] = "(%s * %s)", [PR_DIV] = "(%s / %s)",
	[PR_MAX] = "COIL_MAX(%s, %s)", [PR_MIN] = "COIL_MIN(%s, %s)", [PR_LT] = "(%s < %s)", [PR_LE] = "(%s <= %s)",
	[PR_GT] = "(%s > %s)", [PR_GE] = "(%s >= %s)", [PR_EQ] = "(%s == %s)", [PR_NE] = "(%s != %s)",
	[PR_AND] = "(%s && %s)", [PR_OR] = "(%s || %s)",
};

static const char *render_op(int prim, coil_dtype t)
{
	const char *const *tab = t == COIL_F32 || dtype_is_half(t) ? rf32 : t == COIL_F64 ? rf64 : rint_;
	return tab[prim] ? tab[prim] : rcommon[prim];
}

char *ectx_literal(ectx *c, double v, coil_dtype t)
{
	if (dtype_is_half(t)) /* a value of a kernel: the float it rounds to */
		return ectx_literal(c, dtype_round(t, v), COIL_F32);
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
			      : ectx_literal(c, n->fill, n->dtype);
	if (n->op == IR_REDUCE && n->kernel == c->k)
		return arena_printf(c->a, "acc%d", v);
	char *key = key_of(c, n, idx), *name = memo_get(&c->memo, v, key);
	if (name)
		return name;
	if (is_buf(c, n)) {
		name = arena_printf(c->a, "t%d", c->ntmp++);
		char *ld = arena_printf(c->a, "%s[%s]", bufname(c, v), ix_linear(c->ir, n, idx));
		if (dtype_is_half(n->dtype))
			ld = arena_printf(c->a, "coil_%s_f32(%s)", emit_half(n->dtype), ld);
		ectx_out(c, "const %s %s = %s;\n", emit_vtype(n->dtype), name, ld);
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
		    : dtype_is_half(n->dtype) ? arena_printf(c->a, "coil_round_%s((float)%s)", emit_half(n->dtype), a[0])
					  : arena_printf(c->a, "(%s)%s", emit_ctype(n->dtype), a[0]);
		break;
	case IR_WHERE: e = arena_printf(c->a, "(%s ? %s : %s)", a[0], a[1], a[2]); break;
	default: {
		/* the operands' dtype picks the table (comparisons yield bool) */
		coil_dtype t = c->ir->nodes[n->src[0]].dtype;
		if (!dtype_is_float(t) && (n->sub == PR_DIV || n->sub == PR_FLOORDIV || n->sub == PR_REM)) {
			/* integer division by zero fails the run, as in the interpreter */
			int code = emit_err_code(&c->errs, c->ir, n->gnode, "integer division by zero");
			c->may_fail[c->k] = 1;
			e = arena_printf(c->a, "coil_%s_i(%s, %s, x->st, %d)",
					 n->sub == PR_DIV ? "div" : n->sub == PR_REM ? "rem" : "floordiv", a[0], a[1], code);
		} else {
			e = arena_printf(c->a, render_op(n->sub, t), a[0], a[1]);
		}
	}
	}
	name = arena_printf(c->a, "t%d", c->ntmp++);
	ectx_out(c, "const %s %s = %s;\n", emit_vtype(n->dtype), name, e);
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
			ectx_out(c, "#pragma omp parallel for num_threads(nt) if (nt > 1 && work > 32768)\n");
		ectx_out(c, "for (int64_t i%d = 0; i%d < %s; i%d++) {\n", d, d, sz, d);
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
		ectx_out(c, "}\n");
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
	if (dtype_is_half(n->dtype))
		val = arena_printf(c->a, "coil_f32_%s(%s)", emit_half(n->dtype), val);
	ectx_out(c, "%s[%s] = %s;\n", bufname(c, v), ix_linear(c->ir, n, idx), val);
}

static void emit_pointwise(ectx *c, ir_kernel *K)
{
	ir_node *n = &c->ir->nodes[K->outs[0]];
	char *idx[COIL_MAX_RANK];
	ectx_out(c, "const int64_t work = %s;\n", work_expr(c, n));
	ectx_out(c, "(void)work;\n");
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

/* A sum over the middle dims of a buffer, [outer][rows][cols] to [outer][cols]
 * (a squeeze-excite block's global pool over an NHWC [N, H, W, C]), perhaps
 * divided by a count after (a mean): the prelude's coil_colsum, one copy a
 * unit, where the generated loop nest was a function of ~200 lines for
 * every shape (efficientnet_b7's 56 pools: 70% of its kernels' compile).
 * 1 when taken. */
static int emit_colsum(ectx *c, ir_kernel *K)
{
	if (K->nreds != 1 || K->nouts > 1 || !K->nouts != !!c->ir->nodes[K->reds[0]].mat) /* the sum or one epilogue written */
		return 0;
	const int rv0 = K->reds[0], ov = K->nouts ? K->outs[0] : rv0; /* the result: an epilogue's, or the sum's own */
	ir_node *r = &c->ir->nodes[rv0], *s = &c->ir->nodes[r->src[0]], *p = &c->ir->nodes[ov];
	const unsigned mid = s->rank >= 3 ? ((1u << (s->rank - 1)) - 1) & ~1u : 0;
	if (r->op != IR_REDUCE || r->sub != RD_SUM || r->dtype != COIL_F32 || s->dtype != COIL_F32 || !mid ||
	    r->mask != mid || !is_buf(c, s) || p->dtype != COIL_F32 || p->rank < 2 ||
	    !dim_eq(&p->shape[0], &s->shape[0]) || !dim_eq(&p->shape[p->rank - 1], &s->shape[s->rank - 1]))
		return 0;
	for (int i = 1; i < p->rank - 1; i++)
		if (!dim_eq_const(&p->shape[i], 1))
			return 0;
	ir_node *q = p; /* through reshapes (keepdim=False): the same bytes */
	while (q->op == IR_VIEW && q->sub == V_RESHAPE && q != r)
		q = &c->ir->nodes[q->src[0]];
	const char *div = "1.0f"; /* (x / 1 is x exactly) */
	if (q != r) {
		if (q->op != IR_BINARY || q->sub != PR_DIV || q->src[0] != rv0 || c->ir->nodes[q->src[1]].op != IR_FILL ||
		    c->ir->nodes[q->src[1]].rank)
			return 0;
		div = rv(c, q->src[1], NULL);
	}
	char *rows = "1";
	for (int i = 1; i < s->rank - 1; i++)
		rows = arena_printf(c->a, "%s * (%s)", rows, ir_dim_c(c->a, &s->shape[i]));
	ectx_out(c, "coil_colsum(%s, %s, %s, %s, %s, %s, nt);\n", bufname(c, r->src[0]), bufname(c, ov),
		 ir_dim_c(c->a, &s->shape[0]), rows, ir_dim_c(c->a, &s->shape[s->rank - 1]), div);
	return 1;
}

static void emit_reduce(ectx *c, ir_kernel *K)
{
	ir_node *r0 = &c->ir->nodes[K->reds[0]], *s0 = &c->ir->nodes[r0->src[0]];
	char *full[COIL_MAX_RANK], *outer[COIL_MAX_RANK];
	unsigned M = r0->mask;
	ectx_out(c, "const int64_t work = %s;\n", work_expr(c, s0));
	ectx_out(c, "(void)work;\n");
	int no = open_loops(c, s0->shape, s0->rank, ~M, 1);
	loopvars(c, s0, full, 0);
	loopvars(c, s0, outer, M);
	for (int i = 0; i < K->nreds; i++) {
		int v = K->reds[i];
		ir_node *r = &c->ir->nodes[v];
		coil_dtype st = c->ir->nodes[r->src[0]].dtype;
		if (r->sub == RD_ARGMAX) {
			ectx_out(c, "int64_t acc%d = 0, pos%d = 0;\n", v, v);
			ectx_out(c, "%s m%d = 0;\n", emit_ctype(st), v);
		} else {
			if (r->sub == RD_WMEAN || r->sub == RD_WM2) /* Welford: count and running mean, in double */
				ectx_out(c, "double acc%d = 0, wn%d = 0, wm%d = 0;\n", v, v, v);
			else
				ectx_out(c, "%s acc%d = %s;\n", emit_ctype(r->dtype), v, red_init(r->dtype, r->sub));
		}
		int nl = open_loops(c, s0->shape, s0->rank, M, 0);
		char *x = rv(c, r->src[0], full);
		switch (r->sub) {
		case RD_SUM: ectx_out(c, "acc%d += %s;\n", v, x); break;
		case RD_MAX: ectx_out(c, "acc%d = COIL_MAX(%s, acc%d);\n", v, x, v); break;
		case RD_MIN: ectx_out(c, "acc%d = COIL_MIN(%s, acc%d);\n", v, x, v); break;
		case RD_WMEAN: case RD_WM2:
			ectx_out(c, "{\n");
			ectx_out(c, "        const double d_ = (double)%s - wm%d;\n", x, v);
			ectx_out(c, "        wn%d += 1;\n", v);
			ectx_out(c, "        wm%d += d_ / wn%d;\n", v, v);
			if (r->sub == RD_WMEAN)
				ectx_out(c, "        acc%d = wm%d;\n", v, v);
			else
				ectx_out(c, "        acc%d += d_ * (%s - wm%d);\n", v, x, v);
			ectx_out(c, "}\n");
			break;
		default:
			ectx_out(c, "if (pos%d == 0 || (m%d == m%d && (%s != %s || %s > m%d))) {\n", v, v, v, x, x, x, v);
			ectx_out(c, "        m%d = %s;\n", v, x);
			ectx_out(c, "        acc%d = pos%d;\n", v, v);
			ectx_out(c, "}\n");
			ectx_out(c, "pos%d++;\n", v);
		}
		close_loops(c, nl);
		if (r->mat)
			ectx_out(c, "%s[%s] = acc%d;\n", bufname(c, v), ix_linear(c->ir, r, outer), v);
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

/* k times the elements of a value shaped (rank, shape), a C expression in
 * double: the constant dims multiplied out here.  *k_out, if given, takes the
 * constant instead when every dim is constant (and NULL is returned). */
static char *numel_c(ectx *c, double k, int rank, const coil_dim *shape, double *k_out)
{
	char *e = NULL;
	int64_t d;
	for (int i = 0; i < rank; i++)
		if (dim_is_const(&shape[i], &d))
			k *= (double)d;
	for (int i = 0; i < rank; i++)
		if (!dim_is_const(&shape[i], NULL))
			e = arena_printf(c->a, "%s * (double)(%s)", e ? e : arena_printf(c->a, "%.1f", k), ir_dim_c(c->a, &shape[i]));
	if (e || !k_out)
		return e ? e : arena_printf(c->a, "%.1f", k);
	*k_out += k;
	return NULL;
}

/* The bytes of the buffers kernel k touches (c->used), each once, and of an
 * extern kernel's params (oneDNN holds its weights): what it moves at the
 * least, for the profile's bandwidth. */
static char *kernel_bytes(ectx *c, const ir_kernel *K)
{
	char *e = "", *t;
	double k = 0;
	for (int v = 0; v < c->ir->n; v++) {
		const ir_node *n = &c->ir->nodes[v];
		if (c->used[v] && (t = numel_c(c, (double)dtype_size(n->dtype), n->rank, n->shape, &k)))
			e = arena_printf(c->a, "%s + %s", e, t);
	}
	int gn = K->kind == K_EXTERN ? c->ir->nodes[K->ext].gnode : -1;
	const coil_node *h = gn >= 0 ? &c->ir->g->nodes[gn] : NULL;
	for (int i = 0; h && i < op_get(h->op)->nargs; i++) {
		int gv = h->args[i].kind == ARG_TENSOR ? h->args[i].v[0] : -1, tb;
		if (gv >= 0 && i == (h->op == OP_ADDMM) + 1 && (tb = dn_b_transposed(c->ir->g, h)) >= 0)
			gv = c->ir->g->nodes[tb].args[0].v[0]; /* B = t(W): oneDNN reads W */
		const coil_value *v = gv >= 0 ? &c->ir->g->vals[gv] : NULL;
		int iv = gv >= 0 ? c->ir->val_node[gv] : -1;
		if (v && (v->kind == VAL_PARAM || v->kind == VAL_CONST) && !(iv >= 0 && c->used[iv]) &&
		    (t = numel_c(c, (double)dtype_size(v->dtype), v->rank, v->shape, &k)))
			e = arena_printf(c->a, "%s + %s", e, t);
	}
	return arena_printf(c->a, "%.1f%s", k, e);
}

/* An extern kernel's floating-point work: 2 x the multiply-adds of its
 * convolution, matrix product or attention; "0.0" for the rest. */
static char *kernel_flops(ectx *c, const ir_kernel *K)
{
	int gn = K->kind == K_EXTERN ? c->ir->nodes[K->ext].gnode : -1;
	if (gn < 0)
		return "0.0";
	coil_graph *g = c->ir->g;
	const coil_node *n = &g->nodes[gn];
	const coil_value *o = node_out(g, n, 0), *a;
	switch (n->op) {
	case OP_CONVOLUTION: { /* per output (input, transposed) element: Cin/groups x the window */
		const coil_value *w = node_in(g, n, 1), *x = n->args[6].i ? node_in(g, n, 0) : o;
		return arena_printf(c->a, "%s * %s", numel_c(c, 2, x->rank, x->shape, NULL), numel_c(c, 1, w->rank - 1, w->shape + 1, NULL));
	}
	case OP_MM:
	case OP_BMM:
	case OP_ADDMM:
		a = node_in(g, n, n->op == OP_ADDMM);
		return numel_c(c, 2, o->rank, o->shape, NULL) && a->rank
		       ? arena_printf(c->a, "%s * (double)(%s)", numel_c(c, 2, o->rank, o->shape, NULL), ir_dim_c(c->a, &a->shape[a->rank - 1]))
		       : "0.0";
	case OP_SDPA: { /* q @ k^T and p @ v: out [.., Lq, Dv], k [.., Lk, D] */
		const coil_value *q = node_in(g, n, 0), *k = node_in(g, n, 1);
		return arena_printf(c->a, "%s * (double)(%s) * ((double)(%s) + (double)(%s))",
				    numel_c(c, 2, q->rank - 1, q->shape, NULL), ir_dim_c(c->a, &k->shape[k->rank - 2]),
				    ir_dim_c(c->a, &q->shape[q->rank - 1]), ir_dim_c(c->a, &o->shape[o->rank - 1]));
	}
	default:
		return "0.0";
	}
}

/* One kernel: its body is rendered with the buffers' own names (only those
 * it touches are parameters), put in canonical form, and looked up among the
 * functions so far; a new form becomes a new function kfn<N>.  The kernel's
 * call in run passes its buffers. */
int emit_kernel(ectx *c, int k)
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
	int vr = K->kind == K_REDUCE && emit_colsum(c, K) ? 1
	       : K->kind == K_EXTERN			  ? 0
							  : vec_emit_kernel(c->ir, c->isa, c->f, k, c->used, c->err);
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
	c->bytes[k] = kernel_bytes(c, K);
	c->flops[k] = kernel_flops(c, K);
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
	char *pn = arena_printf(c->a, "%s", kind_name(K));
	for (int i = 0; i < K->ncover; i++) {
		const coil_node *gn = &c->ir->g->nodes[K->cover[i]];
		note = arena_printf(c->a, "%s %d:%s", note, K->cover[i], op_name(gn->op));
		/* the canonical graph's ids ("#k", what a compile through the cache lowers: the
		 * CLI maps them back), else the node's index: no user text in the artifact */
		int canon = gn->id && gn->id[0] == '#' && gn->id[1] && strspn(gn->id + 1, "0123456789") == strlen(gn->id + 1);
		pn = canon ? arena_printf(c->a, "%s %s:%s", pn, gn->id, op_name(gn->op))
			   : arena_printf(c->a, "%s @%d:%s", pn, K->cover[i], op_name(gn->op));
	}
	c->pname[k] = pn;
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

int emit_err_code(emit_errs *e, coil_ir *ir, int gnode, const char *fmt)
{
	const coil_node *n = gnode >= 0 ? &ir->g->nodes[gnode] : NULL;
	char *m = !n ? arena_printf(e->arena, "coil: %s", fmt)
	       : n->id ? arena_printf(e->arena, "node '%s' (%s): %s", emit_cfmt(e->arena, n->id), op_name(n->op), fmt)
		       : arena_printf(e->arena, "%s: %s", op_name(n->op), fmt);
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

/* The tables of c's kernels and functions; fname and storage name and
 * qualify its functions. */
int ectx_init(ectx *c, const char *fname, const char *storage)
{
	coil_ir *ir = c->ir;
	c->fname = fname;
	c->storage = storage;
	c->used = arena_alloc(c->a, (size_t)ir->n + 1);
	c->may_fail = arena_alloc(c->a, (size_t)ir->nk + 1);
	c->fn_of = arena_alloc(c->a, (size_t)(ir->nk + 1) * sizeof(int));
	c->call = arena_alloc(c->a, (size_t)(ir->nk + 1) * sizeof(char *));
	c->bytes = arena_alloc(c->a, (size_t)(ir->nk + 1) * sizeof(char *));
	c->flops = arena_alloc(c->a, (size_t)(ir->nk + 1) * sizeof(char *));
	c->pname = arena_alloc(c->a, (size_t)(ir->nk + 1) * sizeof(char *));
	for (c->htcap = 64; c->htcap < 2 * ir->nk + 2; c->htcap *= 2)
		;
	c->ht = arena_alloc(c->a, (size_t)c->htcap * sizeof(int));
	if (!c->used || !c->may_fail || !c->fn_of || !c->call || !c->bytes || !c->flops || !c->pname || !c->ht)
		return coil_err_oom(c->err);
	memset(c->may_fail, 0, (size_t)ir->nk + 1);
	for (int i = 0; i < c->htcap; i++)
		c->ht[i] = -1;
	return 0;
}

/* The kernels of fold.c's create IR, as functions of their own
 * (fold_kfn<N>, static, in model.c): coil_model_create calls them once to
 * compute the folded params.  Runtime error codes share run's table. */
int emit_fold_kernels(ectx *c)
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

