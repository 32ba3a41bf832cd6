/* Tests for the graph front end: parsing and validation (common/graph.c),
 * shape and dtype inference (common/infer.c), dimension expressions
 * (common/dim.c) and the canonical hash (common/hash.c).
 *
 * Data lives in two directories, read relative to the repository root (the
 * tests run from there):
 *   tests/malformed/NNN-name.json   a graph that must be rejected, and
 *   tests/malformed/NNN-name.expect one line: a substring of the message;
 *   tests/graphs/NAME.json          valid graphs (the net-NAME.json variants of
 *                                   net.json all hash alike). */
#include <ctype.h>
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "common/graph.h"
#include "common/infer.h"
#include "common/interp.h"

#define MALFORMED_DIR "tests/malformed"
#define GRAPHS_DIR "tests/graphs"

/* --- helpers ----------------------------------------------------------------- */

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		fail_msg("cannot open %s (tests run from the repository root)", path);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	long n = ftell(f);
	assert_true(n >= 0);
	rewind(f);
	char *buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = 0;
	fclose(f);
	if (len)
		*len = (size_t)n;
	return buf;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of the files in dir ending in suffix; *n set.  Free with free_list. */
static char **list_dir(const char *dir, const char *suffix, int *n)
{
	DIR *d = opendir(dir);
	if (!d)
		fail_msg("cannot open directory %s (tests run from the repository root)", dir);
	char **names = NULL;
	int cnt = 0, cap = 0;
	size_t sl = strlen(suffix);
	for (struct dirent *e; (e = readdir(d));) {
		size_t l = strlen(e->d_name);
		if (l <= sl || strcmp(e->d_name + l - sl, suffix))
			continue;
		if (cnt == cap) {
			cap = cap ? cap * 2 : 64;
			names = realloc(names, (size_t)cap * sizeof *names);
			assert_non_null(names);
		}
		names[cnt] = strdup(e->d_name);
		assert_non_null(names[cnt]);
		cnt++;
	}
	closedir(d);
	if (cnt)
		qsort(names, (size_t)cnt, sizeof *names, cmp_str);
	*n = cnt;
	return names;
}

static void free_list(char **names, int n)
{
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* A message is one line of printable ASCII, not empty. */
static int one_printable_line(const char *msg)
{
	if (!msg[0])
		return 0;
	for (const char *c = msg; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
			return 0;
	return 1;
}

/* Messages about a node start "node 'ID' (OP): " with OP the full ATen name;
 * an argument follows as "args[I] 'NAME': " with NAME the schema's name for I.
 * Returns NULL when consistent, else what is wrong. */
static const char *check_location(const char *msg)
{
	if (strncmp(msg, "node '", 6))
		return NULL;
	const char *p = strstr(msg, "' (");
	if (!p)
		return NULL; /* "node 'n0': unknown op ..." names no op */
	p += 3;
	const char *e = strstr(p, "): ");
	if (!e || e - p >= 100)
		return "no '): ' after the op name";
	char op[128];
	memcpy(op, p, (size_t)(e - p));
	op[e - p] = 0;
	int o = op_lookup(op);
	if (o < 0 || strcmp(op_name((coil_op)o), op))
		return "the op in parentheses is not a full ATen op name";
	p = e + 3;
	if (strncmp(p, "args[", 5))
		return NULL;
	char *end;
	long i = strtol(p + 5, &end, 10);
	const op_info *oi = op_get((coil_op)o);
	if (i < 0 || i >= oi->nargs || strncmp(end, "] '", 3))
		return "args[I] does not index the op's schema";
	size_t nl = strlen(oi->args[i].name);
	if (strncmp(end + 3, oi->args[i].name, nl) || strncmp(end + 3 + nl, "': ", 3))
		return "args[I] is not followed by the schema's name for argument I";
	return NULL;
}

/* JSON written with single quotes (easier in C), turned into real JSON in buf. */
static void unquote(char *s)
{
	for (; *s; s++)
		if (*s == '\'')
			*s = '"';
}

/* A graph from pieces: decls is top-level text such as
 * "'inputs':[{'name':'x','dtype':'f32','shape':[2]}]", nodes the node list
 * without brackets, outputs likewise.  Returns NULL with err on failure. */
static coil_graph *try_graph(const char *decls, const char *nodes, const char *outputs, coil_err *err)
{
	size_t cap = strlen(decls) + strlen(nodes) + strlen(outputs) + 128;
	char *buf = malloc(cap);
	assert_non_null(buf);
	snprintf(buf, cap, "{'format':'coil-graph','version':1,%s%s'nodes':[%s],'outputs':[%s]}", decls,
		 decls[0] ? "," : "", nodes, outputs);
	unquote(buf);
	coil_graph *g = graph_parse(buf, strlen(buf), err);
	free(buf);
	return g;
}

static coil_graph *must_graph(const char *decls, const char *nodes, const char *outputs)
{
	coil_err err = {0};
	coil_graph *g = try_graph(decls, nodes, outputs, &err);
	if (!g)
		fail_msg("graph rejected: %s\n  decls: %s\n  nodes: %s", err.msg, decls, nodes);
	return g;
}

static void must_reject(const char *decls, const char *nodes, const char *outputs, const char *fragment)
{
	coil_err err = {0};
	coil_graph *g = try_graph(decls, nodes, outputs, &err);
	if (g) {
		graph_free(g);
		fail_msg("graph accepted, expected '%s'\n  nodes: %s", fragment, nodes);
	}
	if (!strstr(err.msg, fragment))
		fail_msg("message '%s' lacks '%s'", err.msg, fragment);
	assert_true(one_printable_line(err.msg));
}

static coil_value *val_named(coil_graph *g, const char *name)
{
	for (int v = 0; v < g->nvals; v++)
		if (g->vals[v].name && !strcmp(g->vals[v].name, name))
			return &g->vals[v];
	fail_msg("no value named '%s'", name);
	return NULL;
}

/* Checks a value's shape (as shape_format prints it) and dtype. */
static void expect_val(coil_graph *g, const char *name, const char *shape, coil_dtype t)
{
	coil_value *v = val_named(g, name);
	char buf[512];
	shape_format(v->shape, v->rank, &g->syms, buf, sizeof buf);
	if (strcmp(buf, shape))
		fail_msg("value '%s': shape %s, expected %s", name, buf, shape);
	if (v->dtype != t)
		fail_msg("value '%s': dtype %s, expected %s", name, dtype_name(v->dtype), dtype_name(t));
}

/* One node "n" of op with args (single-quoted JSON), result "y"; checks y. */
static void expect_op(const char *decls, const char *op, const char *args, const char *shape, coil_dtype t)
{
	char node[2048];
	snprintf(node, sizeof node, "{'id':'n','op':'%s','args':%s,'outputs':['y']}", op, args);
	coil_graph *g = must_graph(decls, node, "'y'");
	expect_val(g, "y", shape, t);
	graph_free(g);
}

/* Dtype of y = op(a, b) for inputs a, b of the given dtypes and shapes. */
static coil_dtype binop_dtype(const char *op, const char *ta, const char *sa, const char *tb, const char *sb)
{
	char decls[512], node[256];
	snprintf(decls, sizeof decls,
		 "'inputs':[{'name':'a','dtype':'%s','shape':%s},{'name':'b','dtype':'%s','shape':%s}]", ta, sa,
		 tb, sb);
	snprintf(node, sizeof node, "{'id':'n','op':'%s','args':['a','b'],'outputs':['y']}", op);
	coil_graph *g = must_graph(decls, node, "'y'");
	coil_dtype t = val_named(g, "y")->dtype;
	graph_free(g);
	return t;
}

/* Dtype of y = op(a, scalar) with scalar as JSON text. */
static coil_dtype scalar_dtype(const char *op, const char *ta, const char *sa, const char *scalar)
{
	char decls[256], node[256];
	snprintf(decls, sizeof decls, "'inputs':[{'name':'a','dtype':'%s','shape':%s}]", ta, sa);
	snprintf(node, sizeof node, "{'id':'n','op':'%s','args':['a',%s],'outputs':['y']}", op, scalar);
	coil_graph *g = must_graph(decls, node, "'y'");
	coil_dtype t = val_named(g, "y")->dtype;
	graph_free(g);
	return t;
}

static void hash_text(const char *text, size_t len, char hex[65])
{
	coil_err err = {0};
	coil_graph *g = graph_parse(text, len, &err);
	if (!g)
		fail_msg("graph rejected: %s", err.msg);
	if (graph_hash(g, hex, &err))
		fail_msg("graph_hash: %s", err.msg);
	graph_free(g);
}

static void hash_file(const char *name, char hex[65])
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", GRAPHS_DIR, name);
	size_t len;
	char *text = slurp(path, &len);
	hash_text(text, len, hex);
	free(text);
}

static void hash_json(json_t *root, size_t flags, char hex[65])
{
	char *text = json_dumps(root, flags);
	assert_non_null(text);
	hash_text(text, strlen(text), hex);
	free(text);
}

static json_t *load_json(const char *name)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", GRAPHS_DIR, name);
	json_error_t je;
	json_t *j = json_load_file(path, 0, &je);
	if (!j)
		fail_msg("%s: %s", path, je.text);
	return j;
}

static void expect_same_hash(const char *variant)
{
	char a[65], b[65];
	hash_file("net.json", a);
	hash_file(variant, b);
	if (strcmp(a, b))
		fail_msg("%s hashes to %s, net.json to %s", variant, b, a);
	assert_int_equal(strlen(a), 64);
}

/* --- 1. malformed graphs ------------------------------------------------------------ */

static void test_malformed_corpus(void **state)
{
	(void)state;
	int n, ne, bad = 0;
	char **files = list_dir(MALFORMED_DIR, ".json", &n);
	char **expects = list_dir(MALFORMED_DIR, ".expect", &ne);
	for (int i = 0; i < ne; i++) { /* every .expect has its .json */
		char base[512];
		snprintf(base, sizeof base, "%.*s.json", (int)(strlen(expects[i]) - 7), expects[i]);
		if (!bsearch(&(char *){base}, files, (size_t)n, sizeof *files, cmp_str)) {
			print_error("%s: no matching .json\n", expects[i]);
			bad++;
		}
	}
	for (int i = 0; i < n; i++) {
		char path[512], epath[512];
		snprintf(path, sizeof path, "%s/%s", MALFORMED_DIR, files[i]);
		snprintf(epath, sizeof epath, "%s/%.*s.expect", MALFORMED_DIR, (int)(strlen(files[i]) - 5), files[i]);
		FILE *ef = fopen(epath, "r");
		if (!ef) {
			print_error("%s: no .expect file\n", files[i]);
			bad++;
			continue;
		}
		fclose(ef);
		char *expect = slurp(epath, NULL);
		size_t el = strlen(expect);
		while (el && (expect[el - 1] == '\n' || expect[el - 1] == '\r'))
			expect[--el] = 0;
		if (!el || strchr(expect, '\n')) {
			print_error("%s: the .expect file must hold one non-empty line\n", files[i]);
			bad++;
			free(expect);
			continue;
		}
		size_t len;
		char *text = slurp(path, &len);
		coil_err err = {0};
		coil_graph *g = graph_parse(text, len, &err);
		const char *loc = g ? NULL : check_location(err.msg);
		if (g) {
			print_error("%s: accepted, expected a message containing \"%s\"\n", files[i], expect);
			graph_free(g);
			bad++;
		} else if (!strstr(err.msg, expect)) {
			print_error("%s: message \"%s\"\n    lacks \"%s\"\n", files[i], err.msg, expect);
			bad++;
		} else if (!one_printable_line(err.msg)) {
			print_error("%s: message is not one printable line: \"%s\"\n", files[i], err.msg);
			bad++;
		} else if (loc) {
			print_error("%s: message \"%s\": %s\n", files[i], err.msg, loc);
			bad++;
		} else if (!strncmp(expect, "node '", 6) && strncmp(err.msg, expect, strlen("node '"))) {
			print_error("%s: message \"%s\" does not start with the node\n", files[i], err.msg);
			bad++;
		}
		free(text);
		free(expect);
	}
	print_message("# malformed corpus: %d files, %d rejected with the expected message\n", n, n - bad);
	free_list(files, n);
	free_list(expects, ne);
	assert_int_equal(bad, 0);
	assert_true(n >= 50);
}

/* Fixed-seed xorshift64* so runs are reproducible. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ull;
}

/* Parses an exact-length heap copy (so ASan sees any read past the end). */
static int parse_bytes(const char *bytes, size_t len, const char *what)
{
	char *copy = malloc(len ? len : 1);
	assert_non_null(copy);
	memcpy(copy, bytes, len);
	coil_err err = {0};
	coil_graph *g = graph_parse(copy, len, &err);
	free(copy);
	if (!g) {
		if (!one_printable_line(err.msg))
			fail_msg("%s: message is not one printable line: \"%s\"", what, err.msg);
		return 0;
	}
	char hex[65];
	size_t cl;
	if (graph_hash(g, hex, &err) || !graph_canonical(g, &cl, &err))
		fail_msg("%s: parsed but cannot be hashed: %s", what, err.msg);
	graph_free(g);
	return 1;
}

static void fuzz_file(const char *path, int *runs, int *accepted)
{
	size_t len;
	char *text = slurp(path, &len);
	char what[600];
	for (size_t cut = 0; cut < len; cut += 7) {
		snprintf(what, sizeof what, "%s cut at %zu", path, cut);
		*accepted += parse_bytes(text, cut, what);
		(*runs)++;
	}
	char *m = malloc(len + 1);
	assert_non_null(m);
	for (int k = 0; k < 40 && len; k++) {
		memcpy(m, text, len);
		int flips = 1 + (int)(rng() % 3);
		for (int f = 0; f < flips; f++) {
			size_t at = (size_t)(rng() % len);
			uint64_t r = rng();
			/* half the time a byte from the JSON alphabet, so parsing gets further */
			static const char alpha[] = "{}[]\",:0123456789-+.eE \\ntfalsu";
			m[at] = (r & 1) ? alpha[(r >> 8) % (sizeof alpha - 1)] : (char)(r >> 8);
		}
		snprintf(what, sizeof what, "%s flip variant %d", path, k);
		*accepted += parse_bytes(m, len, what);
		(*runs)++;
	}
	free(m);
	free(text);
}

static void test_malformed_fuzz(void **state)
{
	(void)state;
	static const char *dirs[] = {MALFORMED_DIR, GRAPHS_DIR};
	int runs = 0, accepted = 0, files = 0;
	rng_state = 0x9e3779b97f4a7c15ull;
	for (int d = 0; d < 2; d++) {
		int n;
		char **names = list_dir(dirs[d], ".json", &n);
		for (int i = 0; i < n; i++) {
			char path[512];
			snprintf(path, sizeof path, "%s/%s", dirs[d], names[i]);
			fuzz_file(path, &runs, &accepted);
			files++;
		}
		free_list(names, n);
	}
	print_message("# fuzz: %d files, %d truncated or flipped variants parsed without a crash (%d accepted)\n",
		      files, runs, accepted);
	assert_true(files >= 50);
}

/* Replaces the k-th leaf (number, string, bool, null; depth-first) of j by v
 * (stolen).  Returns -1 when found and replaced, else the leaves left to skip. */
static long replace_leaf(json_t *j, long k, json_t *v)
{
	size_t i;
	const char *key;
	json_t *x;
	if (json_is_array(j)) {
		json_array_foreach(j, i, x)
		{
			if (json_is_array(x) || json_is_object(x)) {
				if ((k = replace_leaf(x, k, v)) < 0)
					return -1;
			} else if (k-- == 0) {
				json_array_set_new(j, i, v);
				return -1;
			}
		}
	} else if (json_is_object(j)) {
		json_object_foreach(j, key, x)
		{
			if (json_is_array(x) || json_is_object(x)) {
				if ((k = replace_leaf(x, k, v)) < 0)
					return -1;
			} else if (k-- == 0) {
				json_object_set_new(j, key, v);
				return -1;
			}
		}
	}
	return k;
}

/* Every leaf of every valid JSON file, replaced in turn by extreme values: the
 * rules see absurd sizes, dims, strides and names (the point is ASan/UBSan). */
static void test_malformed_extreme_values(void **state)
{
	(void)state;
	static const char *values[] = {"0",	     "-1",	"1",	    "2",	 "3",	   "-9223372036854775808",
				       "9223372036854775807", "4611686018427387904", "1099511627776", "-0.5", "1e308",
				       "true",	     "null",	"\"batch\"", "\"\"",	 "\"inf\"", "[]",
				       "[-1]",	     "[4611686018427387904, 4]", "\"batch*batch-1\""};
	enum { NV = sizeof values / sizeof *values };
	json_t *vals[NV];
	for (int i = 0; i < NV; i++) {
		vals[i] = json_loads(values[i], JSON_DECODE_ANY, NULL);
		assert_non_null(vals[i]);
	}
	static const char *dirs[] = {GRAPHS_DIR, MALFORMED_DIR};
	long runs = 0, accepted = 0;
	for (int d = 0; d < 2; d++) {
		int n;
		char **names = list_dir(dirs[d], ".json", &n);
		for (int f = 0; f < n; f++) {
			char path[512];
			snprintf(path, sizeof path, "%s/%s", dirs[d], names[f]);
			json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, NULL);
			if (!root) /* the invalid-JSON cases */
				continue;
			if (json_dumpb(root, NULL, 0, JSON_COMPACT) > 4096) { /* long constants: slow, nothing new */
				json_decref(root);
				continue;
			}
			for (long leaf = 0;; leaf++) {
				int found = 0;
				for (int i = 0; i < NV; i++) {
					json_t *copy = json_deep_copy(root);
					assert_non_null(copy);
					if (replace_leaf(copy, leaf, json_incref(vals[i])) >= 0) {
						json_decref(vals[i]); /* not placed: drop the reference */
						json_decref(copy);
						break;
					}
					found = 1;
					char *text = json_dumps(copy, JSON_COMPACT);
					assert_non_null(text);
					char what[600];
					snprintf(what, sizeof what, "%s leaf %ld = %s", path, leaf, values[i]);
					accepted += parse_bytes(text, strlen(text), what);
					runs++;
					free(text);
					json_decref(copy);
				}
				if (!found)
					break;
			}
			json_decref(root);
		}
		free_list(names, n);
	}
	for (int i = 0; i < NV; i++)
		json_decref(vals[i]);
	print_message("# extreme values: %ld variants parsed without a crash (%ld accepted)\n", runs, accepted);
	assert_true(runs > 10000);
}

/* Inline cases the corpus cannot hold as readable files. */
static void test_malformed_inline(void **state)
{
	(void)state;
	coil_err err = {0};
	/* a NUL byte inside the buffer */
	static const char nul[] = "{\"format\":\"coil-graph\",\0\"version\":1}";
	assert_null(graph_parse(nul, sizeof nul - 1, &err));
	assert_non_null(strstr(err.msg, "invalid JSON"));
	assert_true(one_printable_line(err.msg));
	/* an empty buffer, and a NULL err pointer is allowed */
	assert_null(graph_parse("", 0, &err));
	assert_non_null(strstr(err.msg, "invalid JSON"));
	assert_null(graph_parse("{}", 2, NULL));
	/* a missing file */
	assert_null(graph_load_file("tests/graphs/no-such-file.json", &err));
	assert_non_null(strstr(err.msg, "no-such-file.json: cannot open"));
	/* a control character in an unknown key and in a dangling name stays out of the message */
	must_reject("'inputs':[{'name':'x','dtype':'f32','shape':[2]}]",
		    "{'id':'n0','op':'aten.relu','args':['x\\u000a'],'outputs':['y']}", "'y'",
		    "node 'n0' (aten.relu.default): args[0] 'self': unknown value 'x?'");
	must_reject("'inputs':[{'name':'x','dtype':'f32','shape':[2]}],'bad\\u000dkey':1", "", "'x'",
		    "unknown top-level key 'bad?key'");
	must_reject("'inputs':[{'name':'x','dtype':'f32','shape':[2]}]",
		    "{'id':'n\\u0007','op':'aten.relu','args':['x','x'],'outputs':['y']}", "'y'",
		    "node 'n?' (aten.relu.default): takes at most 1 argument, 2 given");
	/* a declared dim is an integer or exactly one symbol */
	must_reject("'inputs':[{'name':'x','dtype':'f32','shape':['1']}]", "", "'x'",
		    "inputs[0] 'x': shape[0]: '1' must be a single symbol");
	must_reject("'inputs':[{'name':'x','dtype':'f32','shape':['2*n']}]", "", "'x'",
		    "inputs[0] 'x': shape[0]: '2*n' must be a single symbol");
	/* a node must name at least one result */
	must_reject("'inputs':[{'name':'x','dtype':'f32','shape':[2]}]",
		    "{'id':'n0','op':'aten.relu','args':['x'],'outputs':[]}", "'x'",
		    "node 'n0' (aten.relu.default): 'outputs' must be a non-empty array");
}

/* --- valid graphs ------------------------------------------------------------------- */

static void test_valid_identity(void **state)
{
	(void)state;
	coil_err err = {0};
	coil_graph *g = graph_load_file(GRAPHS_DIR "/identity.json", &err);
	if (!g)
		fail_msg("identity.json: %s", err.msg);
	assert_int_equal(g->nnodes, 0);
	assert_int_equal(g->ninputs, 1);
	assert_int_equal(g->noutputs, 1);
	assert_int_equal(g->outputs[0], g->inputs[0]);
	expect_val(g, "x", "[batch, 3]", COIL_F32);
	char hex[65];
	assert_int_equal(graph_hash(g, hex, &err), 0);
	graph_free(g);
	/* the same with "nodes" left out, and with a param and a constant as outputs */
	g = must_graph("'inputs':[{'name':'x','dtype':'f32','shape':['batch',3]}]", "", "'x'");
	graph_free(g);
	coil_graph *g2 = must_graph("'params':[{'name':'w','dtype':'i8','shape':[]}],"
				    "'constants':[{'name':'c','dtype':'bool','shape':[2],'data':[true,false]}]",
				    "", "'c','w','c'");
	expect_val(g2, "w", "[]", COIL_I8);
	expect_val(g2, "c", "[2]", COIL_BOOL);
	assert_int_equal(g2->noutputs, 3);
	graph_free(g2);
}

static void test_valid_graph_files(void **state)
{
	(void)state;
	int n;
	char **names = list_dir(GRAPHS_DIR, ".json", &n);
	assert_true(n >= 7);
	for (int i = 0; i < n; i++) {
		char path[512];
		snprintf(path, sizeof path, "%s/%s", GRAPHS_DIR, names[i]);
		coil_err err = {0};
		coil_graph *g = graph_load_file(path, &err);
		if (!g)
			fail_msg("%s: %s", path, err.msg);
		graph_free(g);
	}
	free_list(names, n);
}

static void test_doc_example(void **state)
{
	(void)state;
	coil_err err = {0};
	coil_graph *g = graph_load_file(GRAPHS_DIR "/doc-example.json", &err);
	if (!g)
		fail_msg("doc-example.json: %s", err.msg);
	expect_val(g, "pooled", "[batch, 3]", COIL_F32);
	expect_val(g, "t", "[3, 10]", COIL_F32);
	expect_val(g, "logits", "[batch, 10]", COIL_F32);
	/* nodes come topologically sorted: n3 (t) before n2 (addmm) */
	int pos_t = -1, pos_addmm = -1;
	for (int i = 0; i < g->nnodes; i++) {
		if (!strcmp(g->nodes[i].id, "n3"))
			pos_t = i;
		if (!strcmp(g->nodes[i].id, "n2"))
			pos_addmm = i;
	}
	assert_true(pos_t >= 0 && pos_t < pos_addmm);
	graph_free(g);
}

static void test_valid_limits(void **state)
{
	(void)state;
	/* rank 8, zero-size dims, 4096-element constant, a 128-character name, 8 symbols */
	char name[129];
	memset(name, 'n', 128);
	name[128] = 0;
	char decls[1024];
	snprintf(decls, sizeof decls,
		 "'inputs':[{'name':'%s','dtype':'f32','shape':[1,2,1,2,1,2,1,0]},"
		 "{'name':'s','dtype':'u8','shape':['a','b','c','d','e','f','g','h']}],"
		 "'params':[{'name':'big','dtype':'bool','shape':[1099511627775]}]",
		 name);
	coil_graph *g = must_graph(decls, "", "'s'");
	assert_int_equal(g->syms.n, 8);
	expect_val(g, name, "[1, 2, 1, 2, 1, 2, 1, 0]", COIL_F32);
	expect_val(g, "s", "[a, b, c, d, e, f, g, h]", COIL_U8);
	graph_free(g);
	/* one byte more than 2^40 is refused; so is a bit more than 2^40 bytes of f32 spread over dims */
	must_reject("'params':[{'name':'big','dtype':'bool','shape':[1099511627777]}]", "", "'big'",
		    "params[0] 'big': tensor larger than 2^40 bytes");
	must_reject("'inputs':[{'name':'x','dtype':'f32','shape':['n',1024,1024,1024,257]}]", "", "'x'",
		    "inputs[0] 'x': tensor larger than 2^40 bytes");
	/* 4096 elements is the most a constant holds */
	size_t cap = 4096 * 4 + 256; /* at most 4 characters an element: ",-50" */
	char *c = malloc(cap);
	assert_non_null(c);
	size_t o = (size_t)snprintf(c, cap, "'constants':[{'name':'c','dtype':'i8','shape':[64,64],'data':[");
	for (int i = 0; i < 4096; i++) {
		o += (size_t)snprintf(c + o, cap - o, "%s%d", i ? "," : "", i % 100 - 50);
		assert_true(o < cap);
	}
	assert_true((size_t)snprintf(c + o, cap - o, "]}]") < cap - o);
	g = must_graph(c, "", "'c'");
	assert_int_equal(((int8_t *)val_named(g, "c")->data)[4095], 4095 % 100 - 50);
	graph_free(g);
	free(c);
}

static void test_constant_data(void **state)
{
	(void)state;
	coil_graph *g = must_graph(
		"'constants':["
		"{'name':'f','dtype':'f32','shape':[4],'data':['nan','inf','-inf',1.5]},"
		"{'name':'i','dtype':'i64','shape':[3],'data':[9223372036854775807,-9223372036854775808,"
		"9007199254740993]},"
		"{'name':'b','dtype':'bool','shape':[2],'data':[true,false]},"
		"{'name':'u','dtype':'u8','shape':[2],'data':[0,255]},"
		"{'name':'h','dtype':'bf16','shape':[1],'data':[1]}]",
		"", "'f','i','b','u','h'");
	const float *f = val_named(g, "f")->data;
	assert_true(f[0] != f[0]);
	assert_true(f[1] > 1e38f && f[2] < -1e38f);
	assert_true(f[3] == 1.5f);
	const int64_t *i = val_named(g, "i")->data;
	assert_true(i[0] == INT64_MAX);
	assert_true(i[1] == INT64_MIN);
	assert_true(i[2] == 9007199254740993ll); /* not rounded through a double */
	const uint8_t *b = val_named(g, "b")->data, *u = val_named(g, "u")->data;
	assert_int_equal(b[0], 1);
	assert_int_equal(b[1], 0);
	assert_int_equal(u[1], 255);
	graph_free(g);
	must_reject("'constants':[{'name':'c','dtype':'i8','shape':[2],'data':[-128,-129]}]", "", "'c'",
		    "constants[0] 'c': data[1] -129 is out of range for i8");
	must_reject("'constants':[{'name':'c','dtype':'i32','shape':[1],'data':[2147483648]}]", "", "'c'",
		    "constants[0] 'c': data[0] 2147483648 is out of range for i32");
	must_reject("'constants':[{'name':'c','dtype':'f32','shape':[1],'data':['NaN']}]", "", "'c'",
		    "constants[0] 'c': data[0] is not a number");
}

/* --- 2. hashes ------------------------------------------------------------------------- */

static void test_hash_same_reformatted(void **state)
{
	(void)state;
	expect_same_hash("net-reformatted.json");
}

static void test_hash_same_reordered_nodes(void **state)
{
	(void)state;
	expect_same_hash("net-reordered.json");
}

static void test_hash_same_renamed(void **state)
{
	(void)state;
	expect_same_hash("net-renamed.json"); /* intermediates, node ids, the constant, batch -> n */
}

static void test_hash_same_dead_nodes(void **state)
{
	(void)state;
	expect_same_hash("net-dead.json");
}

static void test_hash_same_kwargs_and_defaults(void **state)
{
	(void)state;
	expect_same_hash("net-spelled.json");
}

static void test_hash_same_serializations(void **state)
{
	(void)state;
	json_t *root = load_json("net.json");
	char a[65], b[65];
	hash_json(root, JSON_COMPACT, a);
	static const size_t flags[] = {JSON_SORT_KEYS, JSON_INDENT(8), JSON_INDENT(1) | JSON_SORT_KEYS,
				       JSON_ENSURE_ASCII | JSON_COMPACT | JSON_SORT_KEYS};
	for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
		hash_json(root, flags[i], b);
		assert_string_equal(a, b);
	}
	/* the canonical form is itself a graph with the same hash, and a fixed point */
	coil_err err = {0};
	char *text = json_dumps(root, 0);
	coil_graph *g = graph_parse(text, strlen(text), &err);
	assert_non_null(g);
	size_t len;
	const char *canon = graph_canonical(g, &len, &err);
	assert_non_null(canon);
	assert_int_equal(strlen(canon), len);
	hash_text(canon, len, b);
	assert_string_equal(a, b);
	coil_graph *g2 = graph_parse(canon, len, &err);
	assert_non_null(g2);
	size_t len2;
	const char *canon2 = graph_canonical(g2, &len2, &err);
	assert_non_null(canon2);
	assert_string_equal(canon, canon2);
	for (int i = 0; i < 64; i++)
		assert_true(isdigit((unsigned char)a[i]) || (a[i] >= 'a' && a[i] <= 'f'));
	assert_int_equal(a[64], 0);
	graph_free(g2);
	graph_free(g);
	free(text);
	json_decref(root);
}

/* The node with this id in root's "nodes". */
static json_t *node_by_id(json_t *root, const char *id)
{
	size_t i;
	json_t *n;
	json_array_foreach(json_object_get(root, "nodes"), i, n)
	{
		if (!strcmp(json_string_value(json_object_get(n, "id")), id))
			return n;
	}
	fail_msg("no node '%s'", id);
	return NULL;
}

/* Sets path (segments split by '/': an object key, an array index, "#id" for a
 * node by id, "+" to append to an array) to the JSON text value. */
static void json_set_path(json_t *root, const char *path, const char *value)
{
	json_error_t je;
	json_t *v = json_loads(value, JSON_DECODE_ANY, &je);
	if (!v)
		fail_msg("bad JSON value %s: %s", value, je.text);
	char buf[256];
	snprintf(buf, sizeof buf, "%s", path);
	json_t *cur = root;
	char *save = NULL, *seg = strtok_r(buf, "/", &save);
	while (seg) {
		char *next = strtok_r(NULL, "/", &save);
		if (!next) {
			if (json_is_object(cur))
				assert_int_equal(json_object_set_new(cur, seg, v), 0);
			else if (!strcmp(seg, "+"))
				assert_int_equal(json_array_append_new(cur, v), 0);
			else
				assert_int_equal(json_array_set_new(cur, (size_t)atoi(seg), v), 0);
			return;
		}
		if (seg[0] == '#')
			cur = node_by_id(root, seg + 1);
		else if (json_is_array(cur))
			cur = json_array_get(cur, (size_t)atoi(seg));
		else
			cur = json_object_get(cur, seg);
		if (!cur)
			fail_msg("path %s: no %s", path, seg);
		seg = next;
	}
}

/* Replaces every string equal to from (names, wherever they appear) by to. */
static void json_rename(json_t *j, const char *from, const char *to)
{
	size_t i;
	const char *k;
	json_t *x;
	if (json_is_array(j)) {
		json_array_foreach(j, i, x)
		{
			if (json_is_string(x) && !strcmp(json_string_value(x), from))
				json_array_set_new(j, i, json_string(to));
			else
				json_rename(x, from, to);
		}
	} else if (json_is_object(j)) {
		json_object_foreach(j, k, x)
		{
			if (json_is_string(x) && !strcmp(json_string_value(x), from))
				json_object_set_new(j, k, json_string(to));
			else
				json_rename(x, from, to);
		}
	}
}

typedef struct mutation {
	const char *what;
	const char *path;  /* NULL: rename */
	const char *value; /* JSON text, or the new name */
	const char *from;  /* rename: the old name */
} mutation;

static const mutation mutations[] = {
	{"conv stride", "nodes/#conv/args/3", "[2,2]", NULL},
	{"conv padding", "nodes/#conv/args/4", "[0,0]", NULL},
	{"conv dilation", "nodes/#conv/args/5", "[2,2]", NULL},
	{"layer_norm eps", "nodes/#norm/args/+", "1e-6", NULL},
	{"addmm alpha", "nodes/#fc/kwargs/alpha", "2", NULL},
	{"addmm alpha as a float", "nodes/#fc/kwargs/alpha", "1.5", NULL},
	{"add alpha", "nodes/#shifted/kwargs", "{\"alpha\": 3}", NULL},
	{"softmax dim", "nodes/#probs/args/1", "0", NULL},
	{"sum dim", "nodes/#total/args/1", "[0]", NULL},
	{"sum keepdim", "nodes/#total/args/+", "true", NULL},
	{"input spatial size", "inputs/0/shape/2", "9", NULL},
	{"symbolic batch made static", "inputs/0/shape/0", "2", NULL},
	{"input dtype", "inputs/1/dtype", "\"bf16\"", NULL},
	{"constant dtype", "constants/0/dtype", "\"f64\"", NULL},
	{"constant data", "constants/0/data/9", "0.25", NULL},
	{"constant data -0", "constants/0/data/0", "-0.0", NULL},
	{"output order", "outputs", "[\"tot\", \"ln\"]", NULL},
	{"a different output", "outputs/1", "\"prob\"", NULL},
	{"input order", "inputs", "[{\"name\": \"shift\", \"dtype\": \"f32\", \"shape\": [10]},"
				  "{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [\"batch\", 3, 8, 8]}]", NULL},
	{"op relu -> silu", "nodes/#act/op", "\"aten.silu\"", NULL},
	{"op mul -> div", "nodes/#scaled/op", "\"aten.div.Tensor\"", NULL},
	{"operands swapped", "nodes/#shifted/args", "[\"shift\", \"logits\"]", NULL},
	{"input renamed", NULL, "image", "x"},
	{"param renamed", NULL, "fc.b", "fc.bias"},
	{"unused param added", "params/+", "{\"name\": \"spare\", \"dtype\": \"f32\", \"shape\": [1]}", NULL},
};
#define NMUT (sizeof mutations / sizeof *mutations)

static void test_hash_differs(void **state)
{
	(void)state;
	char hashes[NMUT + 1][65];
	json_t *base = load_json("net.json");
	hash_json(base, 0, hashes[0]);
	for (size_t m = 0; m < NMUT; m++) {
		json_t *root = json_deep_copy(base);
		const mutation *mu = &mutations[m];
		if (mu->path)
			json_set_path(root, mu->path, mu->value);
		else
			json_rename(root, mu->from, mu->value);
		char *text = json_dumps(root, 0);
		coil_err err = {0};
		coil_graph *g = graph_parse(text, strlen(text), &err);
		if (!g)
			fail_msg("mutation '%s' made an invalid graph: %s", mu->what, err.msg);
		assert_int_equal(graph_hash(g, hashes[m + 1], &err), 0);
		graph_free(g);
		free(text);
		json_decref(root);
		for (size_t k = 0; k <= m; k++)
			if (!strcmp(hashes[k], hashes[m + 1]))
				fail_msg("'%s' hashes like %s", mu->what, k ? mutations[k - 1].what : "the base graph");
	}
	print_message("# hash: %zu single changes give %zu distinct hashes\n", NMUT, NMUT);
	json_decref(base);
}

static void test_hash_constants_exact(void **state)
{
	(void)state;
	/* i64 constants that a double cannot tell apart still hash apart */
	static const char *fmt = "{'format':'coil-graph','version':1,'constants':[{'name':'c','dtype':'%s',"
				 "'shape':[1],'data':[%s]}],'outputs':['c']}";
	static const char *cases[][2] = {
		{"i64", "9007199254740992"}, {"i64", "9007199254740993"}, {"i64", "9223372036854775807"},
		{"i64", "9223372036854775806"}, {"i32", "7"}, {"i64", "7"}, {"f64", "7"}, {"f64", "0.1"},
		{"f32", "0.1"}, {"f64", "-0.0"}, {"f64", "0"}, {"bool", "true"}, {"u8", "1"},
	};
	enum { NC = sizeof cases / sizeof *cases };
	char hex[NC][65], buf[512];
	for (int i = 0; i < NC; i++) {
		snprintf(buf, sizeof buf, fmt, cases[i][0], cases[i][1]);
		unquote(buf);
		hash_text(buf, strlen(buf), hex[i]);
		for (int k = 0; k < i; k++)
			if (!strcmp(hex[k], hex[i]))
				fail_msg("%s %s hashes like %s %s", cases[i][0], cases[i][1], cases[k][0], cases[k][1]);
	}
	/* 0.1 and its f32 rounding are the same f32 constant */
	snprintf(buf, sizeof buf, fmt, "f32", "0.100000001490116119384765625");
	unquote(buf);
	char h[65];
	hash_text(buf, strlen(buf), h);
	assert_string_equal(h, hex[8]);
}

static void test_hash_size_expressions(void **state)
{
	(void)state;
	/* equal size expressions written differently hash alike; different ones do not */
	static const char *sizes[] = {"['batch*196']", "['196*batch']", "['(batch)*(14*14)']",
				      "['batch*200-4*batch']", "[-1]"};
	static const char *other = "['batch*196+0*batch', 1]";
	char first[65], h[65], node[256];
	const char *decls = "'inputs':[{'name':'x','dtype':'f32','shape':['batch',14,14]}]";
	for (size_t i = 0; i <= sizeof sizes / sizeof *sizes; i++) {
		int last = i == sizeof sizes / sizeof *sizes;
		snprintf(node, sizeof node, "{'id':'v','op':'aten.view','args':['x',%s],'outputs':['y']}",
			 last ? other : sizes[i]);
		coil_graph *g = must_graph(decls, node, "'y'");
		coil_err err = {0};
		assert_int_equal(graph_hash(g, i ? h : first, &err), 0);
		if (!last && i && i < 4)
			assert_string_equal(first, h);
		else if (i)
			assert_string_not_equal(first, h); /* [-1] is a different argument; rank 2 differs */
		graph_free(g);
	}
	/* symbols are named by position: batch -> n keeps the hash, swapping two does not */
	char a[65], b[65], c[65];
	const char *add = "{'id':'n','op':'aten.add.Tensor','args':['x','z'],'outputs':['y']}";
	coil_graph *g = must_graph("'inputs':[{'name':'x','dtype':'f32','shape':['batch','seq']},"
				   "{'name':'z','dtype':'f32','shape':[1,'seq']}]", add, "'y'");
	coil_err err = {0};
	assert_int_equal(graph_hash(g, a, &err), 0);
	graph_free(g);
	g = must_graph("'inputs':[{'name':'x','dtype':'f32','shape':['n','len']},"
		       "{'name':'z','dtype':'f32','shape':[1,'len']}]", add, "'y'");
	assert_int_equal(graph_hash(g, b, &err), 0);
	graph_free(g);
	g = must_graph("'inputs':[{'name':'x','dtype':'f32','shape':['batch','seq']},"
		       "{'name':'z','dtype':'f32','shape':['batch',1]}]", add, "'y'");
	assert_int_equal(graph_hash(g, c, &err), 0);
	graph_free(g);
	assert_string_equal(a, b);
	assert_string_not_equal(a, c);
}

/* --- 3. shape and dtype inference ------------------------------------------------------ */

#define IN1(dtype, shape) "'inputs':[{'name':'x','dtype':'" dtype "','shape':" shape "}]"

static void test_shape_flatten_symbolic(void **state)
{
	(void)state;
	expect_op(IN1("f32", "['batch',3,14,14]"), "aten.flatten.using_ints", "['x',1]", "[batch, 588]", COIL_F32);
	expect_op(IN1("f32", "['batch',14,14]"), "aten.flatten.using_ints", "['x']", "[196*batch]", COIL_F32);
	expect_op(IN1("f32", "['batch',3,14,14]"), "aten.flatten.using_ints", "['x',0,1]", "[3*batch, 14, 14]",
		  COIL_F32);
	expect_op(IN1("f32", "['batch','seq',4]"), "aten.flatten.using_ints", "['x',0,-2]", "[batch*seq, 4]", COIL_F32);
	expect_op(IN1("i32", "[]"), "aten.flatten.using_ints", "['x']", "[1]", COIL_I32);
	must_reject(IN1("f32", "[2,3,4]"), "{'id':'f','op':'aten.flatten.using_ints','args':['x',2,1],'outputs':['y']}",
		    "'y'", "node 'f' (aten.flatten.using_ints): args[1] 'start_dim': start_dim 2 is after end_dim 1");
}

static void test_shape_view_symbolic(void **state)
{
	(void)state;
	const char *x = IN1("f32", "['batch',14,14]");
	expect_op(x, "aten.view", "['x',[-1,196]]", "[batch, 196]", COIL_F32);
	expect_op(x, "aten.view", "['x',['batch*196']]", "[196*batch]", COIL_F32);
	expect_op(x, "aten.view", "['x',['batch',-1]]", "[batch, 196]", COIL_F32);
	expect_op(x, "aten.view", "['x',['batch*2',7,-1]]", "[2*batch, 7, 14]", COIL_F32);
	expect_op(x, "aten.reshape", "['x',[-1]]", "[196*batch]", COIL_F32);
	expect_op(x, "aten._unsafe_view", "['x',['batch',2,'98']]", "[batch, 2, 98]", COIL_F32);
	expect_op(IN1("f32", "['b','s',64]"), "aten.view", "['x',['b','s',4,16]]", "[b, s, 4, 16]", COIL_F32);
	expect_op(IN1("f32", "['b','s',64]"), "aten.view", "['x',['b*s',-1]]", "[b*s, 64]", COIL_F32);
	expect_op(IN1("f32", "['b','s',64]"), "aten.view", "['x',[-1,'s',8,8]]", "[b, s, 8, 8]", COIL_F32);
	must_reject(x, "{'id':'v','op':'aten.view','args':['x',['batch*195']],'outputs':['y']}", "'y'",
		    "node 'v' (aten.view.default): args[1] 'size': shape [195*batch] is invalid for input of shape "
		    "[batch, 14, 14]");
	must_reject(x, "{'id':'v','op':'aten.view','args':['x',[0,-1]],'outputs':['y']}", "'y'",
		    "node 'v' (aten.view.default): args[1] 'size': shape [0, -1] is invalid");
	must_reject(x, "{'id':'v','op':'aten.view','args':['x',['batch-2',-1]],'outputs':['y']}", "'y'",
		    "node 'v' (aten.view.default): args[1] 'size': negative size at 0");
}

static void test_shape_cat_symbolic(void **state)
{
	(void)state;
	expect_op(IN1("f32", "['batch',3]"), "aten.cat", "[['x','x']]", "[2*batch, 3]", COIL_F32);
	expect_op(IN1("f32", "['batch',3]"), "aten.cat", "[['x','x','x'],-1]", "[batch, 9]", COIL_F32);
	coil_graph *g = must_graph("'inputs':[{'name':'a','dtype':'f16','shape':['n',2]},"
				   "{'name':'b','dtype':'i32','shape':['m',2]},{'name':'e','dtype':'f32','shape':[0]}]",
				   "{'id':'c','op':'aten.cat','args':[['a','e','b','a']],'outputs':['y']}", "'y'");
	expect_val(g, "y", "[m+2*n, 2]", COIL_F32); /* the legacy empty 1-D tensor is skipped */
	graph_free(g);
}

static void test_shape_slice_select(void **state)
{
	(void)state;
	const char *x = IN1("f32", "['batch',10]");
	expect_op(x, "aten.slice.Tensor", "['x',0,1,9223372036854775807]", "[batch-1, 10]", COIL_F32);
	expect_op(x, "aten.slice.Tensor", "['x',0,0]", "[batch, 10]", COIL_F32);
	/* x[3:] clamps as Python does: batch - min(3, batch) */
	expect_op(x, "aten.slice.Tensor", "['x',0,3]", "[-min(3, batch)+batch, 10]", COIL_F32);
	expect_op(x, "aten.slice.Tensor", "['x',1,2,-1,3]", "[batch, 3]", COIL_F32);
	expect_op(x, "aten.slice.Tensor", "['x',1,-100,100]", "[batch, 10]", COIL_F32);
	expect_op(x, "aten.slice.Tensor", "['x',1,8,2]", "[batch, 0]", COIL_F32);
	expect_op(x, "aten.slice.Tensor", "['x',1,0,10,9223372036854775807]", "[batch, 1]", COIL_F32);
	expect_op(x, "aten.select.int", "['x',1,-1]", "[batch]", COIL_F32);
	expect_op(x, "aten.select.int", "['x',0,0]", "[10]", COIL_F32);
	/* symbolic: Python's clamping kept symbolic (x[-1:], x[:-2], x[::2], x[1:batch-1]) */
	expect_op(x, "aten.slice.Tensor", "['x',0,-1]", "[1, 10]", COIL_F32);
	expect_op(x, "aten.slice.Tensor", "['x',0,0,-2]", "[max(0, batch-2), 10]", COIL_F32);
	expect_op(x, "aten.slice.Tensor", "['x',0,0,9223372036854775807,2]", "[((batch+1)//2), 10]", COIL_F32);
	expect_op(x, "aten.slice.Tensor", "['x',0,1,'batch-1']", "[max(1, batch-1)-1, 10]", COIL_F32);
	must_reject(x, "{'id':'s','op':'aten.select.int','args':['x',1,-11],'outputs':['y']}", "'y'",
		    "node 's' (aten.select.int): args[2] 'index': -11 out of range for size 10");
}

static void test_shape_broadcast(void **state)
{
	(void)state;
	static const struct {
		const char *a, *b, *out;
	} cases[] = {
		{"[2,3]", "[3]", "[2, 3]"},
		{"['batch',1,4]", "[3,1]", "[batch, 3, 4]"},
		{"[1]", "['batch']", "[batch]"},
		{"[]", "[2,3]", "[2, 3]"},
		{"['n',1]", "[1,'n']", "[n, n]"},
		{"[5,1,'s']", "['n',1]", "[5, n, s]"},
		{"[0,1]", "[1,7]", "[0, 7]"},
		{"[1,1,1,1,1,1,1,1]", "[2]", "[1, 1, 1, 1, 1, 1, 1, 2]"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char decls[512];
		snprintf(decls, sizeof decls,
			 "'inputs':[{'name':'a','dtype':'f32','shape':%s},{'name':'b','dtype':'f32','shape':%s}]",
			 cases[i].a, cases[i].b);
		coil_graph *g = must_graph(decls,
					   "{'id':'n','op':'aten.add.Tensor','args':['a','b'],'outputs':['y']},"
					   "{'id':'m','op':'aten.where.self','args':['c','b','a'],'outputs':['w']},"
					   "{'id':'k','op':'aten.gt.Tensor','args':['a','b'],'outputs':['c']}",
					   "'y','w'");
		expect_val(g, "y", cases[i].out, COIL_F32);
		expect_val(g, "w", cases[i].out, COIL_F32);
		expect_val(g, "c", cases[i].out, COIL_BOOL);
		graph_free(g);
	}
	/* the broadcasting helper itself */
	coil_dim a[2] = {dim_const(4), dim_const(1)}, b[1] = {dim_const(3)}, out[COIL_MAX_RANK];
	int r;
	coil_err err = {0};
	assert_int_equal(broadcast_shapes(a, 2, b, 1, out, &r, &err), 0);
	assert_int_equal(r, 2);
	assert_true(dim_eq_const(&out[0], 4) && dim_eq_const(&out[1], 3));
	assert_int_equal(broadcast_shapes(a, 2, (coil_dim[]){dim_const(3), dim_const(2)}, 2, out, &r, &err), -1);
	assert_non_null(strstr(err.msg, "dim 0 does not broadcast"));
}

static void test_shape_expand_permute_squeeze(void **state)
{
	(void)state;
	expect_op("'inputs':[{'name':'x','dtype':'f32','shape':[1,3]},{'name':'b','dtype':'f32','shape':['batch']}]",
		  "aten.expand", "['x',['batch',3]]", "[batch, 3]", COIL_F32);
	expect_op(IN1("f32", "['n',1]"), "aten.expand", "['x',[2,-1,5]]", "[2, n, 5]", COIL_F32);
	expect_op(IN1("f32", "['n',2,3]"), "aten.permute", "['x',[2,0,1]]", "[3, n, 2]", COIL_F32);
	expect_op(IN1("f32", "['n',2,3]"), "aten.permute", "['x',[-1,-3,-2]]", "[3, n, 2]", COIL_F32);
	expect_op(IN1("f32", "['n',2,3]"), "aten.transpose.int", "['x',0,-1]", "[3, 2, n]", COIL_F32);
	expect_op(IN1("f32", "['n',2]"), "aten.t", "['x']", "[2, n]", COIL_F32);
	expect_op(IN1("f32", "[5]"), "aten.t", "['x']", "[5]", COIL_F32);
	expect_op(IN1("f32", "[1,'n',1,2]"), "aten.squeeze", "['x']", "[n, 2]", COIL_F32);
	expect_op(IN1("f32", "[1,'n',1,2]"), "aten.squeeze.dim", "['x',2]", "[1, n, 2]", COIL_F32);
	expect_op(IN1("f32", "[1,'n',1,2]"), "aten.squeeze.dim", "['x',1]", "[1, n, 1, 2]", COIL_F32);
	expect_op(IN1("f32", "['n',2]"), "aten.unsqueeze", "['x',-1]", "[n, 2, 1]", COIL_F32);
	expect_op(IN1("f32", "['n',2]"), "aten.unsqueeze", "['x',0]", "[1, n, 2]", COIL_F32);
	expect_op(IN1("i64", "['n',3]"), "aten.constant_pad_nd", "['x',[1,2,0,'n']]", "[2*n, 6]", COIL_I64);
	expect_op(IN1("f32", "[4,5]"), "aten.constant_pad_nd", "['x',[-1,-2]]", "[4, 2]", COIL_F32);
	expect_op(IN1("f32", "[2,3]"), "aten.new_zeros", "['x',[4,'5']]", "[4, 5]", COIL_F32);
	expect_op("", "aten.zeros", "[[2,3]]", "[2, 3]", COIL_F32);
	expect_op("", "aten.full", "[[2],7]", "[2]", COIL_I64);
	expect_op("", "aten.full", "[[2],7.5]", "[2]", COIL_F32);
	expect_op("", "aten.full", "[[2],1],'kwargs':{'dtype':'f16'}", "[2]", COIL_F16);
	must_reject(IN1("f32", "[2,3]"), "{'id':'e','op':'aten.expand','args':['x',[2,4]],'outputs':['y']}", "'y'",
		    "node 'e' (aten.expand.default): args[1] 'size': cannot expand shape [2, 3] to [2, 4]");
	must_reject(IN1("f32", "[1,1,1,1,1,1,1,1]"),
		    "{'id':'u','op':'aten.unsqueeze','args':['x',0],'outputs':['y']}", "'y'",
		    "node 'u' (aten.unsqueeze.default): args[0] 'self': rank would exceed 8");
	must_reject(IN1("f32", "[2,3,4]"), "{'id':'t','op':'aten.t','args':['x'],'outputs':['y']}", "'y'",
		    "node 't' (aten.t.default): args[0] 'self': t() expects a tensor of rank <= 2, got 3");
}

static void test_shape_reductions(void **state)
{
	(void)state;
	const char *x = IN1("f32", "['n',3,4]");
	expect_op(x, "aten.sum.dim_IntList", "['x',[1]]", "[n, 4]", COIL_F32);
	expect_op(x, "aten.sum.dim_IntList", "['x',[-1,0],true]", "[1, 3, 1]", COIL_F32);
	expect_op(x, "aten.sum.dim_IntList", "['x',null]", "[]", COIL_F32);
	expect_op(x, "aten.sum", "['x']", "[]", COIL_F32);
	expect_op(x, "aten.mean.dim", "['x',2]", "[n, 3]", COIL_F32);
	expect_op(x, "aten.amax", "['x']", "[]", COIL_F32);
	expect_op(x, "aten.amax", "['x',[1],true]", "[n, 1, 4]", COIL_F32);
	expect_op(x, "aten.argmax", "['x',1]", "[n, 4]", COIL_I64);
	expect_op(x, "aten.var.correction", "['x',[2]]", "[n, 3]", COIL_F32);
	expect_op(IN1("i32", "[2,3]"), "aten.sum", "['x']", "[]", COIL_I64);
	expect_op(IN1("bool", "[2,3]"), "aten.sum.dim_IntList", "['x',[0]]", "[3]", COIL_I64);
	expect_op(IN1("i32", "[2,3]"), "aten.mean.dim", "['x',[0]],'kwargs':{'dtype':'f64'}", "[3]", COIL_F64);
	expect_op(IN1("f16", "[2,3]"), "aten.mean", "['x']", "[]", COIL_F16);
	coil_graph *g = must_graph(x, "{'id':'m','op':'aten.max.dim','args':['x',1,true],'outputs':['v','i']}",
				   "'v','i'");
	expect_val(g, "v", "[n, 1, 4]", COIL_F32);
	expect_val(g, "i", "[n, 1, 4]", COIL_I64);
	graph_free(g);
}

static void test_shape_split_and_multi_results(void **state)
{
	(void)state;
	coil_graph *g = must_graph(IN1("f32", "['n',7]"),
				   "{'id':'s','op':'aten.split.Tensor','args':['x',3,1],'outputs':['a','b',null]},"
				   "{'id':'w','op':'aten.split_with_sizes','args':['x',[2,5]],'kwargs':{'dim':-1},"
				   "'outputs':['c','d']}",
				   "'a','b','c','d'");
	expect_val(g, "a", "[n, 3]", COIL_F32);
	expect_val(g, "b", "[n, 3]", COIL_F32);
	expect_val(g, "c", "[n, 2]", COIL_F32);
	expect_val(g, "d", "[n, 5]", COIL_F32);
	/* the unnamed third chunk is still a value of size 1 */
	const coil_node *s = NULL;
	for (int i = 0; i < g->nnodes; i++)
		if (!strcmp(g->nodes[i].id, "s"))
			s = &g->nodes[i];
	assert_non_null(s);
	assert_int_equal(s->nout, 3);
	assert_null(node_out(g, s, 2)->name);
	assert_true(dim_eq_const(&node_out(g, s, 2)->shape[1], 1));
	graph_free(g);
	g = must_graph("'inputs':[{'name':'x','dtype':'f16','shape':['n',3,5,5]}],"
		       "'params':[{'name':'m','dtype':'f32','shape':[3]},{'name':'v','dtype':'f32','shape':[3]}]",
		       "{'id':'bn','op':'aten.native_batch_norm','args':['x',null,null,'m','v',false,0.1,1e-5],"
		       "'outputs':['y',null,'r']},"
		       "{'id':'ln','op':'aten.native_layer_norm','args':['x',[5,5],null,null,1e-5],"
		       "'outputs':['l','mu','rs']}",
		       "'y','r','l','mu','rs'");
	expect_val(g, "y", "[n, 3, 5, 5]", COIL_F16);
	expect_val(g, "r", "[0]", COIL_F16);
	expect_val(g, "l", "[n, 3, 5, 5]", COIL_F16);
	expect_val(g, "mu", "[n, 3, 1, 1]", COIL_F16);
	graph_free(g);
}

static void test_dtype_promotion_tensors(void **state)
{
	(void)state;
	static const struct {
		const char *a, *sa, *b, *sb;
		coil_dtype want;
	} cases[] = {
		{"i64", "[2]", "f32", "[2]", COIL_F32},
		{"u8", "[2]", "i64", "[2]", COIL_I64},
		{"bool", "[2]", "bool", "[2]", COIL_BOOL},
		{"f16", "[2]", "bf16", "[2]", COIL_F32},
		{"f64", "[]", "f32", "[2]", COIL_F32},  /* a 0-dim tensor does not promote a dimensioned one */
		{"f32", "[2]", "f64", "[]", COIL_F32},
		{"i64", "[]", "i32", "[2]", COIL_I32},
		{"f32", "[]", "i32", "[2]", COIL_F32},  /* ... unless it is of a higher category */
		{"f64", "[]", "f16", "[2]", COIL_F16},
		{"f64", "[]", "i64", "[]", COIL_F64},
		{"bool", "[2]", "u8", "[]", COIL_U8},
		{"i8", "[2]", "i32", "[2]", COIL_I32},
		{"f16", "[2]", "f16", "[2]", COIL_F16},
		{"bf16", "[2]", "f64", "[2]", COIL_F64},
		{"i8", "[2]", "bool", "[2]", COIL_I8},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		coil_dtype t = binop_dtype("aten.add.Tensor", cases[i].a, cases[i].sa, cases[i].b, cases[i].sb);
		if (t != cases[i].want)
			fail_msg("%s%s + %s%s gives %s, expected %s", cases[i].a, cases[i].sa, cases[i].b, cases[i].sb,
				 dtype_name(t), dtype_name(cases[i].want));
		/* promotion is symmetric */
		assert_int_equal(binop_dtype("aten.mul.Tensor", cases[i].b, cases[i].sb, cases[i].a, cases[i].sa), t);
	}
	/* where and cat promote too; cat ignores ranks */
	coil_graph *g = must_graph("'inputs':[{'name':'c','dtype':'bool','shape':[2]},"
				   "{'name':'a','dtype':'i32','shape':[2]},{'name':'b','dtype':'f16','shape':[2]}]",
				   "{'id':'w','op':'aten.where.self','args':['c','a','b'],'outputs':['w']},"
				   "{'id':'k','op':'aten.cat','args':[['a','b']],'outputs':['k']}",
				   "'w','k'");
	expect_val(g, "w", "[2]", COIL_F16);
	expect_val(g, "k", "[4]", COIL_F16);
	graph_free(g);
}

static void test_dtype_promotion_scalars(void **state)
{
	(void)state;
	static const struct {
		const char *op, *t, *shape, *scalar;
		coil_dtype want;
	} cases[] = {
		{"aten.add.Scalar", "i32", "[2]", "2.5", COIL_F32},   /* a float scalar promotes an int tensor */
		{"aten.mul.Scalar", "i32", "[2]", "2", COIL_I32},     /* an int scalar does not */
		{"aten.add.Scalar", "u8", "[2]", "300", COIL_U8},
		{"aten.mul.Scalar", "f16", "[2]", "1e10", COIL_F16},  /* nor a float scalar a float tensor */
		{"aten.mul.Scalar", "bool", "[2]", "2", COIL_I64},
		{"aten.mul.Scalar", "bool", "[2]", "2.5", COIL_F32},
		{"aten.mul.Scalar", "i64", "[]", "2.5", COIL_F32},
		{"aten.mul.Scalar", "f64", "[]", "2", COIL_F64},
		{"aten.sub.Scalar", "i8", "[2]", "'inf'", COIL_F32},
		{"aten.pow.Tensor_Scalar", "i32", "[2]", "2.5", COIL_F32},
		{"aten.pow.Tensor_Scalar", "bf16", "[2]", "2", COIL_BF16},
		{"aten.clamp_min", "i64", "[2]", "0.5", COIL_F32},
		{"aten.clamp_min", "i64", "[2]", "0", COIL_I64},
		{"aten.eq.Scalar", "f32", "[2]", "1", COIL_BOOL},
		{"aten.lt.Scalar", "i8", "[2]", "1.5", COIL_BOOL},
		{"aten.div.Scalar", "i64", "[2]", "2", COIL_F32},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		coil_dtype t = scalar_dtype(cases[i].op, cases[i].t, cases[i].shape, cases[i].scalar);
		if (t != cases[i].want)
			fail_msg("%s(%s%s, %s) gives %s, expected %s", cases[i].op, cases[i].t, cases[i].shape,
				 cases[i].scalar, dtype_name(t), dtype_name(cases[i].want));
	}
	/* masked_fill keeps self's dtype whatever the fill value */
	expect_op("'inputs':[{'name':'a','dtype':'i32','shape':[2,3]},{'name':'c','dtype':'bool','shape':[3]}]",
		  "aten.masked_fill.Scalar", "['a','c',2.5]", "[2, 3]", COIL_I32);
}

static void test_dtype_division_comparison_unary(void **state)
{
	(void)state;
	assert_int_equal(binop_dtype("aten.div.Tensor", "i32", "[2]", "i32", "[2]"), COIL_F32);
	assert_int_equal(binop_dtype("aten.div.Tensor", "bool", "[2]", "u8", "[2]"), COIL_F32);
	assert_int_equal(binop_dtype("aten.div.Tensor", "f64", "[2]", "i64", "[2]"), COIL_F64);
	assert_int_equal(binop_dtype("aten.div.Tensor", "f16", "[2]", "f16", "[2]"), COIL_F16);
	assert_int_equal(binop_dtype("aten.div.Tensor_mode", "i32", "[2]", "i32", "[2]"), COIL_F32);
	expect_op("'inputs':[{'name':'a','dtype':'i32','shape':[2]},{'name':'b','dtype':'i32','shape':[2]}]",
		  "aten.div.Tensor_mode", "['a','b'],'kwargs':{'rounding_mode':'floor'}", "[2]", COIL_I32);
	must_reject("'inputs':[{'name':'a','dtype':'bool','shape':[2]},{'name':'b','dtype':'bool','shape':[2]}]",
		    "{'id':'n','op':'aten.div.Tensor_mode','args':['a','b'],'kwargs':{'rounding_mode':'trunc'},"
		    "'outputs':['y']}", "'y'", "node 'n' (aten.div.Tensor_mode): args[0] 'self': ");
	must_reject("'inputs':[{'name':'a','dtype':'f32','shape':[2]}]",
		    "{'id':'n','op':'aten.div.Tensor_mode','args':['a','a'],'kwargs':{'rounding_mode':'round'},"
		    "'outputs':['y']}", "'y'",
		    "node 'n' (aten.div.Tensor_mode): args[2] 'rounding_mode': must be \"trunc\", \"floor\" or null");
	static const char *cmp[] = {"aten.eq.Tensor", "aten.ne.Tensor", "aten.lt.Tensor", "aten.le.Tensor",
				    "aten.gt.Tensor", "aten.ge.Tensor", "aten.logical_and", "aten.logical_or"};
	for (size_t i = 0; i < sizeof cmp / sizeof *cmp; i++) {
		assert_int_equal(binop_dtype(cmp[i], "i64", "[2,1]", "f32", "[3]"), COIL_BOOL);
		assert_int_equal(binop_dtype(cmp[i], "f16", "[]", "u8", "[3]"), COIL_BOOL);
	}
	expect_op(IN1("i64", "[2]"), "aten.sigmoid", "['x']", "[2]", COIL_F32);
	expect_op(IN1("bf16", "[2]"), "aten.exp", "['x']", "[2]", COIL_BF16);
	expect_op(IN1("i32", "[2]"), "aten.neg", "['x']", "[2]", COIL_I32);
	expect_op(IN1("u8", "[2]"), "aten.logical_not", "['x']", "[2]", COIL_BOOL);
	expect_op(IN1("f32", "[2]"), "aten._to_copy", "['x']", "[2]", COIL_F32);
	expect_op(IN1("f32", "[2]"), "aten._to_copy", "['x'],'kwargs':{'dtype':'i8'}", "[2]", COIL_I8);
	expect_op(IN1("f16", "[2,3]"), "aten._softmax", "['x',1,true]", "[2, 3]", COIL_F32);
	expect_op(IN1("f32", "[2,3]"), "aten.log_softmax.int", "['x',-1,'f64']", "[2, 3]", COIL_F64);
	must_reject(IN1("bool", "[2]"), "{'id':'s','op':'aten.sub.Tensor','args':['x','x'],'outputs':['y']}", "'y'",
		    "node 's' (aten.sub.Tensor): subtraction of bool tensors is not supported");
	must_reject(IN1("i64", "[2]"), "{'id':'a','op':'aten.add.Tensor','args':['x','x'],'kwargs':{'alpha':0.5},"
				       "'outputs':['y']}", "'y'",
		    "node 'a' (aten.add.Tensor): args[2] 'alpha': a float alpha needs a floating result dtype");
	must_reject(IN1("i64", "[2]"), "{'id':'g','op':'aten.gelu','args':['x'],'outputs':['y']}", "'y'",
		    "node 'g' (aten.gelu.default): args[0] 'self': dtype i64 is not supported");
}

/* A 2-D convolution of x (shape xs) by a static weight ws; checks y's shape. */
static void conv_case(const char *xs, const char *ws, const char *args, const char *want)
{
	char decls[512], node[512];
	snprintf(decls, sizeof decls,
		 "'inputs':[{'name':'x','dtype':'f32','shape':%s}],'params':[{'name':'w','dtype':'f32','shape':%s}]",
		 xs, ws);
	snprintf(node, sizeof node, "{'id':'c','op':'aten.convolution','args':['x','w',null,%s],'outputs':['y']}",
		 args);
	coil_graph *g = must_graph(decls, node, "'y'");
	expect_val(g, "y", want, COIL_F32);
	graph_free(g);
}

static void test_conv_output_sizes(void **state)
{
	(void)state;
	/* expected sizes checked against PyTorch 1.13 */
	conv_case("['n',3,32,32]", "[8,3,3,3]", "[2,2],[1,1],[1,1],false,[0,0],1", "[n, 8, 16, 16]");
	conv_case("['n',3,32,32]", "[8,3,3,3]", "[1],[0],[2],false,[0],1", "[n, 8, 28, 28]");
	conv_case("[1,3,32,32]", "[8,3,5,3]", "[2,1],[2,0],[1,1],false,[0,0],1", "[1, 8, 16, 30]");
	conv_case("[2,6,10,10]", "[9,2,3,3]", "[1,1],[0,0],[1,1],false,[0,0],3", "[2, 9, 8, 8]");
	conv_case("[1,4,7,7]", "[4,3,3,3]", "[2,2],[1,1],[1,1],true,[1,1],1", "[1, 3, 14, 14]");
	conv_case("[1,4,5,5]", "[4,3,4,4]", "[2,2],[0,0],[1,1],true,[0,0],2", "[1, 6, 12, 12]");
	conv_case("[2,3,17]", "[5,3,4]", "[3],[0],[1],false,[0],1", "[2, 5, 5]");
	conv_case("[1,2,4,4,4]", "[3,2,2,2,2]", "[2,2,2],[0,0,0],[1,1,1],false,[0,0,0],1", "[1, 3, 2, 2, 2]");
	conv_case("['n',1,3,3]", "[1,1,3,3]", "[1,1],[0,0],[1,1],false,[0,0],1", "[n, 1, 1, 1]");
	must_reject("'inputs':[{'name':'x','dtype':'f32','shape':[1,'c',8,8]}],"
		    "'params':[{'name':'w','dtype':'f32','shape':[4,3,3,3]}]",
		    "{'id':'c','op':'aten.convolution','args':['x','w',null,[1],[0],[1],false,[0],1],'outputs':['y']}",
		    "'y'", "node 'c' (aten.convolution.default): args[0] 'input': dim 1 must be static here");
	must_reject("'inputs':[{'name':'x','dtype':'f32','shape':[1,3,8,8]}],"
		    "'params':[{'name':'w','dtype':'f32','shape':[4,3,3,3]}]",
		    "{'id':'c','op':'aten.convolution','args':['x','w',null,[1,1,1],[0],[1],false,[0],1],"
		    "'outputs':['y']}",
		    "'y'", "node 'c' (aten.convolution.default): args[3] 'stride': expected 2 values, got 3");
	must_reject("'inputs':[{'name':'x','dtype':'f32','shape':[1,3,8,8]}],"
		    "'params':[{'name':'w','dtype':'f32','shape':[4,3,3,3]}]",
		    "{'id':'c','op':'aten.convolution','args':['x','w',null,[0],[0],[1],false,[0],1],"
		    "'outputs':['y']}",
		    "'y'", "node 'c' (aten.convolution.default): args[3] 'stride': value 0 out of range");
}

/* max_pool2d (or avg_pool2d) on a [1,1,n,n] input; returns the output size. */
static int64_t pool_case(const char *op, int n, const char *args)
{
	char decls[256], node[512];
	snprintf(decls, sizeof decls, "'inputs':[{'name':'x','dtype':'f32','shape':[1,1,%d,%d]}]", n, n);
	snprintf(node, sizeof node, "{'id':'p','op':'%s','args':['x',%s],'outputs':['y']}", op, args);
	coil_graph *g = must_graph(decls, node, "'y'");
	coil_value *y = val_named(g, "y");
	int64_t a, b;
	assert_true(dim_is_const(&y->shape[2], &a) && dim_is_const(&y->shape[3], &b));
	assert_true(a == b);
	graph_free(g);
	return a;
}

static void test_pool_output_sizes(void **state)
{
	(void)state;
	/* (n, kernel, stride, padding, dilation, ceil_mode) -> size, from PyTorch 1.13 */
	static const struct {
		int n, k, s, p, d, ceil;
		int64_t want;
	} mp[] = {
		{8, 3, 2, 0, 1, 0, 3}, {8, 3, 2, 0, 1, 1, 4},	  {5, 2, 2, 1, 1, 1, 3},
		{5, 2, 2, 1, 1, 0, 3}, {6, 3, 3, 1, 1, 1, 3},	  {7, 3, 2, 1, 2, 1, 3},
		{224, 3, 2, 1, 1, 0, 112}, {112, 3, 2, 1, 1, 1, 57}, {13, 3, 2, 0, 1, 1, 6},
	};
	char args[256];
	for (size_t i = 0; i < sizeof mp / sizeof *mp; i++) {
	snprintf(args, sizeof args, "[%d,%d],[%d,%d],%d,[%d,%d],%s", mp[i].k, mp[i].k, mp[i].s, mp[i].s,
			 mp[i].p, mp[i].d, mp[i].d, mp[i].ceil ? "true" : "false");
		int64_t o = pool_case("aten.max_pool2d", mp[i].n, args);
		if (o != mp[i].want)
			fail_msg("max_pool2d n=%d k=%d s=%d p=%d d=%d ceil=%d gives %lld, expected %lld", mp[i].n,
				 mp[i].k, mp[i].s, mp[i].p, mp[i].d, mp[i].ceil, (long long)o, (long long)mp[i].want);
		assert_int_equal(pool_out_size(mp[i].n, mp[i].k, mp[i].s, mp[i].p, mp[i].d, mp[i].ceil), mp[i].want);
	}
	static const struct {
		int n, k, s, p, ceil;
		int64_t want;
	} ap[] = {{7, 2, 2, 0, 1, 4}, {7, 2, 2, 0, 0, 3}, {5, 3, 2, 1, 1, 3}};
	for (size_t i = 0; i < sizeof ap / sizeof *ap; i++) {
		snprintf(args, sizeof args, "%d,%d,%d,%s", ap[i].k, ap[i].s, ap[i].p, ap[i].ceil ? "true" : "false");
		assert_int_equal(pool_case("aten.avg_pool2d", ap[i].n, args), ap[i].want);
	}
	/* stride defaults to the kernel; the indices of max_pool2d_with_indices are i64 */
	assert_int_equal(pool_case("aten.max_pool2d", 9, "[3,3]"), 3);
	coil_graph *g = must_graph(IN1("f16", "['n',2,9,9]"),
				   "{'id':'p','op':'aten.max_pool2d_with_indices','args':['x',3,2],'outputs':['v','i']},"
				   "{'id':'a','op':'aten.adaptive_avg_pool2d','args':['x',[1,1]],'outputs':['q']}",
				   "'v','i','q'");
	expect_val(g, "v", "[n, 2, 4, 4]", COIL_F16);
	expect_val(g, "i", "[n, 2, 4, 4]", COIL_I64);
	expect_val(g, "q", "[n, 2, 1, 1]", COIL_F16);
	graph_free(g);
	must_reject(IN1("f32", "[1,1,2,2]"), "{'id':'p','op':'aten.max_pool2d','args':['x',[3,3]],'outputs':['y']}",
		    "'y'", "node 'p' (aten.max_pool2d.default): args[1] 'kernel_size': output size would be 0");
	must_reject(IN1("i64", "[1,1,4,4]"), "{'id':'p','op':'aten.avg_pool2d','args':['x',[2,2]],'outputs':['y']}",
		    "'y'", "node 'p' (aten.avg_pool2d.default): args[0] 'self': dtype i64 is not supported");
}

/* --- dimension expressions ------------------------------------------------------------- */

static void test_dim_roundtrip(void **state)
{
	(void)state;
	static const struct {
		const char *in, *out;
	} cases[] = {
		{"batch", "batch"},
		{"batch*196", "196*batch"},
		{"196 * batch", "196*batch"},
		{"2*seq+1", "2*seq+1"},
		{"1+seq*2", "2*seq+1"},
		{"batch-1", "batch-1"},
		{"-batch+3", "-batch+3"},
		{"(batch+1)*(batch-1)", "batch*batch-1"},
		{"batch*seq", "batch*seq"},
		{"seq*batch", "batch*seq"},
		{"3*(seq+2)-6", "3*seq"},
		{"batch-batch", "0"},
		{"0", "0"},
		{"42", "42"},
		{"-(2*batch)", "-2*batch"},
		{"--batch", "batch"},
		{"(((batch)))", "batch"},
		{"9223372036854775807", "9223372036854775807"},
		{"4611686018427387904*batch", "4611686018427387904*batch"},
	};
	coil_symtab tab = {0};
	coil_err err = {0};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		coil_dim d, d2;
		char buf[256];
		if (dim_parse(cases[i].in, &tab, 1, &d, &err))
			fail_msg("dim_parse(\"%s\"): %s", cases[i].in, err.msg);
		dim_format(&d, &tab, buf, sizeof buf);
		if (strcmp(buf, cases[i].out))
			fail_msg("\"%s\" formats as \"%s\", expected \"%s\"", cases[i].in, buf, cases[i].out);
		/* the printed form parses back to the same expression */
		if (dim_parse(buf, &tab, 0, &d2, &err))
			fail_msg("dim_parse(\"%s\") (reparse): %s", buf, err.msg);
		assert_true(dim_eq(&d, &d2));
	}
	assert_int_equal(tab.n, 2);
	assert_string_equal(tab.name[0], "batch");
	assert_string_equal(tab.name[1], "seq");
	/* evaluation with bound symbols */
	coil_dim d;
	int64_t vals[COIL_MAX_SYMS] = {5, 7}, v;
	assert_int_equal(dim_parse("(batch+1)*seq-2", &tab, 0, &d, &err), 0);
	assert_int_equal(dim_eval(&d, vals, &v, &err), 0);
	assert_int_equal(v, 40);
	assert_int_equal(dim_min(&d), 0);
	char buf[64];
	coil_dim shape[3] = {dim_const(2), dim_sym(0), d};
	/* terms print in canonical order, the constant last */
	assert_string_equal(shape_format(shape, 3, &tab, buf, sizeof buf), "[2, batch, seq+batch*seq-2]");
	assert_string_equal(shape_format(shape, 0, &tab, buf, sizeof buf), "[]");
	/* a tiny buffer truncates without overflowing */
	char small[6];
	shape_format(shape, 3, &tab, small, sizeof small);
	assert_string_equal(small, "[2, b");
}

static void test_dim_reject(void **state)
{
	(void)state;
	static const struct {
		const char *in, *msg;
	} cases[] = {
		{"9223372036854775808", "integer too large"},
		{"99999999999999999999999", "integer too large"},
		{"9223372036854775807+1", "size expression overflows"},
		{"3037000500*3037000500", "size expression overflows"},
		{"4611686018427387904*batch*2", "size expression overflows"},
		{"-9223372036854775807-2", "size expression overflows"},
		{"batch*batch*batch*batch*batch*batch*batch*batch*batch", "power above 8"},
		{"batch+seq+a+b+c+e+f+g+h", "more than 8 terms"},
		{"", "unexpected 'end'"},
		{"batch+", "unexpected 'end'"},
		{"batch seq", "unexpected 'seq'"},
		{"(batch", "expected ')'"},
		{"batch)", "unexpected ')'"},
		{"2.5", "unexpected '.5'"},
		{"batch/2", "unexpected '/2'"},
		{"nope", "unknown size symbol 'nope'"},
		{"((((((((((((((((((((((((((((((((((batch))))))))))))))))))))))))))))))))))", "nested too deeply"},
		{"------------------------------------batch", "nested too deeply"},
		{"abcdefghijabcdefghijabcdefghijabc", "symbol longer than 32 characters"},
	};
	coil_symtab tab = {0};
	coil_err err = {0};
	coil_dim d;
	assert_int_equal(dim_parse("batch+seq+a+b", &tab, 1, &d, &err), 0);
	assert_int_equal(dim_parse("c+e+f+g+h", &tab, 1, &d, &err), 0);
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		err.msg[0] = 0;
		if (!dim_parse(cases[i].in, &tab, 0, &d, &err))
			fail_msg("dim_parse(\"%s\") accepted", cases[i].in);
		if (!strstr(err.msg, cases[i].msg))
			fail_msg("dim_parse(\"%s\"): \"%s\" lacks \"%s\"", cases[i].in, err.msg, cases[i].msg);
	}
	char longexpr[300];
	memset(longexpr, '1', sizeof longexpr - 1);
	longexpr[sizeof longexpr - 1] = 0;
	assert_int_equal(dim_parse(longexpr, &tab, 0, &d, &err), -1);
	assert_non_null(strstr(err.msg, "longer than 256"));
	/* at most COIL_MAX_SYMS symbols */
	coil_symtab t2 = {0};
	for (int i = 0; i < COIL_MAX_SYMS; i++) {
		char nm[16];
		snprintf(nm, sizeof nm, "q%d", i);
		assert_int_equal(dim_parse(nm, &t2, 1, &d, &err), 0);
	}
	assert_int_equal(dim_parse("i", &t2, 1, &d, &err), -1);
	assert_non_null(strstr(err.msg, "more than 24 size symbols"));
	/* evaluation overflow */
	int64_t vals[COIL_MAX_SYMS] = {INT64_MAX / 2 + 1, 1, 1, 1, 1, 1, 1, 1}, v;
	assert_int_equal(dim_parse("2*q0", &t2, 0, &d, &err), 0);
	assert_int_equal(dim_eval(&d, vals, &v, &err), -1);
	assert_non_null(strstr(err.msg, "overflows"));
	assert_int_equal(dim_parse("q0+q0", &t2, 0, &d, &err), 0);
	assert_int_equal(dim_eval(&d, vals, &v, &err), -1);
}

static void test_dim_arith(void **state)
{
	(void)state;
	coil_symtab tab = {0};
	coil_err err = {0};
	coil_dim a, b, q;
	char buf[128];
	assert_int_equal(dim_parse("6*n*m+12*n", &tab, 1, &a, &err), 0);
	assert_int_equal(dim_parse("3*n", &tab, 0, &b, &err), 0);
	assert_int_equal(dim_div(&q, &a, &b, &err), 0);
	assert_string_equal(dim_format(&q, &tab, buf, sizeof buf), "2*m+4");
	assert_int_equal(dim_parse("4*m", &tab, 0, &b, &err), 0);
	assert_int_equal(dim_div(&q, &a, &b, &err), -1); /* 12*n has no m */
	assert_int_equal(dim_parse("n+1", &tab, 0, &b, &err), 0);
	assert_int_equal(dim_div(&q, &a, &b, &err), -1); /* not a monomial */
	b = dim_const(0);
	assert_int_equal(dim_div(&q, &a, &b, &err), -1);
	assert_int_equal(dim_floordiv(&q, &a, 3, NULL, &err), 0);
	assert_string_equal(dim_format(&q, &tab, buf, sizeof buf), "4*n+2*n*m");
	assert_int_equal(dim_floordiv(&q, &a, 4, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "not divisible by 4"));
	coil_dim c = dim_const(-7);
	assert_int_equal(dim_floordiv(&q, &c, 2, NULL, &err), 0);
	assert_true(dim_eq_const(&q, -4));
	assert_int_equal(dim_floordiv(&q, &c, 0, NULL, &err), -1);
	coil_dim big = dim_const(INT64_MAX), one = dim_const(1), neg = dim_const(INT64_MIN);
	assert_int_equal(dim_add(&q, &big, &one, &err), -1);
	assert_int_equal(dim_sub(&q, &neg, &one, &err), -1);
	assert_int_equal(dim_sub(&q, &one, &neg, &err), -1);
	assert_int_equal(dim_mul(&q, &big, &big, &err), -1);
	/* x - x is the constant 0, which compares equal to dim_const(0) */
	assert_int_equal(dim_sub(&q, &a, &a, &err), 0);
	assert_true(dim_eq_const(&q, 0));
	assert_true(dim_is_const(&q, NULL));
}

/* --- guards: assumptions shape rules make, checked when symbols are bound ---- */

static coil_graph *parse_ok(const char *json)
{
	coil_err err = {0};
	coil_graph *g = graph_parse(json, strlen(json), &err);
	if (!g)
		fail_msg("graph rejected: %s\n  %s", err.msg, json);
	return g;
}

/* Binds input 0's dims to dims[] and checks; returns 0 or the message. */
static const char *bind1(coil_graph *g, const int64_t *dims, int rank, coil_err *err)
{
	coil_tensor t = {.dtype = COIL_F32, .rank = rank};
	for (int i = 0; i < rank; i++)
		t.shape[i] = dims[i];
	int64_t vals[COIL_MAX_SYMS];
	err->msg[0] = 0;
	return bind_symbols(g, &t, vals, err) ? err->msg : NULL;
}

static void expect_bind(coil_graph *g, const int64_t *dims, int rank, const char *want)
{
	coil_err err = {0};
	const char *m = bind1(g, dims, rank, &err);
	if (!want && m)
		fail_msg("binding refused: %s", m);
	if (want && !m)
		fail_msg("binding accepted, expected \"%s\"", want);
	if (want && !strstr(m, want))
		fail_msg("message \"%s\" lacks \"%s\"", m, want);
}

#define G1(IN, NODES, OUT, EXTRA)                                                                           \
	"{\"format\":\"coil-graph\",\"version\":1" EXTRA ",\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":" IN \
	"}],\"nodes\":[" NODES "],\"outputs\":[\"" OUT "\"]}"

static void test_guards(void **state)
{
	(void)state;
	char b[256];
	/* a reshape's -1 over a symbolic count: exact when 3*batch is even */
	coil_graph *g = parse_ok(G1("[\"batch\",3]", "{\"id\":\"v\",\"op\":\"aten.view.default\",\"args\":[\"x\",[-1,2]],"
				     "\"outputs\":[\"y\"]}", "y", ""));
	assert_int_equal(g->nguards, 1);
	assert_string_equal(guard_format(&g->syms, &g->guards[0], b, sizeof b), "3*batch % 2 == 0");
	expect_bind(g, (int64_t[]){4, 3}, 2, NULL);
	expect_bind(g, (int64_t[]){3, 3}, 2,
		    "input 'x' dim 0 (batch = 3): guard 3*batch % 2 == 0 fails (element count of the input of node 'v'");
	graph_free(g);
	/* a size that is not provably non-negative */
	g = parse_ok(G1("[\"batch\"]", "{\"id\":\"z\",\"op\":\"aten.new_zeros.default\",\"args\":[\"x\",[\"1-batch\"]],"
			"\"outputs\":[\"y\"]}", "y", ""));
	expect_bind(g, (int64_t[]){1}, 1, NULL);
	expect_bind(g, (int64_t[]){2}, 1, "input 'x' dim 0 (batch = 2): guard -batch+1 >= 0 fails");
	graph_free(g);
	/* a convolution's output is not empty: h >= 3 */
	g = parse_ok(G1("[1,1,\"h\",5]", "{\"id\":\"c\",\"op\":\"aten.convolution.default\",\"args\":[\"x\",\"w\",null,"
			"[1,1],[0,0],[1,1],false,[0,0],1],\"outputs\":[\"y\"]}", "y",
			",\"constants\":[{\"name\":\"w\",\"dtype\":\"f32\",\"shape\":[1,1,3,3],\"data\":[1,1,1,1,1,1,1,1,1]}]"));
	expect_bind(g, (int64_t[]){1, 1, 3, 5}, 4, NULL);
	expect_bind(g, (int64_t[]){1, 1, 2, 5}, 4, "input 'x' dim 2 (h = 2): guard h-2 >= 1 fails (output size of node 'c'");
	graph_free(g);
	/* a view that holds when a floor division is exact: s even */
	g = parse_ok(G1("[\"b\",\"s\",8]", "{\"id\":\"v\",\"op\":\"aten.view.default\",\"args\":[\"x\",[\"b\",\"s//2\",16]],"
			"\"outputs\":[\"y\"]},{\"id\":\"u\",\"op\":\"aten.view.default\",\"args\":[\"x\",[\"b\",-1,16]],"
			"\"outputs\":[\"z\"]}", "y", ""));
	assert_string_equal(shape_format(g->vals[g->nodes[1].outs[0]].shape, 3, &g->syms, b, sizeof b), "[b, (s//2), 16]");
	expect_bind(g, (int64_t[]){3, 6, 8}, 3, NULL);
	expect_bind(g, (int64_t[]){3, 7, 8}, 3, "input 'x' dim 1 (s = 7): guard s % 2 == 0 fails (exact division in the sizes of node 'v'");
	graph_free(g);
	/* a declared maximum bounds sizes: pos[:seq] of 512 positions is seq long */
	g = parse_ok(G1("[\"seq\",4]", "{\"id\":\"p\",\"op\":\"aten.slice.Tensor\",\"args\":[\"pos\",0,0,\"seq\"],"
			"\"outputs\":[\"q\"]},{\"id\":\"a\",\"op\":\"aten.add.Tensor\",\"args\":[\"x\",\"q\"],\"outputs\":[\"y\"]}",
			"y", ",\"symbols\":{\"seq\":{\"max\":512}},\"params\":[{\"name\":\"pos\",\"dtype\":\"f32\",\"shape\":[512,4]}]"));
	assert_string_equal(shape_format(g->vals[g->nodes[1].outs[0]].shape, 2, &g->syms, b, sizeof b), "[seq, 4]");
	graph_free(g);
	/* declared ranges */
	g = parse_ok(G1("[\"seq\",4]", "{\"id\":\"r\",\"op\":\"aten.relu.default\",\"args\":[\"x\"],\"outputs\":[\"y\"]}", "y",
			",\"symbols\":{\"seq\":{\"min\":2,\"max\":512}}"));
	expect_bind(g, (int64_t[]){2, 4}, 2, NULL);
	expect_bind(g, (int64_t[]){512, 4}, 2, NULL);
	expect_bind(g, (int64_t[]){513, 4}, 2, "input 'x' dim 0 (seq = 513): outside the range [2, 512] of 'seq' (guard)");
	expect_bind(g, (int64_t[]){1, 4}, 2, "outside the range [2, 512] of 'seq'");
	graph_free(g);
	/* ranges are part of the graph's identity */
	char h1[65], h2[65];
	coil_err err = {0};
	g = parse_ok(G1("[\"seq\",4]", "{\"id\":\"r\",\"op\":\"aten.relu.default\",\"args\":[\"x\"],\"outputs\":[\"y\"]}", "y", ""));
	coil_graph *g2 = parse_ok(G1("[\"seq\",4]", "{\"id\":\"r\",\"op\":\"aten.relu.default\",\"args\":[\"x\"],\"outputs\":[\"y\"]}",
				     "y", ",\"symbols\":{\"seq\":{\"max\":64}}"));
	assert_int_equal(graph_hash(g, h1, &err), 0);
	assert_int_equal(graph_hash(g2, h2, &err), 0);
	assert_string_not_equal(h1, h2);
	graph_free(g);
	graph_free(g2);
	/* bad declarations name the field */
	const char *bad[][2] = {
		{",\"symbols\":{\"t\":{\"max\":4}}", "symbols: 't' is not a symbol of any input's shape"},
		{",\"symbols\":{\"seq\":{\"max\":1,\"min\":3}}", "symbols.seq: max 1 is below min 3"},
		{",\"symbols\":{\"seq\":{\"hi\":1}}", "symbols.seq: unknown key 'hi'"},
		{",\"symbols\":{\"seq\":{\"min\":-1}}", "symbols.seq.min: must be an integer"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		char j[1024];
		snprintf(j, sizeof j, "{\"format\":\"coil-graph\",\"version\":1%s,\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\","
			 "\"shape\":[\"seq\"]}],\"nodes\":[],\"outputs\":[\"x\"]}", bad[i][0]);
		err.msg[0] = 0;
		coil_graph *bg = graph_parse(j, strlen(j), &err);
		if (bg || !strstr(err.msg, bad[i][1]))
			fail_msg("%s: got \"%s\", expected \"%s\"", bad[i][0], bg ? "accepted" : err.msg, bad[i][1]);
	}
}

/* floor division and min/max: canonical forms, derived symbols, values */
static void test_dim_floordiv_minmax(void **state)
{
	(void)state;
	coil_symtab tab = {0};
	coil_err err = {0};
	coil_dim d, e;
	char b[256];
	assert_int_equal(dim_parse("h", &tab, 1, &d, &err), 0);
	assert_int_equal(dim_parse("(h+1)//2", &tab, 0, &d, &err), 0);
	assert_string_equal(dim_format(&d, &tab, b, sizeof b), "((h+1)//2)");
	/* multiples of the divisor come out: (2h+3)//2 = h + 1 + 0 */
	assert_int_equal(dim_parse("(2*h+3)//2", &tab, 0, &e, &err), 0);
	assert_string_equal(dim_format(&e, &tab, b, sizeof b), "h+1");
	/* one symbol for equal definitions: (h-1)//2 + 1 is (h+1)//2 */
	assert_int_equal(dim_parse("(h-1)//2+1", &tab, 0, &e, &err), 0);
	assert_true(dim_eq(&d, &e));
	assert_int_equal(tab.n, 2);
	assert_int_equal(dim_parse("min(h, 512)", &tab, 0, &e, &err), 0);
	assert_int_equal(dim_parse("min(512, h)", &tab, 0, &d, &err), 0);
	assert_true(dim_eq(&d, &e));
	assert_int_equal(dim_parse("max(h, 0)", &tab, 0, &d, &err), 0);
	assert_string_equal(dim_format(&d, &tab, b, sizeof b), "h"); /* h >= 1 */
	coil_dim f, q;
	assert_int_equal(dim_parse("max(h-3, 0)*2", &tab, 0, &d, &err), 0);
	assert_int_equal(dim_parse("(h-1)//2+1", &tab, 0, &e, &err), 0);
	assert_int_equal(dim_parse("(h-7)//3", &tab, 0, &f, &err), 0);
	/* x[3:] of h: h - min(3, h), provably >= 0 */
	assert_int_equal(dim_parse("max(h, min(3, h))-min(3, h)", &tab, 0, &q, &err), 0);
	assert_string_equal(dim_format(&q, &tab, b, sizeof b), "-min(3, h)+h");
	for (int64_t h = 1; h <= 9; h++) {
		int64_t vals[COIL_MAX_SYMS] = {h}, v;
		assert_int_equal(symtab_derive(&tab, vals, &err), 0);
		assert_int_equal(dim_eval(&d, vals, &v, &err), 0);
		assert_int_equal(v, 2 * (h - 3 > 0 ? h - 3 : 0));
		assert_int_equal(dim_eval(&e, vals, &v, &err), 0);
		assert_int_equal(v, (h + 1) / 2);
		assert_int_equal(dim_eval(&f, vals, &v, &err), 0);
		assert_int_equal(v, h >= 7 ? (h - 7) / 3 : -((7 - h + 2) / 3));
		assert_int_equal(dim_eval(&q, vals, &v, &err), 0);
		assert_int_equal(v, h > 3 ? h - 3 : 0);
	}
	assert_int_equal(dim_parse("h//0", &tab, 0, &d, &err), -1);
	assert_non_null(strstr(err.msg, "'//' takes a positive integer"));
	assert_int_equal(dim_parse("h//h", &tab, 0, &d, &err), -1);
	assert_int_equal(dim_parse("min(h)", &tab, 0, &d, &err), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_malformed_corpus),
		cmocka_unit_test(test_malformed_fuzz),
		cmocka_unit_test(test_malformed_extreme_values),
		cmocka_unit_test(test_malformed_inline),
		cmocka_unit_test(test_valid_identity),
		cmocka_unit_test(test_valid_graph_files),
		cmocka_unit_test(test_doc_example),
		cmocka_unit_test(test_valid_limits),
		cmocka_unit_test(test_constant_data),
		cmocka_unit_test(test_hash_same_reformatted),
		cmocka_unit_test(test_hash_same_reordered_nodes),
		cmocka_unit_test(test_hash_same_renamed),
		cmocka_unit_test(test_hash_same_dead_nodes),
		cmocka_unit_test(test_hash_same_kwargs_and_defaults),
		cmocka_unit_test(test_hash_same_serializations),
		cmocka_unit_test(test_hash_differs),
		cmocka_unit_test(test_hash_constants_exact),
		cmocka_unit_test(test_hash_size_expressions),
		cmocka_unit_test(test_shape_flatten_symbolic),
		cmocka_unit_test(test_shape_view_symbolic),
		cmocka_unit_test(test_shape_cat_symbolic),
		cmocka_unit_test(test_shape_slice_select),
		cmocka_unit_test(test_shape_broadcast),
		cmocka_unit_test(test_shape_expand_permute_squeeze),
		cmocka_unit_test(test_shape_reductions),
		cmocka_unit_test(test_shape_split_and_multi_results),
		cmocka_unit_test(test_dtype_promotion_tensors),
		cmocka_unit_test(test_dtype_promotion_scalars),
		cmocka_unit_test(test_dtype_division_comparison_unary),
		cmocka_unit_test(test_conv_output_sizes),
		cmocka_unit_test(test_pool_output_sizes),
		cmocka_unit_test(test_dim_roundtrip),
		cmocka_unit_test(test_dim_reject),
		cmocka_unit_test(test_dim_arith),
		cmocka_unit_test(test_guards),
		cmocka_unit_test(test_dim_floordiv_minmax),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
