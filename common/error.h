/* Error reporting shared by every module: a caller-provided struct that the
 * failing call fills with a status code, one precise line and, where a graph
 * node is at fault, its id.  Functions return 0 on success and -1 (or another
 * negative value they document) on failure.
 *
 * The code says what kind of failure it was; front ends map it (coild to an
 * HTTP status in one table, server/http.c; the CLI to its exit status), never
 * the message text. */
#ifndef COIL_ERROR_H
#define COIL_ERROR_H

#include <stddef.h>

typedef enum coil_code {
	COIL_OK = 0,
	COIL_E_INPUT,       /* the request, graph or file is malformed or invalid */
	COIL_E_UNSUPPORTED, /* well-formed, but this coil cannot do it (op, dtype, target, feature) */
	COIL_E_LIMIT,       /* over a configured limit (nodes, depth, body, emitted code) */
	COIL_E_RESOURCE,    /* out of memory, disk full, a process or time budget exhausted */
	COIL_E_IO,          /* a file, directory, database or socket operation failed */
	COIL_E_COMPILER,    /* the C compiler failed or was killed */
	COIL_E_TIMEOUT,     /* a deadline passed */
	COIL_E_INTERNAL,    /* a bug in coil */
	COIL_NCODES
} coil_code;

typedef struct coil_err {
	char msg[512];
	coil_code code;
	char node[96]; /* the id of the graph node at fault, or "" */
} coil_err;

/* Fill e (which may be NULL) with code and a printf-style message; returns -1
 * so that callers can write `return coil_errc(e, COIL_E_IO, ...);`. */
int coil_errc(coil_err *e, coil_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The same with COIL_E_INTERNAL: for failures that are coil's own. */
int coil_errf(coil_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same with COIL_E_INPUT: the input at fault. */
int coil_err_input(coil_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "out of memory" with COIL_E_RESOURCE. */
int coil_err_oom(coil_err *e);

/* Prefix an existing message: "prefix: old message"; the code and node stay.
 * Returns -1. */
int coil_err_prefix(coil_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Record the node at fault (its id; NULL clears it). */
void coil_err_node(coil_err *e, const char *node_id);

/* The code of a failed system call's errno: resource for a full disk, a
 * quota or no memory, else I/O. */
coil_code coil_code_of_errno(int e);

/* The code's name in replies and logs: "bad_input", "unsupported", ... */
const char *coil_code_name(coil_code code);

#endif
