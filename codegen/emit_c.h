/* Shared by emit_c.c (the kernels) and emit_abi.c (the artifact around
 * them, and the file layout): the emitter's state. */
#ifndef COIL_CODEGEN_EMIT_C_H
#define COIL_CODEGEN_EMIT_C_H

#include "codegen/emit.h"

/* A distinct kernel function: its canonical text is the key. */
typedef struct kfn {
	char *key;
	unsigned long hash;
	char *proto;  /* "void kfn<N>(...)" */
	char *text;   /* the definition */
	size_t size;
	int file;     /* the file it goes in (split layout) */
} kfn;

typedef struct ectx {
	coil_ir *ir;
	coil_arena *a;
	FILE *f;          /* the current kernel's body */
	int k, ntmp, ind;
	emit_memo memo;
	char *used;       /* buffers the kernel touches */
	emit_errs errs;   /* runtime error messages */
	char *may_fail;   /* per kernel: raises runtime errors */
	coil_err *err;
	int bad;
	const vec_isa *isa; /* NULL: scalar */
	kfn *fn;          /* the distinct kernel functions */
	int nfn, capfn;
	int *ht, htcap;   /* canonical text -> function */
	int *fn_of;       /* per kernel: its function */
	char **call;      /* per kernel: its call in run */
	char **bytes;     /* per kernel: the bytes of the buffers it touches, a C expression (the profile) */
	char **flops;     /* per kernel: a convolution's or product's multiply-adds times 2, a C expression ("0") */
	char **pname;     /* per kernel: its kind and graph nodes, the inside of a C string literal */
	const char *fname;   /* the functions' names: kfn (run), fold_kfn (create) */
	const char *storage; /* COIL_KFN, or static for create's functions (in model.c) */
	struct ectx *fold;   /* the create IR's kernels (fold.c), NULL */
} ectx;

/* A line of the current kernel's body, indented (c->f). */
void ectx_out(ectx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* v as a C literal of type t. */
char *ectx_literal(ectx *c, double v, coil_dtype t);
/* The state for ir (c->ir, c->a, c->err, c->isa set) whose functions are
 * named fname<N> with storage; 0 or -1 with c->err. */
int ectx_init(ectx *c, const char *fname, const char *storage);
/* The create IR's kernels (fold.c), into c->fold; 0 or -1. */
int emit_fold_kernels(ectx *c);
/* Kernel k into its function (a new one, or one of the same text): 0 or -1. */
int emit_kernel(ectx *c, int k);

#endif
