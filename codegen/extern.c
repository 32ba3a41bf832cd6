/* Extern kernels: ops that are not fused loops (matrix products, data
 * movement) render as plain typed loops over whole buffers.  This is the seam
 * where a library call (oneDNN) will replace the loop: one function per op
 * family, each given its node and the names of its buffers. */
#include <string.h>

#include "codegen/ir.h"
#include "common/infer.h"

typedef struct xctx {
	coil_ir *ir;
	FILE *f;
	int *used;
	const coil_node *n;
} xctx;

static const char *ct(coil_dtype t)
{
	switch (t) {
	case COIL_F32: return "float";
	case COIL_F64: return "double";
	case COIL_I64: return "int64_t";
	case COIL_I32: return "int32_t";
	case COIL_I8: return "int8_t";
	default: return "uint8_t";
	}
}

static char *buf(xctx *c, int v)
{
	ir_node *n = &c->ir->nodes[v];
	c->used[v] = 1;
	switch (n->op) {
	case IR_INPUT: return arena_printf(c->ir->arena, "in%d", n->index);
	case IR_PARAM: return arena_printf(c->ir->arena, "p%d", n->index);
	case IR_CONST: return arena_printf(c->ir->arena, "c%d", n->index);
	default: return n->out >= 0 ? arena_printf(c->ir->arena, "o%d", n->out) : arena_printf(c->ir->arena, "b%d", v);
	}
}

static char *arg(xctx *c, int i) { return buf(c, c->ir->val_node[c->n->args[i].v[0]]); }
static ir_node *argn(xctx *c, int i) { return &c->ir->nodes[c->ir->val_node[c->n->args[i].v[0]]]; }
static char *dimc(xctx *c, const coil_dim *d) { return arena_printf(c->ir->arena, "(%s)", ir_dim_c(c->ir->arena, d)); }

/* C = alpha*A@B (+ beta*bias broadcast to [M,N]), batched for bmm. */
static void matmul(xctx *c, int outv)
{
	int base = c->n->op == OP_ADDMM ? 1 : 0;
	ir_node *a = argn(c, base), *o = &c->ir->nodes[outv];
	const char *t = ct(o->dtype);
	int r = a->rank;
	char *B = c->n->op == OP_BMM ? dimc(c, &a->shape[0]) : "1";
	char *M = dimc(c, &a->shape[r - 2]), *K = dimc(c, &a->shape[r - 1]), *N = dimc(c, &o->shape[o->rank - 1]);
	double alpha = base ? c->n->args[4].f : 1, beta = base ? c->n->args[3].f : 0;
	fprintf(c->f, "\tconst int64_t B = %s, M = %s, K = %s, N = %s, work = B * M * N * K;\n", B, M, K, N);
	fprintf(c->f, "\t#pragma omp parallel for collapse(2) num_threads(nt) if (nt > 1 && work > 32768)\n");
	fprintf(c->f, "\tfor (int64_t b = 0; b < B; b++)\n\tfor (int64_t i = 0; i < M; i++) {\n");
	fprintf(c->f, "\t\t%s *restrict crow = %s + (b * M + i) * N;\n", t, buf(c, outv));
	fprintf(c->f, "\t\tfor (int64_t j = 0; j < N; j++)\n\t\t\tcrow[j] = 0;\n");
	fprintf(c->f, "\t\tfor (int64_t k = 0; k < K; k++) {\n\t\t\tconst %s av = %s[(b * M + i) * K + k];\n", t,
		arg(c, base));
	fprintf(c->f, "\t\t\tconst %s *restrict brow = %s + (b * K + k) * N;\n", t, arg(c, base + 1));
	fprintf(c->f, "\t\t\tfor (int64_t j = 0; j < N; j++)\n\t\t\t\tcrow[j] += av * brow[j];\n\t\t}\n");
	if (base) {
		ir_node *bias = argn(c, 0);
		char *bi = bias->rank == 2 && !dim_eq_const(&bias->shape[0], 1) ? "i * %s" : "0";
		char *bj = bias->rank >= 1 && !dim_eq_const(&bias->shape[bias->rank - 1], 1) ? "j" : "0";
		char *row = strcmp(bi, "0") ? arena_printf(c->ir->arena, "i * %s", N) : "0";
		fprintf(c->f, "\t\tfor (int64_t j = 0; j < N; j++)\n\t\t\tcrow[j] = (%s)%.17g * crow[j]%s;\n", t, alpha,
			beta != 0 ? arena_printf(c->ir->arena, " + (%s)%.17g * %s[%s + %s]", t, beta, arg(c, 0), row, bj)
				  : "");
	} else {
		(void)alpha;
	}
	fprintf(c->f, "\t}\n");
}

/* Copies blocks along dim d: [outer][size_d * inner]. */
static void cat(xctx *c, int outv)
{
	ir_node *o = &c->ir->nodes[outv];
	int d = (int)(c->n->args[1].i < 0 ? c->n->args[1].i + o->rank : c->n->args[1].i);
	char *outer = "1", *inner = "1";
	for (int i = 0; i < d; i++)
		outer = arena_printf(c->ir->arena, "%s*%s", outer, dimc(c, &o->shape[i]));
	for (int i = d + 1; i < o->rank; i++)
		inner = arena_printf(c->ir->arena, "%s*%s", inner, dimc(c, &o->shape[i]));
	fprintf(c->f, "\tconst int64_t outer = %s, inner = %s, od = %s;\n\tint64_t at = 0;\n\t(void)inner;\n", outer,
		inner, dimc(c, &o->shape[d]));
	for (int k = 0; k < c->n->args[0].n; k++) {
		int v = c->ir->val_node[c->n->args[0].v[k]];
		ir_node *x = &c->ir->nodes[v];
		if (x->rank != o->rank)
			continue;
		fprintf(c->f, "\t{\n\t\tconst int64_t xd = %s;\n", dimc(c, &x->shape[d]));
		fprintf(c->f, "\t\tfor (int64_t a = 0; a < outer; a++)\n\t\t\tmemcpy(%s + (a * od + at) * inner, %s + a * xd * inner, "
			   "(size_t)(xd * inner) * sizeof(%s));\n\t\tat += xd;\n\t}\n", buf(c, outv), buf(c, v), ct(o->dtype));
	}
}

static void embedding(xctx *c, int outv)
{
	ir_node *w = argn(c, 0), *ix = argn(c, 1), *o = &c->ir->nodes[outv];
	char *n = "1";
	for (int i = 0; i < ix->rank; i++)
		n = arena_printf(c->ir->arena, "%s*%s", n, dimc(c, &ix->shape[i]));
	fprintf(c->f, "\tconst int64_t n = %s, D = %s, V = %s;\n", n, dimc(c, &w->shape[1]), dimc(c, &w->shape[0]));
	fprintf(c->f, "\tfor (int64_t e = 0; e < n; e++) {\n\t\tint64_t i = (int64_t)%s[e];\n", arg(c, 1));
	fprintf(c->f, "\t\tif (i < 0 || i >= V)\n\t\t\ti = 0; /* out of range: row 0 */\n");
	fprintf(c->f, "\t\tmemcpy(%s + e * D, %s + i * D, (size_t)D * sizeof(%s));\n\t}\n", buf(c, outv), arg(c, 0),
		ct(o->dtype));
}

static void pad(xctx *c, int outv)
{
	ir_node *x = argn(c, 0), *o = &c->ir->nodes[outv];
	const coil_arg *p = &c->n->args[1];
	int64_t lo[COIL_MAX_RANK] = {0};
	for (int k = 0; k < p->n / 2; k++)
		lo[x->rank - 1 - k] = p->ints[2 * k];
	double v = c->n->args[2].f;
	const char *t = ct(o->dtype);
	char *on = "1", *xn = "1";
	for (int i = 0; i < o->rank; i++) {
		on = arena_printf(c->ir->arena, "%s*%s", on, dimc(c, &o->shape[i]));
		xn = arena_printf(c->ir->arena, "%s*%s", xn, dimc(c, &x->shape[i]));
	}
	fprintf(c->f, "\tfor (int64_t e = 0; e < %s; e++)\n\t\t%s[e] = (%s)%.17g;\n", on, buf(c, outv), t,
		o->dtype == COIL_BOOL ? (double)(v != 0) : v);
	fprintf(c->f, "\tfor (int64_t e = 0; e < %s; e++) {\n\t\tint64_t r = e, off = 0, ok = 1, st = 1;\n", xn);
	for (int i = x->rank - 1; i >= 0; i--) {
		fprintf(c->f, "\t\t{\n\t\t\tint64_t j = r %% %s + %lld;\n\t\t\tr /= %s;\n", dimc(c, &x->shape[i]),
			(long long)lo[i], dimc(c, &x->shape[i]));
		fprintf(c->f, "\t\t\tok &= j >= 0 && j < %s;\n\t\t\toff += j * st;\n\t\t\tst *= %s;\n\t\t}\n",
			dimc(c, &o->shape[i]), dimc(c, &o->shape[i]));
	}
	fprintf(c->f, "\t\tif (ok)\n\t\t\t%s[off] = %s[e];\n\t}\n", buf(c, outv), arg(c, 0));
}

void emit_extern(coil_ir *ir, FILE *f, int k, int *used, coil_err *err, int *bad)
{
	ir_kernel *K = &ir->ks[k];
	ir_node *e = &ir->nodes[K->ext];
	xctx c = {.ir = ir, .f = f, .used = used, .n = &ir->g->nodes[e->gnode]};
	ir_node *in0 = NULL;
	for (int i = 0; i < e->nx && !in0; i++)
		in0 = &ir->nodes[e->xsrc[i]];
	if (!dtype_is_float(e->dtype) && (c.n->op == OP_MM || c.n->op == OP_BMM || c.n->op == OP_ADDMM)) {
		*bad = 1;
		node_errf(err, c.n, "codegen: integer matrix products are not supported yet");
		return;
	}
	switch (c.n->op) {
	case OP_MM: case OP_BMM: case OP_ADDMM: matmul(&c, K->ext); return;
	case OP_CAT: cat(&c, K->ext); return;
	case OP_EMBEDDING: embedding(&c, K->ext); return;
	case OP_CONSTANT_PAD_ND: pad(&c, K->ext); return;
	default:
		*bad = 1;
		node_errf(err, c.n, "codegen: no extern kernel for this op yet");
	}
}
