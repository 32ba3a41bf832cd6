/* widen: bf16 convolutions and matrix products on a target below AVX-512.
 *
 * oneDNN 2.6 has bf16 kernels for AVX-512 only (avx512_core emulates the
 * conversions, avx512_core_bf16 has them): built for generic or x86-64-v3,
 * an artifact must run on CPUs where creating a bf16 conv, matmul or pooling
 * answers "unimplemented".  There each bf16 convolution, mm, addmm, bmm and
 * 2-d pooling computes in f32, as oneDNN's bf16 kernels do inside (products of bf16 values are
 * exact in f32, sums accumulate in f32): its bf16 operands cast to f32
 * (weights once, at create: fold.c), its result cast back to bf16 under the
 * original value, so every reader sees the graph's dtypes.  The nodes after
 * it then fuse with the cast into the generated loops instead of oneDNN's
 * post-ops. */
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/ir.h"
#include "common/infer.h"

static int widened(const coil_graph *g, const coil_node *n)
{
	switch (n->op) {
	case OP_CONVOLUTION: case OP_MM: case OP_ADDMM: case OP_BMM: case OP_MAX_POOL2D_WI: case OP_MAX_POOL2D:
	case OP_AVG_POOL2D: case OP_ADAPTIVE_AVG_POOL2D: case OP_ADAPTIVE_AVG_POOL2D_:
		break;
	default:
		return 0;
	}
	return n->nout >= 1 && n->outs[0] >= 0 && g->vals[n->outs[0]].dtype == COIL_BF16;
}

/* Appends node `op(v, dtype=t)` (a _to_copy) writing value out (a new one when < 0): out. */
static int cast_to(coil_graph *g, int v, coil_dtype t, int out, const char *id, coil_arena *a, coil_err *err)
{
	coil_node m = {.id = id, .op = OP_TO_COPY, .nout = 1};
	int *o = arena_alloc(a, sizeof(int));
	if (!o || !node_reargs(&m, OP_TO_COPY, 0, a) || arg_tensor(&m.args[0], v, a))
		return coil_err_oom(err);
	m.args[1] = (coil_arg){.kind = ARG_DTYPE, .i = t};
	if (out < 0) {
		out = g->nvals++;
		g->vals[out] = (coil_value){.kind = VAL_NODE};
	}
	*o = out;
	m.outs = o;
	g->vals[out].index = g->nnodes, g->vals[out].out = 0; /* (a name it had stays) */
	g->nodes[g->nnodes] = m;
	if (infer_node(g, &g->nodes[g->nnodes], err))
		return -1;
	g->nnodes++;
	return out;
}

int ir_widen_bf16(coil_graph **gp, coil_arena *a, unsigned features, coil_err *err)
{
	coil_graph *g0 = *gp, *g;
	if (features & F_AVX512)
		return 0;
	int extra = 0;
	for (int i = 0; i < g0->nnodes; i++) {
		const coil_node *n = &g0->nodes[i];
		if (!widened(g0, n))
			continue;
		extra += 2; /* the cast back, and the node's f32 result */
		for (int k = 0; k < op_get(n->op)->nargs; k++)
			extra += n->args[k].kind == ARG_TENSOR;
	}
	if (!extra)
		return 0;
	if (!(g = graph_copy(g0, a)))
		return coil_err_oom(err);
	coil_node *nodes = arena_alloc(a, (size_t)(g0->nnodes + extra + 1) * sizeof *nodes);
	coil_value *vals = arena_alloc(a, (size_t)(g0->nvals + extra + 1) * sizeof *vals);
	if (!nodes || !vals)
		return coil_err_oom(err);
	memcpy(vals, g0->vals, (size_t)g0->nvals * sizeof *vals);
	g->vals = vals, g->capvals = g0->nvals + extra, g->nodes = nodes, g->nnodes = 0;
	for (int i = 0; i < g0->nnodes; i++) {
		coil_node n = g0->nodes[i];
		const int w = widened(g0, &n);
		if (w) {
			const int na = op_get(n.op)->nargs;
			coil_arg *args = arena_alloc(a, (size_t)(na + 1) * sizeof *args);
			int *outs = arena_alloc(a, (size_t)(n.nout + 1) * sizeof *outs);
			if (!args || !outs)
				return coil_err_oom(err);
			memcpy(args, n.args, (size_t)na * sizeof *args);
			memcpy(outs, n.outs, (size_t)n.nout * sizeof *outs);
			for (int k = 0; k < na; k++) {
				if (args[k].kind != ARG_TENSOR || args[k].v[0] < 0 || vals[args[k].v[0]].dtype != COIL_BF16)
					continue;
				int f = cast_to(g, args[k].v[0], COIL_F32, -1, n.id, a, err);
				if (f < 0 || arg_tensor(&args[k], f, a))
					return f < 0 ? -1 : coil_err_oom(err);
			}
			outs[0] = g->nvals++;
			vals[outs[0]] = (coil_value){.kind = VAL_NODE};
			n.args = args, n.outs = outs;
		}
		nodes[g->nnodes] = n;
		for (int k = 0; k < n.nout; k++)
			if (n.outs[k] >= 0)
				vals[n.outs[k]].index = g->nnodes;
		if (w && infer_node(g, &nodes[g->nnodes], err))
			return -1;
		g->nnodes++;
		if (w && cast_to(g, n.outs[0], COIL_BF16, g0->nodes[i].outs[0], n.id, a, err) < 0)
			return -1;
	}
	*gp = g;
	return 0;
}
