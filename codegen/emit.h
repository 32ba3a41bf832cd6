/* Shared by emit_c.c and extern.c: runtime errors of generated code and the
 * extern-kernel entry point.
 *
 * A kernel that finds bad data (an embedding index out of range, an integer
 * division by zero) calls coil_raise(x->st, CODE, a, b) and carries on
 * harmlessly; coil_model_run checks the status after that kernel and fails
 * with the message registered under CODE (a printf format taking up to two
 * long long arguments, a and b).  Messages name the op, never user names. */
#ifndef COIL_CODEGEN_EMIT_H
#define COIL_CODEGEN_EMIT_H

#include <stdio.h>

#include "codegen/codegen.h"
#include "codegen/ir.h"

typedef struct emit_errs {
	coil_arena *arena;
	int n, cap;
	char **msg;   /* msg[0] unused: code 0 means no error */
	int uses;     /* calls to emit_err_code, for "did this kernel register one" */
} emit_errs;

/* The code (> 0) of the message "<op of gnode>: <fmt>", registered once. */
int emit_err_code(emit_errs *e, coil_ir *ir, int gnode, const char *fmt);

/* Renders the body of extern kernel k into f; marks the IR nodes whose
 * buffers it touches in used[].  On failure sets *bad and err. */
void emit_extern(coil_ir *ir, FILE *f, int k, int *used, emit_errs *errs, coil_err *err, int *bad);

/* emit_common.c: the C type of a dtype; the C name of value v's buffer
 * (in0, p1, c2, o0 or b17: inputs, params, constants, outputs, arena
 * buffers; the caller marks it used); and the index pidx of output p of a
 * reduction kernel whose kept dims (those not 1 in p) take the loop
 * variables outer[] of the reduction r0's non-1 dims in order. */
/* The C type of a buffer's elements (bf16 and f16: their bits, uint16_t),
 * and of a value in a kernel (bf16 and f16: float, holding a value the
 * type can represent). */
const char *emit_ctype(coil_dtype t);
char *emit_cfmt(coil_arena *a, const char *s);
const char *emit_vtype(coil_dtype t);
/* The scalar conversions of the artifact's prelude (vmath.h): "bf16", "f16". */
const char *emit_half(coil_dtype t);
char *emit_buf_name(coil_ir *ir, int v);
void emit_kept_index(const ir_node *p, const ir_node *r0, char **outer, char **pidx);

/* The emitters' memo table (memo.c): the C name of value v rendered at index
 * key; memo_push opens a scope, memo_pop forgets what was put in it.  Entries
 * live in arena a. */
typedef struct emit_memo {
	struct emit_memo_ent {
		int v, depth;
		char *key, *name;
	} *m;
	int n, cap, depth;
} emit_memo;

char *memo_get(const emit_memo *t, int v, const char *key);
char *memo_put(emit_memo *t, coil_arena *a, int v, char *key, char *name);
static inline void memo_push(emit_memo *t) { t->depth++; }
void memo_pop(emit_memo *t);

/* Explicit SIMD (vec.c): the instruction-set table of a target (NULL for
 * generic: emit_c's scalar table), the artifact prelude it needs (vmath.h
 * and helpers; printed for every target), and the vector rendering of a
 * pointwise or reduction kernel: 1 if rendered into f (buffers it touches
 * marked in used[]), 0 if the kernel is not all f32/bool (nothing written:
 * render it scalar), -1 with err. */
typedef struct vec_isa vec_isa;
const vec_isa *vec_isa_for(const char *target);
int vec_width(const vec_isa *isa);
void vec_prelude(FILE *f);
const char *vec_vmath_source(void);
const char *vec_attn_source(void);
const char *vec_upsample_source(void); /* common/upsample.h */
const char *vec_fft_source(void);      /* codegen/fft.h */
const char *vec_rnn_source(void);      /* codegen/rnn.h */
int vec_emit_kernel(coil_ir *ir, const vec_isa *isa, FILE *f, int k, char *used, coil_err *err);

/* The generated C's layout (emit_c.c).  Every kernel renders once into a
 * canonical text (its buffers are parameters a0, a1, ..); kernels with the
 * same text share one function kfn<N>, which run calls with each kernel's
 * buffers.  units 0: one file, model.c, that #includes the oneDNN runtime;
 * units N > 0: split into model.h (shared declarations), model.c (constants,
 * create-time code and the ABI: "light", built at -O0, or -Og with folding
 * kernels) and up to N files
 * k1.c .. of kernel functions, spread by size, the runtime compiled on its
 * own; units -1: chosen from the kernels' size and cpus (one file with one
 * CPU, or when small and without the runtime). */
#define EMIT_MAX_UNITS 12
#define EMIT_UNIT_BYTES 150000  /* kernel C per file in the automatic layout, about */
typedef struct emit_layout {
	int units;
	int cpus;
} emit_layout;

int ir_emit_src(coil_ir *ir, const char *target, const char *hash, const emit_layout *lay, codegen_src *out,
		coil_err *err);

#endif
