/* Dimension expressions: a size is a polynomial with integer coefficients over
 * the graph's symbols (at most COIL_MAX_SYMS), e.g. 196*batch or 2*seq+1.
 * Static sizes are the constant polynomials.  Values are plain structs kept in
 * canonical form (terms sorted, merged, no zero coefficients), so equality is
 * memcmp-free field comparison via dim_eq. */
#ifndef COIL_DIM_H
#define COIL_DIM_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define COIL_MAX_SYMS 8
#define COIL_DIM_TERMS 4
#define COIL_MAX_RANK 8

typedef struct coil_term {
	int64_t coef;
	uint8_t pow[COIL_MAX_SYMS];
} coil_term;

typedef struct coil_dim {
	int n; /* number of terms; 0 is the constant 0 */
	coil_term t[COIL_DIM_TERMS];
} coil_dim;

/* The symbol table a graph keeps; dim_parse may add to it when allowed. */
typedef struct coil_symtab {
	int n;
	char name[COIL_MAX_SYMS][33];
} coil_symtab;

coil_dim dim_const(int64_t v);
coil_dim dim_sym(int idx);
int dim_is_const(const coil_dim *d, int64_t *v); /* 1 if constant (and *v set) */
int dim_eq(const coil_dim *a, const coil_dim *b);
int dim_eq_const(const coil_dim *d, int64_t v);

/* Arithmetic: 0 on success, -1 with err on overflow or too many terms. */
int dim_add(coil_dim *out, const coil_dim *a, const coil_dim *b, coil_err *err);
int dim_sub(coil_dim *out, const coil_dim *a, const coil_dim *b, coil_err *err);
int dim_mul(coil_dim *out, const coil_dim *a, const coil_dim *b, coil_err *err);
/* Exact division: by a constant dividing every coefficient, or by a monomial
 * dividing every term; -1 otherwise ("not an exact division"). */
int dim_div(coil_dim *out, const coil_dim *a, const coil_dim *b, coil_err *err);
/* Floor division by a positive constant: exact for constants, or for
 * polynomials when every non-constant coefficient is divisible by d. */
int dim_floordiv(coil_dim *out, const coil_dim *a, int64_t d, coil_err *err);

/* Value with the symbols bound to vals; -1 with err on overflow. */
int dim_eval(const coil_dim *d, const int64_t *vals, int64_t *out, coil_err *err);
/* Lower bound used for size checks: every symbol taken as 1. */
int64_t dim_min(const coil_dim *d);

/* Parse an integer-free expression string: integers, symbols, + - * ( ).
 * New symbols are added to tab only when add_syms is set. */
int dim_parse(const char *s, coil_symtab *tab, int add_syms, coil_dim *out, coil_err *err);
/* Print as e.g. "196*batch+1"; returns buf. */
char *dim_format(const coil_dim *d, const coil_symtab *tab, char *buf, size_t cap);
/* Print a whole shape as "[2, batch, 3]". */
char *shape_format(const coil_dim *s, int rank, const coil_symtab *tab, char *buf, size_t cap);

#endif
