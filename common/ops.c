/* Parses the ATen schemas of the op table once, and looks ops up by name. */
#include "common/ops.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static op_info table[COIL_NOPS] = {
#define X(e, nm, sc, nr, kd, rule, kern) [OP_##e] = {.name = nm, .schema = sc, .nres = nr, .kind = kd},
	COIL_OPS(X)
#undef X
};
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void die(const char *schema, const char *why)
{
	/* The table is compiled in: a bad schema is a bug in coil, caught by any test. */
	fprintf(stderr, "coil: bad op schema '%s': %s\n", schema, why);
	abort();
}

/* Turns an ATen default ("False", "None", "'none'", "[]", "1e-05", "contiguous_format")
 * into JSON text. */
static void default_json(const char *d, char *out, size_t cap, const char *schema)
{
	if (!strcmp(d, "False"))
		snprintf(out, cap, "false");
	else if (!strcmp(d, "True"))
		snprintf(out, cap, "true");
	else if (!strcmp(d, "None") || !strcmp(d, "contiguous_format"))
		snprintf(out, cap, "null");
	else if (d[0] == '\'') {
		size_t n = strlen(d);
		if (n < 2 || d[n - 1] != '\'')
			die(schema, "unterminated string default");
		snprintf(out, cap, "\"%.*s\"", (int)(n - 2), d + 1);
	} else
		snprintf(out, cap, "%s", d);
}

static void parse_arg(sch_arg *a, char *txt, int kw_only, const char *schema)
{
	char *sp = strchr(txt, ' ');
	if (!sp)
		die(schema, "argument without a name");
	*sp = 0;
	char *type = txt, *name = sp + 1, *eq = strchr(name, '=');
	if (eq) {
		*eq = 0;
		a->has_default = 1;
		default_json(eq + 1, a->deflt, sizeof a->deflt, schema);
	}
	snprintf(a->name, sizeof a->name, "%s", name);
	a->kw_only = kw_only;
	size_t tl = strlen(type);
	if (tl && type[tl - 1] == '?') {
		a->optional = 1;
		type[--tl] = 0;
	}
	int list = 0;
	char *br = strchr(type, '[');
	if (br) {
		list = 1;
		a->list_len = atoi(br + 1);
		*br = 0;
	}
	if (br && br > type && br[-1] == '?') { /* Tensor?[]: entries may be null */
		a->optional = 1;
		br[-1] = 0;
	}
	if (!strcmp(type, "Tensor"))
		a->type = list ? S_TENSOR_LIST : S_TENSOR;
	else if (!strcmp(type, "int"))
		a->type = list ? S_INT_LIST : S_INT;
	else if (!strcmp(type, "SymInt"))
		a->type = list ? S_SYMINT_LIST : S_SYMINT;
	else if (!strcmp(type, "float"))
		a->type = list ? S_FLOAT_LIST : S_FLOAT;
	else if (!strcmp(type, "Scalar"))
		a->type = S_SCALAR;
	else if (!strcmp(type, "SymScalar")) /* coil's: a Scalar, or a size expression (one dim) */
		a->type = S_SYMSCALAR;
	else if (!strcmp(type, "bool"))
		a->type = S_BOOL;
	else if (!strcmp(type, "str"))
		a->type = S_STR;
	else if (!strcmp(type, "ScalarType"))
		a->type = S_DTYPE;
	else if (!strcmp(type, "Layout") || !strcmp(type, "Device") || !strcmp(type, "MemoryFormat"))
		a->type = S_IGNORED;
	else
		die(schema, "unknown type");
}

static void init(void)
{
	for (int op = 0; op < COIL_NOPS; op++) {
		op_info *oi = &table[op];
		char buf[512];
		snprintf(buf, sizeof buf, "%s", oi->schema);
		int kw = 0;
		for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
		     tok = strtok_r(NULL, ",", &save)) {
			while (*tok == ' ')
				tok++;
			if (!strcmp(tok, "*")) {
				kw = 1;
				continue;
			}
			if (oi->nargs == COIL_MAX_ARGS)
				die(oi->schema, "too many arguments");
			parse_arg(&oi->args[oi->nargs++], tok, kw, oi->schema);
		}
	}
}

const op_info *op_get(coil_op op)
{
	pthread_once(&once, init);
	return &table[op];
}

const char *op_name(coil_op op)
{
	return (unsigned)op < COIL_NOPS ? table[op].name : "?";
}

int op_internal(coil_op op) { return op == OP_MB_JOIN; }

int op_lookup(const char *name)
{
	pthread_once(&once, init);
	char buf[128];
	size_t n = strlen(name);
	if (n >= sizeof buf - 9)
		return -1;
	/* "aten.relu_.default" -> "aten.relu.default": in-place means its pure form. */
	const char *dot = strchr(name, '.');
	const char *dot2 = dot ? strchr(dot + 1, '.') : NULL;
	size_t base = dot2 ? (size_t)(dot2 - name) : n;
	memcpy(buf, name, n + 1);
	if (base > 5 && buf[base - 1] == '_' && buf[base - 2] != '_') {
		memmove(buf + base - 1, buf + base, n - base + 1);
		n--;
	}
	if (!dot2) /* no overload given: ".default" */
		memcpy(buf + n, ".default", 9);
	for (int op = 0; op < COIL_NOPS; op++)
		if (!strcmp(table[op].name, buf))
			return op;
	return -1;
}
