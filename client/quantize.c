/* coil quantize (see quantize.h): the graph is edited as JSON, as
 * client/python/coil_quant.py edits its dicts, with the same rules. */
#include "client/quantize.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SAMPLE 65536          /* values an activation observer keeps per run */
#define MAX_SAMPLES (1 << 24) /* and in all */

/* activations fused into the layer before them (codegen/lower_dnnl.c's eltwise post-ops) */
static const char *const activations[] = {
	"aten.relu.default", "aten.hardtanh.default", "aten.clamp.default", "aten.clamp_min.default",
	"aten.clamp_max.default", "aten.silu.default", "aten.hardswish.default", "aten.sigmoid.default",
	"aten.gelu.default", "aten.tanh.default", "aten.leaky_relu.default", "aten.elu.default", NULL};
/* ops that only move data: their result keeps their input's quantization */
static const char *const moves[] = {
	"aten.max_pool2d_with_indices.default", "aten.max_pool2d.default", "aten.view.default", "aten.reshape.default",
	"aten.flatten.using_ints", "aten._unsafe_view.default", "aten.permute.default", "aten.transpose.int",
	"aten.squeeze.dim", "aten.unsqueeze.default", "aten.clone.default", "aten.slice.Tensor", NULL};

typedef struct obs {
	char *name;
	double lo, hi;
	float *samp;
	size_t ns, cap;
} obs;

typedef struct layer {
	json_t *node, *wr; /* the layer, and the node that reads its weight (itself, or t(W)) */
	int wi;            /* which arg of wr */
	char *x, *w;       /* its input and weight (own copies: the graph's strings change) */
	char *e;           /* the value its output quantization goes after */
} layer;

typedef struct qp {
	const char *name; /* an inserted dequantize's value */
	double scale;
	int zp;
} qp;

struct qz {
	json_t *g;
	const st_file *wf;
	int dynamic;
	int nnew;
	char **new_names;
	coil_tensor *new_t;
	layer *L;
	int nl;
	json_t *report; /* [{"node", "op", "reason"} of layers left f32] */
	obs *o;
	int no;
	char *calib;
	size_t calib_len;
	int nout0; /* the graph's own outputs */
	qp *qps;
	int nqp;
};

static int in_list(const char *s, const char *const *l)
{
	for (; s && *l; l++)
		if (!strcmp(s, *l))
			return 1;
	return 0;
}

static const char *str(json_t *j) { return json_is_string(j) ? json_string_value(j) : NULL; }
static json_t *nodes(qz *q) { return json_object_get(q->g, "nodes"); }
static const char *op_of(json_t *n) { return str(json_object_get(n, "op")); }
static json_t *args(json_t *n) { return json_object_get(n, "args"); }
static const char *arg_s(json_t *n, size_t i) { return str(json_array_get(args(n), i)); }
static const char *out0(json_t *n) { return str(json_array_get(json_object_get(n, "outputs"), 0)); }

static json_t *find_named(json_t *list, const char *name)
{
	size_t i;
	json_t *v;
	json_array_foreach(list, i, v) if (name && !strcmp(str(json_object_get(v, "name")) ?: "", name)) return v;
	return NULL;
}

static int is_param(qz *q, const char *name) { return find_named(json_object_get(q->g, "params"), name) != NULL; }

/* The node that computes value name, or NULL. */
static json_t *producer(qz *q, const char *name)
{
	size_t i, k;
	json_t *n, *o;
	json_array_foreach(nodes(q), i, n) json_array_foreach(json_object_get(n, "outputs"), k, o) if (name && str(o) &&
												 !strcmp(str(o), name)) return n;
	return NULL;
}

static int refs_in(json_t *a, const char *name)
{
	if (json_is_string(a))
		return !strcmp(json_string_value(a), name);
	size_t i;
	json_t *v;
	const char *k;
	if (json_is_array(a))
		json_array_foreach(a, i, v) if (refs_in(v, name)) return 1;
	if (json_is_object(a))
		json_object_foreach(a, k, v) if (refs_in(v, name)) return 1;
	return 0;
}

static int refs(json_t *n, const char *name)
{
	return refs_in(json_object_get(n, "args"), name) || refs_in(json_object_get(n, "kwargs"), name);
}

static void replace_in(json_t *a, const char *old, const char *new)
{
	size_t i;
	json_t *v;
	const char *k;
	if (json_is_array(a)) {
		json_array_foreach(a, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), old))
			json_array_set_new(a, i, json_string(new));
		else replace_in(v, old, new);
	}
	if (json_is_object(a)) {
		json_object_foreach(a, k, v) if (json_is_string(v) && !strcmp(json_string_value(v), old))
			json_object_set_new(a, k, json_string(new));
		else replace_in(v, old, new);
	}
}

/* Every reader of old (nodes, graph outputs) reads new instead. */
static void replace_all(qz *q, const char *old, const char *new, json_t *except)
{
	size_t i;
	json_t *n;
	json_array_foreach(nodes(q), i, n) if (n != except && refs(n, old))
	{
		replace_in(json_object_get(n, "args"), old, new);
		replace_in(json_object_get(n, "kwargs"), old, new);
	}
	replace_in(json_object_get(q->g, "outputs"), old, new);
}

/* Readers of v among the nodes, and whether it is a graph output. */
static int readers(qz *q, const char *v, json_t **one, int *is_out)
{
	size_t i;
	json_t *n;
	int c = 0;
	json_array_foreach(nodes(q), i, n) if (refs(n, v)) c++, *one = n;
	*is_out = refs_in(json_object_get(q->g, "outputs"), v);
	return c;
}

static int name_used(qz *q, const char *s)
{
	static const char *const lists[] = {"inputs", "params", "constants"};
	for (int k = 0; k < 3; k++)
		if (find_named(json_object_get(q->g, lists[k]), s))
			return 1;
	size_t i, j;
	json_t *n, *o;
	json_array_foreach(nodes(q), i, n)
	{
		if (!strcmp(str(json_object_get(n, "id")) ?: "", s))
			return 1;
		json_array_foreach(json_object_get(n, "outputs"), j, o) if (str(o) && !strcmp(str(o), s)) return 1;
	}
	for (int k = 0; k < q->nnew; k++)
		if (!strcmp(q->new_names[k], s))
			return 1;
	return 0;
}

/* A fresh name from base (base, base_1, ...), kept alive by the graph once used:
 * returned from a small ring of buffers. */
static const char *fresh(qz *q, const char *base)
{
	static char ring[16][300];
	static int at;
	char *b = ring[at++ % 16];
	snprintf(b, sizeof ring[0], "%s", base);
	for (int k = 1; name_used(q, b); k++)
		snprintf(b, sizeof ring[0], "%s_%d", base, k);
	return b;
}

static const coil_tensor *param_t(const qz *q, const char *name)
{
	for (int k = 0; k < q->nnew; k++)
		if (!strcmp(q->new_names[k], name))
			return &q->new_t[k];
	return q->wf ? st_find(q->wf, name) : NULL;
}

const coil_tensor *qz_param(const qz *q, const char *name) { return param_t(q, name); }

/* A new f32 param (data taken over). */
static int add_param(qz *q, const char *name, int rank, const int64_t *shape, float *data, coil_err *err)
{
	char **nn = realloc(q->new_names, (size_t)(q->nnew + 1) * sizeof *nn);
	if (nn)
		q->new_names = nn;
	coil_tensor *nt = realloc(q->new_t, (size_t)(q->nnew + 1) * sizeof *nt);
	if (nt)
		q->new_t = nt;
	char *nm = strdup(name);
	json_t *sh = json_array();
	if (!nn || !nt || !nm || !sh) {
		free(nm), free(data), json_decref(sh);
		return coil_err_oom(err);
	}
	coil_tensor t = {.dtype = COIL_F32, .rank = rank, .data = data};
	for (int d = 0; d < rank; d++)
		t.shape[d] = shape[d], json_array_append_new(sh, json_integer(shape[d]));
	q->new_names[q->nnew] = nm, q->new_t[q->nnew++] = t;
	json_array_append_new(json_object_get(q->g, "params"),
			      json_pack("{s:s, s:s, s:o}", "name", name, "dtype", "f32", "shape", sh));
	return 0;
}

static const coil_tensor *f32_param(qz *q, const char *name, int64_t n)
{
	const coil_tensor *t = name && is_param(q, name) ? param_t(q, name) : NULL;
	return t && t->dtype == COIL_F32 && tensor_numel(t) == n ? t : NULL;
}

/* Inference batch norms right after a convolution folded into its weight and bias (new
 * params), as PyTorch's FX flow fuses them before observing: the layer is quantized once. */
static int fold_batch_norms(qz *q, coil_err *err)
{
	for (size_t i = 0; i < json_array_size(nodes(q)); i++) {
		json_t *n = json_array_get(nodes(q), i), *a = args(n), *one = NULL;
		const char *op = op_of(n);
		if (!op || (strcmp(op, "aten.native_batch_norm.default") && strcmp(op, "aten.batch_norm.default")))
			continue;
		json_t *conv = producer(q, arg_s(n, 0));
		int is_out, extra = 0;
		size_t k;
		json_t *o;
		json_array_foreach(json_object_get(n, "outputs"), k, o) extra |= k > 0 && str(o) && *str(o);
		if (!conv || strcmp(op_of(conv), "aten.convolution.default") || json_is_true(json_array_get(args(conv), 6)) ||
		    json_is_true(json_array_get(a, 5)) || extra || readers(q, arg_s(n, 0), &one, &is_out) != 1 || is_out)
			continue;
		const coil_tensor *w = arg_s(conv, 1) && is_param(q, arg_s(conv, 1)) ? param_t(q, arg_s(conv, 1)) : NULL;
		if (!w || w->dtype != COIL_F32 || w->rank < 1)
			continue;
		const int64_t oc = w->shape[0], per = tensor_numel(w) / (oc ? oc : 1);
		const char *bname = json_is_null(json_array_get(args(conv), 2)) ? NULL : arg_s(conv, 2);
		const coil_tensor *b = bname ? f32_param(q, bname, oc) : NULL, *gm = NULL, *bt = NULL;
		const coil_tensor *mean = f32_param(q, arg_s(n, 3), oc), *var = f32_param(q, arg_s(n, 4), oc);
		if ((bname && !b) || !mean || !var)
			continue;
		if (!json_is_null(json_array_get(a, 1)) && !(gm = f32_param(q, arg_s(n, 1), oc)))
			continue;
		if (!json_is_null(json_array_get(a, 2)) && !(bt = f32_param(q, arg_s(n, 2), oc)))
			continue;
		const double eps = json_number_value(json_array_get(a, 7));
		float *nw = malloc((size_t)tensor_numel(w) * sizeof *nw), *nb = malloc((size_t)oc * sizeof *nb);
		if (!nw || !nb) {
			free(nw), free(nb);
			return coil_err_oom(err);
		}
		for (int64_t c = 0; c < oc; c++) {
			const float *mv = mean->data, *vv = var->data, *wv = w->data;
			double kk = (gm ? ((const float *)gm->data)[c] : 1.0) / sqrt((double)vv[c] + eps);
			for (int64_t e = 0; e < per; e++)
				nw[c * per + e] = (float)(wv[c * per + e] * kk);
			nb[c] = (float)(((b ? ((const float *)b->data)[c] : 0.0) - mv[c]) * kk + (bt ? ((const float *)bt->data)[c] : 0.0));
		}
		char wn[300], bn[300], base[300];
		snprintf(base, sizeof base, "%s.coil_bn", arg_s(conv, 1));
		snprintf(wn, sizeof wn, "%s", fresh(q, base));
		snprintf(base, sizeof base, "%s.coil_bias", str(json_object_get(n, "id")) ?: "bn");
		snprintf(bn, sizeof bn, "%s", fresh(q, base));
		int64_t bshape[1] = {oc};
		if (add_param(q, wn, w->rank, w->shape, nw, err) || add_param(q, bn, 1, bshape, nb, err))
			return -1;
		json_array_set_new(args(conv), 1, json_string(wn));
		json_array_set_new(args(conv), 2, json_string(bn));
		char y[300], x[300];
		snprintf(y, sizeof y, "%s", out0(n));
		snprintf(x, sizeof x, "%s", arg_s(n, 0));
		json_array_remove(nodes(q), i--);
		replace_all(q, y, x, NULL);
	}
	return 0;
}

/* Why node n (a convolution, addmm or mm) cannot be an int8 layer, or NULL with *l filled. */
static const char *as_layer(qz *q, json_t *n, layer *l)
{
	const char *op = op_of(n);
	memset(l, 0, sizeof *l);
	l->node = n;
	if (!strcmp(op, "aten.convolution.default")) {
		if (q->dynamic)
			return "a convolution (dynamic quantization covers linear layers; the static mode takes both)";
		if (json_is_true(json_array_get(args(n), 6)))
			return "transposed convolution (oneDNN 2.6 has no int8 one here)";
		if (!is_param(q, arg_s(n, 1)))
			return "its weight is computed, not a parameter";
		if (!json_is_null(json_array_get(args(n), 2)) && json_array_size(args(n)) > 2 && !is_param(q, arg_s(n, 2)))
			return "its bias is computed, not a parameter";
		l->x = (char *)arg_s(n, 0), l->w = (char *)arg_s(n, 1), l->wr = n, l->wi = 1;
		return NULL;
	}
	const int base = !strcmp(op, "aten.addmm.default");
	if (base) {
		json_t *kw = json_object_get(n, "kwargs");
		for (int k = 0; k < 2; k++) {
			json_t *v = json_array_get(args(n), 3 + k);
			if (!v)
				v = json_object_get(kw, k ? "alpha" : "beta");
			if (v && json_number_value(v) != 1)
				return "addmm with alpha or beta other than 1";
		}
		if (!is_param(q, arg_s(n, 0)))
			return "its bias is computed, not a parameter";
	}
	const char *b = arg_s(n, base + 1);
	if (is_param(q, b))
		return "a matrix product by a [k, n] parameter (coil quantizes nn.Linear's t(W))";
	json_t *t = producer(q, b);
	const char *top = t ? op_of(t) : NULL;
	if (!top || (strcmp(top, "aten.t.default") && strcmp(top, "aten.transpose.int") && strcmp(top, "aten.permute.default")) ||
	    !is_param(q, arg_s(t, 0)))
		return "its second operand is not a parameter's transpose (not a linear layer)";
	l->x = (char *)arg_s(n, base), l->w = (char *)arg_s(t, 0), l->wr = t, l->wi = 0;
	return NULL;
}

/* The value a layer's output quantization goes after: through single-reader activations. */
static const char *chain_end(qz *q, json_t *n)
{
	const char *v = out0(n);
	for (;;) {
		json_t *r = NULL;
		int is_out;
		if (readers(q, v, &r, &is_out) != 1 || is_out || !in_list(op_of(r), activations) || strcmp(arg_s(r, 0) ?: "", v))
			return v;
		v = out0(r);
	}
}

static obs *watch(qz *q, const char *name, coil_err *err)
{
	for (int k = 0; k < q->no; k++)
		if (!strcmp(q->o[k].name, name))
			return &q->o[k];
	obs *no = realloc(q->o, (size_t)(q->no + 1) * sizeof *no);
	if (!no)
		return coil_err_oom(err), NULL;
	q->o = no;
	char *nm = strdup(name);
	if (!nm)
		return coil_err_oom(err), NULL;
	q->o[q->no] = (obs){.name = nm, .lo = INFINITY, .hi = -INFINITY};
	return &q->o[q->no++];
}

int qz_plan(const char *graph, size_t len, const st_file *weights, int dynamic, qz **out, coil_err *err)
{
	json_error_t je;
	qz *q = calloc(1, sizeof *q);
	*out = NULL;
	if (!q)
		return coil_err_oom(err);
	q->wf = weights, q->dynamic = dynamic;
	q->report = json_array();
	if (!(q->g = json_loadb(graph, len, JSON_REJECT_DUPLICATES, &je)) || !json_is_array(nodes(q)) || !q->report) {
		qz_free(q);
		return coil_errf(err, "graph: %s", je.text);
	}
	if (!json_object_get(q->g, "constants"))
		json_object_set_new(q->g, "constants", json_array());
	if (!dynamic && fold_batch_norms(q, err)) {
		qz_free(q);
		return -1;
	}
	size_t i;
	json_t *n;
	json_array_foreach(nodes(q), i, n)
	{
		const char *op = op_of(n), *why;
		if (!op || (strcmp(op, "aten.convolution.default") && strcmp(op, "aten.addmm.default") && strcmp(op, "aten.mm.default")))
			continue;
		layer l;
		const coil_tensor *w;
		if (!(why = as_layer(q, n, &l)) && (!(w = param_t(q, l.w)) || w->dtype != COIL_F32))
			why = w ? "its weight is not f32" : "its weight is missing from the weights file";
		if (why) {
			json_array_append_new(q->report, json_pack("{s:s?, s:s, s:s}", "node", str(json_object_get(n, "id")),
								   "op", op, "reason", why));
			continue;
		}
		const char *e = dynamic ? "" : chain_end(q, n);
		layer *nl = realloc(q->L, (size_t)(q->nl + 1) * sizeof *nl);
		if (nl)
			q->L = nl;
		l.x = strdup(l.x), l.w = strdup(l.w), l.e = strdup(e);
		if (!nl || !l.x || !l.w || !l.e) {
			free(l.x), free(l.w), free(l.e);
			qz_free(q);
			return coil_err_oom(err);
		}
		q->L[q->nl++] = l;
		if (!dynamic && (!watch(q, l.x, err) || !watch(q, l.e, err))) {
			qz_free(q);
			return -1;
		}
	}
	if (!q->nl) {
		json_t *r = json_array_get(q->report, 0);
		coil_errf(err, "no layer can run in int8%s%s%s%s", r ? ": " : " (no convolution or linear layer)",
			  r ? str(json_object_get(r, "node")) : "", r ? " " : "", r ? str(json_object_get(r, "reason")) : "");
		qz_free(q);
		return -1;
	}
	/* the calibration graph: the folded graph, each watched value that is not an input an output too */
	json_t *cg = json_deep_copy(q->g), *outs = json_object_get(cg, "outputs");
	q->nout0 = (int)json_array_size(outs);
	for (int k = 0; k < q->no; k++)
		if (!find_named(json_object_get(cg, "inputs"), q->o[k].name))
			json_array_append_new(outs, json_string(q->o[k].name));
	q->calib = q->no ? json_dumps(cg, JSON_COMPACT) : NULL;
	q->calib_len = q->calib ? strlen(q->calib) : 0;
	json_decref(cg);
	if (q->no && !q->calib) {
		qz_free(q);
		return coil_err_oom(err);
	}
	*out = q;
	return 0;
}

const char *qz_calib(qz *q, size_t *len)
{
	*len = q->calib_len;
	return q->calib;
}

static int observe(obs *o, const coil_tensor *t, coil_err *err)
{
	const int64_t n = tensor_numel(t);
	if (!dtype_is_float(t->dtype) || n == 0)
		return 0;
	const int64_t step = n / SAMPLE > 1 ? n / SAMPLE : 1;
	size_t want = o->ns + (size_t)((n + step - 1) / step);
	if (want > MAX_SAMPLES)
		want = MAX_SAMPLES;
	if (want > o->cap) {
		float *ns = realloc(o->samp, want * sizeof *ns);
		if (!ns)
			return coil_err_oom(err);
		o->samp = ns, o->cap = want;
	}
	for (int64_t e = 0; e < n; e++) {
		double v = dtype_load(t->dtype, t->data, (size_t)e);
		if (v < o->lo)
			o->lo = v;
		if (v > o->hi)
			o->hi = v;
		if (e % step == 0 && o->ns < o->cap)
			o->samp[o->ns++] = (float)v;
	}
	return 0;
}

int qz_observe(qz *q, const coil_tensor *ins, int ninputs, const coil_tensor *outs, int noutputs, coil_err *err)
{
	json_t *gi = json_object_get(q->g, "inputs");
	for (int k = 0, at = q->nout0; k < q->no; k++) {
		const coil_tensor *t = NULL;
		for (int i = 0; i < ninputs && !t; i++)
			if (!strcmp(str(json_object_get(json_array_get(gi, (size_t)i), "name")) ?: "", q->o[k].name))
				t = &ins[i];
		if (!t) {
			if (at >= noutputs)
				return coil_errf(err, "calibration run: %d outputs, expected more", noutputs);
			t = &outs[at++];
		}
		if (observe(&q->o[k], t, err))
			return -1;
	}
	return 0;
}

static int cmp_f(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

/* Per tensor u8 affine parameters of an observed range (coil_quant.Observer.qparams). */
static int obs_qparams(obs *o, const char *method, double percentile, double *scale, int *zp, coil_err *err)
{
	double lo = o->lo, hi = o->hi;
	if (!(lo <= hi))
		return coil_errf(err, "calibration never computed %s", o->name);
	if (!strcmp(method, "histogram") && o->ns) {
		qsort(o->samp, o->ns, sizeof *o->samp, cmp_f);
		double at[2] = {(1 - percentile / 100) * (double)(o->ns - 1), percentile / 100 * (double)(o->ns - 1)}, v[2];
		for (int k = 0; k < 2; k++) {
			size_t i = (size_t)floor(at[k]), j = i + 1 < o->ns ? i + 1 : i;
			v[k] = o->samp[i] + (o->samp[j] - o->samp[i]) * (at[k] - (double)i);
		}
		lo = v[0], hi = v[1];
		o->ns = 0; /* sorted once: a second call reads the same */
		o->lo = lo, o->hi = hi;
	}
	lo = lo < 0 ? lo : 0, hi = hi > 0 ? hi : 0;
	double s = (hi - lo) / 255.0;
	s = s > FLT_EPSILON ? s : FLT_EPSILON;
	double z = nearbyint(-lo / s);
	*zp = (int)(z < 0 ? 0 : z > 255 ? 255 : z);
	*scale = (float)s;
	return 0;
}

static json_t *node(qz *q, const char *base, const char *op, json_t *a, json_t *outs)
{
	return json_pack("{s:s, s:s, s:o, s:o}", "id", fresh(q, base), "op", op, "args", a, "outputs", outs);
}

/* Inserts items (a JSON array, stolen) into the node list after the producer of v (at the
 * front for an input or param). */
static void insert_after(qz *q, const char *v, json_t *items)
{
	json_t *p = producer(q, v), *all = nodes(q);
	size_t at = 0, i;
	json_t *n;
	if (p)
		json_array_foreach(all, i, n) if (n == p) at = i + 1;
	for (i = 0; i < json_array_size(items); i++)
		json_array_insert(all, at + i, json_array_get(items, i));
	json_decref(items);
}

/* Weight w (read by l->wr at l->wi) through a per-channel symmetric s8 quantize and dequantize. */
static int quantize_weight(qz *q, const layer *l, coil_err *err)
{
	const coil_tensor *w = param_t(q, l->w);
	const int64_t oc = w->shape[0], per = tensor_numel(w) / (oc ? oc : 1);
	float *s = malloc((size_t)(oc ? oc : 1) * sizeof *s);
	if (!s)
		return coil_err_oom(err);
	for (int64_t c = 0; c < oc; c++) {
		float m = 0;
		for (int64_t e = 0; e < per; e++)
			m = fmaxf(m, fabsf(((const float *)w->data)[c * per + e]));
		s[c] = fmaxf(m / 127.5f, FLT_EPSILON); /* PyTorch's qint8 per-channel observer */
	}
	char sn[300], zn[300], wq[300], wd[300], base[300];
	snprintf(base, sizeof base, "%s.coil_scale", l->w);
	snprintf(sn, sizeof sn, "%s", fresh(q, base));
	int64_t sh[1] = {oc};
	if (add_param(q, sn, 1, sh, s, err))
		return -1;
	snprintf(base, sizeof base, "%s.coil_zero_point", l->w);
	snprintf(zn, sizeof zn, "%s", fresh(q, base));
	snprintf(base, sizeof base, "%s_q", l->w);
	snprintf(wq, sizeof wq, "%s", fresh(q, base));
	snprintf(base, sizeof base, "%s_dq", l->w);
	snprintf(wd, sizeof wd, "%s", fresh(q, base));
	json_t *items = json_array();
	/* zero points: a zeros node (any channel count; a constant holds at most 4096) */
	json_array_append_new(items, json_pack("{s:s, s:s, s:[[I]], s:{s:s}, s:[s]}", "id", fresh(q, "zeros_w"), "op",
					       "aten.zeros.default", "args", (json_int_t)oc, "kwargs", "dtype", "i64",
					       "outputs", zn));
	json_array_append_new(items, node(q, "quant_w", "quantized_decomposed.quantize_per_channel.default",
					  json_pack("[s, s, s, i, i, i, s]", l->w, sn, zn, 0, -128, 127, "i8"),
					  json_pack("[s]", wq)));
	json_array_append_new(items, node(q, "dequant_w", "quantized_decomposed.dequantize_per_channel.default",
					  json_pack("[s, s, s, i, i, i, s]", wq, sn, zn, 0, -128, 127, "i8"),
					  json_pack("[s]", wd)));
	json_array_set_new(args(l->wr), (size_t)l->wi, json_string(wd));
	size_t at = 0, i;
	json_t *n;
	json_array_foreach(nodes(q), i, n) if (n == l->wr) at = i;
	for (i = 0; i < json_array_size(items); i++)
		json_array_insert(nodes(q), at + i, json_array_get(items, i));
	json_decref(items);
	return 0;
}

static const qp *qp_of(qz *q, const char *name)
{
	for (int k = 0; name && k < q->nqp; k++)
		if (!strcmp(q->qps[k].name, name))
			return &q->qps[k];
	return NULL;
}

/* v through quantize -> dequantize (u8, per tensor) for every reader; the dequantize's value. */
static const char *qdq(qz *q, const char *v, double scale, int zp, const char *tag, coil_err *err)
{
	char qn[300], dn[300], base[300];
	snprintf(base, sizeof base, "%s_q", tag);
	snprintf(qn, sizeof qn, "%s", fresh(q, base));
	snprintf(base, sizeof base, "%s_dq", tag);
	snprintf(dn, sizeof dn, "%s", fresh(q, base));
	snprintf(base, sizeof base, "quant_%s", tag);
	json_t *qnode = node(q, base, "quantized_decomposed.quantize_per_tensor.default",
			     json_pack("[s, f, i, i, i, s]", v, scale, zp, 0, 255, "u8"), json_pack("[s]", qn));
	snprintf(base, sizeof base, "dequant_%s", tag);
	json_t *dnode = node(q, base, "quantized_decomposed.dequantize_per_tensor.default",
			     json_pack("[s, f, i, i, i, s]", qn, scale, zp, 0, 255, "u8"), json_pack("[s]", dn));
	qp *nq = realloc(q->qps, (size_t)(q->nqp + 1) * sizeof *nq);
	char *keep = strdup(dn);
	if (!qnode || !dnode || !nq || !keep) {
		json_decref(qnode), json_decref(dnode), free(keep);
		if (nq)
			q->qps = nq;
		return coil_err_oom(err), NULL;
	}
	q->qps = nq;
	replace_all(q, v, dn, NULL);
	insert_after(q, v, json_pack("[o, o]", qnode, dnode));
	q->qps[q->nqp++] = (qp){.name = keep, .scale = scale, .zp = zp};
	return keep;
}

/* Dynamic: each linear's input through choose_qparams -> quantize -> dequantize (one per
 * input value, whoever reads it). */
static int dynamic_input(qz *q, const layer *l, coil_err *err)
{
	json_t *n = l->node;
	const size_t base = !strcmp(op_of(n), "aten.addmm.default");
	const char *x = arg_s(n, base), *d;
	const qp *done = NULL;
	for (int k = 0; k < q->nqp && !done; k++)
		if (q->qps[k].scale == -1 && !strcmp(q->qps[k].name, x))
			done = &q->qps[k + 1];
	if (!done) {
		char tag[200], nm[4][300], base_[300];
		snprintf(tag, sizeof tag, "%s_in", str(json_object_get(n, "id")) ?: "layer");
		static const char *const suf[] = {"scale", "zp", "q", "dq"};
		for (int k = 0; k < 4; k++) { /* (distinct suffixes: fresh cannot give one twice) */
			snprintf(base_, sizeof base_, "%s_%s", tag, suf[k]);
			snprintf(nm[k], sizeof nm[k], "%s", fresh(q, base_));
		}
		const double eps = FLT_EPSILON;
		char id[3][300];
		static const char *const ids[] = {"qparams_", "quant_", "dequant_"};
		for (int k = 0; k < 3; k++) {
			snprintf(base_, sizeof base_, "%s%s", ids[k], tag);
			snprintf(id[k], sizeof id[k], "%s", fresh(q, base_));
		}
		json_t *items = json_pack(
			"[{s:s, s:s, s:[s, i, i, f, s], s:[s, s]}, {s:s, s:s, s:[s, s, s, i, i, s], s:[s]},"
			" {s:s, s:s, s:[s, s, s, i, i, s], s:[s]}]",
			"id", id[0], "op", "quantized_decomposed.choose_qparams.tensor", "args", x, 0, 255, eps, "u8",
			"outputs", nm[0], nm[1], "id", id[1], "op", "quantized_decomposed.quantize_per_tensor.tensor", "args", x,
			nm[0], nm[1], 0, 255, "u8", "outputs", nm[2], "id", id[2], "op",
			"quantized_decomposed.dequantize_per_tensor.tensor", "args", nm[2], nm[0], nm[1], 0, 255, "u8",
			"outputs", nm[3]);
		qp *nq = realloc(q->qps, (size_t)(q->nqp + 2) * sizeof *nq);
		char *kx = strdup(x), *kd = strdup(nm[3]);
		if (!items || !nq || !kx || !kd) {
			json_decref(items), free(kx), free(kd);
			if (nq)
				q->qps = nq;
			return coil_err_oom(err);
		}
		q->qps = nq;
		insert_after(q, x, items);
		/* a pair: x (scale -1 marks it), then its dequantized value */
		q->qps[q->nqp++] = (qp){.name = kx, .scale = -1};
		q->qps[q->nqp++] = (qp){.name = kd, .scale = 0};
		done = &q->qps[q->nqp - 1];
	}
	d = done->name;
	json_array_set_new(args(n), base, json_string(d));
	return 0;
}

static int write_all(qz *q, const char *dir, coil_err *err)
{
	char path[4096];
	if (mkdir(dir, 0777) && errno != EEXIST)
		return coil_errc(err, COIL_E_IO, "%s: %s", dir, strerror(errno));
	snprintf(path, sizeof path, "%s/graph.json", dir);
	if (json_dump_file(q->g, path, JSON_INDENT(1)))
		return coil_errc(err, COIL_E_IO, "%s: cannot write", path);
	json_t *ps = json_object_get(q->g, "params");
	const size_t np = json_array_size(ps);
	const char **names = calloc(np + 1, sizeof *names);
	coil_tensor *ts = calloc(np + 1, sizeof *ts);
	int rc = -1;
	if (!names || !ts) {
		coil_err_oom(err);
		goto out;
	}
	for (size_t i = 0; i < np; i++) {
		names[i] = str(json_object_get(json_array_get(ps, i), "name"));
		const coil_tensor *t = names[i] ? param_t(q, names[i]) : NULL;
		if (!t) {
			coil_errf(err, "param '%s' is missing from the weights file", names[i] ? names[i] : "?");
			goto out;
		}
		ts[i] = *t;
	}
	snprintf(path, sizeof path, "%s/weights.safetensors", dir);
	rc = st_write(path, (int)np, names, ts, err);
out:
	free(names);
	free(ts);
	return rc;
}

int qz_options(const char *method, double percentile, coil_err *err)
{
	if (strcmp(method, "histogram") && strcmp(method, "minmax"))
		return coil_err_input(err, "--method takes histogram or minmax, not '%.20s'", method);
	if (!(percentile > 50 && percentile <= 100))
		return coil_err_input(err, "--percentile must be in (50, 100], not %g", percentile);
	return 0;
}

int qz_write(qz *q, const char *method, double percentile, const char *dir, FILE *report, coil_err *err)
{
	if (qz_options(method, percentile, err))
		return -1;
	for (int k = 0; k < q->nl; k++) {
		layer *l = &q->L[k];
		json_t *n = l->node;
		if (quantize_weight(q, l, err))
			return -1;
		if (q->dynamic) {
			if (dynamic_input(q, l, err))
				return -1;
		} else {
			/* the input: a layer's quantized output as it is, else quantized here for every
			 * reader; data movement of a quantized value keeps its quantization */
			const char *xin = arg_s(n, !strcmp(op_of(n), "aten.addmm.default"));
			if (!qp_of(q, xin)) {
				json_t *src = producer(q, xin);
				const qp *from = src && in_list(op_of(src), moves) ? qp_of(q, arg_s(src, 0)) : NULL;
				double s;
				int z;
				char tag[200], x[300];
				if (from)
					s = from->scale, z = from->zp;
				else if (obs_qparams(watch(q, l->x, err), method, percentile, &s, &z, err))
					return -1;
				snprintf(tag, sizeof tag, "%s_in", str(json_object_get(n, "id")) ?: "layer");
				snprintf(x, sizeof x, "%s", xin);
				if (!qdq(q, x, s, z, tag, err))
					return -1;
			}
			/* the output, after its activations */
			double s;
			int z;
			char tag[200];
			if (obs_qparams(watch(q, l->e, err), method, percentile, &s, &z, err))
				return -1;
			snprintf(tag, sizeof tag, "%s_out", str(json_object_get(n, "id")) ?: "layer");
			if (!qdq(q, l->e, s, z, tag, err))
				return -1;
		}
		fprintf(report, "int8 %s (%s): weight %s\n", str(json_object_get(n, "id")) ?: "?", op_of(n), l->w);
	}
	size_t i;
	json_t *r;
	json_array_foreach(q->report, i, r) fprintf(report, "f32 %s (%s): %s\n", str(json_object_get(r, "node")) ?: "?",
						    str(json_object_get(r, "op")), str(json_object_get(r, "reason")));
	return write_all(q, dir, err);
}

void qz_free(qz *q)
{
	if (!q)
		return;
	json_decref(q->g);
	json_decref(q->report);
	for (int k = 0; k < q->nnew; k++)
		free(q->new_names[k]), free(q->new_t[k].data);
	free(q->new_names);
	free(q->new_t);
	for (int k = 0; k < q->nl; k++)
		free(q->L[k].x), free(q->L[k].w), free(q->L[k].e);
	free(q->L);
	for (int k = 0; k < q->no; k++)
		free(q->o[k].samp), free(q->o[k].name);
	free(q->o);
	for (int k = 0; k < q->nqp; k++)
		free((char *)q->qps[k].name);
	free(q->qps);
	free(q->calib);
	free(q);
}
