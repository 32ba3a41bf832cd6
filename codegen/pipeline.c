/* The pipeline: one function listing the passes in order. */
#include <string.h>

#include "codegen/codegen.h"
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
	char *src = NULL;
	if (dump(ir, o, "decompose") || ir_fuse(ir, err) || dump(ir, o, "fuse") || ir_schedule(ir, err) ||
	    dump(ir, o, "schedule") || ir_memplan(ir, err) || dump(ir, o, "memplan"))
		goto out;
	if (!(src = ir_emit_c(ir, t->name, hash, err)))
		goto out;
	if (o->dump_after && !strcmp(o->dump_after, "emit_c"))
		fputs(src, o->dump_file ? o->dump_file : stdout);
	if (o->keep_c) {
		FILE *f = fopen(o->keep_c, "w");
		if (!f || fputs(src, f) < 0) {
			if (f)
				fclose(f);
			coil_errf(err, "cannot write %s", o->keep_c);
			goto out;
		}
		fclose(f);
	}
	double secs = 0;
	if (out_so && build_so(src, o->cc, o->opt, t->flags, o->werror, o->timeout_s, out_so, &secs, err))
		goto out;
	if (res) {
		memset(res, 0, sizeof *res);
		res->nkernels = ir->nk;
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
