/* The codegen IR.  decompose turns a graph into a DAG of a closed set of
 * primitives (tinygrad style): loads of graph buffers, constant fills, unary,
 * binary and ternary pointwise ops, casts, reductions (always keepdim), views
 * (pure index arithmetic) and extern kernels (library-call seams: convolution,
 * matrix products, pooling, data movement).  fuse groups the primitives into
 * kernels, schedule orders them, memplan gives intermediates arena offsets,
 * emit_c renders C.  Everything lives in the IR's arena. */
#ifndef COIL_CODEGEN_IR_H
#define COIL_CODEGEN_IR_H

#include <stdio.h>

#include "common/graph.h"

enum ir_op {
	IR_INPUT, IR_PARAM, IR_CONST, /* graph buffers: index = position */
	IR_FILL,                      /* every element is fill */
	IR_UNARY, IR_BINARY, IR_WHERE, IR_CAST,
	IR_REDUCE,                    /* sub: red_kind, over mask, keepdim shape */
	IR_VIEW,                      /* sub: view_kind */
	IR_EXTERN,                    /* gnode: the graph node, computed by a library-style loop */
};

/* Pointwise primitives: X(enum, name, arity) */
#define PRIMS(X)                                                                              \
	X(NEG, "neg", 1) X(EXP, "exp", 1) X(LOG, "log", 1) X(LOG1P, "log1p", 1) X(SQRT, "sqrt", 1) \
	X(RECIP, "recip", 1) X(ABS, "abs", 1) X(FLOOR, "floor", 1) X(CEIL, "ceil", 1)             \
	X(TRUNC, "trunc", 1) X(ROUND, "round", 1) X(SIN, "sin", 1) X(COS, "cos", 1) X(ERF, "erf", 1) X(TANH, "tanh", 1) \
	X(NOT, "not", 1)                                                                          \
	X(ADD, "add", 2) X(SUB, "sub", 2) X(MUL, "mul", 2) X(DIV, "div", 2) X(MAX, "max", 2)      \
	X(MIN, "min", 2) X(POW, "pow", 2) X(FLOORDIV, "floordiv", 2) X(LT, "lt", 2)               \
	X(LE, "le", 2) X(GT, "gt", 2) X(GE, "ge", 2) X(EQ, "eq", 2) X(NE, "ne", 2)                \
	X(AND, "and", 2) X(OR, "or", 2)                                                           \
	X(REM, "rem", 2) X(BNOT, "bnot", 1) X(BAND, "band", 2) X(BOR, "bor", 2) X(BXOR, "bxor", 2) \
	X(SHL, "shl", 2) X(SHR, "shr", 2)

enum prim {
#define X(e, n, a) PR_##e,
	PRIMS(X)
#undef X
	PR_COUNT
};

/* RD_WMEAN and RD_WM2: Welford's mean and sum of squared deviations of the
 * source (variance = M2 / n); a kernel holding both over the same source
 * computes them in one pass. */
enum red_kind { RD_SUM, RD_MAX, RD_MIN, RD_ARGMAX, RD_WMEAN, RD_WM2 };
enum view_kind { V_PERMUTE, V_EXPAND, V_SLICE, V_RESHAPE };

typedef struct ir_node {
	enum ir_op op;
	int sub;           /* prim, red_kind or view_kind */
	int nsrc, src[3];  /* IR_EXTERN: nsrc/src unused, xsrc lists its inputs */
	int nx, *xsrc;
	coil_dtype dtype;
	int rank;
	coil_dim shape[COIL_MAX_RANK];
	int index;         /* IR_INPUT/PARAM/CONST: position; IR_EXTERN: result number */
	double fill;       /* IR_FILL; sub 1: the value is the dim `start` */
	unsigned mask;     /* IR_REDUCE: reduced dims */
	int perm[COIL_MAX_RANK]; /* V_PERMUTE: out dim i reads src dim perm[i] */
	int vdim;          /* V_SLICE */
	int64_t step;
	coil_dim start;
	int gnode;         /* graph node it came from, -1 for graph buffers */
	/* set by fuse */
	int nuse;          /* readers among IR nodes */
	int mat;           /* materialized: has a buffer */
	int kernel;        /* kernel that writes it (materialized or fused reduction) */
	/* set by memplan */
	int slot;          /* arena slot, -1 when not in the arena */
	int out;           /* graph output position, -1 if none */
	int inplace;       /* kernel + 1 that writes it in the slot of a buffer it reads, 0 */
	int inplace_by;    /* kernel + 1 that writes another buffer in its slot, 0 (a buffer
			    * can be both: written in place, then overwritten in place) */
} ir_node;

enum kernel_kind { K_POINTWISE, K_REDUCE, K_EXTERN };

typedef struct ir_kernel {
	enum kernel_kind kind;
	int nouts, *outs;  /* materialized nodes it writes (K_REDUCE: epilogue, full or outer shaped) */
	int nreds, *reds;  /* K_REDUCE: reductions, in order */
	int capouts, capreds;
	int ext;           /* K_EXTERN: first IR_EXTERN node of the graph node */
	int ncover, *cover; /* graph node indices covered, for comments */
} ir_kernel;

typedef struct ir_slot {
	coil_dim bytes;
	int64_t at;        /* static size: byte offset in the arena's fixed part; -1: laid out after it */
	int first, last;   /* kernels from its first writer to its last reader */
} ir_slot;

typedef struct coil_ir {
	coil_arena *arena;
	coil_graph *g;
	unsigned features; /* the target's (F_* bits): what the lowering may use (dn_int8) */
	int n, cap;
	ir_node *nodes;
	int *val_node;     /* graph value -> IR node */
	int nout, *outs;   /* graph outputs -> IR node */
	int nk, capk;
	ir_kernel *ks;     /* in schedule order after schedule */
	int nslots;
	ir_slot *slots;
	coil_dim arena_bytes;
	int arena_unknown; /* the sum has too many terms to write (arena_bytes is a part) */
	int64_t fixed_bytes; /* the arena's first part, where static slots lie (ir_slot.at) */
	struct dn_plan *dn; /* oneDNN fusions (lower_dnnl.c), NULL when none */
	struct dn_tune *tune; /* autotuning's choices and measures (autotune.c), NULL when not tuning */
	struct ir_fold *fold; /* what fold.c computed ahead of the run, NULL when nothing */
	/* microbatch.c: the graph was compiled for mb_chunk of the inputs' mb_total images at
	 * dim 0 (the ABI's sizes), run mb_total / mb_chunk times; 0: as it is */
	int64_t mb_total, mb_chunk;
	int mb_join; /* the kernel of the join (coil.mb_join) where the chunks end, else -1 */
	/* set by memplan: per param index (folded ones too), whether a kernel of
	 * the run reads it (not only oneDNN's create: conv weights, constant B) */
	int npar_run;
	char *par_run;
} coil_ir;

/* fold.c: values that do not depend on the inputs, computed ahead.  g is
 * the graph the rest of the pipeline compiles (the user's own when nothing
 * folds): constants g->consts[nconsts - nconst ..] were computed at compile
 * time; params nparams .. nparams + nparam - 1 (not in g->params) are
 * computed in coil_model_create by the kernels of `create` (its outputs, in
 * order, bytes[j] each) from the user's params and the constants. */
typedef struct ir_fold {
	coil_arena *arena;
	coil_graph *g;
	int nconst, nparam;
	struct coil_ir *create; /* NULL when nparam is 0 */
	int64_t *bytes;
	int64_t folded_bytes;   /* sum of bytes */
	char *param_live;       /* per user param: read by the run (else create does not keep it) */
} ir_fold;

/* The passes, in pipeline order. */
int ir_fold_graph(coil_graph *g, unsigned features, ir_fold **out, coil_err *err);
/* attention.c: baddbmm lowered to bmm + add and traced attention matched
 * into scaled_dot_product_attention, in a copy of *g (in arena a) that
 * replaces *g when anything changed; the caller's graph is not changed. */
int ir_attention(coil_graph **g, coil_arena *a, coil_err *err);
int ir_scatter_index(coil_graph **g, coil_arena *a, coil_err *err);
/* rewrite.c: reads of each value by g's nodes and outputs (uses[nvals]); nodes
 * none of whose results is read dropped (uses recounted), values' indices kept. */
void graph_count_uses(const coil_graph *g, int *uses);
/* Reads of each value by g's nodes only (uses) and the last node reading it (last, -1 if
 * none); either may be NULL. */
void graph_node_reads(const coil_graph *g, int *uses, int *last);
int graph_drop_dead(coil_graph *g, int *uses, coil_arena *a);
/* A rewrite pass's loop: fn on each node whose op is op1 or op2 (uses current; recounted
 * after each change).  fn returns 1 changed, 0 not, -1 error.  1 if any changed, 0, -1. */
typedef int (*graph_node_fn)(coil_graph *g, coil_node *n, const int *uses, coil_arena *a, coil_err *err);
int graph_rewrite_each(coil_graph *g, int *uses, coil_op op1, coil_op op2, graph_node_fn fn, coil_arena *a,
		       coil_err *err);
/* A rewrite pass's end: when changed, g (a copy of *gp) without its dead nodes replaces *gp. */
int graph_rewrite_done(coil_graph **gp, coil_graph *g, int changed, int *uses, coil_arena *a, coil_err *err);
coil_graph *graph_copy(const coil_graph *g0, coil_arena *a);
/* The bytes of value v; 0 for a symbolic size. */
int64_t graph_value_bytes(const coil_value *v);
coil_arg *node_reargs(coil_node *n, coil_op op, int keep, coil_arena *a);
int arg_tensor(coil_arg *arg, int v, coil_arena *a);
/* A node of op appended to g (room for it and its value is the caller's), its arguments
 * absent, with one result: value out, or a new one when out < 0.  NULL: no memory. */
coil_node *graph_append(coil_graph *g, coil_arena *a, coil_op op, const char *id, int out);
/* microbatch.c: *g at *chunk images of its batch (dim 0 of every input, *total of them)
 * where its images never meet, else left as it is (*total 0).  *chunk: 0 the rule's
 * choice (set to it), -1 never, c > 0 c where it divides the batch.  -1 only out of memory. */
int ir_microbatch(coil_graph **g, int64_t *chunk, coil_arena *a, int64_t *total, coil_err *err);
/* sescale.c: a squeeze-excite scale read by a 1x1 convolution folded into its weights, per image (a bmm). */
int ir_se_scale(coil_graph **g, coil_arena *a, coil_err *err);
/* shuffle.c: ShuffleNet's view, transpose, view of the channels into one channel_shuffle. */
int ir_channel_shuffle(coil_graph **g, coil_arena *a, coil_err *err);
/* quant.c: q(op(dq(x))) with the same quantization on both sides, op moving data
 * without arithmetic (max pooling, views, cat, padding): op(x) on the quantized values. */
int ir_requant(coil_graph **g, coil_arena *a, coil_err *err);
/* bf16 convolutions and matrix products computed in f32 between casts where the
 * target's features (F_* bits) lack AVX-512, which oneDNN's bf16 kernels need (widen.c). */
int ir_widen_bf16(coil_graph **g, coil_arena *a, unsigned features, coil_err *err);
void ir_fold_free(ir_fold *f);
/* decompose.c: an empty IR of graph g (freed with ir_free); what runs on
 * oneDNN (lower_dnnl.c's plan, into ir->dn); then g's nodes as IR nodes. */
coil_ir *ir_create(coil_graph *g, coil_err *err);
int ir_plan_dnnl(coil_ir *ir, coil_err *err);
int ir_decompose(coil_ir *ir, coil_err *err);
/* Whether graph node n is a scatter (scatter_add, scatter_reduce, index_add,
 * index_reduce, gather_scatter) into a fill of its output's dtype, zeros(n,
 * F).scatter_add(...): its kernel writes the fill itself and does not read it,
 * so decompose leaves the fill out of the kernel's inputs. */
int ir_scatter_fills_self(const coil_ir *ir, const coil_node *n);
int ir_fuse(coil_ir *ir, coil_err *err);
int ir_schedule(coil_ir *ir, coil_err *err);
int ir_memplan(coil_ir *ir, coil_err *err);
char *ir_emit_c(coil_ir *ir, const char *target_desc, const char *graph_hash, coil_err *err);
/* dump.c: each pass's result as text, for --dump-after. */
void ir_dump(coil_ir *ir, FILE *f);
void fold_dump(const ir_fold *fd, FILE *f);
void dnnl_dump(const coil_ir *ir, FILE *f);
void ir_free(coil_ir *ir);

/* Helpers (ir.c / index.c). */
int ir_add(coil_ir *ir, const ir_node *proto, coil_err *err);
const char *prim_name(int p);
int prim_arity(int p);
/* The sources of a node (xsrc for IR_EXTERN). */
static inline const int *ir_srcs(const ir_node *n, int *cnt)
{
	*cnt = n->op == IR_EXTERN ? n->nx : n->nsrc;
	return n->op == IR_EXTERN ? n->xsrc : n->src;
}
/* Static numel of node (or -1 when symbolic). */
int64_t ir_static_numel(const ir_node *n);
int dims_equal(const coil_dim *a, const coil_dim *b, int rank);
/* A C expression for a dim, symbols spelled s0..s7. */
char *ir_dim_c(coil_arena *a, const coil_dim *d);
/* Index of operand k of node n, given n's index idx (C expressions). */
void ix_operand(coil_ir *ir, const ir_node *n, int k, char **idx, char **out);
/* Row-major linear offset of idx in a node's shape. */
char *ix_linear(coil_ir *ir, const ir_node *n, char **idx);

#endif
