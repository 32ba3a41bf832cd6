/* The pipeline: one function listing the passes in order. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codegen/codegen.h"
#include "codegen/emit.h"
#include "codegen/ir.h"

static int dump(coil_ir *ir, const codegen_opts *o, const char *pass)
{
	if (o->dump_after && !strcmp(o->dump_after, pass)) {
		FILE *f = o->dump_file ? o->dump_file : stdout;
		fprintf(f, "# after %s\n", pass);
		ir_dump(ir, f);
	}
	return 0;
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
				return coil_errf(err, "cannot write %s: %s", p, strerror(errno));
		}
		return 0;
	}
	FILE *f = fopen(path, "w");
	int bad = !f || write_src(src, f) != 0;
	if (f && fclose(f) != 0)
		bad = 1;
	return bad ? coil_errf(err, "cannot write %s", path) : 0;
}

int codegen_compile(coil_graph *g, const codegen_opts *o, const char *out_so, codegen_result *res, coil_err *err)
{
	static const char *const passes[] = {"decompose", "fuse", "schedule", "memplan", "emit_c", "build"};
	codegen_opts dflt = {0};
	o = o ? o : &dflt;
	if (o->dump_after) {
		int ok = 0;
		for (size_t i = 0; i < sizeof passes / sizeof *passes; i++)
			ok |= !strcmp(passes[i], o->dump_after);
		if (!ok)
			return coil_errf(err, "--dump-after: unknown pass '%s' (decompose, fuse, schedule, memplan, emit_c)",
					 o->dump_after);
	}
	const coil_target *t = target_get(o->target ? o->target : "native", err);
	char hash[65];
	if (!t || graph_hash(g, hash, err))
		return -1;
	ir_fold *fd;
	if (ir_fold_graph(g, &fd, err))
		return -1;
	coil_ir *ir = ir_decompose(fd->g, err);
	if (!ir) {
		ir_fold_free(fd);
		return err && !err->msg[0] ? coil_errf(err, "codegen: out of memory") : -1;
	}
	ir->fold = fd;
	int rc = -1;
	codegen_src src;
	if (dump(ir, o, "decompose") || ir_fuse(ir, err) || dump(ir, o, "fuse") || ir_schedule(ir, err) ||
	    dump(ir, o, "schedule") || ir_memplan(ir, err) || dump(ir, o, "memplan"))
		goto out;
	emit_layout lay = {-1, build_cpus()};
	const char *env = getenv("COIL_CC_UNITS");
	int units = o->units ? o->units : env && *env ? atoi(env) : 0;
	if (units)
		lay.units = units < 0 ? 0 : units > EMIT_MAX_UNITS ? EMIT_MAX_UNITS : units;
	if (ir_emit_src(ir, t->name, hash, &lay, &src, err))
		goto out;
	if (o->dump_after && !strcmp(o->dump_after, "emit_c"))
		write_src(&src, o->dump_file ? o->dump_file : stdout);
	if (o->keep_c && keep_src(&src, o->keep_c, err))
		goto out;
	double secs = 0;
	if (out_so && build_files(&src, o->cc, o->opt, t->flags, o->werror, o->timeout_s, o->jobs, out_so, &secs, err))
		goto out;
	if (res) {
		memset(res, 0, sizeof *res);
		res->nkernels = ir->nk;
		res->nfuncs = src.nfuncs;
		res->nunits = src.rt_unit;
		for (int i = 0; i < src.n; i++) {
			res->c_bytes += strlen(src.text[i]);
			res->nunits += strstr(src.name[i], ".c") != NULL;
		}
		res->compile_s = secs;
		snprintf(res->target, sizeof res->target, "%s", t->name);
		char *ab = ir_dim_c(ir->arena, &ir->arena_bytes);
		snprintf(res->arena_bytes, sizeof res->arena_bytes, "%s", ab);
	}
	rc = 0;
out:
	ir_free(ir);
	ir_fold_free(fd);
	/* Every failure says something (a pass that ran out of memory may not). */
	if (rc && err && !err->msg[0])
		coil_errf(err, "codegen: out of memory");
	return rc;
}
