/* oneDNN lowering: which convolutions and matrix products run on
 * codegen/rt/dnnl_rt (lower_dnnl.c) and how they render (emit_dnnl.c).
 *
 * lower_dnnl.c plans on the graph, before decompose: every f32 convolution
 * with constant weights and every f32 mm/addmm/bmm becomes a "fusion": its
 * head node plus the chain of single-user nodes after it that oneDNN can
 * apply on the way out (views, batch norm and constant per-channel
 * multiply/add folded into the weights, activations, a residual add, other
 * broadcast binaries), up to `last`.  decompose then emits one IR_EXTERN node
 * (gnode = head, shape of last's result) at `last` instead of the chain.
 *
 * emit_dnnl.c renders a fusion's kernel as one rt_conv_run/rt_matmul_run
 * call, and the model's create/destroy: the rt objects (primitives, folded
 * and prepacked weights) are built once per model handle and shape binding,
 * in coil_model_create when the graph has no symbols, else at the first run
 * with each new binding.  The artifact includes the rt's source, which
 * build.c writes beside model.c from the copy embedded in libcoil.
 *
 * Layout (lower_dnnl.c, layout()): activations between consecutive 2-d
 * convs stay NHWC; only chain boundaries reorder (inside the rt call).  The
 * nodes between them compute in the channels-last frame (dn_plan.cl,
 * decompose's cl_enter): an NHWC value is an [N, H, W, C] IR node that its
 * [N, C, H, W] graph value sees through a flat reshape.
 * Pooling between such convs (resnet's stem max pool, a global average pool
 * feeding the classifier) runs on oneDNN too, in NHWC; a pool with NCHW on
 * both sides stays generated code.
 *
 * NaNs: fused eltwise post-ops follow oneDNN (relu(NaN) = 0), not ATen.
 *
 * Measurement switches in the compiler's environment (not in the cache key:
 * use a private COIL_CACHE_DIR): COIL_DNNL=0 turns the lowering off (every
 * convolution and matrix product as generated loops); COIL_DNNL_NHWC=0 keeps
 * every activation NCHW (the rt reorders around each conv). */
#ifndef COIL_CODEGEN_DNNL_H
#define COIL_CODEGEN_DNNL_H

#include <stdint.h>
#include <stdio.h>

#include "codegen/codegen.h"
#include "codegen/emit.h"
#include "codegen/ir.h"

#define DN_MAX_POST 8   /* = RT_MAX_POST */
#define DN_MAX_FOLD 8
#define DN_SETS 8     /* bindings of the symbols whose rt objects a model handle keeps */
#define DN_SEEN 64    /* bindings whose runs a handle counts */
#define DN_HOT 8      /* runs after which a binding gets per-shape objects (generic ones before):
                       * generic matrix products run about 5% slower, and making a
                       * binding's objects costs about as much as 4-8 runs of BERT's */
#define DN_WCOPIES 2  /* sets' worth of packed weights a handle keeps at first (coil_dn_trim) */
#define DN_WCOPIES_MAX 3 /* ... and at most, once it thrashes: with the runtime's own Winograd
                       * packing a rebuilt set costs ~40 ms on resnet18 (not ~0.5 s), and three
                       * sets serve three batch sizes taking turns without rebuilds */
#define DN_GHOST 8    /* bindings whose sets coil_dn_trim released, remembered */
#define DN_THRASH 4   /* of the last 8 sets built, this many for remembered ones: thrashing */

/* rt_post_kind, in the rt's order (codegen/rt/dnnl_rt.h). */
enum dn_post_kind {
	DN_RELU, DN_LEAKY_RELU, DN_GELU_ERF, DN_GELU_TANH, DN_SILU, DN_SIGMOID, DN_TANH,
	DN_HARDSWISH, DN_HARDSIGMOID, DN_CLAMP, DN_ELU, DN_LINEAR, DN_ROUND, DN_ADD_SAME, DN_ADD_BCAST,
	DN_MUL_BCAST, DN_SUB_BCAST, DN_DIV_BCAST,
};

typedef struct dn_post {
	enum dn_post_kind kind;
	double a, b;
	double scale;    /* eltwise kinds: the result times scale (0: 1) */
	int val;         /* graph value of the tensor operand, -1 */
	int last_only;   /* operand broadcasts along the last dim only (after a view) */
} dn_post;

/* Folds into weights and bias, at create time, in order. */
enum dn_fold_kind { FOLD_BN, FOLD_MUL, FOLD_ADD, FOLD_DIV, FOLD_SUB };
typedef struct dn_fold {
	enum dn_fold_kind kind;
	int gnode;       /* FOLD_BN: the batch norm node */
	int val;         /* per-channel graph value, -1 for the scalar s */
	double s;
} dn_fold;

typedef struct dn_fuse {
	int head, last;  /* graph nodes */
	int is_conv;
	int is_pool;     /* 2-d max/avg pooling: no chain; only between NHWC convs */
	int b_param;     /* matmul: graph value of the constant B (or of W in B = t(W)), -1 */
	int b_trans;
	int nfold;
	dn_fold fold[DN_MAX_FOLD];
	int npost;
	dn_post post[DN_MAX_POST];
	int src_nhwc, dst_nhwc; /* 2-d convs: activations kept channels-last (layout pass) */
	int dst_f32;     /* a bf16 chain ending in a cast to f32: oneDNN writes f32 (no rounding) */
	/* int8 (q): the head's input and weight are dequantized (q_xdq: per tensor, of a u8/i8
	 * value; q_wdq: per output channel or per tensor, of a constant s8 weight) and the chain
	 * ends in a per-tensor quantize (last).  The head reads the quantized values; the rt
	 * computes in s32 with the scales folded in at create (rt_quant).  q_rdq: the
	 * dequantize of the residual (the sum post-op reads its quantized value), else -1. */
	int q, q_xdq, q_wdq, q_rdq;
	/* q = 2, dynamic: q_xdq dequantizes a quantize of an f32 x with qparams from
	 * choose_qparams (lower_dnnl.c's dq_dyn); the head reads x, which the rt quantizes at
	 * each run, and the chain is a float one (real values out, no final quantize). */
	int q_sdiv;      /* the quantize whose scale divides the accumulator (last, or the first
			  * of a chain through requantized activations: q_requant) */
	int emitted;     /* set by emit: its kernel is live */
	int kernel;      /* set by emit: that kernel */
	int elt;         /* a float conv's or product's eltwise post-ops (activations) */
	int act;         /* the activation autotune kept out of the chain (dn_tune.unfuse), -1 */
} dn_fuse;

/* The lowerings autotuning (codegen/autotune.c) chooses between for a
 * fusion: bit c of dn_tune_choices is set when choice c is a distinct way
 * to run it (0 always: the runtime's own heuristics), and the fusion is a
 * site when another is. */
enum {
	DN_TUNE_AUTO = 0,   /* the runtime's heuristics: Winograd where it applies, NHWC or NCHW by shape */
	DN_TUNE_NO_WINO,    /* the same without Winograd */
	DN_TUNE_NCHW,       /* oneDNN's NCHW (GEMM) kernel, no Winograd */
	DN_TUNE_NHWC,       /* through the NHWC primitive, no Winograd */
	DN_TUNE_IMPL1,      /* the heuristics' path, no Winograd, oneDNN's second jit implementation */
	DN_TUNE_IMPL2,      /* ... its third */
	DN_TUNE_N
};
unsigned dn_tune_choices(const coil_ir *ir, int j);
/* Autotuning across the builds of one compile (autotune.c), per node of the
 * graph the pipeline lowers: a convolution head's choices, and what the
 * measuring builds found.  Build A keeps the heuristics' fusions, build B
 * leaves every fused activation out (generated code runs it). */
typedef struct dn_tune {
	int nnodes;
	int build;          /* 0: the final build (nothing timed), 1: A, 2: B */
	uint8_t *path;      /* the DN_TUNE_* choice the final build takes */
	uint8_t *unfuse;    /* 1: the activation out of the fusion (read by the plan) */
	uint8_t *site;      /* A: 2 for a timed conv head, | 1 when its fusion has activations */
	uint8_t *path_a, *path_b; /* each build's fastest path for the head */
	double *t_a, *t_b;  /* the head's kernel at that path (B: plus its activation's own cost) */
	double *t0_a;       /* A: the head's kernel at the heuristics' path */
	double *t_node;     /* A: per node, the time of a kernel that covers it (-1: none) */
	double secs;        /* spent timing */
	double deadline_ms; /* clock_ms() past which no more timing starts (0: none) */
	int timed;          /* set by ir_autotune: build A was timed */
	char note[160];     /* why it was not, when it could not run */
} dn_tune;

/* Times so (built from ir, with ir->tune; its ABI takes g's params and
 * inputs) on nthreads threads: each head's path choices, and per kernel,
 * into ir->tune (autotune.c).  1 when timed, 0 when g has symbolic sizes or
 * nothing to choose, -1 with err. */
int ir_autotune(coil_ir *ir, coil_graph *g, const char *so, int nthreads, coil_err *err);
/* The choices from builds A and B's measures (ir->tune): how many heads take
 * a lowering the heuristics did not, and the time per run that saves. */
int dn_tune_decide(dn_tune *t, double *gain_ms);
/* Builds so_a (the heuristics') and so_c (the tuned) of static graph g timed
 * whole, interleaved: each one's median seconds a run.  0, or -1 when they
 * cannot be run. */
int dn_tune_verify(coil_graph *g, const char *so_a, const char *so_c, int nthreads, double *ta, double *tc);

typedef struct dn_plan {
	int nf;
	dn_fuse *f;
	int *at;         /* per graph node: -1, -2 absorbed into a fusion, or the fusion ending there */
	char *cl;        /* per graph node: computes in NHWC with per-channel operands (a batch
			  * norm, an SE block's scale): decompose builds it in the channels-last
			  * frame, its NHWC operands seen as [N, H, W, C] */
} dn_plan;

/* A pooling node's window as oneDNN takes it (kind: rt_pool_kind's order:
 * 0 max, 1 avg counting padding, 2 avg over the input only).  0, or -1 when
 * oneDNN cannot compute exactly what ATen does (divisor_override, an
 * averaging window that overhangs with ceil_mode and counts padding, an
 * adaptive pool whose windows differ in size or over symbolic sizes,
 * ceil_mode over symbolic sizes where the overhang is not representable). */
typedef struct dn_pool {
	int kind;
	int64_t k[2], s[2], pl[2], pr[2], d[2];
	int sym;  /* symbolic spatial sizes: pr is pl, or with ceil_mode set at run time */
	int ceil;
} dn_pool;
int dn_pool_window(coil_graph *g, const coil_node *n, dn_pool *w);

/* memplan's hook: the position in extern node ext's xsrc of its residual
 * (the operand of a conv or matmul fusion's sum post-op), or -1. */
int dn_residual(coil_ir *ir, int ext);
/* Whether xsrc[i] of extern node ext is read only when the fusion's object
 * is created (a conv's weight and bias, a matmul's constant B or bias). */
int dn_create_only(coil_ir *ir, int ext, int i);

/* If n is an mm/addmm whose B is t(W) (transpose(W, 0, 1), a 2-d permute)
 * of a constant W, which oneDNN reads transposed at no cost: that transpose's
 * node; else -1.  (fold keeps such a transpose for oneDNN to read.) */
int dn_b_transposed(coil_graph *g, const coil_node *n);

/* Pre-fold: marks (mark[node] = 1) the weight dequantize of every
 * convolution or matrix product whose int8 pattern holds (input and weight
 * dequantized as an int8 fusion takes them, its chain ending in a quantize):
 * fold keeps them in the run, so that oneDNN reads the s8 weights.  0, or -1
 * out of memory. */
int dn_q_weights(coil_graph *g, unsigned features, char *mark);

/* 0 when COIL_DNNL=0 turns the lowering off. */
int dn_enabled(void);
/* Plans g (NULL when nothing runs on oneDNN).  Lives in arena a. */
dn_plan *dn_plan_graph(coil_graph *g, const uint8_t *unfuse, unsigned features, coil_arena *a, coil_err *err);

/* decompose's hook for graph node i: 0 not ours, 1 res[0] is the fusion's
 * extern node, 2 absorbed (no results), -1 error. */
int dn_decompose_node(coil_ir *ir, int i, int *res, coil_err *err);

/* emit_c's hooks.  dn_emit_extern renders kernel k when it is a fusion's
 * (returns 1), else returns 0.  dn_emit_support goes before the kernels,
 * dn_emit_model right after struct coil_model; rt_unit: the runtime is a
 * translation unit of its own (its header is included), else model.c
 * includes its source. */
int dn_used(const coil_ir *ir);
int dn_emit_extern(coil_ir *ir, FILE *f, int k, int *used, emit_errs *errs);
void dn_emit_support(coil_ir *ir, FILE *f, int rt_unit);
void dn_emit_tune(coil_ir *ir, FILE *f);  /* the autotuning table and coil_model_tune */
void dn_emit_model(coil_ir *ir, FILE *f);

#endif
