/* coild's configuration: defaults, then COILD_* environment variables, then
 * flags (--name VALUE or --name=VALUE).  Every value is checked here, so the
 * rest of the server can trust it. */
#include "server/server.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/fleet.h"

/* One setting: its flag, its environment variable, how to read it.  A K_BOOL
 * flag takes no value (--allow-root), or =1/=0; its variable 1 or 0.  A
 * K_LIST flag is repeatable: its values (and its variable's, separated by
 * spaces or commas) make a space-separated list; the flags replace the
 * variable's. */
enum kind { K_STR, K_INT, K_SIZE, K_BOOL, K_LIST };

typedef struct setting {
	const char *flag, *env, *help;
	enum kind kind;
	size_t off;   /* into coild_config */
	long min, max; /* K_INT bounds */
} setting;

#define OFF(f) offsetof(coild_config, f)

static const setting settings[] = {
	{"--listen", "COILD_LISTEN", "ADDR:PORT to listen on (default 127.0.0.1:8470; port 0 = any free)",
	 K_STR, OFF(listen), 0, 0},
	{"--cache-dir", "COILD_CACHE_DIR", "artifact cache directory (default $COIL_CACHE_DIR, else ~/.cache/coil)",
	 K_STR, OFF(cache_dir), 0, 0},
	{"--workers", "COILD_WORKERS", "compile worker threads (default: number of CPUs)", K_INT, OFF(workers), 1,
	 1024},
	{"--queue", "COILD_QUEUE", "compile jobs that may wait for a worker; more get 503 (default 64)", K_INT,
	 OFF(queue), 0, 1000000},
	{"--threads", "COILD_THREADS", "HTTP threads (default: number of CPUs, at least 2)", K_INT, OFF(threads), 1,
	 1024},
	{"--max-body", "COILD_MAX_BODY", "largest request body, e.g. 64M (default 64M)", K_SIZE, OFF(max_body), 0,
	 0},
	{"--max-nodes", "COILD_MAX_NODES", "most nodes in a graph (default 100000)", K_INT, OFF(max_nodes), 1,
	 COIL_MAX_NODES},
	{"--compile-timeout", "COILD_COMPILE_TIMEOUT",
	 "deadline of one compile, code generation and C compiler, in seconds (default 300)", K_INT,
	 OFF(compile_timeout_s), 1, 86400},
	{"--compile-memory", "COILD_COMPILE_MEMORY", "memory of one compile's whole process tree, e.g. 2G (default 4G)",
	 K_SIZE, OFF(compile_mem), 0, 0},
	{"--compile-pids", "COILD_COMPILE_PIDS", "processes one compile may run at once (default 256)", K_INT,
	 OFF(compile_pids), 0, 100000},
	{"--tokens", "COILD_TOKENS", "bearer tokens file, 'TOKEN role,role' per line (default: no auth)", K_STR,
	 OFF(tokens_file), 0, 0},
	{"--budget", "COILD_BUDGET", "cache size bound, e.g. 10G (default 0 = unlimited)", K_SIZE, OFF(budget), 0,
	 0},
	{"--job-ttl", "COILD_JOB_TTL", "seconds a finished job stays readable (default 600)", K_INT, OFF(job_ttl_s),
	 1, 86400 * 7},
	{"--port-file", "COILD_PORT_FILE", "write the bound port number to this file", K_STR, OFF(port_file), 0, 0},
	{"--max-conns-per-ip", "COILD_MAX_CONNS_PER_IP",
	 "connections one client address may hold open; more are closed at once (default 64; 0 = no limit)", K_INT,
	 OFF(max_conns_per_ip), 0, 1000000},
	{"--header-timeout", "COILD_HEADER_TIMEOUT",
	 "seconds to receive a request's headers, also between requests on a kept-alive connection (default 10)",
	 K_INT, OFF(header_timeout_s), 1, 3600},
	{"--min-body-rate", "COILD_MIN_BODY_RATE",
	 "bytes per second a request body must average once it is --header-timeout old (default 4k; 0 = no floor)",
	 K_SIZE, OFF(min_body_rate), 0, 0},
	{"--max-jobs-per-tenant", "COILD_MAX_JOBS_PER_TENANT",
	 "compiles one token (or, without tokens, one client address) may run at once (default 0 = workers - 1, at "
	 "least 1)",
	 K_INT, OFF(max_jobs_per_tenant), 0, 1024},
	{"--grace", "COILD_GRACE", "seconds a SIGTERM waits for running compiles before exiting (default 30)", K_INT,
	 OFF(grace_s), 1, 86400},
	{"--allow-root", "COILD_ALLOW_ROOT", "run even as root (default: refuse)", K_BOOL, OFF(allow_root), 0, 1},
	{"--sign-key", "COILD_SIGN_KEY",
	 "secret key file (coil keygen; mode 0600): sign every artifact built with it (default: unsigned)", K_STR,
	 OFF(sign_key), 0, 0},
	{"--upstream", "COILD_UPSTREAM",
	 "URL of a tier above (a coild, a farm's nginx, an HTTP cache of one), asked for an artifact on a miss "
	 "before compiling it or answering 404; repeatable, asked in order",
	 K_LIST, OFF(upstream), 0, 0},
	{"--peer", "COILD_PEERS",
	 "URL of another node of this farm, asked for an artifact on a miss that came from a client (not from "
	 "another coild); repeatable",
	 K_LIST, OFF(peers), 0, 0},
	{"--trusted-key", "COILD_TRUSTED_KEYS",
	 "NAME:BASE64 public key: an upstream's artifacts must carry a signature by one of these (repeatable)",
	 K_LIST, OFF(trusted_keys), 0, 0},
	{"--trusted-keys-file", "COILD_TRUSTED_KEYS_FILE", "a file of trusted public keys, one per line", K_STR,
	 OFF(trusted_keys_file), 0, 0},
	{"--node-id", "COILD_NODE_ID",
	 "this server's name in X-Coil-Node and X-Coil-Via, 1-32 of [A-Za-z0-9._-] (default: a random one)", K_STR,
	 OFF(node_id), 0, 0},
};
#define NSETTINGS (sizeof settings / sizeof settings[0])

int config_parse_size(const char *s, uint64_t *out)
{
	if (!s || !*s)
		return -1;
	errno = 0;
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || s[0] == '-')
		return -1;
	unsigned shift = 0;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	}
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end || (shift && v > (ULLONG_MAX >> shift)))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

static int set(coild_config *cfg, const setting *st, const char *val, const char *from, coil_err *err)
{
	char *p = (char *)cfg + st->off;
	switch (st->kind) {
	case K_STR:
		if (!*val)
			return coil_err_input(err, "%s: empty value", from);
		*(const char **)p = val;
		return 0;
	case K_INT: {
		errno = 0;
		char *end;
		long v = strtol(val, &end, 10);
		if (errno || end == val || *end || v < st->min || v > st->max)
			return coil_err_input(err, "%s: '%s' is not an integer in %ld..%ld", from, val, st->min, st->max);
		*(int *)p = (int)v;
		return 0;
	}
	case K_SIZE:
		if (config_parse_size(val, (uint64_t *)p) != 0)
			return coil_err_input(err, "%s: '%s' is not a size (bytes, or a number with k, M, G or T)", from,
					 val);
		return 0;
	case K_LIST: {
		size_t have = strlen(p);
		for (const char *v = val;;) {
			v += strspn(v, " ,\t");
			size_t n = strcspn(v, " ,\t");
			if (!n)
				break;
			if (have + n + 2 > CONFIG_LIST_MAX)
				return coil_err_input(err, "%s: more than %d bytes of values", from, CONFIG_LIST_MAX);
			if (have)
				p[have++] = ' ';
			memcpy(p + have, v, n);
			p[have += n] = 0;
			v += n;
		}
		if (!have)
			return coil_err_input(err, "%s: empty value", from);
		return 0;
	}
	case K_BOOL:
		if (strcmp(val, "1") && strcmp(val, "0"))
			return coil_err_input(err, "%s: '%s' is not 1 or 0", from, val);
		*(int *)p = val[0] == '1';
		return 0;
	}
	return 0;
}

void config_usage(FILE *f)
{
	fprintf(f, "usage: coild [options]   (each option also reads from its environment variable)\n");
	for (size_t i = 0; i < NSETTINGS; i++)
		fprintf(f, "  %-22s %-26s %s\n", settings[i].flag, settings[i].env, settings[i].help);
}

int config_load(coild_config *cfg, int argc, char **argv, coil_err *err)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	if (ncpu < 1)
		ncpu = 1;
	*cfg = (coild_config){
		.listen = "127.0.0.1:8470",
		.cache_dir = getenv("COIL_CACHE_DIR"),
		.workers = (int)(ncpu > 64 ? 64 : ncpu),
		.queue = 64,
		.threads = (int)(ncpu < 2 ? 2 : ncpu > 64 ? 64 : ncpu),
		.max_body = (uint64_t)64 << 20,
		.max_nodes = 100000,
		.compile_timeout_s = 300,
		.job_ttl_s = 600,
		.max_conns_per_ip = 64,
		.header_timeout_s = 10,
		.min_body_rate = 4096,
		.grace_s = 30,
	};
	for (size_t i = 0; i < NSETTINGS; i++) {
		const char *v = getenv(settings[i].env);
		if (v && *v && set(cfg, &settings[i], v, settings[i].env, err) != 0)
			return -1;
	}
	uint64_t flagged = 0; /* K_LIST settings a flag has set */
	for (int a = 1; a < argc; a++) {
		const char *arg = argv[a];
		if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
			config_usage(stdout);
			return 1;
		}
		const setting *st = NULL;
		const char *val = NULL;
		for (size_t i = 0; i < NSETTINGS && !st; i++) {
			size_t n = strlen(settings[i].flag);
			if (!strncmp(arg, settings[i].flag, n) && (arg[n] == 0 || arg[n] == '=')) {
				st = &settings[i];
				val = arg[n] == '=' ? arg + n + 1 : NULL;
			}
		}
		if (!st)
			return coil_err_input(err, "unknown option '%s' (see coild --help)", arg);
		if (!val && st->kind == K_BOOL)
			val = "1";
		if (!val) {
			if (a + 1 >= argc)
				return coil_err_input(err, "option %s needs a value", arg);
			val = argv[++a];
		}
		/* the first flag of a list replaces its variable's values */
		if (st->kind == K_LIST && !(flagged & (1ull << (st - settings)))) {
			flagged |= 1ull << (st - settings);
			((char *)cfg + st->off)[0] = 0;
		}
		if (set(cfg, st, val, st->flag, err) != 0)
			return -1;
	}
	int nurls = 0;
	for (int l = 0; l < 2; l++)
		for (const char *u = l ? cfg->peers : cfg->upstream; *u; nurls++) {
			size_t n = strcspn(u, " ");
			if (strncmp(u, "http://", 7) && strncmp(u, "https://", 8))
				return coil_err_input(err, "%s: '%.*s' is not an http:// or https:// URL",
						      l ? "--peer" : "--upstream", (int)(n > 200 ? 200 : n), u);
			u += n + (u[n] == ' ');
		}
	if (nurls > COIL_MAX_TIERS) /* one tier list, peers first */
		return coil_err_input(err, "--peer and --upstream: %d URLs, more than %d", nurls, COIL_MAX_TIERS);
	if (cfg->node_id) {
		size_t n = strlen(cfg->node_id);
		if (n < 1 || n > 32 || strspn(cfg->node_id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != n)
			return coil_err_input(err, "--node-id: '%.40s' is not 1-32 of [A-Za-z0-9._-]", cfg->node_id);
	}
	if (cfg->max_body < 64)
		return coil_err_input(err, "--max-body %llu is too small", (unsigned long long)cfg->max_body);
	return 0;
}
