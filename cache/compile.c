/* Compiling through the cache (see compile.h). */
#include "cache/compile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dnnl.h>

#include "codegen/codegen.h"
#include "common/clock.h"

#ifndef COIL_CODEGEN_HASH
#define COIL_CODEGEN_HASH "dev"
#endif
/* Digest of codegen's sources (Makefile): what coil emits changes, the key does too. */
#define CODEGEN_KEY_VERSION "coil-codegen-" COIL_CODEGEN_HASH

/* A build that fails with less free than this on the cache's file system
 * failed for want of room. */
#define COMPILE_MIN_FREE ((int64_t)4 << 20)

/* The C compiler's full version ("cc -v"), read once per process; part of the key. */
static pthread_once_t ident_once = PTHREAD_ONCE_INIT;
static char ident_buf[512];

static void read_identity(void)
{
	snprintf(ident_buf, sizeof ident_buf, "unknown");
	FILE *f = popen("cc -v 2>&1", "r");
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof line, f))
		if (strstr(line, " version ")) {
			line[strcspn(line, "\n")] = 0;
			snprintf(ident_buf, sizeof ident_buf, "%s", line);
		}
	pclose(f);
}

const char *compile_compiler_identity(void)
{
	pthread_once(&ident_once, read_identity);
	return ident_buf;
}

const char *compile_codegen_version(void)
{
	return CODEGEN_KEY_VERSION;
}

static pthread_once_t dnnl_once = PTHREAD_ONCE_INIT;
static char dnnl_buf[96];
static void read_dnnl_version(void)
{
	const dnnl_version_t *v = dnnl_version();
	snprintf(dnnl_buf, sizeof dnnl_buf, "%d.%d.%d+%.40s", v->major, v->minor, v->patch, v->hash ? v->hash : "");
}

const char *compile_dnnl_version(void)
{
	pthread_once(&dnnl_once, read_dnnl_version);
	return dnnl_buf;
}

int compile_key(const char *graph_hash, const char *target, const char *compiler, const char *codegen,
		const char *dnnl, int opt_level, coil_dtype precision, int mode, int tune_threads, char key[65],
		coil_err *err)
{
	const coil_target *t = target_get(target, err);
	if (!t)
		return -1;
	if (!strcmp(target, "native"))
		return coil_errf(err, "compile_key: the target must be resolved, not 'native'");
	/* key = sha256(graph hash, target and its flags, compiler identity, codegen
	 * version, options, oneDNN version) */
	char material[2048], tuned[64] = "";
	if (mode == COMPILE_MODE_MAX_AUTOTUNE) /* tuned for this many threads */
		snprintf(tuned, sizeof tuned, "mode=max-autotune\ntune_threads=%d\n", tune_threads);
	int n = snprintf(material, sizeof material,
			 "graph=%s\ntarget=%s\nflags=%s\ncompiler=%s\ncodegen=%s\nopt=%d\n%s%sdnnl=%s\n", graph_hash,
			 t->name, t->flags, compiler, codegen, opt_level, precision == COIL_BF16 ? "precision=bf16\n" : "",
			 tuned, dnnl);
	if (n < 0 || (size_t)n >= sizeof material)
		return coil_errf(err, "cache key material too long");
	return cache_sha256_bytes(material, (size_t)n, key, err);
}

int compile_mode_parse(const char *s)
{
	return !s || !strcmp(s, "default") ? COMPILE_MODE_DEFAULT : !strcmp(s, "max-autotune") ? COMPILE_MODE_MAX_AUTOTUNE : -1;
}

const char *compile_mode_name(int mode) { return mode == COMPILE_MODE_MAX_AUTOTUNE ? "max-autotune" : "default"; }

void compile_plan_free(compile_plan *p)
{
	if (!p)
		return;
	graph_free(p->g);
	free(p);
}

int compile_plan_make(const char *json, size_t len, const compile_opts *o, compile_plan **out, coil_err *err)
{
	*out = NULL;
	coil_graph *g = graph_parse(json, len, err);
	return g ? compile_plan_graph(g, o, out, err) : -1;
}

/* The plan of g up to its graph hash (options checked, autocast applied,
 * canonical text hashed); with_key: the target resolved and the key made. */
static int plan_build(coil_graph *g, const compile_opts *o, int with_key, compile_plan **out, coil_err *err)
{
	compile_opts dflt = {.opt_level = COMPILE_OPT_DEFAULT};
	if (!o)
		o = &dflt;
	*out = NULL;
	compile_plan *p = calloc(1, sizeof *p);
	if (!p) {
		graph_free(g);
		return coil_err_oom(err);
	}
	p->g = g;
	if (o->opt_level < 0 || o->opt_level > 3) {
		coil_err_input(err, "options: opt_level %d is not in 0..3", o->opt_level);
		goto fail;
	}
	p->opt_level = o->opt_level;
	p->timeout_s = o->timeout_s;
	p->precision = o->precision;
	p->signer = o->signer;
	p->mode = o->mode;
	p->tune_threads = o->tune_threads ? o->tune_threads : build_cpus();
	if (o->tune_threads < 0 || o->tune_threads > 1024) {
		coil_err_input(err, "options: tune_threads %d is not in 1..1024", o->tune_threads);
		goto fail;
	}
	if (o->mode != COMPILE_MODE_DEFAULT && o->mode != COMPILE_MODE_MAX_AUTOTUNE) {
		coil_err_input(err, "options: mode %d is not default or max-autotune", o->mode);
		goto fail;
	}
	if (o->precision != COIL_F32 && o->precision != COIL_BF16) {
		coil_err_input(err, "options: precision %s is not f32 or bf16", dtype_name(o->precision));
		goto fail;
	}
	if (o->precision == COIL_BF16) {
		coil_graph *ac = graph_autocast(p->g, COIL_BF16, err);
		if (!ac)
			goto fail;
		graph_free(p->g);
		p->g = ac;
	}
	p->limits = (sandbox_limits){o->sandbox_mem_bytes, o->sandbox_pids, o->sandbox_cpu_s, o->timeout_s};
	int max_nodes = o->max_nodes ? o->max_nodes : COIL_MAX_NODES;
	if (p->g->nnodes > max_nodes) {
		coil_errc(err, COIL_E_LIMIT, "graph has %d nodes, more than the limit of %d", p->g->nnodes, max_nodes);
		goto fail;
	}
	p->canon = graph_canonical(p->g, &p->canon_len, err);
	/* the graph's hash is the SHA-256 of its canonical text (graph_hash) */
	if (!p->canon || cache_sha256_bytes(p->canon, p->canon_len, p->graph_hash, err))
		goto fail;
	if (with_key) {
		const coil_target *t = target_get(o->target ? o->target : "native", err);
		if (!t)
			goto fail;
		snprintf(p->target, sizeof p->target, "%s", t->name);
		if (p->mode == COMPILE_MODE_MAX_AUTOTUNE && !target_runs_here(t->name)) {
			coil_errc(err, COIL_E_UNSUPPORTED, "options: mode max-autotune times the kernels on this machine, "
				  "which cannot run target %s (no %s)", t->name, target_missing(t->name));
			goto fail;
		}
		if (compile_key(p->graph_hash, t->name, compile_compiler_identity(), CODEGEN_KEY_VERSION,
				compile_dnnl_version(), p->opt_level, p->precision, p->mode, p->tune_threads, p->key, err))
			goto fail;
	}
	*out = p;
	return 0;
fail:
	compile_plan_free(p);
	return -1;
}

int compile_plan_graph(coil_graph *g, const compile_opts *o, compile_plan **out, coil_err *err)
{
	return plan_build(g, o, 1, out, err);
}

int compile_graph_hash(const char *json, size_t len, coil_dtype precision, char hash[65], coil_err *err)
{
	coil_graph *g = graph_parse(json, len, err);
	compile_opts o = {.opt_level = COMPILE_OPT_DEFAULT, .precision = precision};
	compile_plan *p;
	if (!g || plan_build(g, &o, 0, &p, err))
		return -1;
	memcpy(hash, p->graph_hash, 65);
	compile_plan_free(p);
	return 0;
}

/* A max-autotune artifact's metadata ("autotune") in words, "" without. */
static void tune_summary(json_t *a, char *buf, size_t cap)
{
	buf[0] = 0;
	int sites = (int)json_integer_value(json_object_get(a, "sites"));
	const char *note = json_string_value(json_object_get(a, "note"));
	if (json_is_object(a) && note && *note)
		snprintf(buf, cap, "the heuristics' lowering kept: %.200s", note);
	else if (json_is_object(a) && !sites)
		snprintf(buf, cap, "nothing to time (no float convolution or product on oneDNN, or symbolic sizes): the heuristics' lowering");
	else if (json_is_object(a))
		snprintf(buf, cap, "%d of %d convolutions and products lowered otherwise than the heuristics would, %.3f ms a run "
			 "faster as timed, %.1f s of timing", (int)json_integer_value(json_object_get(a, "changed")), sites,
			 json_number_value(json_object_get(a, "gain_ms")), json_number_value(json_object_get(a, "tune_s")));
}

static int fill_hit(coil_cache *c, compile_plan *p, compile_result *r, coil_err *err)
{
	char *meta = NULL;
	if (cache_get_meta(c, p->key, &meta, r->sha256, &r->size, err) < 0)
		return -1;
	json_t *j = meta ? json_loads(meta, 0, NULL) : NULL;
	json_t *ab = json_object_get(j, "arena_bytes");
	r->arena_bytes = json_is_integer(ab) ? json_integer_value(ab) : -1;
	const char *sig = json_string_value(json_object_get(j, "signature"));
	snprintf(r->signature, sizeof r->signature, "%s", sig && strlen(sig) < SIGN_STR_MAX ? sig : "");
	tune_summary(json_object_get(j, "autotune"), r->autotune, sizeof r->autotune);
	json_decref(j);
	free(meta);
	return 0;
}

/* What codegen is given for plan p: every compile and inspection of a plan
 * goes through here. */
static codegen_opts plan_codegen_opts(const compile_plan *p)
{
	static const char *opt_flags[4] = {"-O0", "-O1", "-O2", "-O3"};
	codegen_opts co = {.target = p->target, .graph_hash = p->graph_hash, .opt = opt_flags[p->opt_level],
			   .timeout_s = p->timeout_s, .autotune = p->mode == COMPILE_MODE_MAX_AUTOTUNE,
			   .tune_threads = p->tune_threads};
	return co;
}

int compile_plan_inspect(compile_plan *p, const char *dump_after, FILE *dump_file, const char *emit_c,
			 codegen_result *res, coil_err *err)
{
	codegen_opts co = plan_codegen_opts(p);
	co.dump_after = dump_after;
	co.dump_file = dump_file;
	co.keep_c = emit_c;
	if (!dump_after || strcmp(dump_after, "build"))
		return codegen_compile(p->g, &co, NULL, res, err);
	/* through the build, into a directory of its own that goes after */
	char dir[] = "/tmp/coil-inspect-XXXXXX", so[64];
	if (!mkdtemp(dir))
		return coil_errc(err, COIL_E_IO, "cannot make a directory in /tmp: %s", strerror(errno));
	snprintf(so, sizeof so, "%s/model.so", dir);
	int rc = codegen_compile(p->g, &co, so, res, err);
	unlink(so);
	rmdir(dir);
	return rc;
}

/* The oneDNN runtime's object (dnnl_rt.c compiled) depends on nothing of the
 * graph: one per compiler, coil codegen (which digests the runtime's
 * source), target and optimisation level, kept in the cache's rt/ directory
 * and linked into every artifact built with the same.  Its path into path;
 * 1 when it is there, 0 when not, -1 when it cannot be had. */
static int rt_object(coil_cache *c, const compile_plan *p, char *path, size_t cap)
{
	coil_err e = {0};
	const coil_target *t = target_get(p->target, &e);
	char material[1024], hex[65], kh_hex[65];
	/* the kernels' header precompiled beside it is named by its text too (a
	 * precompiled header is taken on its flags alone, never its contents) */
	char *kh = codegen_kernels_header();
	int bad = !kh || cache_sha256_bytes(kh, strlen(kh), kh_hex, &e) != 0;
	free(kh);
	if (bad)
		return -1;
	snprintf(material, sizeof material, "dnnl_rt\ncompiler=%s\ncodegen=%s\ntarget=%s\nflags=%s\nopt=%d\nkernels_h=%s\n",
		 compile_compiler_identity(), CODEGEN_KEY_VERSION, p->target, t ? t->flags : "", p->opt_level, kh_hex);
	if (!t || cache_sha256_bytes(material, strlen(material), hex, &e) != 0 ||
	    snprintf(path, cap, "%s/rt", cache_dir(c)) >= (int)cap)
		return -1;
	if (mkdir(path, 0755) != 0 && errno != EEXIST)
		return -1;
	if (snprintf(path, cap, "%s/rt/%s.o", cache_dir(c), hex) >= (int)cap)
		return -1;
	if (access(path, R_OK) != 0)
		return 0;
	/* in use: its time says so to rt_sweep */
	char g[CACHE_PATH_MAX + 96];
	(void)utimensat(AT_FDCWD, path, NULL, 0);
	if (pch_path(path, g, sizeof g) == 0)
		(void)utimensat(AT_FDCWD, g, NULL, 0);
	return 1;
}

/* Runtime objects and their headers (30 MB each) of other compilers, coil
 * versions or options stay in rt/ until a build there finds them unused for
 * RT_UNUSED_DAYS: then they go. */
#define RT_UNUSED_DAYS 30
static void rt_sweep(coil_cache *c)
{
	char dir[CACHE_PATH_MAX + 8], f[CACHE_PATH_MAX + 300];
	snprintf(dir, sizeof dir, "%s/rt", cache_dir(c));
	DIR *d = opendir(dir);
	if (!d)
		return;
	const time_t old = time(NULL) - (time_t)RT_UNUSED_DAYS * 86400;
	struct dirent *de;
	struct stat st;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.' && (size_t)snprintf(f, sizeof f, "%s/%s", dir, de->d_name) < sizeof f &&
		    lstat(f, &st) == 0 && S_ISREG(st.st_mode) && st.st_mtime < old)
			(void)unlink(f);
	closedir(d);
}

/* The runtime's object (pch 0), or the kernels' header precompiled for it
 * (pch 1), built for the cache at dest before the first compile that needs
 * it: from coil's own source only (no request reaches it), so outside the
 * sandbox, under build.c's own confinement; 0 when it is at dest. */
static int rt_build(coil_cache *c, const compile_plan *p, const codegen_opts *co, const char *dest, int pch)
{
	coil_err e = {0};
	const coil_target *t = target_get(p->target, &e);
	char tmp[CACHE_PATH_MAX], o[CACHE_PATH_MAX + 16];
	int fd = -1, rc = -1;
	if (!t || cache_tmpdir_create(c, tmp, sizeof tmp, &fd, &e) != 0)
		return -1;
	snprintf(o, sizeof o, "%s/%s", tmp, pch ? "kernels.gch" : "dnnl_rt.o");
	if ((pch ? build_kernels_pch : build_rt_object)(co->cc, co->opt, t->flags, co->werror, p->timeout_s, o, &e) == 0) {
		rc = rename(o, dest); /* atomic: a reader sees all of it or none */
		if (!pch)
			rt_sweep(c);
	}
	cache_tmpdir_remove(tmp, fd);
	return rc;
}

int compile_plan_run(coil_cache *c, compile_plan *p, compile_result *r, coil_err *err)
{
	memset(r, 0, sizeof *r);
	memcpy(r->key, p->key, sizeof r->key);
	memcpy(r->graph_hash, p->graph_hash, sizeof r->graph_hash);
	snprintf(r->target, sizeof r->target, "%s", p->target);
	r->arena_bytes = -1;
	int hit = cache_lookup(c, p->key, p->canon, p->canon_len, r->path, sizeof r->path, err);
	if (hit < 0)
		return -1;
	if (hit) {
		r->hit = 1;
		return fill_hit(c, p, r, err);
	}
	int fd = -1;
	if (cache_lock_key(c, p->key, &fd, err))
		return -1;
	int rc = -1, dir_fd = -1;
	char tmpdir[CACHE_PATH_MAX] = "", so[CACHE_PATH_MAX + 16];
	/* Another process may have built it while we waited for the lock. */
	hit = cache_lookup(c, p->key, p->canon, p->canon_len, r->path, sizeof r->path, err);
	if (hit < 0)
		goto out;
	if (hit) {
		r->hit = 1;
		rc = fill_hit(c, p, r, err);
		goto out;
	}
	/* The build happens inside the cache's tmp/, in a directory that a
	 * reconcile deletes if this process dies before it does. */
	if (cache_tmpdir_create(c, tmpdir, sizeof tmpdir, &dir_fd, err))
		goto out;
	snprintf(so, sizeof so, "%s/model.so", tmpdir);
	codegen_opts co = plan_codegen_opts(p);
	/* the runtime's object: linked in from the cache, made there first when
	 * it is not (a failure to make it only costs this build its own) */
	double t0 = clock_ms();
	char rt[CACHE_PATH_MAX + 80];
	int have_rt = rt_object(c, p, rt, sizeof rt);
	if (have_rt == 1 || (have_rt == 0 && rt_build(c, p, &co, rt, 0) == 0))
		co.rt_in = rt;
	/* its precompiled header: made by the compile after the one that made the
	 * object, so that no one compile pays for both (~0.9 s each on 2 CPUs; a
	 * coild killed mid-way restarts the smaller step) */
	char g[CACHE_PATH_MAX + 96];
	if (have_rt == 1 && pch_path(rt, g, sizeof g) == 0 && access(g, R_OK) != 0)
		(void)rt_build(c, p, &co, g, 1);
	codegen_result cr;
	memset(&cr, 0, sizeof cr);
	int built = sandbox_compile(p->g, &co, &p->limits, so, &cr, NULL, err);
	if (built != 0 && co.rt_in && err->code == COIL_E_COMPILER) {
		/* a runtime object the linker refuses (truncated, damaged), or its
		 * precompiled header the compiler does: both dropped, and this build
		 * makes its own */
		char g[CACHE_PATH_MAX + 96];
		if (pch_path(co.rt_in, g, sizeof g) == 0)
			unlink(g);
		unlink(co.rt_in);
		co.rt_in = NULL;
		memset(err, 0, sizeof *err);
		built = sandbox_compile(p->g, &co, &p->limits, so, &cr, NULL, err);
	}
	if (built != 0) {
		/* A build that failed on a full disk (the compiler could not
		 * write its output): make room by evicting, try once more. */
		int64_t room = cache_free_bytes(c);
		if (room < 0 || room >= COMPILE_MIN_FREE)
			goto out;
		coil_err e2 = {0};
		if (cache_make_room(c, COMPILE_MIN_FREE, &e2) <= 0 ||
		    sandbox_compile(p->g, &co, &p->limits, so, &cr, NULL, err)) {
			coil_err_prefix(err, "the cache's file system is full (%lld bytes free)",
					(long long)cache_free_bytes(c));
			goto out;
		}
	}
	r->compile_ms = clock_ms() - t0;
	/* The digest of the bytes built here: what is signed, stored and loaded. */
	char built_sha[65], sig[SIGN_STR_MAX] = "";
	if (cache_sha256_file(so, built_sha, err))
		goto out;
	if (p->signer && sign_artifact(p->signer, p->key, built_sha, p->target, sig, err))
		goto out;
	char *meta = NULL;
	{
		json_t *m = json_pack("{s:s,s:s,s:s,s:i,s:f,s:i,s:s}", "graph_hash", p->graph_hash, "target", p->target,
				      "arena_bytes_expr", cr.arena_bytes, "kernels", cr.nkernels, "compile_s",
				      cr.compile_s, "opt_level", p->opt_level, "cflags", cr.cflags);
		int64_t ab;
		char *end;
		ab = strtoll(cr.arena_bytes, &end, 10);
		if (m && *cr.arena_bytes && !*end)
			json_object_set_new(m, "arena_bytes", json_integer(ab));
		if (m && sig[0])
			json_object_set_new(m, "signature", json_string(sig));
		if (m && p->mode == COMPILE_MODE_MAX_AUTOTUNE)
			json_object_set_new(m, "autotune", json_pack("{s:s,s:i,s:i,s:f,s:f,s:s}", "mode", "max-autotune", "sites",
								      cr.tune_sites, "changed", cr.tune_changed, "gain_ms",
								      cr.tune_gain_ms, "tune_s", cr.tune_s, "note", cr.tune_note));
		if (m)
			tune_summary(json_object_get(m, "autotune"), r->autotune, sizeof r->autotune);
		meta = m ? json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
		json_decref(m);
	}
	if (!meta) {
		coil_err_oom(err);
		goto out;
	}
	int src = cache_store(c, p->key, so, p->canon, p->canon_len, meta, err);
	free(meta);
	if (src)
		goto out;
	/* The entry's path, without a lookup that would count as a hit. */
	if (cache_entry_paths(c, p->key, r->path, NULL, sizeof r->path, err))
		goto out;
	if (fill_hit(c, p, r, err))
		goto out;
	if (strcmp(r->sha256, built_sha)) {
		coil_errc(err, COIL_E_IO, "artifact %s changed in the cache while it was stored", p->key);
		goto out;
	}
	r->built = 1;
	rc = 0;
out:
	if (dir_fd >= 0)
		cache_tmpdir_remove(tmpdir, dir_fd);
	cache_unlock_key(fd);
	return rc;
}

int cache_compile(coil_cache *c, const char *json, size_t len, const compile_opts *o, compile_result *res,
		  coil_err *err)
{
	compile_plan *p;
	if (compile_plan_make(json, len, o, &p, err))
		return -1;
	int rc = compile_plan_run(c, p, res, err);
	compile_plan_free(p);
	return rc;
}
