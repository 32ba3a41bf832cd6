/* IR helpers and index arithmetic: views and broadcasting become C index
 * expressions, never copies.  An index is one C expression per dim; size-1
 * dims are always indexed by "0". */
#include <stdlib.h>
#include <string.h>

#include "codegen/ir.h"

static const struct { const char *name; int arity; } prims[] = {
#define X(e, n, a) {n, a},
	PRIMS(X)
#undef X
};

const char *prim_name(int p) { return prims[p].name; }
int prim_arity(int p) { return prims[p].arity; }

int ir_add(coil_ir *ir, const ir_node *proto, coil_err *err)
{
	if (ir->n == ir->cap) {
		int cap = ir->cap ? 2 * ir->cap : 64;
		ir_node *nn = arena_alloc(ir->arena, (size_t)cap * sizeof *nn);
		if (!nn)
			return coil_err_oom(err);
		if (ir->n)
			memcpy(nn, ir->nodes, (size_t)ir->n * sizeof *nn);
		ir->nodes = nn;
		ir->cap = cap;
	}
	ir->nodes[ir->n] = *proto;
	ir->nodes[ir->n].kernel = -1;
	ir->nodes[ir->n].slot = -1;
	ir->nodes[ir->n].out = -1;
	return ir->n++;
}

void ir_free(coil_ir *ir)
{
	if (ir)
		arena_destroy(ir->arena);
}

int64_t ir_static_numel(const ir_node *n)
{
	int64_t e = 1, v;
	for (int i = 0; i < n->rank; i++) {
		if (!dim_is_const(&n->shape[i], &v))
			return -1;
		e *= v;
	}
	return e;
}

int dims_equal(const coil_dim *a, const coil_dim *b, int rank)
{
	for (int i = 0; i < rank; i++)
		if (!dim_eq(&a[i], &b[i]))
			return 0;
	return 1;
}

char *ir_dim_c(coil_arena *a, const coil_dim *d)
{
	#define gen (*symtab_generic())
	char buf[512];
	dim_format(d, &gen, buf, sizeof buf);
	return arena_strdup(a, buf);
}

static int is_one(const coil_dim *d) { return dim_eq_const(d, 1); }

/* Strides of a row-major shape as C expressions. */
static void strides_c(coil_ir *ir, const ir_node *n, char **st)
{
	char *s = "1";
	for (int i = n->rank - 1; i >= 0; i--) {
		st[i] = s;
		char *d = ir_dim_c(ir->arena, &n->shape[i]);
		if (strpbrk(d, "+-*"))
			d = arena_printf(ir->arena, "(%s)", d);
		s = !strcmp(s, "1") ? d : arena_printf(ir->arena, "%s*%s", s, d);
	}
}

char *ix_linear(coil_ir *ir, const ir_node *n, char **idx)
{
	char *st[COIL_MAX_RANK], *e = NULL;
	strides_c(ir, n, st);
	for (int i = 0; i < n->rank; i++) {
		if (!strcmp(idx[i], "0"))
			continue;
		char *t = !strcmp(st[i], "1") ? idx[i] : arena_printf(ir->arena, "%s*%s", idx[i], st[i]);
		e = e ? arena_printf(ir->arena, "%s + %s", e, t) : t;
	}
	return e ? e : "0";
}

/* Reshape, group by group: the non-1 dims of both shapes are cut into the
 * shortest runs with equal products ([116, 28, 28] and [2, 58, 28, 28] give
 * (116 | 2, 58), (28 | 28), (28 | 28)); a run of one dim on each side maps
 * directly, others through the run's own linear offset, so indices outside a
 * split or merge stay plain loop variables.  A source dim that is a multiple
 * of the next target dim is split first (4*b over b: index / 4, then index
 * % 4 carries on), so symbolic dims pair up as well: [s, 4*b, 64] read as
 * [s, b, 256] is (i0 / 4, (i0 % 4)*64 + i2), contiguous in i2.  Runs are
 * matched by exact division of the size expressions; where none divides,
 * the whole shape goes through the linear offset. */
static char *paren(coil_arena *a, const char *e)
{
	return strpbrk(e, "+-*/% ") ? arena_printf(a, "(%s)", e) : (char *)e;
}

static int reshape_groups(coil_ir *ir, const ir_node *n, const ir_node *s, char **idx, char **out)
{
	coil_arena *a = ir->arena;
	coil_dim nd[COIL_MAX_RANK + COIL_MAX_RANK];
	char *nix[COIL_MAX_RANK + COIL_MAX_RANK];
	int sp[COIL_MAX_RANK], nn = 0, ns = 0;
	coil_err e;
	for (int k = 0; k < s->rank; k++) {
		out[k] = "0";
		if (!is_one(&s->shape[k]))
			sp[ns++] = k;
	}
	for (int k = 0; k < n->rank; k++)
		if (!is_one(&n->shape[k])) {
			nd[nn] = n->shape[k];
			nix[nn++] = idx[k];
		}
	int i = 0, j = 0;
	for (;;) {
		if (i == nn || j == ns)
			return i == nn && j == ns;
		const coil_dim *sd = &s->shape[sp[j]];
		if (dim_eq(&nd[i], sd)) {
			out[sp[j++]] = nix[i++];
			continue;
		}
		coil_dim q;
		int64_t c;
		if (!dim_div(&q, &nd[i], sd, &e) && dim_is_const(&q, &c) && c > 1 && i + 1 < COIL_MAX_RANK + COIL_MAX_RANK) {
			/* split: outer part sd (index / c), inner part c (index % c) */
			const char *x = paren(a, nix[i]);
			out[sp[j++]] = !strcmp(x, "0") ? "0" : arena_printf(a, "(%s / %lld)", x, (long long)c);
			nd[i] = q;
			nix[i] = !strcmp(x, "0") ? "0" : arena_printf(a, "(%s %% %lld)", x, (long long)c);
			continue;
		}
		coil_dim pn = nd[i], ps = *sd;
		int i0 = i, j0 = j;
		while (!dim_eq(&pn, &ps)) {
			if (!dim_div(&q, &ps, &pn, &e)) {
				if (++i == nn || dim_mul(&pn, &pn, &nd[i], &e))
					return 0;
			} else if (!dim_div(&q, &pn, &ps, &e)) {
				if (++j == ns || dim_mul(&ps, &ps, &s->shape[sp[j]], &e))
					return 0;
			} else {
				return 0;
			}
		}
		i++, j++;
		char *lin = NULL, *st = "1";
		for (int k = i - 1; k >= i0; k--) {
			if (strcmp(nix[k], "0")) {
				char *t = !strcmp(st, "1") ? arena_printf(a, "(%s)", nix[k]) : arena_printf(a, "(%s)*%s", nix[k], st);
				lin = lin ? arena_printf(a, "%s + %s", t, lin) : t;
			}
			char *d = paren(a, ir_dim_c(a, &nd[k]));
			st = !strcmp(st, "1") ? d : arena_printf(a, "%s*%s", st, d);
		}
		if (!lin)
			lin = "0";
		st = "1";
		for (int k = j - 1; k >= j0; k--) {
			char *v = paren(a, ir_dim_c(a, &s->shape[sp[k]]));
			if (k == j0)
				out[sp[k]] = !strcmp(st, "1") ? arena_printf(a, "(%s)", lin)
							  : arena_printf(a, "((%s) / %s)", lin, paren(a, st));
			else /* st, a product of dims, is one divisor: x / (a*b), not x / a*b */
				out[sp[k]] = !strcmp(st, "1") ? arena_printf(a, "((%s) %% %s)", lin, v)
							  : arena_printf(a, "((%s) / %s %% %s)", lin, paren(a, st), v);
			st = !strcmp(st, "1") ? v : arena_printf(a, "%s*%s", st, v);
		}
	}
}

static void ix_reshape(coil_ir *ir, const ir_node *n, const ir_node *s, char **idx, char **out)
{
	if (reshape_groups(ir, n, s, idx, out))
		return;
	char *lin = ix_linear(ir, n, idx), *st[COIL_MAX_RANK];
	strides_c(ir, s, st);
	for (int k = 0; k < s->rank; k++) {
		char *d = ir_dim_c(ir->arena, &s->shape[k]);
		if (is_one(&s->shape[k]))
			out[k] = "0";
		else if (k == 0)
			out[k] = arena_printf(ir->arena, "((%s) / (%s))", lin, st[k]);
		else
			out[k] = arena_printf(ir->arena, "((%s) / (%s) %% (%s))", lin, st[k], d);
	}
}

void ix_operand(coil_ir *ir, const ir_node *n, int k, char **idx, char **out)
{
	const ir_node *s = &ir->nodes[n->src[k]];
	if (n->op == IR_VIEW) {
		switch (n->sub) {
		case V_PERMUTE:
			for (int i = 0; i < n->rank; i++)
				out[n->perm[i]] = idx[i];
			break;
		case V_SLICE: {
			char *st = ir_dim_c(ir->arena, &n->start);
			for (int i = 0; i < s->rank; i++)
				out[i] = idx[i];
			if (is_one(&s->shape[n->vdim]))
				out[n->vdim] = "0";
			else if (n->step == 1)
				out[n->vdim] = !strcmp(st, "0") ? idx[n->vdim]
					: !strcmp(idx[n->vdim], "0") ? arena_printf(ir->arena, "(%s)", st)
					: arena_printf(ir->arena, "(%s + %s)", idx[n->vdim], st);
			else
				out[n->vdim] = arena_printf(ir->arena, "(%s*%lld + %s)", idx[n->vdim], (long long)n->step, st);
			return;
		}
		case V_RESHAPE:
			ix_reshape(ir, n, s, idx, out);
			return;
		default: /* V_EXPAND: broadcasting, below */
			break;
		}
		if (n->sub == V_PERMUTE)
			return;
	}
	/* Broadcasting: right-aligned, size-1 dims read index 0. */
	for (int j = 0; j < s->rank; j++)
		out[j] = is_one(&s->shape[j]) ? "0" : idx[j + n->rank - s->rank];
}
