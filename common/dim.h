/* Dimension expressions: a size is a polynomial with integer coefficients over
 * the graph's symbols (at most COIL_MAX_SYMS), e.g. 196*batch or 2*seq+1.
 * Static sizes are the constant polynomials.  Values are plain structs kept in
 * canonical form (terms sorted, merged, no zero coefficients), so equality is
 * memcmp-free field comparison via dim_eq.
 *
 * Symbols are free (bound from an input's dim at run time, with an optional
 * range) or derived: floor(a / d) for a polynomial a and a constant d > 0,
 * min(a, b) or max(a, b).  A derived symbol's operands use only symbols
 * before it, so binding the free ones and evaluating the rest in order
 * (symtab_derive) gives every value; a convolution's output size
 * floor((h + 2p - k) / s) + 1 is the polynomial 1 + t with t = floor((h +
 * 2p - k) / s) a derived symbol.  Equal definitions share one symbol. */
#ifndef COIL_DIM_H
#define COIL_DIM_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define COIL_MAX_SYMS 24
#define COIL_DIM_TERMS 8
#define COIL_MAX_RANK 8

typedef struct coil_term {
	int64_t coef;
	uint8_t pow[COIL_MAX_SYMS];
} coil_term;

typedef struct coil_dim {
	int n; /* number of terms; 0 is the constant 0 */
	coil_term t[COIL_DIM_TERMS];
} coil_dim;

enum sym_kind { SYM_FREE, SYM_FLOORDIV, SYM_MIN, SYM_MAX };

/* The symbol table a graph keeps; dim_parse may add to it when allowed. */
typedef struct coil_symtab {
	int n;
	char name[COIL_MAX_SYMS][33];  /* free symbols; derived ones print their definition */
	uint8_t kind[COIL_MAX_SYMS];   /* enum sym_kind */
	coil_dim a[COIL_MAX_SYMS], b[COIL_MAX_SYMS]; /* operands: floor(a / den), min/max(a, b) */
	int64_t den[COIL_MAX_SYMS];
	int64_t lo[COIL_MAX_SYMS], hi[COIL_MAX_SYMS]; /* free: declared range (hi 0: none) */
} coil_symtab;

coil_dim dim_const(int64_t v);
coil_dim dim_sym(int idx);
int dim_is_const(const coil_dim *d, int64_t *v); /* 1 if constant (and *v set) */
int shape_is_const(const coil_dim *s, int n);   /* 1 if s[0..n) are all constant */
int dim_eq(const coil_dim *a, const coil_dim *b);
int dim_eq_const(const coil_dim *d, int64_t v);

/* Arithmetic: 0 on success, -1 with err on overflow or too many terms. */
int dim_add(coil_dim *out, const coil_dim *a, const coil_dim *b, coil_err *err);
int dim_sub(coil_dim *out, const coil_dim *a, const coil_dim *b, coil_err *err);
int dim_mul(coil_dim *out, const coil_dim *a, const coil_dim *b, coil_err *err);
/* Exact division: by a constant dividing every coefficient, or by a monomial
 * dividing every term; -1 otherwise ("not an exact division"). */
int dim_div(coil_dim *out, const coil_dim *a, const coil_dim *b, coil_err *err);
/* Floor division by a positive constant.  The multiples of d come out as a
 * polynomial; what is left, when not constant, becomes a derived symbol of
 * tab (tab NULL: an error instead). */
int dim_floordiv(coil_dim *out, const coil_dim *a, int64_t d, coil_symtab *tab, coil_err *err);
/* min(a, b) / max(a, b): one operand when the difference has a known sign
 * for every value of the symbols (each >= its lower bound), else a derived
 * symbol of tab. */
int dim_minmax(coil_dim *out, const coil_dim *a, const coil_dim *b, int is_max, coil_symtab *tab,
	       coil_err *err);
/* A lower bound of d's value (-1 when none is known, e.g. a negative term). */
int64_t dim_lower(const coil_dim *d, const coil_symtab *tab);
/* 1 when d >= 0 for every binding of the symbols (as far as can be shown). */
int dim_nonneg(const coil_dim *d, const coil_symtab *tab);
/* Whether d uses symbol k. */
int dim_uses(const coil_dim *d, int k);
/* Values of the derived symbols from the free ones in vals (in place). */
int symtab_derive(const coil_symtab *tab, int64_t *vals, coil_err *err);

/* Value with the symbols bound to vals; -1 with err on overflow. */
int dim_eval(const coil_dim *d, const int64_t *vals, int64_t *out, coil_err *err);
/* Lower bound used for size checks: every symbol taken as 1. */
int64_t dim_min(const coil_dim *d);

/* Parse an expression string: integers, symbols, + - * ( ), a // c (c a
 * positive integer), min(a, b), max(a, b).
 * New symbols are added to tab only when add_syms is set. */
int dim_parse(const char *s, coil_symtab *tab, int add_syms, coil_dim *out, coil_err *err);
/* Print as e.g. "196*batch+1"; returns buf. */
char *dim_format(const coil_dim *d, const coil_symtab *tab, char *buf, size_t cap);
/* tab with its free symbols renamed s0, s1, ... by index (derived ones keep
 * printing their definitions): how canonical graphs and artifacts spell
 * sizes, with no name from the graph. */
void symtab_canonical(const coil_symtab *tab, coil_symtab *out);
/* A table naming every symbol s0, s1, ... (derived ones too): how generated
 * C and dumps spell sizes. */
const coil_symtab *symtab_generic(void);
/* Print a whole shape as "[2, batch, 3]". */
char *shape_format(const coil_dim *s, int rank, const coil_symtab *tab, char *buf, size_t cap);

#endif
