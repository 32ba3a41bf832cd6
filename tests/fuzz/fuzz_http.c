/* Fuzz target: what coild parses from a request (server/parse.c, auth.c,
 * config.c) — routing, the key and job id patterns, headers, the compile
 * request's query and body (raw graph or envelope, then planned: graph
 * validation, target and options) — and tokens files.
 *
 * Input: nine lines, then the body:
 *   method, path, Content-Type, Content-Length, Authorization,
 *   If-None-Match, ?target=, ?opt_level=, ?async=
 * An empty line is an absent header or argument; a line "=" an empty one.
 * The whole input is also read as a tokens file.
 *
 * Invariants: a clean target has no control byte; framing that passes has
 * one Content-Length (a number) or one chunked Transfer-Encoding, not both,
 * and at most one Host; a route found takes the method; a path parameter that passes
 * its pattern check is exactly 64 (key) or 32 (job id) lowercase hex digits,
 * so nothing else reaches a file name; authorization answers 0, 401 or 403;
 * a refused compile request has a code (bad input, limit or out of memory)
 * and a one-line message; a dynamic decision (the body) is canonical once
 * merged, or a one-line bad input. */
#include <string.h>

#include "cache/cache.h"
#include "cache/compile.h"
#include "server/server.h"
#include "tests/fuzz/fuzz.h"

#define NFIELDS 9

static const char TOKENS[] = "# roles\n"
			     "compile-token-0001 compile\n"
			     "reader-token-00002 read\n"
			     "admin-token-000003 admin,read,compile\n";

static int hexlen(const char *s)
{
	int n = 0;
	for (; s[n]; n++)
		if (!strchr("0123456789abcdef", s[n]))
			return -1;
	return n;
}

int fuzz_http(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = 0;
	const char *f[NFIELDS] = {0};
	char *p = buf, *end = buf + size;
	for (int i = 0; i < NFIELDS && p < end; i++) {
		char *nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			nl = end;
		*nl = 0;
		f[i] = !*p ? NULL : !strcmp(p, "=") ? "" : p;
		p = nl < end ? nl + 1 : end;
	}
	const char *body = p;
	size_t blen = (size_t)(end - p);

	/* Routing. */
	char param[80], allow[64];
	int known = 0;
	unsigned allowed = 0;
	const route_def *r = route_find(f[0], f[1], param, sizeof param, &known, &allowed);
	route_allow_list(allowed, allow, sizeof allow);
	if (r) {
		FUZZ_CHECK(known && (r->methods & http_method_bit(f[0])));
		if (strstr(r->pattern, "{key}") && cache_key_valid(param))
			FUZZ_CHECK(hexlen(param) == CACHE_KEY_HEX);
		if (strstr(r->pattern, "{id}") && job_id_valid(param))
			FUZZ_CHECK(hexlen(param) == JOB_ID_HEX);
		if (!strchr(r->pattern, '{'))
			FUZZ_CHECK(!strcmp(r->pattern, f[1]));
	} else if (known) {
		FUZZ_CHECK(allowed != 0 && allow[0]);
	}
	if (cache_key_valid(f[1]))
		FUZZ_CHECK(hexlen(f[1]) == CACHE_KEY_HEX);
	(void)content_type_ok(f[2]);
	unsigned long long cl;
	if (content_length_over(f[3], 64 << 20, &cl))
		FUZZ_CHECK(cl > (64u << 20));
	uint64_t sz;
	(void)config_parse_size(f[3], &sz);
	(void)etag_matches(f[5], f[1]);

	/* The raw target and the framing headers (Content-Length from line 4,
	 * Transfer-Encoding from line 6; how many of each from the size). */
	if (f[1] && uri_clean(f[1]))
		for (const char *c = f[1]; *c; c++)
			FUZZ_CHECK((unsigned char)*c >= 0x20 && *c != 0x7f && strncmp(c, "%00", 3));
	framing fr = {.version = size & 1 ? "HTTP/1.1" : "HTTP/1.0",
		      .n_length = f[3] ? 1 + (int)(size >> 1 & 1) : 0,
		      .length = f[3],
		      .n_encoding = f[5] ? 1 : 0,
		      .encoding = f[5],
		      .n_host = (int)(size >> 2 & 3)};
	coil_err ferr = {0};
	if (framing_check(&fr, &ferr) == 0) {
		FUZZ_CHECK(fr.n_length <= 1 && fr.n_host <= 1 && !(fr.n_length && fr.n_encoding));
		FUZZ_CHECK(!fr.n_length || strspn(fr.length, "0123456789") == strlen(fr.length));
	} else {
		FUZZ_CHECK(ferr.code == COIL_E_INPUT && ferr.msg[0]);
	}

	/* Authorization against a fixed tokens file. */
	coild_auth a;
	coil_err err = {0};
	FUZZ_CHECK(auth_parse(&a, TOKENS, sizeof TOKENS - 1, "fuzz", &err) == 0);
	for (unsigned need = 0; need <= ROLE_ADMIN; need++) {
		int rc = auth_check(&a, f[4], need);
		FUZZ_CHECK(rc == 0 || rc == 401 || rc == 403);
		if (need == 0)
			FUZZ_CHECK(rc == 0);
		else
			FUZZ_CHECK((rc == 401) == (auth_find(&a, f[4]) < 0));
	}
	auth_free(&a);

	/* The compile request, then its plan (graph validation, target, options). */
	compile_request cr;
	coil_err rerr = {0};
	if (compile_request_parse(body, blen, f[6], f[7], f[8], 1000, &cr, &rerr) != 0) {
		FUZZ_CHECK((rerr.code == COIL_E_INPUT || rerr.code == COIL_E_UNSUPPORTED || rerr.code == COIL_E_LIMIT ||
			    rerr.code == COIL_E_RESOURCE) &&
			   rerr.msg[0] && !strchr(rerr.msg, '\n') && !cr.g);
	} else {
		FUZZ_CHECK(cr.g && cr.opts.opt_level >= 0 && cr.opts.opt_level <= 3);
		cr.opts.max_nodes = 1000;
		compile_plan *plan = NULL;
		coil_graph *g = cr.g;
		cr.g = NULL;
		if (compile_plan_graph(g, &cr.opts, &plan, &err) == 0) {
			FUZZ_CHECK(cache_key_valid(plan->key) && !strchr(plan->target, ' '));
			compile_plan_free(plan);
		} else {
			FUZZ_CHECK(err.msg[0] && !plan);
		}
		compile_request_free(&cr);
	}

	/* The body as a dynamic decision, alone and over itself as the stored
	 * one: valid ones come out canonical (merging again changes nothing),
	 * bad ones are a one-line bad input. */
	char *dec = NULL;
	coil_err derr = {0};
	if (decision_merge(NULL, 0, body, blen, &dec, &derr) == 0) {
		char *again = NULL;
		FUZZ_CHECK(dec && strlen(dec) < 8192);
		FUZZ_CHECK(decision_merge(dec, strlen(dec), dec, strlen(dec), &again, &derr) == 0 && !strcmp(again, dec));
		free(again);
		again = NULL;
		FUZZ_CHECK(decision_merge(body, blen, dec, strlen(dec), &again, &derr) == 0 && !strcmp(again, dec));
		free(again);
	} else {
		FUZZ_CHECK(!dec && (derr.code == COIL_E_INPUT || derr.code == COIL_E_RESOURCE) && derr.msg[0] &&
			   !strchr(derr.msg, '\n'));
	}
	free(dec);

	/* The input as a tokens file. */
	if (auth_parse(&a, (const char *)data, size, "fuzz", &err) == 0) {
		FUZZ_CHECK(a.n > 0);
		for (int i = 0; i < a.n; i++)
			FUZZ_CHECK(strlen(a.tokens[i]) >= 8 && a.roles[i] != 0);
		auth_free(&a);
	} else {
		FUZZ_CHECK(err.msg[0]);
	}
	free(buf);
	return 0;
}

FUZZ_ENTRY(fuzz_http)
