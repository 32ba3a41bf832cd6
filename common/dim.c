#include "common/dim.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

coil_dim dim_const(int64_t v)
{
	coil_dim d = {0};
	if (v) {
		d.n = 1;
		d.t[0].coef = v;
	}
	return d;
}

coil_dim dim_sym(int idx)
{
	coil_dim d = {0};
	d.n = 1;
	d.t[0].coef = 1;
	d.t[0].pow[idx] = 1;
	return d;
}

static int term_cmp(const coil_term *a, const coil_term *b)
{
	return memcmp(a->pow, b->pow, COIL_MAX_SYMS);
}

static int is_const_term(const coil_term *t)
{
	for (int i = 0; i < COIL_MAX_SYMS; i++)
		if (t->pow[i])
			return 0;
	return 1;
}

int dim_is_const(const coil_dim *d, int64_t *v)
{
	if (d->n == 0) {
		if (v)
			*v = 0;
		return 1;
	}
	if (d->n == 1 && is_const_term(&d->t[0])) {
		if (v)
			*v = d->t[0].coef;
		return 1;
	}
	return 0;
}

int shape_is_const(const coil_dim *s, int n)
{
	for (int i = 0; i < n; i++)
		if (!dim_is_const(&s[i], NULL))
			return 0;
	return 1;
}

int dim_eq(const coil_dim *a, const coil_dim *b)
{
	if (a->n != b->n)
		return 0;
	for (int i = 0; i < a->n; i++)
		if (a->t[i].coef != b->t[i].coef || term_cmp(&a->t[i], &b->t[i]))
			return 0;
	return 1;
}

int dim_eq_const(const coil_dim *d, int64_t v)
{
	int64_t c;
	return dim_is_const(d, &c) && c == v;
}

/* Add term t into the canonical list in *d. */
static int add_term(coil_dim *d, const coil_term *t, coil_err *err)
{
	if (t->coef == 0)
		return 0;
	int i = 0;
	while (i < d->n && term_cmp(&d->t[i], t) < 0)
		i++;
	if (i < d->n && term_cmp(&d->t[i], t) == 0) {
		if (__builtin_add_overflow(d->t[i].coef, t->coef, &d->t[i].coef))
			return coil_err_input(err, "size expression overflows");
		if (d->t[i].coef == 0) {
			memmove(&d->t[i], &d->t[i + 1], (size_t)(d->n - i - 1) * sizeof *t);
			d->n--;
		}
		return 0;
	}
	if (d->n == COIL_DIM_TERMS)
		return coil_err_input(err, "size expression has more than %d terms", COIL_DIM_TERMS);
	memmove(&d->t[i + 1], &d->t[i], (size_t)(d->n - i) * sizeof *t);
	d->t[i] = *t;
	d->n++;
	return 0;
}

int dim_add(coil_dim *out, const coil_dim *a, const coil_dim *b, coil_err *err)
{
	coil_dim r = *a;
	for (int i = 0; i < b->n; i++)
		if (add_term(&r, &b->t[i], err))
			return -1;
	*out = r;
	return 0;
}

int dim_sub(coil_dim *out, const coil_dim *a, const coil_dim *b, coil_err *err)
{
	coil_dim r = *a;
	for (int i = 0; i < b->n; i++) {
		coil_term t = b->t[i];
		if (t.coef == INT64_MIN)
			return coil_err_input(err, "size expression overflows");
		t.coef = -t.coef;
		if (add_term(&r, &t, err))
			return -1;
	}
	*out = r;
	return 0;
}

int dim_mul(coil_dim *out, const coil_dim *a, const coil_dim *b, coil_err *err)
{
	coil_dim r = {0};
	for (int i = 0; i < a->n; i++)
		for (int j = 0; j < b->n; j++) {
			coil_term t;
			if (__builtin_mul_overflow(a->t[i].coef, b->t[j].coef, &t.coef))
				return coil_err_input(err, "size expression overflows");
			for (int k = 0; k < COIL_MAX_SYMS; k++) {
				int p = a->t[i].pow[k] + b->t[j].pow[k];
				if (p > 8)
					return coil_err_input(err, "size expression has a power above 8");
				t.pow[k] = (uint8_t)p;
			}
			if (add_term(&r, &t, err))
				return -1;
		}
	*out = r;
	return 0;
}

int dim_div(coil_dim *out, const coil_dim *a, const coil_dim *b, coil_err *err)
{
	if (b->n != 1 || b->t[0].coef == 0)
		return coil_err_input(err, "size division by a non-monomial or zero");
	const coil_term *m = &b->t[0];
	coil_dim r = {0};
	for (int i = 0; i < a->n; i++) {
		coil_term t = a->t[i];
		if (t.coef % m->coef)
			return coil_err_input(err, "size is not an exact multiple");
		t.coef /= m->coef;
		for (int k = 0; k < COIL_MAX_SYMS; k++) {
			if (t.pow[k] < m->pow[k])
				return coil_err_input(err, "size is not an exact multiple");
			t.pow[k] -= m->pow[k];
		}
		if (add_term(&r, &t, err))
			return -1;
	}
	*out = r;
	return 0;
}

static int64_t floordiv64(int64_t a, int64_t b)
{
	int64_t q = a / b;
	return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t mod64(int64_t a, int64_t b) { return a - floordiv64(a, b) * b; }

static int64_t gcd64(int64_t a, int64_t b)
{
	if (a < 0)
		a = -a;
	while (b) {
		int64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

/* The index of the derived symbol (kind, a, b, den), added when new. */
static int derived(coil_symtab *tab, int kind, const coil_dim *a, const coil_dim *b, int64_t den,
		   coil_err *err)
{
	coil_dim z = {0};
	if (!b)
		b = &z;
	for (int k = 0; k < tab->n; k++)
		if (tab->kind[k] == kind && tab->den[k] == den && dim_eq(&tab->a[k], a) && dim_eq(&tab->b[k], b))
			return k;
	if (tab->n == COIL_MAX_SYMS)
		return coil_err_input(err, "more than %d size symbols (free and derived)", COIL_MAX_SYMS);
	int k = tab->n++;
	memset(tab->name[k], 0, sizeof tab->name[k]);
	tab->kind[k] = (uint8_t)kind;
	tab->a[k] = *a;
	tab->b[k] = *b;
	tab->den[k] = den;
	tab->lo[k] = tab->hi[k] = 0;
	return k;
}

int dim_floordiv(coil_dim *out, const coil_dim *a, int64_t d, coil_symtab *tab, coil_err *err)
{
	if (d <= 0)
		return coil_err_input(err, "size division by %lld", (long long)d);
	/* a = d*q + r with r's coefficients in [0, d): floor(a/d) = q + floor(r/d) */
	coil_dim q = {0}, r = {0};
	for (int i = 0; i < a->n; i++) {
		coil_term tq = a->t[i], tr = a->t[i];
		tq.coef = floordiv64(a->t[i].coef, d);
		tr.coef = mod64(a->t[i].coef, d);
		if (add_term(&q, &tq, err) || add_term(&r, &tr, err))
			return -1;
	}
	int64_t rc;
	if (dim_is_const(&r, &rc)) { /* 0 <= rc < d */
		*out = q;
		return 0;
	}
	if (!tab)
		return coil_err_input(err, "symbolic size is not divisible by %lld", (long long)d);
	int64_t g = d;
	for (int i = 0; i < r.n; i++)
		g = gcd64(r.t[i].coef, g);
	for (int i = 0; i < r.n; i++)
		r.t[i].coef /= g;
	int k = derived(tab, SYM_FLOORDIV, &r, NULL, d / g, err);
	if (k < 0)
		return -1;
	coil_dim s = dim_sym(k);
	return dim_add(out, &q, &s, err);
}

int dim_uses(const coil_dim *d, int k)
{
	for (int i = 0; i < d->n; i++)
		if (d->t[i].pow[k])
			return 1;
	return 0;
}

/* An upper bound of symbol k's value, -1 when none is known. */
static int64_t dim_upper_sym(const coil_symtab *tab, int k)
{
	if (!tab || k >= tab->n)
		return -1;
	if (tab->kind[k] == SYM_FREE)
		return tab->hi[k] > 0 ? tab->hi[k] : -1;
	if (tab->kind[k] == SYM_FLOORDIV) {
		/* floor(a / den) <= a / den with a's terms bounded above */
		const coil_dim *a = &tab->a[k];
		int64_t s = 0;
		for (int i = 0; i < a->n; i++) {
			int64_t v = a->t[i].coef;
			if (v < 0 && !is_const_term(&a->t[i]))
				continue; /* dropping a negative term only raises the bound */
			for (int j = 0; j < COIL_MAX_SYMS; j++)
				for (int p = 0; p < a->t[i].pow[j]; p++) {
					int64_t hi = dim_upper_sym(tab, j);
					if (hi < 0 || __builtin_mul_overflow(v, hi, &v))
						return -1;
				}
			if (__builtin_add_overflow(s, v, &s))
				return -1;
		}
		return s < 0 ? 0 : s / tab->den[k];
	}
	/* min: either operand's bound; max: both */
	int64_t ua = -1, ub = -1;
	if (tab->a[k].n == 1 && is_const_term(&tab->a[k].t[0]))
		ua = tab->a[k].t[0].coef;
	else if (tab->a[k].n == 1 && tab->a[k].t[0].coef == 1)
		for (int j = 0; j < COIL_MAX_SYMS; j++)
			if (tab->a[k].t[0].pow[j] == 1)
				ua = dim_upper_sym(tab, j);
	if (tab->b[k].n == 1 && is_const_term(&tab->b[k].t[0]))
		ub = tab->b[k].t[0].coef;
	else if (tab->b[k].n == 1 && tab->b[k].t[0].coef == 1)
		for (int j = 0; j < COIL_MAX_SYMS; j++)
			if (tab->b[k].t[0].pow[j] == 1)
				ub = dim_upper_sym(tab, j);
	if (tab->kind[k] == SYM_MIN)
		return ua < 0 ? ub : ub < 0 ? ua : ua < ub ? ua : ub;
	return ua < 0 || ub < 0 ? -1 : ua > ub ? ua : ub;
}

int64_t dim_lower(const coil_dim *d, const coil_symtab *tab)
{
	int64_t s = 0;
	for (int i = 0; i < d->n; i++) {
		const coil_term *t = &d->t[i];
		int64_t v = t->coef;
		if (v < 0 && !is_const_term(t)) {
			/* a negative term is bounded by its symbols' declared maxima */
			for (int k = 0; k < COIL_MAX_SYMS; k++)
				for (int p = 0; p < t->pow[k]; p++) {
					int64_t hi = dim_upper_sym(tab, k);
					if (hi < 0 || __builtin_mul_overflow(v, hi, &v))
						return -1;
				}
			if (__builtin_add_overflow(s, v, &s))
				return -1;
			continue;
		}
		for (int k = 0; k < COIL_MAX_SYMS; k++)
			for (int p = 0; p < t->pow[k]; p++) {
				int64_t lo = 1;
				if (tab && k < tab->n) {
					if (tab->kind[k] == SYM_FREE)
						lo = tab->lo[k] > 0 ? tab->lo[k] : 1;
					else if (tab->kind[k] == SYM_FLOORDIV)
						lo = floordiv64(dim_lower(&tab->a[k], tab), tab->den[k]);
					else
						lo = dim_lower(&tab->a[k], tab) < dim_lower(&tab->b[k], tab) ?
							dim_lower(&tab->a[k], tab) : dim_lower(&tab->b[k], tab);
					if (lo < 0)
						return -1;
				}
				if (__builtin_mul_overflow(v, lo, &v))
					return -1;
			}
		if (__builtin_add_overflow(s, v, &s))
			return -1;
	}
	return s;
}

/* Whether d >= 0 for every binding: its lower bound, or, where d holds
 * -c*min(a, b) (c*max(a, b)), the same question with a or b in its place
 * (min(a, b) <= a, b <= max(a, b)). */
static int nonneg(const coil_dim *d, const coil_symtab *tab, int depth)
{
	if (dim_lower(d, tab) >= 0)
		return 1;
	if (!tab || depth > 4)
		return 0;
	for (int i = 0; i < d->n; i++) {
		const coil_term *t = &d->t[i];
		int k = -1, deg = 0;
		for (int s = 0; s < COIL_MAX_SYMS; s++)
			if (t->pow[s]) {
				k = s;
				deg += t->pow[s];
			}
		if (deg != 1 || k >= tab->n || tab->kind[k] == SYM_FREE || tab->kind[k] == SYM_FLOORDIV)
			continue;
		/* c*min(a, b) with c < 0 is >= c*a and >= c*b: one side suffices; with
		 * c > 0 it is the smaller of c*a, c*b: both must hold (max alike) */
		int either = (t->coef < 0) == (tab->kind[k] == SYM_MIN), ok = 0;
		coil_err e;
		coil_dim c = dim_const(t->coef), s = dim_sym(k), cs, rest, alt;
		if (dim_mul(&cs, &c, &s, &e) || dim_sub(&rest, d, &cs, &e))
			continue;
		for (int side = 0; side < 2; side++)
			ok += !dim_mul(&alt, &c, side ? &tab->b[k] : &tab->a[k], &e) && !dim_add(&alt, &rest, &alt, &e) &&
			      nonneg(&alt, tab, depth + 1);
		if (either ? ok > 0 : ok == 2)
			return 1;
	}
	return 0;
}

int dim_nonneg(const coil_dim *d, const coil_symtab *tab) { return nonneg(d, tab, 0); }

/* 1 when a - b >= 0 for every binding, -1 when <= 0, 0 unknown. */
static int sign_of_diff(const coil_dim *a, const coil_dim *b, const coil_symtab *tab)
{
	coil_dim d;
	coil_err e;
	if (dim_sub(&d, a, b, &e))
		return 0;
	if (nonneg(&d, tab, 0))
		return 1;
	coil_dim nd, z = {0};
	if (dim_sub(&nd, &z, &d, &e))
		return 0;
	return nonneg(&nd, tab, 0) ? -1 : 0;
}

int dim_minmax(coil_dim *out, const coil_dim *a, const coil_dim *b, int is_max, coil_symtab *tab,
	       coil_err *err)
{
	int sg = sign_of_diff(a, b, tab);
	if (sg) { /* sg > 0: a >= b */
		*out = (sg > 0) == !!is_max ? *a : *b;
		return 0;
	}
	if (!tab)
		return coil_err_input(err, "%s of sizes whose order depends on the symbols", is_max ? "max" : "min");
	/* order the operands so that min(a, b) and min(b, a) are one symbol */
	const coil_dim *x = a, *y = b;
	char fa[256], fb[256];
	if (strcmp(dim_format(a, tab, fa, sizeof fa), dim_format(b, tab, fb, sizeof fb)) > 0) {
		x = b;
		y = a;
	}
	int k = derived(tab, is_max ? SYM_MAX : SYM_MIN, x, y, 0, err);
	if (k < 0)
		return -1;
	*out = dim_sym(k);
	return 0;
}

int symtab_derive(const coil_symtab *tab, int64_t *vals, coil_err *err)
{
	for (int k = 0; k < tab->n; k++) {
		int64_t a, b;
		if (tab->kind[k] == SYM_FREE)
			continue;
		if (dim_eval(&tab->a[k], vals, &a, err))
			return -1;
		if (tab->kind[k] == SYM_FLOORDIV) {
			vals[k] = floordiv64(a, tab->den[k]);
			continue;
		}
		if (dim_eval(&tab->b[k], vals, &b, err))
			return -1;
		vals[k] = (tab->kind[k] == SYM_MAX) == (a > b) ? a : b;
	}
	return 0;
}

int dim_eval(const coil_dim *d, const int64_t *vals, int64_t *out, coil_err *err)
{
	int64_t s = 0;
	for (int i = 0; i < d->n; i++) {
		int64_t v = d->t[i].coef;
		for (int k = 0; k < COIL_MAX_SYMS; k++)
			for (int p = 0; p < d->t[i].pow[k]; p++)
				if (__builtin_mul_overflow(v, vals[k], &v))
					return coil_err_input(err, "size overflows");
		if (__builtin_add_overflow(s, v, &s))
			return coil_err_input(err, "size overflows");
	}
	*out = s;
	return 0;
}

int64_t dim_min(const coil_dim *d)
{
	int64_t s = 0;
	for (int i = 0; i < d->n; i++)
		if (__builtin_add_overflow(s, d->t[i].coef, &s))
			return INT64_MAX;
	return s;
}

/* Recursive descent: expr := term (('+'|'-') term)* ; term := atom ('*' atom)* ;
 * atom := integer | symbol | '(' expr ')' | '-' atom */
struct parser {
	const char *p;
	coil_symtab *tab;
	int add_syms, depth;
	coil_err *err;
};

static int p_expr(struct parser *ps, coil_dim *out);

static void skip_ws(struct parser *ps)
{
	while (*ps->p == ' ')
		ps->p++;
}

static int p_atom(struct parser *ps, coil_dim *out)
{
	skip_ws(ps);
	if (++ps->depth > 32)
		return coil_err_input(ps->err, "size expression nested too deeply");
	const char *p = ps->p;
	int rc = 0;
	if (*p == '(') {
		ps->p++;
		if (p_expr(ps, out))
			return -1;
		skip_ws(ps);
		if (*ps->p != ')')
			return coil_err_input(ps->err, "size expression: expected ')'");
		ps->p++;
	} else if (*p == '-') {
		ps->p++;
		coil_dim a, z = dim_const(0);
		if (p_atom(ps, &a) || dim_sub(out, &z, &a, ps->err))
			return -1;
	} else if (isdigit((unsigned char)*p)) {
		int64_t v = 0;
		while (isdigit((unsigned char)*p)) {
			if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *p - '0', &v))
				return coil_err_input(ps->err, "size expression: integer too large");
			p++;
		}
		ps->p = p;
		*out = dim_const(v);
	} else if (isalpha((unsigned char)*p) || *p == '_') {
		size_t n = 0;
		while (isalnum((unsigned char)p[n]) || p[n] == '_')
			n++;
		if (n > 32)
			return coil_err_input(ps->err, "symbol longer than 32 characters");
		char name[33];
		memcpy(name, p, n);
		name[n] = 0;
		ps->p = p + n;
		skip_ws(ps);
		if ((!strcmp(name, "min") || !strcmp(name, "max")) && *ps->p == '(') {
			coil_dim a, b;
			ps->p++;
			if (p_expr(ps, &a))
				return -1;
			skip_ws(ps);
			if (*ps->p != ',')
				return coil_err_input(ps->err, "size expression: expected ',' in %s(a, b)", name);
			ps->p++;
			if (p_expr(ps, &b))
				return -1;
			skip_ws(ps);
			if (*ps->p != ')')
				return coil_err_input(ps->err, "size expression: expected ')' after %s(a, b", name);
			ps->p++;
			ps->depth--;
			return dim_minmax(out, &a, &b, name[1] == 'a', ps->tab, ps->err);
		}
		int idx = -1;
		for (int i = 0; i < ps->tab->n; i++)
			if (ps->tab->kind[i] == SYM_FREE && !strcmp(ps->tab->name[i], name))
				idx = i;
		if (idx < 0) {
			if (!ps->add_syms)
				return coil_err_input(ps->err, "unknown size symbol '%s'", name);
			if (ps->tab->n == COIL_MAX_SYMS)
				return coil_err_input(ps->err, "more than %d size symbols", COIL_MAX_SYMS);
			idx = ps->tab->n++;
			memcpy(ps->tab->name[idx], name, n + 1);
			ps->tab->kind[idx] = SYM_FREE;
			ps->tab->lo[idx] = ps->tab->hi[idx] = 0;
		}
		*out = dim_sym(idx);
	} else {
		return coil_err_input(ps->err, "size expression: unexpected '%.8s'", *p ? p : "end");
	}
	ps->depth--;
	return rc;
}

static int p_term(struct parser *ps, coil_dim *out)
{
	if (p_atom(ps, out))
		return -1;
	for (;;) {
		skip_ws(ps);
		if (ps->p[0] == '/' && ps->p[1] == '/') {
			ps->p += 2;
			coil_dim b;
			int64_t d;
			if (p_atom(ps, &b))
				return -1;
			if (!dim_is_const(&b, &d) || d <= 0)
				return coil_err_input(ps->err, "size expression: '//' takes a positive integer");
			if (dim_floordiv(out, out, d, ps->tab, ps->err))
				return -1;
			continue;
		}
		if (*ps->p != '*')
			return 0;
		ps->p++;
		coil_dim b;
		if (p_atom(ps, &b) || dim_mul(out, out, &b, ps->err))
			return -1;
	}
}

static int p_expr(struct parser *ps, coil_dim *out)
{
	if (p_term(ps, out))
		return -1;
	for (;;) {
		skip_ws(ps);
		char c = *ps->p;
		if (c != '+' && c != '-')
			return 0;
		ps->p++;
		coil_dim b;
		if (p_term(ps, &b))
			return -1;
		if ((c == '+' ? dim_add(out, out, &b, ps->err) : dim_sub(out, out, &b, ps->err)))
			return -1;
	}
}

int dim_parse(const char *s, coil_symtab *tab, int add_syms, coil_dim *out, coil_err *err)
{
	if (strlen(s) > 256)
		return coil_err_input(err, "size expression longer than 256 characters");
	struct parser ps = {s, tab, add_syms, 0, err};
	if (p_expr(&ps, out))
		return -1;
	skip_ws(&ps);
	if (*ps.p)
		return coil_err_input(err, "size expression: unexpected '%.8s'", ps.p);
	return 0;
}

static void put(char *buf, size_t cap, size_t *o, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t cap, size_t *o, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf + *o, *o < cap ? cap - *o : 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		*o += (size_t)n;
}

static void format_rec(const coil_dim *d, const coil_symtab *tab, char *buf, size_t cap, size_t *o, int depth);

static void format_sym(int k, const coil_symtab *tab, char *buf, size_t cap, size_t *o, int depth)
{
	if (!tab || k >= tab->n) {
		put(buf, cap, o, "?");
		return;
	}
	if (tab->kind[k] == SYM_FREE || depth > 16) {
		put(buf, cap, o, "%s", tab->kind[k] == SYM_FREE ? tab->name[k] : "?");
		return;
	}
	if (tab->kind[k] == SYM_FLOORDIV) {
		const coil_dim *a = &tab->a[k];
		int wrap = a->n > 1 || (a->n == 1 && a->t[0].coef != 1);
		put(buf, cap, o, "(%s", wrap ? "(" : "");
		format_rec(a, tab, buf, cap, o, depth + 1);
		put(buf, cap, o, "%s//%lld)", wrap ? ")" : "", (long long)tab->den[k]);
		return;
	}
	put(buf, cap, o, "%s(", tab->kind[k] == SYM_MAX ? "max" : "min");
	format_rec(&tab->a[k], tab, buf, cap, o, depth + 1);
	put(buf, cap, o, ", ");
	format_rec(&tab->b[k], tab, buf, cap, o, depth + 1);
	put(buf, cap, o, ")");
}

static void format_rec(const coil_dim *d, const coil_symtab *tab, char *buf, size_t cap, size_t *o, int depth)
{
	size_t o0 = *o;
	if (d->n == 0) {
		put(buf, cap, o, "0");
		return;
	}
	/* constant term last reads better: 196*batch+1 */
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < d->n; i++) {
			const coil_term *t = &d->t[i];
			if (is_const_term(t) != pass)
				continue;
			int64_t c = t->coef;
			if (*o > o0 && c >= 0)
				put(buf, cap, o, "+");
			int first = 1;
			if (pass || (c != 1 && c != -1)) {
				put(buf, cap, o, "%lld", (long long)c);
				first = 0;
			} else if (c == -1) {
				put(buf, cap, o, "-");
			}
			for (int k = 0; k < COIL_MAX_SYMS; k++)
				for (int p = 0; p < t->pow[k]; p++) {
					if (!first)
						put(buf, cap, o, "*");
					format_sym(k, tab, buf, cap, o, depth);
					first = 0;
				}
		}
}

char *dim_format(const coil_dim *d, const coil_symtab *tab, char *buf, size_t cap)
{
	size_t o = 0;
	buf[0] = 0;
	format_rec(d, tab, buf, cap, &o, 0);
	return buf;
}

char *shape_format(const coil_dim *s, int rank, const coil_symtab *tab, char *buf, size_t cap)
{
	size_t o = 0;
	char d[128];
	o += (size_t)snprintf(buf, cap, "[");
	for (int i = 0; i < rank; i++)
		o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0, "%s%s", i ? ", " : "",
				      dim_format(&s[i], tab, d, sizeof d));
	snprintf(buf + o, o < cap ? cap - o : 0, "]");
	return buf;
}

const coil_symtab *symtab_generic(void)
{
	static const coil_symtab gen = {COIL_MAX_SYMS, {"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "s12", "s13", "s14", "s15", "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23"}, {0}, {{0}}, {{0}}, {0}, {0}, {0}};
	return &gen;
}

void symtab_canonical(const coil_symtab *tab, coil_symtab *out)
{
	*out = *tab;
	for (int k = 0; k < out->n; k++)
		if (out->kind[k] == SYM_FREE)
			snprintf(out->name[k], sizeof out->name[k], "s%d", k);
}
