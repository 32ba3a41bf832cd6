/* dump: the IR as text, one node per line, then the kernels:
 *   %12 = add f32[s0, 4] %10, %11        fuse: k2 buf slot 0
 * Graph buffers print as input/param/const with their position. */
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/ir.h"

static const coil_symtab gen = {COIL_MAX_SYMS, {"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"}};
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
		fprintf(f, "arena: %d slots, %s bytes\n", ir->nslots, dim_format(&ir->arena_bytes, &gen_syms, b, sizeof b));
}
