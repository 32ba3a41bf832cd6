#include "common/dim.h"

#include <ctype.h>
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

int dim_floordiv(coil_dim *out, const coil_dim *a, int64_t d, coil_err *err)
{
	if (d <= 0)
		return coil_err_input(err, "size division by %lld", (long long)d);
	coil_dim r = {0};
	for (int i = 0; i < a->n; i++) {
		coil_term t = a->t[i];
		if (is_const_term(&t))
			t.coef = floordiv64(t.coef, d);
		else if (t.coef % d)
			return coil_err_input(err, "symbolic size is not divisible by %lld", (long long)d);
		else
			t.coef /= d;
		if (add_term(&r, &t, err))
			return -1;
	}
	*out = r;
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
		int idx = -1;
		for (int i = 0; i < ps->tab->n; i++)
			if (!strcmp(ps->tab->name[i], name))
				idx = i;
		if (idx < 0) {
			if (!ps->add_syms)
				return coil_err_input(ps->err, "unknown size symbol '%s'", name);
			if (ps->tab->n == COIL_MAX_SYMS)
				return coil_err_input(ps->err, "more than %d size symbols", COIL_MAX_SYMS);
			idx = ps->tab->n++;
			memcpy(ps->tab->name[idx], name, n + 1);
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

char *dim_format(const coil_dim *d, const coil_symtab *tab, char *buf, size_t cap)
{
	size_t o = 0;
	buf[0] = 0;
	if (d->n == 0) {
		snprintf(buf, cap, "0");
		return buf;
	}
	/* constant term last reads better: 196*batch+1 */
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < d->n; i++) {
			const coil_term *t = &d->t[i];
			if (is_const_term(t) != pass)
				continue;
			int64_t c = t->coef;
			if (o > 0 && c >= 0)
				o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0, "+");
			int first = 1;
			if (pass || (c != 1 && c != -1)) {
				o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0, "%lld", (long long)c);
				first = 0;
			} else if (c == -1) {
				o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0, "-");
			}
			for (int k = 0; k < COIL_MAX_SYMS; k++)
				for (int p = 0; p < t->pow[k]; p++) {
					o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0, "%s%s",
							      first ? "" : "*",
							      tab && k < tab->n ? tab->name[k] : "?");
					first = 0;
				}
		}
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
