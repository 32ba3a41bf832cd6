/* autotune: mode "max-autotune".  Where more than one lowering of a oneDNN
 * fusion is valid (dn_tune_choices: Winograd or not, oneDNN's NCHW GEMM
 * kernel or its NHWC one for a convolution outside an NHWC chain), the
 * artifact just built is loaded here, in the compile's own process (the
 * sandbox's worker where there is one, never coild), and run at its own
 * sizes on made-up data with the profile switch on: each choice is given to
 * every site that has it at once, in TUNE_ROUNDS rounds that interleave the
 * choices, and a site takes a choice other than the runtime's heuristics
 * only where its kernel's median time beats theirs by TUNE_MARGIN.  The
 * caller builds again with the choices as the artifact's table
 * (coil_model_tune, emit_dnnl.c): every machine that fetches the artifact
 * runs the tuned lowerings without tuning again.
 *
 * Only graphs of static sizes are timed (a symbolic one has no sizes to
 * time at); the made-up data are small floats and zero integers (indices
 * in range), which is what a kernel's time does not depend on. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/dnnl.h"
#include "common/clock.h"

#define TUNE_ROUNDS 3
#define TUNE_MARGIN 0.95   /* a choice's time at most this times the heuristics' */
#define TUNE_ROUND_S 0.1   /* each round runs the model for about this long */
#define TUNE_MAX_RUNS 50

typedef struct tune_abi {
	void *dl;
	int (*create)(const void *const *, int, int, void **);
	int (*run)(void *, const void *const *, const int64_t *const *, void *const *);
	void (*destroy)(void *);
	int (*profile)(void *, double *);
	int (*tune)(int, int, int *, unsigned *);
	const char *(*last_error)(void);
} tune_abi;

/* n elements of dtype t at p: small floats from a fixed sequence, 0 else. */
static void fill(coil_dtype t, void *p, int64_t n, uint32_t *seed)
{
	if (!dtype_is_float(t))
		return; /* calloc'd: zero integers and bools */
	for (int64_t i = 0; i < n; i++) {
		*seed = *seed * 1664525u + 1013904223u;
		dtype_store(t, p, (size_t)i, ((double)(*seed >> 8) / (1 << 24) - 0.5) * 0.2);
	}
}

/* A buffer for static value v, filled; NULL on a symbolic size or no memory. */
static void *buffer(const coil_value *v, uint32_t *seed)
{
	int64_t n = 1, d;
	for (int i = 0; i < v->rank; i++) {
		if (!dim_is_const(&v->shape[i], &d))
			return NULL;
		n *= d;
	}
	void *p = calloc((size_t)(n ? n : 1), dtype_size(v->dtype));
	if (p)
		fill(v->dtype, p, n, seed);
	return p;
}

/* The made-up params, inputs and outputs of a static graph. */
typedef struct tune_data {
	void **par, **in, **out;
	int64_t **shp;
} tune_data;

static void data_free(const coil_graph *g, tune_data *d)
{
	for (int i = 0; d->par && i < g->nparams; i++)
		free(d->par[i]);
	for (int i = 0; d->in && i < g->ninputs; i++) {
		free(d->in[i]);
		free(d->shp ? d->shp[i] : NULL);
	}
	for (int i = 0; d->out && i < g->noutputs; i++)
		free(d->out[i]);
	free(d->par), free(d->in), free(d->out), free(d->shp);
	memset(d, 0, sizeof *d);
}

/* 0, or -1 when a size is not static or memory is short (d freed). */
static int data_make(const coil_graph *g, tune_data *d)
{
	uint32_t seed = 12345;
	d->par = calloc((size_t)g->nparams + 1, sizeof *d->par), d->in = calloc((size_t)g->ninputs + 1, sizeof *d->in);
	d->out = calloc((size_t)g->noutputs + 1, sizeof *d->out), d->shp = calloc((size_t)g->ninputs + 1, sizeof *d->shp);
	int bad = !d->par || !d->in || !d->out || !d->shp;
	for (int i = 0; !bad && i < g->nparams; i++)
		bad = !(d->par[i] = buffer(&g->vals[g->params[i]], &seed));
	for (int i = 0; !bad && i < g->ninputs; i++) {
		const coil_value *v = &g->vals[g->inputs[i]];
		bad = !(d->in[i] = buffer(v, &seed)) || !(d->shp[i] = calloc((size_t)v->rank + 1, sizeof **d->shp));
		for (int k = 0; !bad && k < v->rank; k++)
			dim_is_const(&v->shape[k], &d->shp[i][k]);
	}
	for (int i = 0; !bad && i < g->noutputs; i++)
		bad = !(d->out[i] = buffer(&g->vals[g->outputs[i]], &seed));
	if (bad)
		data_free(g, d);
	return bad ? -1 : 0;
}

static int load(const char *so, tune_abi *a, coil_err *err)
{
	char path[4096];
	snprintf(path, sizeof path, "%s%s", strchr(so, '/') ? "" : "./", so);
	if (!(a->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL)))
		return coil_errf(err, "autotune: cannot load the artifact: %s", dlerror());
	*(void **)&a->create = dlsym(a->dl, "coil_model_create");
	*(void **)&a->run = dlsym(a->dl, "coil_model_run");
	*(void **)&a->destroy = dlsym(a->dl, "coil_model_destroy");
	*(void **)&a->profile = dlsym(a->dl, "coil_model_profile");
	*(void **)&a->tune = dlsym(a->dl, "coil_model_tune");
	*(void **)&a->last_error = dlsym(a->dl, "coil_model_last_error");
	if (!a->create || !a->run || !a->destroy || !a->profile || !a->tune || !a->last_error)
		return coil_errf(err, "autotune: the artifact lacks the profile or tuning functions");
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* One round at choice c: every site that has it takes it, the rest their
 * heuristics; every kernel's time per run into tk[nk].  0, or -1 when the
 * model cannot be made or run so (a choice the runtime refuses). */
static int round_at(const tune_abi *a, int c, int nsites, const int *site, const unsigned *mask, int nthreads,
		    const coil_graph *g, const tune_data *d, double *acc, int nk, double *tk, coil_err *err)
{
	const void *const *par = (const void *const *)d->par, *const *in = (const void *const *)d->in;
	const int64_t *const *shp = (const int64_t *const *)d->shp;
	void *const *out = d->out;
	const int npar = g->nparams;
	int kk;
	unsigned mm;
	for (int s = 0; s < nsites; s++)
		a->tune(site[s], mask[s] >> c & 1 ? c : DN_TUNE_AUTO, &kk, &mm);
	void *m = NULL;
	if (a->create(par, npar, nthreads, &m) != 0)
		return coil_errf(err, "autotune: create: %s", a->last_error());
	double t0 = clock_ms();
	int rc = a->run(m, in, shp, out); /* makes the arena and oneDNN's objects */
	double once = clock_ms() - t0;
	rc = rc || a->run(m, in, shp, out);
	once = clock_ms() - t0 - once;
	int runs = once > 0 ? (int)(TUNE_ROUND_S * 1e3 / once) : TUNE_MAX_RUNS;
	runs = runs < 3 ? 3 : runs > TUNE_MAX_RUNS ? TUNE_MAX_RUNS : runs;
	memset(acc, 0, 3 * ((size_t)nk + 1) * sizeof *acc);
	a->profile(m, acc);
	for (int r = 0; r < runs && !rc; r++)
		rc = a->run(m, in, shp, out);
	a->profile(m, NULL);
	if (rc)
		coil_errf(err, "autotune: run: %s", a->last_error());
	a->destroy(m);
	for (int k = 0; k < nk && !rc; k++)
		tk[k] = acc[3 * k] / runs;
	return rc ? -1 : 0;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return v[n / 2];
}

/* A node generated code computes (no oneDNN fusion holds it). */
static int generated(const coil_ir *ir, int n)
{
	return !ir->dn || ir->dn->at[n] == -1;
}

/* What the measures of one build say, into ir->tune: per site its fastest
 * path and times; A: per generated node the time of a kernel covering it;
 * B: each activation left out of a fusion charged to its head (the kernels
 * that compute it, less what their like cost in A). */
static void record(coil_ir *ir, int nsites, const int *site, const unsigned *mask, const double *t, const double *tk,
		   int nk)
{
	dn_tune *tn = ir->tune;
	dn_plan *p = ir->dn;
	const int A = tn->build == 1;
	for (int s = 0; s < nsites; s++) {
		double med[DN_TUNE_N];
		for (int c = 0; c < DN_TUNE_N; c++)
			med[c] = mask[s] >> c & 1 ? t[(size_t)s * DN_TUNE_N + (size_t)c] : -1;
		int best = DN_TUNE_AUTO;
		for (int c = 1; c < DN_TUNE_N; c++)
			if (med[c] >= 0 && med[c] < TUNE_MARGIN * med[DN_TUNE_AUTO] && med[c] < med[best])
				best = c;
		const dn_fuse *f = &p->f[site[s]];
		int h = f->head;
		if (getenv("COIL_AUTOTUNE_LOG") && f->is_conv) { /* a line per convolution and build, on stderr */
			const coil_node *n = &ir->g->nodes[h];
			const coil_value *w = &ir->g->vals[n->args[1].v[0]], *o = node_out(ir->g, n, 0);
			int64_t d[4] = {0, 0, 0, 0};
			for (int i = 0; i < 4 && i < w->rank; i++)
				dim_is_const(&w->shape[i], &d[i]);
			int64_t oh = 0;
			if (o->rank > 2)
				dim_is_const(&o->shape[2], &oh);
			fprintf(stderr, "autotune %c: node %d conv %lldx%lld k%lld g%lld out %lld, %d post-ops (%d activations)%s:",
				A ? 'A' : 'B', h, (long long)d[1] * n->args[8].i, (long long)d[0], (long long)d[2], (long long)n->args[8].i,
				(long long)oh, f->npost, f->elt, f->act >= 0 ? ", activation left out" : "");
			for (int c = 0; c < DN_TUNE_N; c++)
				if (med[c] >= 0)
					fprintf(stderr, " [%d] %.4f ms", c, med[c] * 1e3);
			fprintf(stderr, "\n");
		}
		if (A) {
			tn->path_a[h] = (uint8_t)best, tn->t_a[h] = med[best], tn->t0_a[h] = med[DN_TUNE_AUTO];
			tn->site[h] = (uint8_t)((f->elt ? 1 : 0) | 2);
			continue;
		}
		tn->path_b[h] = (uint8_t)best, tn->t_b[h] = med[best];
		if (f->act < 0)
			continue;
		for (int k = 0; k < nk; k++) { /* the kernels that compute the activation */
			const ir_kernel *K = &ir->ks[k];
			int has = 0, other = -1;
			for (int i = 0; i < K->ncover; i++) {
				int n = K->cover[i];
				has |= n == f->act;
				if (n != f->act && other < 0 && generated(ir, n))
					other = n;
			}
			if (has)
				tn->t_b[h] += tk[k] - (other >= 0 && tn->t_node[other] > 0 ? tn->t_node[other] : 0);
		}
	}
	if (A)
		for (int k = 0; k < nk; k++)
			for (int i = 0; i < ir->ks[k].ncover; i++)
				if (generated(ir, ir->ks[k].cover[i]))
					tn->t_node[ir->ks[k].cover[i]] = tk[k];
}

int ir_autotune(coil_ir *ir, coil_graph *g, const char *so, int nthreads, coil_err *err)
{
	double t_start = clock_ms();
	dn_plan *p = ir->dn;
	dn_tune *tn = ir->tune;
	if (!p || !tn || !tn->build || g->syms.n)
		return 0; /* nothing to choose, or no sizes to time at */
	int nsites = 0, rc = -1, nk = 0;
	for (int j = 0; j < p->nf; j++)
		nsites += p->f[j].emitted && !p->f[j].is_pool && !p->f[j].q;
	if (!nsites)
		return 0;
	tune_abi a = {0};
	tune_data d = {0};
	int *site = calloc((size_t)nsites, sizeof *site);
	unsigned *mask = calloc((size_t)nsites, sizeof *mask);
	double *t = calloc((size_t)nsites * DN_TUNE_N * TUNE_ROUNDS, sizeof *t), *acc = NULL, *tk = NULL, *tkr = NULL;
	char *failed = calloc(DN_TUNE_N, 1);
	if (!site || !mask || !t || !failed) {
		coil_err_oom(err);
		goto done;
	}
	if (data_make(g, &d))
		goto untimed;
	coil_err le = {0};
	if (load(so, &a, &le)) { /* best effort: a compile that builds does not fail for its timing */
		snprintf(tn->note, sizeof tn->note, "it could not be loaded: %.120s", le.msg);
		rc = 0;
		goto done;
	}
	nk = a.profile(NULL, NULL);
	acc = calloc(3 * ((size_t)nk + 1), sizeof *acc);
	tk = calloc((size_t)nk + 1, sizeof *tk);
	tkr = calloc(((size_t)nk + 1) * TUNE_ROUNDS, sizeof *tkr);
	if (!acc || !tk || !tkr) {
		coil_err_oom(err);
		goto done;
	}
	for (int j = 0, s = 0; j < p->nf; j++) {
		int k = -1;
		unsigned m = 0;
		if (!p->f[j].emitted || p->f[j].is_pool || p->f[j].q)
			continue;
		a.tune(j, -1, &k, &m);
		if (k < 0 || k >= nk || m != dn_tune_choices(ir, j) || k != p->f[j].kernel) {
			coil_errf(err, "autotune: the artifact's table does not match its plan (fusion %d)", j);
			goto done;
		}
		site[s] = j, mask[s++] = m;
	}
	/* rounds interleave the choices: each is timed beside the others */
	int rounds = 0; /* complete ones: a round is never cut, the deadline stops the next */
	for (int r = 0; r < TUNE_ROUNDS && ((r == 0 && tn->build == 1) || !tn->deadline_ms || clock_ms() < tn->deadline_ms);
	     r++, rounds++)
		for (int c = 0; c < DN_TUNE_N; c++) {
			int any = c == DN_TUNE_AUTO;
			for (int s = 0; s < nsites; s++)
				any |= (int)(mask[s] >> c & 1);
			if (!any || failed[c])
				continue;
			coil_err e = {0};
			int bad = round_at(&a, c, nsites, site, mask, nthreads, g, &d, acc, nk, tk, &e);
			if (bad && c == DN_TUNE_AUTO) { /* it does not run on made-up data: left as the heuristics built it */
				snprintf(tn->note, sizeof tn->note, "it did not run on made-up data: %.120s", e.msg);
				rc = 0;
				goto done;
			}
			failed[c] = (char)bad;
			for (int s = 0; s < nsites && !bad; s++)
				t[((size_t)s * DN_TUNE_N + (size_t)c) * TUNE_ROUNDS + (size_t)r] = tk[p->f[site[s]].kernel];
			for (int k = 0; k < nk && c == DN_TUNE_AUTO; k++)
				tkr[(size_t)k * TUNE_ROUNDS + (size_t)r] = tk[k];
		}
	if (!rounds) { /* build B out of time: left unmeasured, so nothing is left out of a fusion */
		rc = 0;
		goto done;
	}
	/* medians: per site and choice (failed ones out), per kernel */
	for (int s = 0; s < nsites; s++)
		for (int c = 0; c < DN_TUNE_N; c++) {
			double *v = &t[((size_t)s * DN_TUNE_N + (size_t)c) * TUNE_ROUNDS];
			if (failed[c])
				mask[s] &= ~(1u << c);
			v[0] = mask[s] >> c & 1 ? median(v, rounds) : -1;
		}
	for (int s = 0; s < nsites; s++) /* compact: the median first of each (site, choice) */
		for (int c = 0; c < DN_TUNE_N; c++)
			t[(size_t)s * DN_TUNE_N + (size_t)c] = t[((size_t)s * DN_TUNE_N + (size_t)c) * TUNE_ROUNDS];
	for (int k = 0; k < nk; k++)
		tk[k] = median(&tkr[(size_t)k * TUNE_ROUNDS], rounds);
	record(ir, nsites, site, mask, t, tk, nk);
	tn->timed |= tn->build == 1;
	rc = 1;
	goto done;
untimed:
	rc = 0; /* a size that is not static (or no memory for the data): left untuned */
done:
	tn->secs += (clock_ms() - t_start) / 1e3;
	if (a.dl)
		dlclose(a.dl);
	data_free(g, &d);
	free(site), free(mask), free(t), free(acc), free(tk), free(tkr), free(failed);
	return rc;
}

/* One run's median time of a model over a round of runs, in seconds; < 0 on failure. */
static double whole_round(const tune_abi *a, const coil_graph *g, const tune_data *d, int nthreads, int runs)
{
	void *m = NULL;
	const void *const *in = (const void *const *)d->in;
	const int64_t *const *shp = (const int64_t *const *)d->shp;
	if (a->create((const void *const *)d->par, g->nparams, nthreads, &m) != 0)
		return -1;
	double best = -1, ts[TUNE_MAX_RUNS];
	int rc = a->run(m, in, shp, d->out), n = 0;
	for (; n < runs && n < TUNE_MAX_RUNS && !rc; n++) {
		double t0 = clock_ms();
		rc = a->run(m, in, shp, d->out);
		ts[n] = (clock_ms() - t0) / 1e3;
	}
	a->destroy(m);
	if (!rc && n)
		best = median(ts, n);
	return best;
}

int dn_tune_verify(coil_graph *g, const char *so_a, const char *so_c, int nthreads, double *ta, double *tc)
{
	tune_abi a = {0}, c = {0};
	tune_data d = {0};
	coil_err e = {0};
	int rc = -1;
	double va[TUNE_ROUNDS], vc[TUNE_ROUNDS];
	if (data_make(g, &d) || load(so_a, &a, &e) || load(so_c, &c, &e))
		goto out;
	double once = whole_round(&a, g, &d, nthreads, 1);
	if (once < 0)
		goto out;
	int runs = once > 0 ? (int)(TUNE_ROUND_S / once) : TUNE_MAX_RUNS;
	runs = runs < 3 ? 3 : runs > TUNE_MAX_RUNS ? TUNE_MAX_RUNS : runs;
	for (int r = 0; r < TUNE_ROUNDS; r++) { /* alternating which goes first */
		const tune_abi *x = r % 2 ? &c : &a, *y = r % 2 ? &a : &c;
		double tx = whole_round(x, g, &d, nthreads, runs), ty = whole_round(y, g, &d, nthreads, runs);
		if (tx < 0 || ty < 0)
			goto out;
		va[r] = r % 2 ? ty : tx, vc[r] = r % 2 ? tx : ty;
	}
	*ta = median(va, TUNE_ROUNDS), *tc = median(vc, TUNE_ROUNDS);
	rc = 0;
out:
	if (a.dl)
		dlclose(a.dl);
	if (c.dl)
		dlclose(c.dl);
	data_free(g, &d);
	return rc;
}

int dn_tune_decide(dn_tune *t, double *gain_ms)
{
	int changed = 0, fpath = -1, funfuse = -1;
	double gain = 0;
	/* COIL_AUTOTUNE_FORCE=PATH,UNFUSE (tests): every site takes choice PATH
	 * where it has it and UNFUSE (0/1) whatever the times say, so that each
	 * lowering can be checked against the interpreter */
	const char *force = getenv("COIL_AUTOTUNE_FORCE");
	if (force && sscanf(force, "%d,%d", &fpath, &funfuse) != 2)
		fpath = funfuse = -1;
	for (int h = 0; h < t->nnodes; h++) {
		t->unfuse[h] = 0;
		t->path[h] = t->path_a[h];
		if (fpath >= 0 && fpath < DN_TUNE_N) {
			t->path[h] = (uint8_t)fpath; /* emit keeps it only where the fusion has it */
			t->unfuse[h] = (uint8_t)(funfuse == 1 && (t->site[h] & 1));
			changed += t->site[h] != 0;
			continue;
		}
		if (!t->site[h])
			continue;
		if ((t->site[h] & 1) && t->t_b[h] > 0 && t->t_b[h] < TUNE_MARGIN * t->t_a[h]) {
			t->unfuse[h] = 1, t->path[h] = t->path_b[h];
			gain += t->t0_a[h] - t->t_b[h];
		} else {
			gain += t->t0_a[h] - t->t_a[h];
		}
		if (getenv("COIL_AUTOTUNE_LOG"))
			fprintf(stderr, "autotune: node %d: A %.4f ms (path %d), B with its activation %.4f ms (path %d): %s, path %d\n",
				h, t->t_a[h] * 1e3, t->path_a[h], t->t_b[h] * 1e3, t->path_b[h],
				t->unfuse[h] ? "activation as generated code" : "fused", t->path[h]);
		changed += t->unfuse[h] || t->path[h] != DN_TUNE_AUTO;
	}
	*gain_ms = gain * 1e3;
	return changed;
}
