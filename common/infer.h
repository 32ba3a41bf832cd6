/* Shape and dtype inference: one rule per op family (named in the op table). */
#ifndef COIL_INFER_H
#define COIL_INFER_H

#include "common/graph.h"

/* Sets the dtype and shape of every result of n from its (already inferred)
 * inputs, or fails naming the node, op and argument at fault. */
int infer_node(coil_graph *g, coil_node *n, coil_err *err);

/* ATen's result_type over a node's tensor and scalar operands (args listed in
 * idx, count n). Returns -1 with err when no dtype fits. */
int infer_result_type(coil_graph *g, const coil_node *n, const int *idx, int cnt, coil_err *err);

/* Dims reduced by a reduction node, as a bit mask over its input's rank, and
 * whether it keeps them. */
int reduce_dims(const coil_graph *g, const coil_node *n, unsigned *mask, int *keepdim);

/* A fill (full, zeros, new_zeros, zeros_like, ones_like, full_like): 1 and
 * its value in *v (before rounding to the result's dtype); 0 otherwise. */
int fill_value(const coil_node *n, double *v);
/* arange's arguments: *start (NULL: 0), *end (ARG_SCALAR or a size expression's
 * ARG_DIMS), the step, whether it is an integer, the dtype argument's index. */
void arange_args(const coil_node *n, const coil_arg **start, const coil_arg **end, double *step, int *is_int,
		 int *dt);

/* Broadcast shape of two operands (numpy rules); -1 with err if incompatible. */
int broadcast_shapes(const coil_dim *a, int ra, const coil_dim *b, int rb, coil_dim *out, int *rout,
		     coil_err *err);

/* aten.index.Tensor: the self dims its index tensors take (indices[k] for dim
 * k, None leaving it whole) and where their broadcast shape B sits in the
 * result: in place of the indexed dims when they are adjacent, else first. */
typedef struct index_plan {
	int rb, bpos;           /* B's rank; the result dim where B starts */
	int keep[COIL_MAX_RANK]; /* per self dim: the result dim it becomes, -1 where indexed */
	coil_dim b[COIL_MAX_RANK];
} index_plan;
int index_plan_of(coil_graph *g, coil_node *n, index_plan *p, coil_err *err);

/* Pooling windows of a pool node, per spatial dim ([nd]: height, width, or
 * depth, height, width). */
typedef struct pool_params {
	int nd;
	int64_t k[3], s[3], p[3], d[3];
	int ceil, count_pad;
	int64_t divisor; /* avg_pool's divisor_override, 0 if none */
} pool_params;
void pool_get_params(const coil_node *n, pool_params *pp);
/* avg_pool2d/3d (else a max pool), and the 3-d ones. */
static inline int pool_is_avg(coil_op op) { return op == OP_AVG_POOL2D || op == OP_AVG_POOL3D; }
static inline int pool_is_3d(coil_op op)
{
	return op == OP_MAX_POOL3D_WI || op == OP_MAX_POOL3D || op == OP_AVG_POOL3D;
}
int64_t pool_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int ceil);
/* The same for a static or symbolic input size (derived symbols go to tab). */
int pool_out_dim(coil_symtab *tab, const coil_dim *in, int64_t k, int64_t s, int64_t p, int64_t d, int ceil,
		 coil_dim *out, coil_err *err);

/* Resampling of an upsample node (bilinear or nearest, over the last two dims),
 * with PyTorch 1.13's CPU index and weight rules.  Output position i of a dim
 * that resizes in -> out reads input positions src[0], src[1] with weights
 * w[0], w[1] (nearest: src[0] == src[1], w = {1, 0}).  The arithmetic runs in
 * t's opmath type (double for f64, else float), as in ATen. */
typedef struct upsample_params {
	int linear, align_corners;
	double scale[2]; /* scale factors as given (height, width); used when > 0 */
} upsample_params;
void upsample_get_params(const coil_node *n, upsample_params *up);
void upsample_source(const upsample_params *up, int dim, coil_dtype t, int64_t in, int64_t out, int64_t i,
		     int64_t src[2], double w[2]);

/* Views as index arithmetic: output dim i of a permute/transpose/t reads input
 * dim perm[i] (returns the arg index at fault, or 0); a slice/select reads dim
 * *dim from start in steps of step (slice_scatter/select_scatter: the region
 * they write). */
int view_perm(const coil_graph *g, const coil_node *n, int *perm);
int view_slice(const coil_graph *g, const coil_node *n, int *dim, coil_dim *start, coil_dim *len, int64_t *step,
	       coil_err *err);

#endif
