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

typedef struct coil_graph {
	coil_arena *arena;
	coil_symtab syms;
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

/* "node 'id' (aten.op)" prefix for messages about a node. */
int node_errf(coil_err *err, const coil_node *n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
