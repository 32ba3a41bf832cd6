/* dump: the IR as text, one node per line, then the kernels:
 *   %12 = add f32[s0, 4] %10, %11        fuse: k2 buf slot 0
 * Graph buffers print as input/param/const with their position. */
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/dnnl.h"
#include "codegen/ir.h"

#define gen (*symtab_generic())
#define gen_syms gen
static const char *const opname[] = {"input", "param", "const", "fill", "unary", "binary", "where", "cast",
				     "reduce", "view", "extern"};
static const char *const redname[] = {"sum", "max", "min", "argmax", "wmean", "wm2"};
static const char *const viewname[] = {"permute", "expand", "slice", "reshape"};

void ir_dump(coil_ir *ir, FILE *f)
{
	char b[256];
	for (int v = 0; v < ir->n; v++) {
		ir_node *n = &ir->nodes[v];
		const char *name = opname[n->op];
		if (n->op == IR_UNARY || n->op == IR_BINARY)
			name = prim_name(n->sub);
		else if (n->op == IR_REDUCE)
			name = redname[n->sub];
		else if (n->op == IR_VIEW)
			name = viewname[n->sub];
		else if (n->op == IR_EXTERN)
			name = op_name(ir->g->nodes[n->gnode].op);

		fprintf(f, "%%%d = %s %s%s", v, name, dtype_name(n->dtype), shape_format(n->shape, n->rank, &gen, b, sizeof b));
		int cnt;
		const int *s = ir_srcs(n, &cnt);
		for (int i = 0; i < cnt; i++)
			fprintf(f, "%s%%%d", i ? ", " : " ", s[i]);
		switch (n->op) {
		case IR_INPUT: case IR_PARAM: case IR_CONST: fprintf(f, " #%d", n->index); break;
		case IR_FILL:
			if (n->sub)
				fprintf(f, " value=%s", dim_format(&n->start, &gen, b, sizeof b));
			else
				fprintf(f, " value=%.9g", n->fill);
			break;
		case IR_REDUCE: fprintf(f, " mask=0x%x", n->mask); break;
		case IR_VIEW:
			if (n->sub == V_PERMUTE) {
				fprintf(f, " perm=");
				for (int i = 0; i < n->rank; i++)
					fprintf(f, "%s%d", i ? "," : "", n->perm[i]);
			} else if (n->sub == V_SLICE) {
				fprintf(f, " dim=%d start=%s step=%lld", n->vdim, dim_format(&n->start, &gen, b, sizeof b),
					(long long)n->step);
			}
			break;
		default: break;
		}
		if (n->gnode >= 0)
			fprintf(f, "    ; node %d", n->gnode);
		if (n->kernel >= 0)
			fprintf(f, " k%d", n->kernel);
		if (n->mat)
			fprintf(f, " buf");
		if (n->out >= 0)
			fprintf(f, " out%d", n->out);
		if (n->slot >= 0)
			fprintf(f, " slot%d", n->slot);
		fprintf(f, "\n");
	}
	for (int k = 0; k < ir->nk; k++) {
		ir_kernel *K = &ir->ks[k];
		fprintf(f, "kernel %d %s:", k, K->kind == K_POINTWISE ? "pointwise" : K->kind == K_REDUCE ? "reduce" : "extern");
		for (int i = 0; i < K->nreds; i++)
			fprintf(f, " red %%%d", K->reds[i]);
		for (int i = 0; i < K->nouts; i++)
			fprintf(f, " out %%%d", K->outs[i]);
		fprintf(f, "  covers");
		for (int i = 0; i < K->ncover; i++)
			fprintf(f, " %d", K->cover[i]);
		fprintf(f, "\n");
	}
	if (ir->slots)
		fprintf(f, "arena: %d slots, %s bytes\n", ir->nslots,
			ir->arena_unknown ? "(too many terms)" : dim_format(&ir->arena_bytes, &gen_syms, b, sizeof b));
}

/* A graph value: %v, or the declared input/param/const it is. */
static void value_ref(const coil_graph *g, int v, FILE *f)
{
	const coil_value *val = &g->vals[v];
	static const char *const kind[] = {"input", "param", "const", "%"};
	if (val->kind == VAL_NODE || !val->name)
		fprintf(f, "%%%d", v);
	else
		fprintf(f, "%s:%s", kind[val->kind], val->name);
}

/* The graph fold leaves for the rest of the pipeline, one node a line:
 *   %12 = aten.relu.default f32[1, 64] %11    ; node 'n7'
 * then what was folded. */
void fold_dump(const ir_fold *fd, FILE *f)
{
	const coil_graph *g = fd->g;
	char b[256];
	fprintf(f, "# folded: %d constants at compile time, %d weights at create (%lld bytes)\n", fd->nconst,
		fd->nparam, (long long)fd->folded_bytes);
	for (int i = 0; i < g->nnodes; i++) {
		const coil_node *n = &g->nodes[i];
		const coil_value *o = &g->vals[n->outs[0]];
		fprintf(f, "%%%d = %s %s%s", n->outs[0], op_name(n->op), dtype_name(o->dtype),
			shape_format(o->shape, o->rank, &g->syms, b, sizeof b));
		const op_info *oi = op_get(n->op);
		const char *sep = " ";
		for (int a = 0; a < oi->nargs; a++)
			if (n->args[a].kind == ARG_TENSOR || n->args[a].kind == ARG_TENSORS)
				for (int k = 0; k < n->args[a].n; k++)
					if (n->args[a].v[k] >= 0) {
						fputs(sep, f);
						value_ref(g, n->args[a].v[k], f);
						sep = ", ";
					}
		fprintf(f, "    ; node %d '%s'\n", i, n->id);
	}
	fprintf(f, "outputs");
	for (int i = 0; i < g->noutputs; i++) {
		fputs(i ? ", " : " ", f);
		value_ref(g, g->outputs[i], f);
	}
	fprintf(f, "\n");
}

/* oneDNN's plan, a fusion a line:
 *   fusion 0: conv node 3 'conv1' .. node 5 'relu1', 1 fold, 1 post-op, nhwc src/dst 0/1 */
void dnnl_dump(const coil_ir *ir, FILE *f)
{
	const dn_plan *p = ir->dn;
	const coil_graph *g = ir->g;
	fprintf(f, "# oneDNN: %d fusion%s\n", p ? p->nf : 0, p && p->nf == 1 ? "" : "s");
	for (int j = 0; p && j < p->nf; j++) {
		const dn_fuse *z = &p->f[j];
		fprintf(f, "fusion %d: %s node %d '%s' (%s) .. node %d '%s', %d fold%s, %d post-op%s", j,
			z->is_pool ? "pool" : z->is_conv ? "conv" : "matmul", z->head, g->nodes[z->head].id,
			op_name(g->nodes[z->head].op), z->last, g->nodes[z->last].id, z->nfold, z->nfold == 1 ? "" : "s",
			z->npost, z->npost == 1 ? "" : "s");
		if (z->is_conv || z->is_pool)
			fprintf(f, ", nhwc src/dst %d/%d", z->src_nhwc, z->dst_nhwc);
		if (z->b_trans)
			fprintf(f, ", B transposed");
		if (z->q)
			fprintf(f, ", int8 (%s%s in, %s out%s)", z->q == 2 ? "dynamic " : "",
				dtype_name(g->vals[g->nodes[z->q_xdq].args[0].v[0]].dtype),
				dtype_name(g->vals[g->nodes[z->last].outs[0]].dtype), z->q_rdq >= 0 ? ", residual sum" : "");
		fprintf(f, "\n");
	}
}
