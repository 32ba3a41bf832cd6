/* The graph: values (inputs, params, constants, node results) and nodes that
 * apply ATen ops to them.  graph_parse turns JSON into a validated graph with
 * every value's dtype and (symbolic) shape inferred; nothing after it needs to
 * check the structure again.  All memory lives in the graph's arena. */
#ifndef COIL_GRAPH_H
#define COIL_GRAPH_H

#include <stdint.h>

#include "common/arena.h"
#include "common/dim.h"
#include "common/dtype.h"
#include "common/error.h"
#include "common/ops.h"

#define COIL_FORMAT_VERSION 1
#define COIL_MAX_NODES 1000000
#define COIL_MAX_CONST_ELEMS 4096
#define COIL_MAX_NAME 128
#define COIL_MAX_BYTES ((int64_t)1 << 40)

enum value_kind { VAL_INPUT, VAL_PARAM, VAL_CONST, VAL_NODE };

typedef struct coil_value {
	const char *name;   /* user's name; NULL for unnamed results */
	enum value_kind kind;
	int index;          /* position among inputs/params/constants, or node index */
	int out;            /* which result of its node */
	coil_dtype dtype;
	int rank;
	coil_dim shape[COIL_MAX_RANK];
	void *data;         /* constants: row-major elements of dtype */
} coil_value;

/* A parsed argument, aligned with the op's schema. */
enum arg_kind {
	ARG_NONE,    /* absent optional */
	ARG_TENSOR,  /* v[0] */
	ARG_TENSORS, /* v[0..n); -1 for an absent Tensor? entry */
	ARG_INT,     /* i */
	ARG_SCALAR,  /* f, and i when is_int */
	ARG_BOOL,    /* i */
	ARG_STR,     /* s */
	ARG_INTS,    /* ints[0..n) */
	ARG_DIMS,    /* dims[0..n) (SymInt, SymInt[]); ints filled too when all static */
	ARG_DTYPE,   /* i */
	ARG_FLOATS,  /* floats[0..n) (float[]) */
};

typedef struct coil_arg {
	enum arg_kind kind;
	int is_int;      /* ARG_SCALAR: an integer scalar */
	int is_bool;     /* ARG_SCALAR: written as true/false (is_int is set too) */
	int n;
	int64_t i;
	double f;
	const char *s;
	int *v;
	int64_t *ints;
	double *floats;
	coil_dim *dims;
} coil_arg;

typedef struct coil_node {
	const char *id; /* user's node id, for messages only */
	coil_op op;
	coil_arg *args; /* op_info(op)->nargs entries */
	int nout;
	int *outs;      /* value index of each result */
} coil_node;

/* An assumption a shape rule made about the symbols, checked whenever they
 * are bound (interp's bind_symbols, an artifact's run): e >= c (a
 * convolution's output is not empty), or e divisible by c (a reshape's -1
 * came out exact). */
enum guard_kind { GUARD_GE, GUARD_DIV };
typedef struct coil_guard {
	enum guard_kind kind;
	coil_dim e;
	int64_t c;
	int node;        /* the node whose rule relied on it */
	const char *why; /* e.g. "output size" */
} coil_guard;

typedef struct coil_graph {
	coil_arena *arena;
	coil_symtab syms;
	int nguards, capguards;
	coil_guard *guards;
	int nvals, capvals;
	coil_value *vals;
	int ninputs, nparams, nconsts, nnodes, noutputs;
	int *inputs, *params, *consts, *outputs;
	coil_node *nodes; /* topologically sorted */
} coil_graph;

/* Parse, validate and infer.  Returns NULL with err naming the node, op and
 * field at fault.  The result is freed with graph_free. */
coil_graph *graph_parse(const char *json, size_t len, coil_err *err);
/* The two halves of graph_parse, for a graph that comes inside another
 * document (coild's envelope): text -> JSON with duplicate keys refused (the
 * one rule for every way in), and JSON -> graph (root stays the caller's). */
struct json_t;
struct json_t *graph_json_load(const char *json, size_t len, coil_err *err);
coil_graph *graph_from_json(struct json_t *root, coil_err *err);
coil_graph *graph_load_file(const char *path, coil_err *err);
/* A file's bytes (malloc'd into *text, *len of them): what graph_load_file
 * parses, for a caller that keeps the text too. */
int graph_read_file(const char *path, char **text, size_t *len, coil_err *err);
void graph_free(coil_graph *g);

/* Canonical text (JSON, see docs/graph-format.md) in the graph's arena, and its
 * SHA-256 as 64 lowercase hex digits. */
const char *graph_canonical(coil_graph *g, size_t *len, coil_err *err);
/* The node index in g of each node of its canonical form (node "#k" of a
 * compiled artifact is g->nodes[order[k]]; order: g->nnodes ints): their
 * count, or -1 with err. */
int graph_canonical_order(coil_graph *g, int *order, coil_err *err);
int graph_hash(coil_graph *g, char hex[65], coil_err *err);

/* Helpers for rules and passes. */
static inline coil_value *graph_val(coil_graph *g, int v) { return &g->vals[v]; }
static inline coil_value *node_in(coil_graph *g, const coil_node *n, int arg)
{
	return &g->vals[n->args[arg].v[0]];
}
static inline coil_value *node_out(coil_graph *g, const coil_node *n, int i)
{
	return &g->vals[n->outs[i]];
}

/* Records the guard (once); n may be NULL.  A guard that holds for every
 * binding (or that the symbols' ranges decide) is not recorded; one that can
 * never hold is an error naming the node. */
int graph_guard(coil_graph *g, const coil_node *n, enum guard_kind kind, const coil_dim *e, int64_t c,
		const char *why, coil_err *err);
/* The guard as text, sizes spelled with tab (the graph's symbols, or
 * symtab_canonical's): "(h+1)//2 >= 1", "3*s % 2 == 0". */
char *guard_format(const coil_symtab *tab, const coil_guard *gd, char *buf, size_t cap);
/* With the free symbols bound in vals: checks their declared ranges,
 * computes the derived ones and checks every guard; the error names the
 * input and dim bound to the symbol at fault, the guard and its node. */
int graph_check_syms(const coil_graph *g, int64_t *vals, coil_err *err);
/* Free symbol k's first binding: input position and dim (-1 if none). */
int graph_sym_binding(const coil_graph *g, int k, int *dim);
/* The first free symbol e depends on (through derived ones), or -1. */
int graph_sym_root(const coil_graph *g, const coil_dim *e);

/* "node 'id' (aten.op)" prefix for messages about a node. */
int node_errf(coil_err *err, const coil_node *n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
