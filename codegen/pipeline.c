/* The pipeline: one function listing the passes in order.
 *
 *   attention  baddbmm into bmm + add; traced attention into one SDPA node (attention.c)
 *   scatter    scatters over a broadcast 1-d index into index_add/index_reduce (scatter.c)
 *   fold       values that do not depend on the inputs, computed ahead (fold.c)
 *   dnnl       what runs on oneDNN: fusions, folds into weights, layouts (lower_dnnl.c)
 *   decompose  graph nodes -> primitive IR (decompose.c)
 *   fuse       pointwise chains and reductions into kernels (fuse.c)
 *   schedule   kernel order, loops, tiles (schedule.c)
 *   memplan    buffers into arena slots (memplan.c)
 *   emit_c     C source files (emit_c.c, vec.c, extern.c, emit_dnnl.c)
 *   build      the C compiler, into a shared object (build.c)
 *
 * `--dump-after=PASS` prints each one's result (dump.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "codegen/dnnl.h"
#include "codegen/emit.h"
#include "codegen/ir.h"
#include "common/clock.h"

static const char *const passes[] = {"fold", "dnnl", "decompose", "fuse", "schedule", "memplan", "emit_c", "build"};
#define NPASSES (int)(sizeof passes / sizeof *passes)

const char *codegen_pass_name(int i)
{
	return i >= 0 && i < NPASSES ? passes[i] : NULL;
}

/* The stream to dump into after pass, or NULL when it is not dumped. */
static FILE *dump_to(const codegen_opts *o, const char *pass)
{
	if (!o->dump_after || strcmp(o->dump_after, pass))
		return NULL;
	FILE *f = o->dump_file ? o->dump_file : stdout;
	fprintf(f, "# after %s\n", pass);
	return f;
}

static void dump_ir(coil_ir *ir, const codegen_opts *o, const char *pass)
{
	FILE *f = dump_to(o, pass);
	if (f)
		ir_dump(ir, f);
}

/* The generated files one after another, each under a banner with its name. */
static int write_src(const codegen_src *src, FILE *f)
{
	int bad = 0;
	for (int i = 0; i < src->n; i++) {
		if (src->n > 1)
			bad |= fprintf(f, "/* ==== %s ==== */\n", src->name[i]) < 0;
		bad |= fputs(src->text[i], f) < 0;
	}
	if (src->rt_unit)
		bad |= fprintf(f, "/* ==== dnnl_rt.c: the oneDNN runtime (codegen/rt), a unit of its own ==== */\n") < 0;
	return bad ? -1 : 0;
}

/* --emit-c PATH: the files into PATH when it is a directory, else the lot
 * into the file PATH. */
static int keep_src(const codegen_src *src, const char *path, coil_err *err)
{
	struct stat st;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		for (int i = 0; i < src->n; i++) {
			char p[4096];
			snprintf(p, sizeof p, "%s/%s", path, src->name[i]);
			FILE *f = fopen(p, "w");
			int bad = !f || fputs(src->text[i], f) < 0;
			if (f && fclose(f) != 0)
				bad = 1;
			if (bad)
				return coil_errc(err, COIL_E_IO, "cannot write %s: %s", p, strerror(errno));
		}
		return 0;
	}
	FILE *f = fopen(path, "w");
	int bad = !f || write_src(src, f) != 0;
	if (f && fclose(f) != 0)
		bad = 1;
	return bad ? coil_errc(err, COIL_E_IO, "cannot write %s", path) : 0;
}

/* The passes once, into out_so; with tune, its choices taken and, in a
 * measuring build (tune->build), the artifact timed (autotune.c). */
static int tune_alloc(dn_tune *t, int nnodes, coil_err *err);

static int compile_once(coil_graph *g, const codegen_opts *o, dn_tune *tune, const char *out_so, codegen_result *res,
			coil_err *err)
{
	if (o->dump_after) {
		int ok = 0;
		for (int i = 0; i < NPASSES; i++)
			ok |= !strcmp(passes[i], o->dump_after);
		if (!ok)
			return coil_err_input(err,
					      "--dump-after: unknown pass '%.64s' (fold, dnnl, decompose, fuse, schedule, "
					      "memplan, emit_c, build)",
					      o->dump_after);
	}
	/* The target and the graph's hash come resolved from the caller's plan
	 * (cache/compile.c); only a direct caller without them has them made here. */
	const coil_target *t = target_get(o->target ? o->target : "native", err);
	char hash[65];
	if (!t)
		return -1;
	if (o->graph_hash)
		snprintf(hash, sizeof hash, "%s", o->graph_hash);
	else if (graph_hash(g, hash, err))
		return -1;
	ir_fold *fd;
	coil_graph *g_abi = g; /* the graph whose params and inputs the artifact takes */
	coil_arena *ga = arena_create();
	if (!ga)
		return coil_err_oom(err);
	const char *mbe = getenv("COIL_MICROBATCH"); /* "0" never, "c" chunks of c */
	int64_t mb_chunk = o->microbatch, mb_total = 0;
	if (!mb_chunk && mbe && *mbe)
		mb_chunk = atoll(mbe) > 0 ? atoll(mbe) : -1;
	if (ir_microbatch(&g, &mb_chunk, ga, &mb_total, err) || ir_attention(&g, ga, err) ||
	    ir_scatter_index(&g, ga, err) || ir_se_scale(&g, ga, err) || ir_channel_shuffle(&g, ga, err) ||
	    ir_requant(&g, ga, err) ||
	    ir_widen_bf16(&g, ga, t->features, err) || ir_fold_graph(g, t->features, &fd, err)) {
		arena_destroy(ga);
		return -1;
	}
	FILE *df = dump_to(o, "fold");
	if (df)
		fold_dump(fd, df);
	if (df && mb_total)
		fprintf(df, "# microbatch: %lld of %lld images a run\n", (long long)mb_chunk, (long long)mb_total);
	coil_ir *ir = ir_create(fd->g, err);
	if (!ir) {
		ir_fold_free(fd);
		arena_destroy(ga);
		return -1;
	}
	ir->fold = fd;
	ir->features = t->features;
	ir->mb_total = mb_total;
	ir->mb_chunk = mb_total ? mb_chunk : 0;
	int rc = -1;
	codegen_src src;
	if (tune && tune_alloc(tune, ir->g->nnodes, err))
		goto out;
	ir->tune = tune;
	if (ir_plan_dnnl(ir, err))
		goto out;
	if ((df = dump_to(o, "dnnl")))
		dnnl_dump(ir, df);
	if (ir_decompose(ir, err))
		goto out;
	dump_ir(ir, o, "decompose");
	if (ir_fuse(ir, err))
		goto out;
	dump_ir(ir, o, "fuse");
	if (ir_schedule(ir, err))
		goto out;
	dump_ir(ir, o, "schedule");
	if (ir_memplan(ir, err))
		goto out;
	dump_ir(ir, o, "memplan");
	emit_layout lay = {-1, build_cpus()};
	const char *env = getenv("COIL_CC_UNITS");
	int units = o->units ? o->units : env && *env ? atoi(env) : 0;
	if (units)
		lay.units = units < 0 ? 0 : units > EMIT_MAX_UNITS ? EMIT_MAX_UNITS : units;
	if (ir_emit_src(ir, t->name, hash, &lay, &src, err))
		goto out;
	int nunits = src.rt_unit;
	size_t c_bytes = 0, max_c = o->max_c_bytes ? o->max_c_bytes : CODEGEN_MAX_C_BYTES;
	for (int i = 0; i < src.n; i++) {
		c_bytes += strlen(src.text[i]);
		nunits += strstr(src.name[i], ".c") != NULL;
	}
	if (c_bytes > max_c) {
		coil_errc(err, COIL_E_LIMIT, "codegen: the graph's C is %zu bytes, more than the limit of %zu", c_bytes,
			  max_c);
		goto out;
	}
	if ((df = dump_to(o, "emit_c")))
		write_src(&src, df);
	if (o->keep_c && keep_src(&src, o->keep_c, err))
		goto out;
	double secs = 0;
	if (out_so && build_files(&src, o->cc, o->opt, t->flags, o->werror, o->timeout_s, o->jobs, o->rt_in, NULL, out_so,
				  &secs, err))
		goto out;
	if (out_so && tune && tune->build &&
	    ir_autotune(ir, g_abi, out_so, o->tune_threads ? o->tune_threads : build_cpus(), err) < 0)
		goto out;
	if ((df = dump_to(o, "build"))) {
		if (out_so)
			fprintf(df, "%s: %d unit%s, cc %s %s, %.2f s\n", out_so, nunits, nunits == 1 ? "" : "s",
				o->opt ? o->opt : "-O3", t->flags, secs);
		else
			fprintf(df, "no shared object asked for: nothing built\n");
	}
	if (res) {
		memset(res, 0, sizeof *res);
		res->nkernels = ir->nk;
		res->nfuncs = src.nfuncs;
		res->nunits = nunits;
		res->c_bytes = c_bytes;
		res->compile_s = secs;
		snprintf(res->target, sizeof res->target, "%s", t->name);
		snprintf(res->cflags, sizeof res->cflags, "%s %s", o->opt ? o->opt : "-O3", t->flags);
		char *ab = ir->arena_unknown ? "unknown" : ir_dim_c(ir->arena, &ir->arena_bytes);
		snprintf(res->arena_bytes, sizeof res->arena_bytes, "%s", ab);
	}
	rc = 0;
out:
	ir_free(ir);
	ir_fold_free(fd);
	arena_destroy(ga);
	/* Every failure says something (a pass that ran out of memory may not). */
	if (rc && err && !err->msg[0])
		coil_err_oom(err);
	return rc;
}

/* Autotuning's arrays, per node of the lowered graph (the same in every
 * build of one compile: the passes before the plan are deterministic). */
static int tune_alloc(dn_tune *t, int nnodes, coil_err *err)
{
	if (t->nnodes)
		return t->nnodes == nnodes ? 0 : coil_errf(err, "autotune: the builds lower different graphs");
	size_t n = (size_t)nnodes + 1;
	t->path = calloc(n, 1), t->unfuse = calloc(n, 1), t->site = calloc(n, 1), t->path_a = calloc(n, 1);
	t->path_b = calloc(n, 1);
	t->t_a = calloc(n, sizeof(double)), t->t_b = calloc(n, sizeof(double)), t->t0_a = calloc(n, sizeof(double));
	t->t_node = calloc(n, sizeof(double));
	if (!t->path || !t->unfuse || !t->site || !t->path_a || !t->path_b || !t->t_a || !t->t_b || !t->t0_a || !t->t_node)
		return coil_err_oom(err);
	t->nnodes = nnodes;
	return 0;
}

static void tune_free(dn_tune *t)
{
	free(t->path), free(t->unfuse), free(t->site), free(t->path_a), free(t->path_b);
	free(t->t_a), free(t->t_b), free(t->t0_a), free(t->t_node);
}

/* max-autotune: build A (the heuristics' lowering) timed; where a
 * convolution's activation is fused, build B (every such one left to
 * generated code) timed beside it, into a file of its own; then the final
 * build with each head's faster lowering, unless that is A as built. */
int codegen_compile(coil_graph *g, const codegen_opts *o, const char *out_so, codegen_result *res, coil_err *err)
{
	codegen_opts dflt = {0};
	o = o ? o : &dflt;
	if (!o->autotune || !out_so || o->dump_after || o->keep_c)
		return compile_once(g, o, NULL, out_so, res, err);
	/* timing may take 30% of the compile's deadline: past it no round starts (one round of
	 * build A always runs) and what was timed decides; a build (B, the final one) starts only
	 * with room for it, and what follows, before 90% of the deadline */
	dn_tune t = {.build = 1};
	const double start = clock_ms(), budget = 1000.0 * (o->timeout_s ? o->timeout_s : BUILD_DEFAULT_TIMEOUT_S);
	t.deadline_ms = start + 0.3 * budget;
	codegen_result r, ra;
	char so_a[4096], so_b[4096];
	snprintf(so_a, sizeof so_a, "%s.a.so", out_so);
	snprintf(so_b, sizeof so_b, "%s.b.so", out_so);
	double cc_s = 0, gain = 0, ta = 0, tc = 0;
	int nthreads = o->tune_threads ? o->tune_threads : build_cpus();
	int changed = 0, rc = compile_once(g, o, &t, so_a, &ra, err);
	const double build_ms = clock_ms() - start - 1000.0 * t.secs; /* one build, its timing aside */
	/* room for n more builds before 90% of the deadline */
#define ROOM(n) (clock_ms() + (n) * 1.5 * build_ms < start + 0.9 * budget)
	cc_s += ra.compile_s;
	r = ra;
	if (!rc && t.timed) {
		int any_elt = 0;
		for (int h = 0; h < t.nnodes; h++)
			any_elt |= (t.unfuse[h] = t.site[h] & 1);
		if (any_elt && clock_ms() < t.deadline_ms && ROOM(2)) {
			t.build = 2;
			rc = compile_once(g, o, &t, so_b, &r, err);
			cc_s += r.compile_s;
			unlink(so_b);
		}
		if (!rc) {
			changed = dn_tune_decide(&t, &gain);
			t.build = 0;
			if (changed && !ROOM(1)) {
				changed = 0, gain = 0;
				snprintf(t.note, sizeof t.note, "out of time for the tuned build (the compile's deadline is %.0f s)",
					 budget / 1e3);
			}
			if (changed) {
				rc = compile_once(g, o, &t, out_so, &r, err);
				cc_s += r.compile_s;
			}
			/* the choices were timed kernel by kernel: the tuned build as a whole must beat
			 * the heuristics' too (a choice can slow its neighbours), else A stands */
			double t0 = clock_ms();
			if (!rc && changed && !getenv("COIL_AUTOTUNE_FORCE") && !ROOM(1)) {
				changed = 0, gain = 0, r = ra; /* unverified: the heuristics' build stands */
				snprintf(t.note, sizeof t.note, "out of time before the tuned build could be checked "
					 "(the compile's deadline is %.0f s)", budget / 1e3);
			} else if (!rc && changed && !getenv("COIL_AUTOTUNE_FORCE") &&
			    (dn_tune_verify(g, so_a, out_so, nthreads, &ta, &tc) || tc >= ta * 0.99)) {
				changed = 0, gain = 0, r = ra;
				snprintf(t.note, sizeof t.note, "the tuned build, %.3f ms a run, was not faster than the heuristics', "
					 "%.3f ms", tc * 1e3, ta * 1e3);
			} else if (!rc && changed && tc > 0) {
				gain = (ta - tc) * 1e3;
			}
			t.secs += (clock_ms() - t0) / 1e3;
		}
	}
	if (!rc && !changed && rename(so_a, out_so) != 0)
		rc = coil_errc(err, COIL_E_IO, "autotune: cannot move the build into place: %s", strerror(errno));
	unlink(so_a);
	if (!rc && res) {
		*res = r;
		res->compile_s = cc_s;
		for (int h = 0; h < t.nnodes; h++)
			res->tune_sites += t.site[h] != 0;
		res->tune_changed = changed;
		res->tune_gain_ms = gain;
		res->tune_s = t.secs;
		snprintf(res->tune_note, sizeof res->tune_note, "%s", t.note);
	}
	tune_free(&t);
	return rc;
#undef ROOM
}
