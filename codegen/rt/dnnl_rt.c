/* dnnl_rt: convolution / matmul runtime over oneDNN 2.x.  See dnnl_rt.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NOLOAD, RTLD_DEFAULT */
#endif
#include "dnnl_rt.h"

#include <dlfcn.h>
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

/* vmath (the generated kernels' f32 math, codegen/vmath.h): build.c writes
 * it beside this file in an artifact's build */
#if __has_include("dnnl_rt_vmath.h")
#include "dnnl_rt_vmath.h"
#else
#include "../vmath.h"
#endif

#if DNNL_VERSION_MAJOR != 2
#error "dnnl_rt is written for the oneDNN 2.x C API"
#endif

/* ------------------------------------------------------------------ */
/* errors                                                              */

static int seterr(char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int seterr(char *err, size_t errlen, int code, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

/* Evaluates a dnnl call; on failure records it and jumps to `fail`. */
#define DN(call)                                                                  \
	do {                                                                      \
		dnnl_status_t st_ = (call);                                       \
		if (st_ != dnnl_success) {                                        \
			rc = seterr(err, errlen, RT_EDNNL, "oneDNN %s: %s", #call, \
				    dnnl_status2str(st_));                        \
			goto fail;                                                \
		}                                                                 \
	} while (0)

#define FAIL(code, ...)                                        \
	do {                                                   \
		rc = seterr(err, errlen, (code), __VA_ARGS__); \
		goto fail;                                     \
	} while (0)

/* ------------------------------------------------------------------ */
/* context                                                             */

typedef void (*omp_set_fn)(int);
typedef int (*omp_get_fn)(void);

struct rt_ctx {
	dnnl_engine_t engine;
	dnnl_stream_t stream;
	int nthreads;
	omp_set_fn omp_set; /* libgomp's, as loaded with libdnnl; NULL if absent */
	omp_get_fn omp_get;
	/* Workspace shared by the objects of this context (calls on one context
	 * never overlap): oneDNN scratchpads and NCHW<->NHWC staging buffers.
	 * Grown at create time only, so run() never allocates. */
	void *ws;
	size_t ws_bytes;
	/* Packed weights shared between objects created with the same
	 * weight_key and layout (one fusion at several shapes): reordered once. */
	struct shared_w {
		uint64_t key;
		dnnl_memory_desc_t md;
		dnnl_memory_t mem;
		void *buf; /* mem's data, ours (returned to the pool below) */
		size_t bytes;
		int refs;
	} *sw;
	int nsw, capsw;
	/* Buffers of packed weights no object uses any more, kept for the next
	 * pack: a model with symbolic sizes drops and repacks weights as its
	 * kernels' layouts change with the sizes, and fresh pages cost more
	 * than the pack (first touch ~0.8 ms a MB here: 120 ms for resnet18's
	 * Winograd weights).  Held only while the weights in use plus the pool
	 * stay within the most ever in use, so memory is not above what the
	 * pool saves allocating again. */
	struct { void *p; size_t bytes; } pool[16];
	int npool;
	size_t w_use, w_peak, pool_bytes;
};

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Buffers of a MiB or more (packed weights, the workspace) come straight
 * from the kernel and go back to it when freed.  From malloc they came from
 * its heap once its mmap threshold had grown past their size, and a freed
 * one below a live one stayed resident: resnet18 over 300 shapes peaked
 * ~110 MiB higher so.  bytes: as given to big_alloc. */
#define RT_BIG ((size_t)1 << 20)

static void *big_alloc(size_t bytes)
{
	bytes = round64(bytes ? bytes : 1);
	if (bytes < RT_BIG)
		return aligned_alloc(64, bytes);
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void big_free(void *p, size_t bytes)
{
	bytes = round64(bytes ? bytes : 1);
	if (p && bytes < RT_BIG)
		free(p);
	else if (p)
		munmap(p, bytes);
}

/* Frees pooled buffers, largest first, until in use plus pool fit the peak
 * (all of them when the peak is 0). */
static void pool_fit(rt_ctx *c)
{
	while (c->npool && c->w_use + c->pool_bytes > c->w_peak) {
		int big = 0;
		for (int i = 1; i < c->npool; i++)
			if (c->pool[i].bytes > c->pool[big].bytes)
				big = i;
		big_free(c->pool[big].p, c->pool[big].bytes);
		c->pool_bytes -= c->pool[big].bytes;
		c->pool[big] = c->pool[--c->npool];
	}
}

/* A buffer for bytes of packed weights: the smallest pooled one that holds
 * them without wasting more than a quarter, else a new one. */
static void *pool_get(rt_ctx *c, size_t bytes, size_t *got)
{
	int best = -1;
	for (int i = 0; i < c->npool; i++)
		if (c->pool[i].bytes >= bytes && c->pool[i].bytes - bytes <= bytes / 4 &&
		    (best < 0 || c->pool[i].bytes < c->pool[best].bytes))
			best = i;
	void *p;
	if (best >= 0) {
		p = c->pool[best].p;
		*got = c->pool[best].bytes;
		c->pool_bytes -= *got;
		c->pool[best] = c->pool[--c->npool];
	} else if ((p = big_alloc(bytes))) {
		*got = round64(bytes ? bytes : 1);
	} else {
		return NULL;
	}
	c->w_use += *got;
	if (c->w_use > c->w_peak)
		c->w_peak = c->w_use;
	pool_fit(c);
	return p;
}

static void pool_put(rt_ctx *c, void *p, size_t bytes)
{
	c->w_use -= bytes;
	if (c->npool == (int)(sizeof c->pool / sizeof *c->pool)) { /* no room: one goes */
		big_free(c->pool[0].p, c->pool[0].bytes);
		c->pool_bytes -= c->pool[0].bytes;
		c->pool[0] = c->pool[--c->npool];
	}
	c->pool[c->npool].p = p;
	c->pool[c->npool++].bytes = bytes;
	c->pool_bytes += bytes;
	pool_fit(c);
}

static int ctx_reserve(rt_ctx *c, size_t bytes, char *err, size_t errlen)
{
	if (bytes <= c->ws_bytes)
		return RT_OK;
	big_free(c->ws, c->ws_bytes); /* scratch between runs: holding both made the peak their sum */
	c->ws = NULL;
	c->ws_bytes = 0;
	void *p = big_alloc(bytes);
	if (!p)
		return seterr(err, errlen, RT_ENOMEM, "cannot allocate %zu bytes of workspace",
			      bytes);
	c->ws = p;
	c->ws_bytes = bytes;
	return RT_OK;
}

/* Sets the calling thread's OpenMP thread count for one call; returns the
 * value to restore (0: nothing to restore). */
static int threads_enter(const rt_ctx *c)
{
	if (c->nthreads <= 0 || !c->omp_set || !c->omp_get)
		return 0;
	int prev = c->omp_get();
	if (prev == c->nthreads)
		return 0;
	c->omp_set(c->nthreads);
	return prev;
}

static void threads_leave(const rt_ctx *c, int prev)
{
	if (prev > 0)
		c->omp_set(prev);
}

/* oneDNN keeps every primitive it creates in a process-wide cache (1,024 by
 * default), JIT code included: with symbolic sizes each new binding adds
 * its primitives there, about 0.3 MiB each, so memory grew with every new
 * shape (an MLP: 418 -> 693 MiB over 400 batch sizes).  Worse, oneDNN 2.6
 * hands a primitive made under one thread count to a context of another:
 * an MLP's handle at 2 threads got the shape-generic GEMM its 1-thread
 * handle had made and ran at 1-thread speed (batch 74: 8.9 ms against 4.9
 * ms with the cache off).  The objects a handle reuses are its own, so the
 * cache is turned off (RT_PRIMITIVE_CACHE) unless
 * DNNL_PRIMITIVE_CACHE_CAPACITY says otherwise; a second handle of a model
 * makes its primitives again. */
#define RT_PRIMITIVE_CACHE 0

static void bound_primitive_cache(void)
{
	static int done;
	if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL) || getenv("DNNL_PRIMITIVE_CACHE_CAPACITY"))
		return;
	int cap = 0;
	if (dnnl_get_primitive_cache_capacity(&cap) == dnnl_success && cap > RT_PRIMITIVE_CACHE)
		dnnl_set_primitive_cache_capacity(RT_PRIMITIVE_CACHE);
}

RT_API int rt_ctx_create(int nthreads, rt_ctx **out, char *err, size_t errlen)
{
	int rc = RT_OK;
	if (!out)
		return seterr(err, errlen, RT_EINVAL, "rt_ctx_create: out is NULL");
	*out = NULL;
	bound_primitive_cache();
	rt_ctx *c = calloc(1, sizeof *c);
	if (!c)
		return seterr(err, errlen, RT_ENOMEM, "rt_ctx_create: out of memory");
	c->nthreads = nthreads;
	if (nthreads > 0) {
		const dnnl_version_t *v = dnnl_version();
		if (v->cpu_runtime == DNNL_RUNTIME_OMP) {
			/* libdnnl pulled libgomp in; find it without linking it. */
			void *h = dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD);
			void *s = h ? dlsym(h, "omp_set_num_threads")
				    : dlsym(RTLD_DEFAULT, "omp_set_num_threads");
			void *g = h ? dlsym(h, "omp_get_max_threads")
				    : dlsym(RTLD_DEFAULT, "omp_get_max_threads");
			if (h)
				dlclose(h); /* NOLOAD handle: drops our reference only */
			if (!s || !g)
				FAIL(RT_EUNSUP, "rt_ctx_create: libdnnl uses OpenMP but "
						"omp_set_num_threads was not found");
			/* POSIX allows this conversion (dlsym returns functions). */
			*(void **)&c->omp_set = s;
			*(void **)&c->omp_get = g;
		} else if (v->cpu_runtime != DNNL_RUNTIME_SEQ) {
			FAIL(RT_EUNSUP, "rt_ctx_create: libdnnl CPU runtime %u: cannot "
					"set a thread count", v->cpu_runtime);
		}
	}
	DN(dnnl_engine_create(&c->engine, dnnl_cpu, 0));
	DN(dnnl_stream_create(&c->stream, c->engine, dnnl_stream_default_flags));
	*out = c;
	return RT_OK;
fail:
	rt_ctx_destroy(c);
	return rc;
}

RT_API size_t rt_ctx_workspace_bytes(const rt_ctx *c) { return c ? c->ws_bytes : 0; }

RT_API size_t rt_ctx_weight_bytes(const rt_ctx *c)
{
	size_t n = 0;
	for (int i = 0; c && i < c->nsw; i++)
		n += dnnl_memory_desc_get_size(&c->sw[i].md);
	return n;
}

RT_API size_t rt_ctx_weight_pool_bytes(const rt_ctx *c) { return c ? c->pool_bytes : 0; }

RT_API void rt_scale_rows(float *w, int64_t rows, int64_t per, const float *s, int div)
{
	for (int64_t o = 0; o < rows; o++) {
		float *r = w + o * per;
		const float f = s[o];
		if (div)
			for (int64_t j = 0; j < per; j++)
				r[j] /= f;
		else
			for (int64_t j = 0; j < per; j++)
				r[j] *= f;
	}
}

RT_API float rt_bf16_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

RT_API void rt_bf16_to_f32(float *dst, const uint16_t *src, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		dst[i] = rt_bf16_f32(src[i]);
}

RT_API void rt_ctx_destroy(rt_ctx *c)
{
	if (!c)
		return;
	if (c->stream)
		dnnl_stream_destroy(c->stream);
	if (c->engine)
		dnnl_engine_destroy(c->engine);
	for (int i = 0; i < c->nsw; i++) {
		dnnl_memory_destroy(c->sw[i].mem);
		big_free(c->sw[i].buf, c->sw[i].bytes);
	}
	for (int i = 0; i < c->npool; i++)
		big_free(c->pool[i].p, c->pool[i].bytes);
	free(c->sw);
	big_free(c->ws, c->ws_bytes);
	free(c);
}

/* ------------------------------------------------------------------ */
/* shared primitive plumbing                                           */

/* bf16 bits -> f32 */
static float bf16_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* Dense memory descriptor: dims in logical order, physical order given by
 * `order` (outermost first; NULL = logical order). */
static dnnl_status_t md_dense(dnnl_memory_desc_t *md, int nd, const int64_t *dims,
			      const int *order, dnnl_data_type_t dt)
{
	dnnl_dims_t d, s;
	int64_t st = 1;
	for (int i = nd - 1; i >= 0; --i) {
		int ax = order ? order[i] : i;
		s[ax] = st;
		/* a run-time dim (DNNL_RUNTIME_DIM_VAL) makes the strides outside it run-time too */
		st = st == DNNL_RUNTIME_DIM_VAL || dims[ax] == DNNL_RUNTIME_DIM_VAL ? DNNL_RUNTIME_DIM_VAL
										   : st * dims[ax];
	}
	for (int i = 0; i < nd; ++i)
		d[i] = dims[i];
	return dnnl_memory_desc_init_by_strides(md, nd, d, dt, s);
}

enum { ARG_SRC, ARG_WEI, ARG_BIAS, ARG_DST, ARG_SCRATCH, ARG_ZSRC, ARG_ZDST, ARG_OSCALE, ARG_POST0 };
#define MAX_ARGS (ARG_POST0 + RT_MAX_POST)

/* What each user post-op became. */
enum post_role { ROLE_NONE, ROLE_SUM, ROLE_BIN };

/* One primitive with its memories; data handles are set at each run. */
typedef struct prim {
	rt_ctx *ctx;
	dnnl_primitive_desc_t pd;
	dnnl_primitive_t prim;
	dnnl_memory_t mem[MAX_ARGS];
	int arg_id[MAX_ARGS];
	size_t scratch_bytes; /* at offset 0 of the context's workspace */
	size_t dst_bytes;
	int rt_dims; /* src/dst have run-time dims: their memories are made per run */
	int npost;
	enum post_role role[RT_MAX_POST];
	int impl;    /* 0: oneDNN's first implementation; n: its n-th jit one after that (autotuning) */
	const char *prefer; /* impl 0: the first whose name starts so, if any, before oneDNN's first */
	int ws_later; /* the caller reserves the workspace (scratchpad included) itself */
} prim;

static void prim_free(prim *p)
{
	for (int i = 0; i < MAX_ARGS; ++i)
		if (p->mem[i])
			dnnl_memory_destroy(p->mem[i]);
	if (p->prim)
		dnnl_primitive_destroy(p->prim);
	if (p->pd)
		dnnl_primitive_desc_destroy(p->pd);
}

static const char *prim_impl(const prim *p)
{
	const char *s = NULL;
	if (!p->pd || dnnl_primitive_desc_query(p->pd, dnnl_query_impl_info_str, 0, &s)
			      != dnnl_success || !s)
		return "";
	return s;
}

/* A binary operand's dims padded (numpy-style, leading 1s) to rank nd. */
static void bin_dims(const rt_post *q, int nd, int64_t *dims)
{
	for (int j = 0; j < nd; ++j) {
		int sj = j - (nd - q->rank);
		dims[j] = sj < 0 || sj >= 8 ? 1 : q->dims[sj];
	}
}

/* oneDNN 2.6's NHWC conv kernels (brgconv, brdgmm) silently mis-broadcast
 * binary operands like [n,c,1,1] or [1,1,h,w]: allow scalar, per-channel
 * (only dim 1 non-unit) and dst-shaped ones only. */
static int nhwc_bcast_ok(const int64_t *dims, const int64_t *dst_dims, int nd)
{
	int scalar = 1, perc = 1, full = 1;
	for (int j = 0; j < nd; ++j) {
		if (dims[j] != dst_dims[j])
			full = 0;
		if (dims[j] != 1 && dst_dims[j] != 1)
			scalar = 0, perc &= j == 1;
	}
	return scalar || perc || full;
}

/* Validates the post-op chain against a dst of rank nd / dims (logical) and
 * builds the oneDNN post-ops.  `order` is dst's physical order (binary
 * operands use it too).  `lead` is a number of oneDNN post-ops the caller
 * already appended to *po (indices shift).  Records roles and the binary
 * operands' descriptors (bin_md[i]) and oneDNN post-op indices (bin_idx[i]).
 * bcast_strict: NHWC conv primitive, see nhwc_bcast_ok. */
static int build_post_ops(dnnl_post_ops_t po, int lead, int npost, const rt_post *post,
			  int nd, const int64_t *dst_dims, const int *order, int bcast_strict, prim *p,
			  dnnl_memory_desc_t *bin_md, int *bin_idx, dnnl_data_type_t dt, const rt_quant *qt,
			  char *err, size_t errlen)
{
	int rc = RT_OK, idx = lead, nsum = 0;
	if (npost < 0 || npost > RT_MAX_POST)
		return seterr(err, errlen, RT_EINVAL, "npost %d out of range 0..%d", npost,
			      RT_MAX_POST);
	p->npost = npost;
	for (int i = 0; i < npost; ++i) {
		const rt_post *q = &post[i];
		dnnl_alg_kind_t alg = dnnl_alg_kind_undef;
		float a = 0, b = 0;
		p->role[i] = ROLE_NONE;
		switch (q->kind) {
		case RT_RELU: alg = dnnl_eltwise_relu; break;
		case RT_LEAKY_RELU: alg = dnnl_eltwise_relu; a = q->a; break;
		case RT_GELU_ERF: alg = dnnl_eltwise_gelu_erf; break;
		case RT_GELU_TANH: alg = dnnl_eltwise_gelu_tanh; break;
		case RT_SILU: alg = dnnl_eltwise_swish; a = 1; break;
		case RT_SIGMOID: alg = dnnl_eltwise_logistic; break;
		case RT_TANH: alg = dnnl_eltwise_tanh; break;
		case RT_HARDSWISH: alg = dnnl_eltwise_hardswish; break;
		case RT_HARDSIGMOID:
			/* oneDNN 2.6 has no hardsigmoid: clip(x/6 + 1/2, 0, 1). */
			DN(dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_linear,
							1.f / 6, 0.5f));
			idx++;
			alg = dnnl_eltwise_clip, a = 0, b = 1;
			break;
		case RT_CLAMP:
			if (!(q->a <= q->b))
				FAIL(RT_EINVAL, "post-op %d: clamp bounds %g > %g", i,
				     (double)q->a, (double)q->b);
			alg = dnnl_eltwise_clip, a = q->a, b = q->b;
			/* clamp_min / clamp_max come as +-INFINITY: pass finite bounds */
			if (isinf(a)) a = a < 0 ? -3.4028235e38f : 3.4028235e38f;
			if (isinf(b)) b = b < 0 ? -3.4028235e38f : 3.4028235e38f;
			break;
		case RT_ELU: alg = dnnl_eltwise_elu; a = q->a; break;
		case RT_LINEAR: alg = dnnl_eltwise_linear; a = q->a, b = q->b; break;
		case RT_ROUND: alg = dnnl_eltwise_round; break;
		case RT_ADD_SAME:
			if (++nsum > 1)
				FAIL(RT_EUNSUP, "post-op %d: at most one RT_ADD_SAME", i);
			if (qt)
				DN(dnnl_post_ops_append_sum_v3(po, qt->sum_scale, qt->sum_zp, dnnl_data_type_undef));
			else
				DN(dnnl_post_ops_append_sum(po, 1.f));
			p->role[i] = ROLE_SUM;
			idx++;
			continue;
		case RT_ADD_BCAST: alg = dnnl_binary_add; break;
		case RT_MUL_BCAST: alg = dnnl_binary_mul; break;
		case RT_SUB_BCAST: alg = dnnl_binary_sub; break;
		case RT_DIV_BCAST: alg = dnnl_binary_div; break;
		default:
			FAIL(RT_EINVAL, "post-op %d: unknown kind %d", i, (int)q->kind);
		}
		if (alg >= dnnl_binary_add && alg <= dnnl_binary_ne) {
			if (qt && !qt->dynamic) /* (a dynamic one's dst is f32: real values) */
				FAIL(RT_EUNSUP, "post-op %d: no binary post-ops on int8", i);
			if (q->rank < 1 || q->rank > nd)
				FAIL(RT_EINVAL, "post-op %d: operand rank %d, dst rank %d", i,
				     q->rank, nd);
			int64_t dims[DNNL_MAX_NDIMS];
			bin_dims(q, nd, dims);
			for (int j = 0; j < nd; ++j)
				if (dims[j] != 1 && dims[j] != dst_dims[j])
					FAIL(RT_EINVAL, "post-op %d: operand dim %d is %lld, "
						       "dst's is %lld", i, j - (nd - q->rank),
					     (long long)dims[j], (long long)dst_dims[j]);
			if (bcast_strict && !nhwc_bcast_ok(dims, dst_dims, nd))
				FAIL(RT_EUNSUP, "post-op %d: a conv on an NHWC primitive takes "
						"scalar, per-channel or dst-shaped binary operands "
						"only", i);
			DN(md_dense(&bin_md[i], nd, dims, order, dt));
			DN(dnnl_post_ops_append_binary(po, alg, &bin_md[i]));
			p->role[i] = ROLE_BIN;
			bin_idx[i] = idx++;
		} else {
			DN(dnnl_post_ops_append_eltwise(po, q->scale != 0 ? q->scale : 1.f, alg, a, b));
			idx++;
		}
	}
	return RT_OK;
fail:
	return rc;
}

/* Creates pd + primitive from an op descriptor; sets up the scratchpad, the
 * memories for src/dst (handles set at run) and for the binary post-op
 * operands.  Weights and bias memories are the caller's business. */
/* The primitive descriptor: oneDNN's first implementation (or the first
 * named p->prefer...), or with p->impl = n its n-th jit one after that (a
 * reference or plain-GEMM one is never taken); the first where there are
 * not that many. */
static dnnl_status_t pd_create(prim *p, const void *op_desc, dnnl_primitive_attr_t attr, dnnl_engine_t eng)
{
	if (p->impl <= 0 && !p->prefer)
		return dnnl_primitive_desc_create(&p->pd, op_desc, attr, eng, NULL);
	dnnl_primitive_desc_iterator_t it;
	dnnl_status_t st = dnnl_primitive_desc_iterator_create(&it, op_desc, attr, eng, NULL);
	if (st != dnnl_success)
		return st;
	dnnl_primitive_desc_t first = dnnl_primitive_desc_iterator_fetch(it), pick = NULL;
	const char *name = NULL;
	if (p->impl <= 0 && first && dnnl_primitive_desc_query(first, dnnl_query_impl_info_str, 0, &name) == dnnl_success &&
	    name && !strncmp(name, p->prefer, strlen(p->prefer))) {
		dnnl_primitive_desc_iterator_destroy(it);
		p->pd = first;
		return dnnl_success;
	}
	for (int n = 0; first && !pick && dnnl_primitive_desc_iterator_next(it) == dnnl_success;) {
		dnnl_primitive_desc_t pd = dnnl_primitive_desc_iterator_fetch(it);
		name = NULL;
		if (pd && dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) == dnnl_success && name &&
		    (p->impl <= 0 ? !strncmp(name, p->prefer, strlen(p->prefer))
				  : (strstr(name, "jit") || strstr(name, "brg") || strstr(name, "brdgmm")) && ++n == p->impl))
			pick = pd;
		else if (pd)
			dnnl_primitive_desc_destroy(pd);
	}
	dnnl_primitive_desc_iterator_destroy(it);
	if (!first)
		return dnnl_out_of_memory;
	if (pick)
		dnnl_primitive_desc_destroy(first);
	p->pd = pick ? pick : first;
	return dnnl_success;
}

static int prim_finish(prim *p, const void *op_desc, dnnl_primitive_attr_t attr,
		       const dnnl_memory_desc_t *bin_md, const int *bin_idx, char *err,
		       size_t errlen, const char *what)
{
	int rc = RT_OK;
	dnnl_engine_t eng = p->ctx->engine;
	dnnl_status_t st = pd_create(p, op_desc, attr, eng);
	if (st != dnnl_success) {
		p->pd = NULL;
		return seterr(err, errlen, st == dnnl_unimplemented ? RT_EUNSUP : RT_EDNNL,
			      "oneDNN: cannot create the %s primitive: %s", what,
			      dnnl_status2str(st));
	}
	const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(p->pd, dnnl_query_src_md, 0);
	const dnnl_memory_desc_t *dmd = dnnl_primitive_desc_query_md(p->pd, dnnl_query_dst_md, 0);
	const dnnl_memory_desc_t *scr =
		dnnl_primitive_desc_query_md(p->pd, dnnl_query_scratchpad_md, 0);
	if (!smd || !dmd)
		FAIL(RT_EDNNL, "oneDNN: %s: cannot query src/dst descriptors", what);
	p->arg_id[ARG_SRC] = DNNL_ARG_SRC;
	p->arg_id[ARG_DST] = DNNL_ARG_DST;
	if (!p->rt_dims) {
		p->dst_bytes = dnnl_memory_desc_get_size(dmd);
		DN(dnnl_memory_create(&p->mem[ARG_SRC], smd, eng, DNNL_MEMORY_NONE));
		DN(dnnl_memory_create(&p->mem[ARG_DST], dmd, eng, DNNL_MEMORY_NONE));
	}
	p->scratch_bytes = scr ? dnnl_memory_desc_get_size(scr) : 0;
	if (p->scratch_bytes) {
		if (!p->ws_later && (rc = ctx_reserve(p->ctx, p->scratch_bytes, err, errlen)))
			goto fail;
		DN(dnnl_memory_create(&p->mem[ARG_SCRATCH], scr, eng, DNNL_MEMORY_NONE));
		p->arg_id[ARG_SCRATCH] = DNNL_ARG_SCRATCHPAD;
	}
	for (int i = 0; i < p->npost; ++i) {
		if (p->role[i] != ROLE_BIN)
			continue;
		DN(dnnl_memory_create(&p->mem[ARG_POST0 + i], &bin_md[i], eng,
				      DNNL_MEMORY_NONE));
		p->arg_id[ARG_POST0 + i] = DNNL_ARG_ATTR_MULTIPLE_POST_OP(bin_idx[i]) |
					   DNNL_ARG_SRC_1;
	}
	DN(dnnl_primitive_create(&p->prim, p->pd));
	return RT_OK;
fail:
	return rc;
}

static int reorder_make(rt_ctx *ctx, const dnnl_memory_desc_t *from,
			const dnnl_memory_desc_t *to, dnnl_primitive_t *out, char *err,
			size_t errlen)
{
	int rc = RT_OK;
	dnnl_primitive_desc_t rpd = NULL;
	DN(dnnl_reorder_primitive_desc_create(&rpd, from, ctx->engine, to, ctx->engine, NULL));
	DN(dnnl_primitive_create(out, rpd));
fail:
	if (rpd)
		dnnl_primitive_desc_destroy(rpd);
	return rc;
}

/* Winograd weights (oneDNN's `wino` format) from plain f32 3x3 weights:
 * oneDNN 2.6's own reorder takes ~45 ns a weight (106 ms for one 512x512
 * 3x3 conv here), and a dynamic model meets a new blocking of the same
 * weights whenever its kernel's blocking changes with the sizes (resnet18
 * over 100 image sizes met three).  Each (oc, ic) kernel g becomes
 * U = G g G^T, with the G oneDNN's transforms pair with (F(2x2,3x3) for
 * the aaOio / aaOBiOo formats, F(4x4,3x3) for OBaaIBOIio), stored in the
 * format's block order: 16 output channels (oc_block) a run.  Tested
 * against oneDNN's reorder (RT_WINO_PACK=0 uses that).  Returns 0 when
 * done, -1 for a layout it does not know (the caller reorders). */
static const float wino_g2[4][3] = {{1.f, 0.f, 0.f}, {.5f, .5f, .5f}, {.5f, -.5f, .5f}, {0.f, 0.f, 1.f}};
static const float wino_g4[6][3] = {
	{1.13777777777778f, 0.f, 0.f},
	{-0.688403361344538f, -0.430252100840336f, -0.26890756302521f},
	{-0.688403361344538f, 0.430252100840336f, -0.26890756302521f},
	{0.119514472455649f, 0.179271708683473f, 0.26890756302521f},
	{0.119514472455649f, -0.179271708683473f, 0.26890756302521f},
	{0.f, 0.f, 1.f},
};

/* The sizes wino_block works with, copied out of the descriptors (the
 * build has -fno-strict-aliasing: fields read through pointers would be
 * reloaded after every store). */
struct wino_geom {
	int64_t s[4], or_oc, or_ic;
	int a, ic, icb, oc2, ic2, nb_oc, nb_ic, fmt;
};

/* The packing of output block ob (ocb channels; channels beyond the
 * weights' dims read as 0): t = g G^T for every input channel into tb
 * ([ic][3][alpha][ocb]), then U = G t a column uw at a time: tb is read
 * once and the stores run along the format's input-channel order in six
 * streams (36 stores a channel to 36 places 32 KB apart, and tb read 36
 * times, ran at 17 ns a weight; this runs at ~1.5). */
static inline __attribute__((always_inline)) void wino_block(const struct wino_geom *gp, const float *restrict w,
							     const float *restrict g, int ob, const int ocb,
							     float *restrict tb, float *restrict out)
{
	const struct wino_geom q = *gp;
	const int a = q.a;
	for (int i = 0; i < q.ic; i++) {
		float k[9][64];
		for (int o = 0; o < ocb; o++) {
			const int64_t oo = (int64_t)ob * ocb + o;
			const int in = oo < q.or_oc && i < q.or_ic;
			const float *src = w + (in ? oo * q.s[0] + i * q.s[1] : 0);
			for (int r = 0; r < 9; r++)
				k[r][o] = in ? src[r / 3 * q.s[2] + r % 3 * q.s[3]] : 0.f;
		}
		float *t = tb + (size_t)i * 3 * a * ocb;
		for (int r = 0; r < 3; r++)
			for (int j = 0; j < a; j++) {
				const float g0 = g[j * 3], g1 = g[j * 3 + 1], g2 = g[j * 3 + 2];
				for (int o = 0; o < ocb; o++)
					t[(r * a + j) * ocb + o] = k[r * 3][o] * g0 + k[r * 3 + 1][o] * g1 + k[r * 3 + 2][o] * g2;
			}
	}
	for (int uw = 0; uw < a; uw++)
		for (int ib = 0; ib < q.nb_ic; ib++) {
			size_t off[6], step = 1; /* channel ib * icb's, in ocb-float runs */
			for (int uh = 0; uh < a; uh++)
				if (q.fmt == dnnl_wino_wei_OBaaIBOIio)
					off[uh] = ((((((size_t)(ob / q.oc2) * a + uh) * a + uw) * (q.nb_ic / q.ic2) + ib / q.ic2) *
							    q.oc2 + ob % q.oc2) * q.ic2 + ib % q.ic2) * q.icb;
				else if (q.fmt == dnnl_wino_wei_aaOBiOo)
					off[uh] = (((size_t)(uh * a + uw) * (q.nb_oc / q.oc2) + ob / q.oc2) * q.nb_ic + ib) *
							  q.oc2 * q.icb + ob % q.oc2, step = q.oc2;
				else
					off[uh] = (((size_t)(uh * a + uw) * q.nb_oc + ob) * q.nb_ic + ib) * q.icb;
			for (int ii = 0; ii < q.icb; ii++) {
				const float *t = tb + ((size_t)(ib * q.icb + ii) * 3 * a + uw) * ocb;
				for (int uh = 0; uh < a; uh++) {  /* U = G t */
					const float g0 = g[uh * 3], g1 = g[uh * 3 + 1], g2 = g[uh * 3 + 2];
					float *u = out + (off[uh] + ii * step) * ocb;
					for (int o = 0; o < ocb; o++)
						u[o] = g0 * t[o] + g1 * t[a * ocb + o] + g2 * t[2 * a * ocb + o];
				}
			}
		}
}

static int wino_pack(const dnnl_memory_desc_t *have, const dnnl_memory_desc_t *want, const float *w,
		     float *out)
{
	const char *e = getenv("RT_WINO_PACK");
	if ((e && !strcmp(e, "0")) || want->format_kind != dnnl_format_kind_wino || want->data_type != dnnl_f32 ||
	    have->data_type != dnnl_f32 || have->format_kind != dnnl_blocked || have->ndims != 4 ||
	    have->format_desc.blocking.inner_nblks || have->dims[2] != 3 || have->dims[3] != 3)
		return -1;
	const dnnl_wino_desc_t *wd = &want->format_desc.wino_desc;
	const int a = (int)wd->alpha, ocb = (int)wd->oc_block, icb = (int)wd->ic_block;
	const int oc = (int)wd->oc, ic = (int)wd->ic, oc2 = (int)wd->oc2_block, ic2 = (int)wd->ic2_block;
	const float *g = wd->wino_format == dnnl_wino_wei_OBaaIBOIio ? &wino_g4[0][0] : &wino_g2[0][0];
	if (wd->r != 3 || ocb < 1 || ocb > 64 || icb < 1 || oc % ocb || ic % icb ||
	    oc < have->dims[0] || ic < have->dims[1] ||
	    dnnl_memory_desc_get_size(want) != (size_t)a * a * oc * ic * sizeof(float))
		return -1;
	const int nb_oc = oc / ocb, nb_ic = ic / icb;
	if (wd->wino_format == dnnl_wino_wei_OBaaIBOIio) {
		if (a != 6 || oc2 < 1 || ic2 < 1 || nb_oc % oc2 || nb_ic % ic2)
			return -1;
	} else if (wd->wino_format == dnnl_wino_wei_aaOBiOo) {
		if (a != 4 || oc2 < 1 || nb_oc % oc2)
			return -1;
	} else if (wd->wino_format != dnnl_wino_wei_aaOio || a != 4) {
		return -1;
	}
	const dnnl_dim_t *st = have->format_desc.blocking.strides;
	const struct wino_geom q = {{st[0], st[1], st[2], st[3]}, have->dims[0], have->dims[1], a, ic, icb, oc2, ic2,
				    nb_oc, nb_ic, (int)wd->wino_format};
	int rc = 0;
#ifdef _OPENMP
#pragma omp parallel
#endif
	{
		float *tb = malloc((size_t)ic * 3 * a * ocb * sizeof *tb);
		if (!tb)
			rc = -1;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
		for (int ob = 0; ob < nb_oc; ob++) {
			if (!tb)
				continue;
			if (ocb == 16)  /* a constant trip count: vectorized */
				wino_block(&q, w, g, ob, 16, tb, out);
			else
				wino_block(&q, w, g, ob, ocb, tb, out);
		}
		free(tb);
	}
	return rc;
}

/* Makes a memory of the primitive's preferred descriptor `want` holding the
 * user data `data` laid out as `have` (reordering when they differ). */
static int pack_into(rt_ctx *ctx, const dnnl_memory_desc_t *have, const dnnl_memory_desc_t *want,
		     const void *data, void *buf, dnnl_memory_t *out, char *err, size_t errlen)
{
	int rc = RT_OK;
	dnnl_memory_t user = NULL;
	dnnl_primitive_t r = NULL;
	*out = NULL;
	DN(dnnl_memory_create(out, want, ctx->engine, buf ? buf : DNNL_MEMORY_ALLOCATE));
	if (dnnl_memory_desc_equal(have, want)) {
		void *h = NULL;
		DN(dnnl_memory_get_data_handle(*out, &h));
		memcpy(h, data, dnnl_memory_desc_get_size(want));
		return RT_OK;
	}
	if (want->format_kind == dnnl_format_kind_wino) {
		void *h = NULL;
		DN(dnnl_memory_get_data_handle(*out, &h));
		if (!wino_pack(have, want, data, h))
			return RT_OK;
	}
	DN(dnnl_memory_create(&user, have, ctx->engine, (void *)data));
	if ((rc = reorder_make(ctx, have, want, &r, err, errlen)))
		goto fail;
	dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, *out}};
	DN(dnnl_primitive_execute(r, ctx->stream, 2, args));
	DN(dnnl_stream_wait(ctx->stream));
	goto done;
fail:
	if (*out)
		dnnl_memory_destroy(*out);
	*out = NULL;
done:
	if (r)
		dnnl_primitive_destroy(r);
	if (user)
		dnnl_memory_destroy(user);
	return rc;
}

static int pack(rt_ctx *ctx, const dnnl_memory_desc_t *have, const dnnl_memory_desc_t *want,
		const void *data, dnnl_memory_t *out, char *err, size_t errlen)
{
	return pack_into(ctx, have, want, data, NULL, out, err, errlen);
}

/* pack() through the context's shared table when key is nonzero, into a
 * buffer of the context's pool. */
static int pack_shared(rt_ctx *ctx, uint64_t key, const dnnl_memory_desc_t *have,
		       const dnnl_memory_desc_t *want, const void *data, dnnl_memory_t *out,
		       char *err, size_t errlen)
{
	if (!key)
		return pack(ctx, have, want, data, out, err, errlen);
	for (int i = 0; i < ctx->nsw; i++)
		if (ctx->sw[i].key == key && dnnl_memory_desc_equal(&ctx->sw[i].md, want)) {
			ctx->sw[i].refs++;
			*out = ctx->sw[i].mem;
			return RT_OK;
		}
	if (!data)
		return seterr(err, errlen, RT_EAGAIN, "weights of key %llu not packed in this layout",
			      (unsigned long long)key);
	if (ctx->nsw == ctx->capsw) {
		int cap = ctx->capsw ? 2 * ctx->capsw : 8;
		struct shared_w *n = realloc(ctx->sw, (size_t)cap * sizeof *n);
		if (!n)
			return seterr(err, errlen, RT_ENOMEM, "out of memory");
		ctx->sw = n;
		ctx->capsw = cap;
	}
	size_t got = 0;
	void *buf = pool_get(ctx, dnnl_memory_desc_get_size(want), &got);
	if (!buf)
		return seterr(err, errlen, RT_ENOMEM, "cannot allocate %zu bytes of weights",
			      dnnl_memory_desc_get_size(want));
	int rc = pack_into(ctx, have, want, data, buf, out, err, errlen);
	if (rc) {
		pool_put(ctx, buf, got);
		return rc;
	}
	ctx->sw[ctx->nsw++] = (struct shared_w){key, *want, *out, buf, got, 1};
	return RT_OK;
}

/* The layout the context already packed key's weights in, for weights of
 * like's dims: a new object of that key tries it first (so one packed copy
 * serves every shape); NULL if none. */
static const dnnl_memory_desc_t *shared_md(rt_ctx *ctx, uint64_t key, const dnnl_memory_desc_t *like)
{
	for (int i = 0; key && i < ctx->nsw; i++) {
		const dnnl_memory_desc_t *m = &ctx->sw[i].md;
		if (ctx->sw[i].key != key || m->ndims != like->ndims)
			continue;
		int same = 1;
		for (int k = 0; k < m->ndims; k++)
			same &= m->dims[k] == like->dims[k];
		if (same)
			return m;
	}
	return NULL;
}

/* Undoes a prim_finish that failed or was given up. */
static void prim_reset(prim *p)
{
	prim_free(p);
	memset(p->mem, 0, sizeof p->mem);
	p->pd = NULL, p->prim = NULL;
}

/* Drops an object's reference to m when the table holds it (then m is not
 * the object's to destroy): returns 1. */
static int unshare(rt_ctx *ctx, dnnl_memory_t m)
{
	for (int i = 0; m && ctx && i < ctx->nsw; i++)
		if (ctx->sw[i].mem == m) {
			if (--ctx->sw[i].refs == 0) {
				dnnl_memory_destroy(m);
				pool_put(ctx, ctx->sw[i].buf, ctx->sw[i].bytes);
				ctx->sw[i] = ctx->sw[--ctx->nsw];
			}
			return 1;
		}
	return 0;
}

/* Binds the per-run pointers and executes.  ptr[i] is the data for mem[i]
 * (NULL where mem[i] holds its own data: weights, bias).  The scratchpad is
 * bound to the context's workspace here. */
static int prim_exec(prim *p, void *const *ptr, int nptr, char *err, size_t errlen)
{
	int rc = RT_OK, n = 0;
	dnnl_exec_arg_t args[MAX_ARGS];
	if (p->mem[ARG_SCRATCH])
		DN(dnnl_memory_set_data_handle(p->mem[ARG_SCRATCH], p->ctx->ws));
	for (int i = 0; i < MAX_ARGS; ++i) {
		if (!p->mem[i])
			continue;
		if (i < nptr && ptr[i])
			DN(dnnl_memory_set_data_handle(p->mem[i], ptr[i]));
		args[n].arg = p->arg_id[i];
		args[n].memory = p->mem[i];
		n++;
	}
	DN(dnnl_primitive_execute(p->prim, p->ctx->stream, n, args));
	DN(dnnl_stream_wait(p->ctx->stream));
	return RT_OK;
fail:
	return rc;
}

/* Runs a reorder from `from` (data fp) to `to` (data tp). */
static int reorder_exec(rt_ctx *ctx, dnnl_primitive_t r, dnnl_memory_t from, const void *fp,
			dnnl_memory_t to, void *tp, char *err, size_t errlen)
{
	int rc = RT_OK;
	DN(dnnl_memory_set_data_handle(from, (void *)fp));
	DN(dnnl_memory_set_data_handle(to, tp));
	dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
	DN(dnnl_primitive_execute(r, ctx->stream, 2, args));
	return RT_OK;
fail:
	return rc;
}

/* Fills ptr[ARG_POST0 + i] for binary post-ops and pre-fills dst for the
 * sum post-op (callers checked that post_src has what the chain needs). */
static void bind_posts(const prim *p, const void *const *post_src, void *dst, void **ptr)
{
	for (int i = 0; i < p->npost; ++i) {
		const void *s = post_src ? post_src[i] : NULL;
		if (p->role[i] == ROLE_BIN)
			ptr[ARG_POST0 + i] = (void *)s;
		else if (p->role[i] == ROLE_SUM && s != dst)
			memcpy(dst, s, p->dst_bytes);
	}
}

static dnnl_primitive_attr_t make_attr(dnnl_post_ops_t po, int *rc, char *err, size_t errlen)
{
	dnnl_primitive_attr_t attr = NULL;
	dnnl_status_t st = dnnl_primitive_attr_create(&attr);
	if (st == dnnl_success)
		st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
	if (st == dnnl_success)
		st = dnnl_primitive_attr_set_post_ops(attr, po);
	if (st != dnnl_success) {
		*rc = seterr(err, errlen, RT_EDNNL, "oneDNN: primitive attributes: %s",
			     dnnl_status2str(st));
		if (attr)
			dnnl_primitive_attr_destroy(attr);
		return NULL;
	}
	return attr;
}

static dnnl_data_type_t rt_dnnl_dt(enum rt_dtype t)
{
	return t == RT_BF16 ? dnnl_bf16 : t == RT_U8 ? dnnl_u8 : t == RT_S8 ? dnnl_s8 : dnnl_f32;
}

/* int8: per-channel output scales (nch of them along dst dim ch) and the
 * zero points, which oneDNN takes at run time (quant_mems holds them). */
static int quant_attr(dnnl_primitive_attr_t attr, const rt_quant *q, int64_t nch, int ch, char *err,
		      size_t errlen)
{
	int rc = RT_OK;
	const int32_t rtv = DNNL_RUNTIME_S32_VAL;
	const float rts = DNNL_RUNTIME_F32_VAL;
	if (q->dynamic)
		DN(dnnl_primitive_attr_set_output_scales(attr, 1, 1 << ch, &rts));
	else
		DN(dnnl_primitive_attr_set_output_scales(attr, nch, 1 << ch, q->scale));
	if (q->src_zp || q->dynamic)
		DN(dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_SRC, 1, 0, &rtv));
	if (q->dst_zp && q->dst != RT_F32)
		DN(dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_DST, 1, 0, &rtv));
fail:
	return rc;
}

static int quant_mems(prim *p, const rt_quant *q, char *err, size_t errlen)
{
	int rc = RT_OK;
	for (int k = 0; k < 2; k++) {
		const int32_t zp = k ? q->dst_zp : q->src_zp;
		if ((!zp && !(q->dynamic && !k)) || (k && q->dst == RT_F32))
			continue;
		dnnl_memory_desc_t md;
		int64_t one = 1;
		void *h = NULL;
		DN(md_dense(&md, 1, &one, NULL, dnnl_s32));
		DN(dnnl_memory_create(&p->mem[ARG_ZSRC + k], &md, p->ctx->engine, DNNL_MEMORY_ALLOCATE));
		DN(dnnl_memory_get_data_handle(p->mem[ARG_ZSRC + k], &h));
		memcpy(h, &zp, sizeof zp);
		p->arg_id[ARG_ZSRC + k] = DNNL_ARG_ATTR_ZERO_POINTS | (k ? DNNL_ARG_DST : DNNL_ARG_SRC);
	}
fail:
	return rc;
}

/* Without AVX-512 VNNI oneDNN multiplies u8 by s8 with vpmaddubsw, whose pairwise
 * 16-bit sums saturate (a dynamic linear came out 16% off on AVX2): int8 runs only
 * where they cannot (lower_dnnl.c's dn_int8 keeps generated code off it elsewhere). */
static int int8_check(char *err, size_t errlen)
{
	const unsigned vnni = (unsigned)dnnl_cpu_isa_avx512_core_vnni;
	if (((unsigned)dnnl_get_effective_cpu_isa() & vnni) != vnni)
		return seterr(err, errlen, RT_EUNSUP, "int8: oneDNN runs no AVX-512 VNNI kernels here, and its u8 x s8 "
			      "products saturate without them");
	return RT_OK;
}

static int quant_check(const rt_quant *q, enum rt_dtype src, int matmul, char *err, size_t errlen)
{
	if (q->dynamic && !matmul)
		return seterr(err, errlen, RT_EINVAL, "int8 dynamic: matrix products only");
	if ((src != RT_U8 && src != RT_S8) || (q->dst != RT_U8 && q->dst != RT_S8 && q->dst != RT_F32) || !q->scale)
		return seterr(err, errlen, RT_EINVAL, "int8: src must be u8/s8, dst u8/s8/f32, scales given");
	const int32_t tmin = src == RT_U8 ? 0 : -128, tmax = src == RT_U8 ? 255 : 127;
	if (q->dynamic && (q->dst != RT_F32 || q->qmin < tmin || q->qmax > tmax || q->qmin >= q->qmax ||
			   !(q->eps > 0) || !isfinite(q->eps)))
		return seterr(err, errlen, RT_EINVAL, "int8 dynamic: dst must be f32, [qmin, qmax] a range of the "
			      "src type, eps positive");
	return RT_OK;
}

/* Where a caller's layout differs from the primitive's: views of the
 * caller's src/dst (handles set at run), the reorders between them and the
 * primitive's, and where the primitive-side copies live in the workspace. */
typedef struct edges {
	dnnl_primitive_t r_in, r_out;        /* caller src -> prim src, prim dst -> caller dst */
	dnnl_memory_t u_src, u_dst;
	size_t off_src, off_dst;
} edges;

static void edges_free(edges *e)
{
	if (e->r_in)
		dnnl_primitive_destroy(e->r_in);
	if (e->r_out)
		dnnl_primitive_destroy(e->r_out);
	if (e->u_src)
		dnnl_memory_destroy(e->u_src);
	if (e->u_dst)
		dnnl_memory_destroy(e->u_dst);
}

/* ------------------------------------------------------------------ */
/* convolution                                                         */

/* A transposed conv run as one GEMM and a gather (conv_gemm_ok): col =
 * w^T x, [oc x taps, pixels of x], then each output row sums the col rows
 * of the (tap, input row) pairs that land on it, in tap order. */
typedef struct deconv_gemm {
	rt_conv_desc d;
	float *w;       /* [ic, oc, kh, kw], as PyTorch has it */
	float *bias;    /* [oc], or NULL */
	int src_cl;
	size_t col_bytes;
} deconv_gemm;

typedef struct cwino cwino;

/* Post-ops a conv or matmul leaves to the runtime (conv_tail_at,
 * mm_tail_at): op[0..n) applied by tail_apply over the count floats of
 * the result after the primitive; with a residual among them (op[res])
 * the primitive writes the context's workspace at off instead, the
 * residual read from post_src[res_at]. */
typedef struct post_tail {
	int n, res, res_at;
	rt_post op[RT_MAX_POST];
	int64_t count;
	size_t off;
} post_tail;

struct rt_conv {
	prim p;
	deconv_gemm *dg; /* the GEMM path instead of oneDNN's primitive */
	cwino *cw;       /* coil's Winograd instead of oneDNN's primitive (conv_cwino_ok) */
	struct cgrp *cg; /* coil's grouped conv, 2 or 4 channels a group or multiples of 8 (conv_cgrp_ok) */
	rt_matmul *mm;   /* a 1x1 conv of one pixel: the gemv (conv_gemv_ok) */
	struct conv_col *col; /* a strided 1-d conv as a 1x1 conv over its windows (conv_col_ok) */
	size_t weight_bytes;
	size_t ws_bytes;       /* workspace this conv needs (scratchpad included) */
	/* via: NCHW caller layout, NHWC primitive; reorders around it.  Binary
	 * operands that are dst-shaped get reordered too (bin_full), others are
	 * the same in both layouts. */
	int via;
	int src_nhwc, dst_nhwc;              /* via: that side is NHWC already */
	edges e;                             /* via: the caller's side (NCHW, or NHWC for Winograd) */
	dnnl_primitive_t r_res;              /* dst-shaped operand, caller layout -> prim */
	size_t off_bin[RT_MAX_POST];
	int bin_full[RT_MAX_POST];
	int wino;                            /* Winograd or a dilated depthwise conv: blocked primitive, via */
	/* A Winograd conv run chunk->n images at a time (conv_chunk): nchunk
	 * calls of chunk, images img_src / img_dst bytes apart, a residual
	 * operand's img_dst apart as well. */
	struct rt_conv *chunk;
	int64_t nchunk, nb;
	size_t img_src, img_dst;
	unsigned char img_post[RT_MAX_POST]; /* post i's operand is dst-shaped (RT_ADD_SAME) */
	post_tail tail; /* the desc's post-ops from a SiLU on (conv_tail_at) */
};

static int conv_check(const rt_conv_desc *d, char *err, size_t errlen)
{
#define BAD(...) return seterr(err, errlen, RT_EINVAL, "rt_conv: " __VA_ARGS__)
	if (d->q && quant_check(d->q, d->dtype, 0, err, errlen) != RT_OK)
		return RT_EINVAL;
	if (d->q && int8_check(err, errlen) != RT_OK)
		return RT_EUNSUP;
	if (!d->q && d->dtype != RT_F32 && d->dtype != RT_BF16)
		return seterr(err, errlen, RT_EUNSUP, "rt_conv: dtype %d not supported",
			      (int)d->dtype);
	if (d->q && d->transposed)
		return seterr(err, errlen, RT_EUNSUP, "rt_conv: no int8 transposed convolution");
	if (d->nsp < 1 || d->nsp > 3)
		BAD("nsp %d not in 1..3", d->nsp);
	if (d->path != RT_PATH_AUTO && d->path != RT_PATH_DIRECT && d->path != RT_PATH_NHWC)
		BAD("path %d unknown", (int)d->path);
	if (d->npost < 0 || d->npost > RT_MAX_POST)
		BAD("npost %d out of range 0..%d", d->npost, RT_MAX_POST);
	int64_t g = d->groups ? d->groups : 1;
	if (d->n < 1 || d->ic < 1 || d->oc < 1 || g < 1)
		BAD("n, ic, oc, groups must be positive");
	if (d->ic % g || d->oc % g)
		BAD("ic %lld and oc %lld must be multiples of groups %lld", (long long)d->ic,
		    (long long)d->oc, (long long)g);
	for (int i = 0; i < d->nsp; ++i) {
		int64_t s = d->stride[i] ? d->stride[i] : 1, dl = d->dil[i] ? d->dil[i] : 1;
		if (d->in[i] < 1 || d->k[i] < 1 || s < 1 || dl < 1 || d->pad_l[i] < 0 ||
		    d->pad_r[i] < 0)
			BAD("spatial dim %d: bad in/k/stride/dil/pad", i);
		int64_t kr = dl * (d->k[i] - 1) + 1, want;
		if (d->transposed) {
			int64_t op = d->out_pad[i];
			if (op < 0 || (op >= s && op >= dl))
				BAD("spatial dim %d: output padding %lld must be < stride or "
				    "dilation", i, (long long)op);
			if (op > d->pad_r[i] + s - 1)
				BAD("spatial dim %d: output padding too large", i);
			want = (d->in[i] - 1) * s - d->pad_l[i] - d->pad_r[i] + kr + op;
		} else {
			int64_t span = d->in[i] + d->pad_l[i] + d->pad_r[i] - kr;
			if (span < 0)
				BAD("spatial dim %d: kernel extent %lld exceeds padded input "
				    "%lld", i, (long long)kr,
				    (long long)(d->in[i] + d->pad_l[i] + d->pad_r[i]));
			want = span / s + 1;
		}
		if (want < 1 || d->out[i] != want)
			BAD("spatial dim %d: out is %lld, expected %lld", i, (long long)d->out[i],
			    (long long)want);
	}
	return RT_OK;
#undef BAD
}

/* Whether every binary operand of the chain is one an NHWC primitive takes
 * (see nhwc_bcast_ok) and, for RT_PATH_AUTO, whether running an NCHW conv
 * through an NHWC primitive pays.  Measured with oneDNN 2.6 on AVX-512, one
 * thread: NCHW convs run a GEMM kernel (~60-70% of brgconv's speed on 3x3s,
 * on par on dense 1x1s) whose fused post-ops other than a lone sum are 3-30x
 * slower still, while an NCHW<->NHWC reorder moves ~25 GB/s. */
static int conv_via_nhwc(const rt_conv_desc *d)
{
	const int nd = d->nsp + 2;
	int64_t ddims[5] = {d->n, d->oc, d->out[0], d->out[1], d->out[2]}, dims[5];
	int only_sum = 1;
	for (int i = 0; i < d->npost; ++i) {
		const rt_post *q = &d->post[i];
		if (q->kind != RT_ADD_SAME)
			only_sum = 0;
		if (q->kind < RT_ADD_BCAST || q->kind > RT_DIV_BCAST || q->rank < 1 ||
		    q->rank > nd)
			continue; /* (bad ranks are refused later) */
		bin_dims(q, nd, dims);
		if (!nhwc_bcast_ok(dims, ddims, nd))
			return 0;
	}
	if (d->path == RT_PATH_NHWC || d->src_nhwc || d->dst_nhwc)
		return 1;
	if (d->path == RT_PATH_DIRECT)
		return 0;
	/* AUTO: GEMM wins only on plain (or summed) dense 1x1s. */
	int one = !d->transposed && (d->groups ? d->groups : 1) == 1;
	for (int i = 0; i < d->nsp; ++i)
		one &= d->k[i] == 1;
	return !(one && (d->npost == 0 || (d->npost == 1 && only_sum)));
}

/* Whether to try oneDNN's Winograd kernels (F(2x2,3x3) / F(4x4,3x3) on
 * AVX-512): dense 3x3 stride-1 2-d convs without binary post-ops.  Measured
 * with oneDNN 2.6, one thread, resnet's shapes: 1.3-2.5x brgconv's speed,
 * including the reorders into and out of the blocked layout they need.
 * Their rounding differs from a direct conv's (relative error ~1e-6 on
 * resnet50's output).  Not with RT_PATH_DIRECT; RT_WINOGRAD=0 in the
 * environment turns them off.
 * Nor with 32 output channels or fewer over 56x56 outputs or more: the
 * transformed tiles (4x the activations) leave the L2 there, and GEMMs of so
 * few columns do not cover that traffic.  Measured on an Intel Xeon (AMX,
 * 2 MB L2), one thread, NHWC, the reorders included, direct / Winograd:
 * 0.27 (8->8 at 224), 0.55 (32->16 at 112), 0.75 (inception_v3's 32->32 at
 * 147), 0.88-0.97 (32, 48, 64, 128 -> 32 at 56), 1.0 (256->32 at 56), while
 * the same convs at 28x28 and below keep Winograd ahead (64->32 1.29, 128->32
 * 1.12, 96->32 1.29) and so do 48 and more channels out at 56 (32->48 1.33,
 * 64->64 1.31); two threads agree. */
static int conv_wino_ok(const rt_conv_desc *d)
{
	const char *e = getenv("RT_WINOGRAD");
	if ((e && !strcmp(e, "0")) || d->no_wino || d->path == RT_PATH_DIRECT || d->nsp != 2 || d->transposed ||
	    (d->groups ? d->groups : 1) != 1)
		return 0;
	if (d->oc <= 32 && d->out[0] * d->out[1] >= 56 * 56)
		return 0;
	for (int i = 0; i < 2; ++i)
		if (d->k[i] != 3 || (d->stride[i] ? d->stride[i] : 1) != 1 || (d->dil[i] ? d->dil[i] : 1) != 1)
			return 0;
	for (int i = 0; i < d->npost; ++i)
		if (d->post[i].kind >= RT_ADD_BCAST)
			return 0;
	return 1;
}

/* An RT_* switch in the environment: "0" off, "1" on, else dflt */
static int env_switch(const char *env, int dflt)
{
	const char *e = getenv(env);
	return e && !strcmp(e, "0") ? 0 : e && !strcmp(e, "1") ? 1 : dflt;
}

/* Whether oneDNN's ISA on this machine is below AVX-512 */
static int below_avx512(void)
{
	const unsigned avx512 = (unsigned)dnnl_cpu_isa_avx512_core;
	return ((unsigned)dnnl_get_effective_cpu_isa() & avx512) != avx512;
}

/* Convs that run in the layout oneDNN picks (format `any`, blocked here)
 * rather than the caller's NHWC, the caller's side reordered (via, as
 * Winograd; where the layouts agree the reorders are plain copies).  f32,
 * 2-d, no binary post-op.
 * - A dilated depthwise conv: oneDNN 2.6's NHWC depthwise kernel (brdgmm)
 *   takes no dilation and falls back to gemm, ~250x slower, but jit_dw
 *   does.  lraspp's 960-channel 5x5 dilation-2 convs at 14x14: 1.66 ms in
 *   generated loops, ~0.15 ms so.  (The lowering keeps static 1-d ones in
 *   generated loops: ConvTasNet's ran 2x slower here.)  RT_DW_BLOCKED=0
 *   keeps them off.
 * - A grouped (not depthwise) conv with at most 32 channels a group whose
 *   NHWC rows are a multiple of 128 floats and at least 56 kB (ic x width):
 *   oneDNN 2.6's NHWC kernel runs there 2-8x slower than its blocked one
 *   (one thread: resnext101_64x4d's g64 1024x14x14 1.08 against 0.49 ms,
 *   512x56x56 stride 2 5.68 against 0.74, 512x28x28 2.59 against 0.79;
 *   resnext50's g32 256x56x56 stride 2 1.36 against 0.29), while narrower
 *   rows (resnext50's 256x28x28 0.32 against 0.40, 128x56x56 0.72 against
 *   0.67), other widths (regnet's 144, 432, 960) and 64 channels a group
 *   (2048x7x7 g32) run as fast or faster NHWC, and there the reorders in
 *   and out would only add.  Only on RT_PATH_AUTO (a tuned artifact may pick NHWC
 *   or NCHW); RT_GRP_BLOCKED=0 keeps them NHWC.
 * - Below AVX-512 (an AVX2 EPYC, oneDNN 2.6's jit:avx2) those measurements do
 *   not hold: with the input in cache (batch 1) the NHWC kernel is as fast
 *   or faster (resnext50's 256x56x56 stride 2 1.23 against 1.47 ms with the
 *   reorders; regnet_y_800mf's 64 g4 at 112x112 0.98 against 1.20), but with
 *   the input coming from memory (batch 8) it reads it 1.5-2x slower than
 *   the blocked one.  There a grouped conv with a batch, channels a group
 *   multiples of 8 and 56 or more columns in, or 8 channels a group, runs
 *   one image at a time (conv_split; image: this is that image's object),
 *   each reordered into the blocked layout in the workspace (cache-sized)
 *   and back: one thread, batch 8, regnet_y_800mf's 64 g4 at 112x112 22.6
 *   -> 13.6 ms, its 144 g9 at 56x56 14.6 -> 8.0, regnet_x_1_6gf's 168 g7
 *   at 56x56 19.3 -> 9.9, resnext50's 256 g32 at 28x28 11.9 -> 8.2 (the
 *   whole batch blocked at once: 13.6, 10.2, 11.7, 9.1); narrower inputs
 *   with 16 or more channels a group gained nothing or lost (512 g32 at
 *   28x28 stride 2 5.2 -> 5.8).  The same holds for dense 3x3 convs of
 *   stride 2 (resnet's: 128 at 56x56 35.2 -> 23.7 ms, 128 -> 256 at 28x28
 *   15.2 -> 11.7, 256 -> 512 at 14x14 14.2 -> 12.5; at batch 1 within
 *   0.95-1.13), not for 1x1 ones (256 -> 512 at 56x56 stride 2 19.1 ->
 *   23.7) nor stride 1.  RT_GRP_IMAGES=0 / 1 turns this rule off / on on
 *   any ISA.  Returns 0 (the caller's layout), 2 (the blocked one) or 3
 *   (blocked, one image at a time). */
static int conv_blocked_ok(const rt_conv_desc *d, int image)
{
	const char *e = getenv("RT_DW_BLOCKED"), *e2 = getenv("RT_GRP_BLOCKED");
	const int64_t g = d->groups ? d->groups : 1;
	const int images = env_switch("RT_GRP_IMAGES", below_avx512()); /* the rule below AVX-512 */
	int dilated = 0;
	if (d->dtype != RT_F32 || d->q || d->transposed || d->nsp != 2)
		return 0;
	int strided = 0, wide = 1; /* a stride over a 3x3 or wider kernel */
	for (int i = 0; i < 2; ++i) {
		dilated |= (d->dil[i] ? d->dil[i] : 1) > 1;
		strided |= (d->stride[i] ? d->stride[i] : 1) > 1;
		wide &= d->k[i] >= 3;
	}
	for (int i = 0; i < d->npost; ++i)
		if (d->post[i].kind >= RT_ADD_BCAST)
			return 0;
	if (g == 1) /* below AVX-512: a dense strided conv of a batch (not 1x1) */
		return images && strided && wide && !dilated && d->path == RT_PATH_AUTO &&
				       d->ic % 8 == 0 && d->oc % 8 == 0
			       ? image ? 2 : d->n >= 2 ? 3 : 0
			       : 0;
	if (d->ic == g && d->oc == g)
		return dilated && !(e && !strcmp(e, "0")) ? 2 : 0;
	if ((e2 && !strcmp(e2, "0")) || d->path != RT_PATH_AUTO)
		return 0;
	const int64_t icg = d->ic / g, ocg = d->oc / g;
	if (images)
		return icg % 8 || ocg % 8 || !(d->in[1] >= 56 || icg == 8) ? 0 : image ? 2 : d->n >= 2 ? 3 : 0;
	return d->ic % 128 == 0 && d->ic * d->in[1] >= 14336 && icg <= 32 && ocg <= 32 ? 2 : 0;
}

/* An f32 depthwise conv prefers oneDNN's jit_dw kernel to its first pick
 * (brdgmm_dw, NHWC): 20-40% faster where the data leave L1 (32x112x112 s1:
 * 0.075 against 0.124 ms; 672x14x14 5x5: 0.067 against 0.093), the same on
 * small ones.  No binary post-op.  RT_DW_JIT=0 in the environment keeps
 * oneDNN's pick. */
static int conv_dw_jit(const rt_conv_desc *d)
{
	const char *e = getenv("RT_DW_JIT");
	const int64_t g = d->groups ? d->groups : 1;
	if ((e && !strcmp(e, "0")) || d->dtype != RT_F32 || d->q || d->transposed || g == 1 || d->ic != g ||
	    d->oc != g)
		return 0;
	for (int i = 0; i < d->npost; ++i)
		if (d->post[i].kind >= RT_ADD_SAME)
			return 0;
	return 1;
}

/* Whether a transposed conv runs as a GEMM and a gather (deconv_gemm)
 * instead of oneDNN 2.6's deconvolution: f32, one group, 1 or 2 spatial
 * dims, no post-op (coil fuses none into a transposed conv), an NCHW dst
 * (into NHWC the gather measured no faster than oneDNN).  oneDNN runs
 * it as a backward-data conv at 30-60 GFLOP/s on hdemucs' and U-Net shapes
 * (ic48 oc16 128x173 k8x1 s4x1: 9.0 ms NCHW), the GEMM near oneDNN's sgemm
 * rate (4.9 ms).  RT_DECONV_GEMM=0 in the environment keeps oneDNN's. */
static int conv_gemm_ok(const rt_conv_desc *d)
{
	const char *e = getenv("RT_DECONV_GEMM");
	return d->transposed && !(e && !strcmp(e, "0")) && !d->q && d->dtype == RT_F32 && (d->groups ? d->groups : 1) == 1 &&
	       d->npost == 0 && (d->nsp == 1 || d->nsp == 2) && !d->channels_last && !d->dst_nhwc;
}

static int deconv_gemm_create(rt_ctx *ctx, rt_conv *c, const rt_conv_desc *d, const void *weight, const void *bias,
			      char *err, size_t errlen)
{
	deconv_gemm *g = calloc(1, sizeof *g);
	if (!g)
		return seterr(err, errlen, RT_ENOMEM, "rt_conv_create: out of memory");
	g->d = *d;
	g->src_cl = d->src_nhwc;
	const int64_t kh = d->nsp == 2 ? d->k[0] : 1, kw = d->k[d->nsp - 1], K = kh * kw;
	const int64_t ih = d->nsp == 2 ? d->in[0] : 1, iw = d->in[d->nsp - 1];
	g->w = malloc((size_t)(d->ic * K * d->oc) * sizeof(float) + 64);
	g->bias = d->has_bias ? malloc((size_t)d->oc * sizeof(float)) : NULL;
	g->col_bytes = (size_t)(ih * iw * K * d->oc) * sizeof(float);
	int rc = !g->w || (d->has_bias && !g->bias) ? seterr(err, errlen, RT_ENOMEM, "rt_conv_create: out of memory")
						     : ctx_reserve(ctx, g->col_bytes, err, errlen);
	if (rc) {
		free(g->w), free(g->bias), free(g);
		return rc;
	}
	/* PyTorch's [ic, oc, kh, kw] as it is: col's rows are (oc, tap) planes over the pixels */
	memcpy(g->w, weight, (size_t)(d->ic * K * d->oc) * sizeof(float));
	if (g->bias)
		memcpy(g->bias, bias, (size_t)d->oc * sizeof(float));
	c->dg = g;
	c->weight_bytes = (size_t)(d->ic * K * d->oc) * sizeof(float);
	c->ws_bytes = round64(g->col_bytes);
	return RT_OK;
}

static int deconv_gemm_run(rt_conv *c, const float *src, float *dst, char *err, size_t errlen)
{
	const deconv_gemm *g = c->dg;
	const rt_conv_desc *d = &g->d;
	const int two = d->nsp == 2, sp = d->nsp - 1;
	const int64_t kh = two ? d->k[0] : 1, kw = d->k[sp], K = kh * kw, OC = d->oc, IC = d->ic, KO = K * OC;
	const int64_t ih = two ? d->in[0] : 1, iw = d->in[sp], oh = two ? d->out[0] : 1, ow = d->out[sp];
	const int64_t sh = two && d->stride[0] ? d->stride[0] : 1, sw = d->stride[sp] ? d->stride[sp] : 1;
	const int64_t dh = two && d->dil[0] ? d->dil[0] : 1, dw = d->dil[sp] ? d->dil[sp] : 1;
	const int64_t ph = two ? d->pad_l[0] : 0, pw = d->pad_l[sp], P = ih * iw, OP = oh * ow;
	float *col = c->p.ctx->ws;
	const int nt = c->p.ctx->nthreads > 0 ? c->p.ctx->nthreads : 1;
	(void)nt;
	for (int64_t n = 0; n < d->n; n++) {
		const float *x = src + n * IC * P;
		float *y = dst + n * OC * OP;
		/* col [OC*K, P] = w^T x: plane (o, tap) over the input pixels (x [IC, P], or
		 * [P, IC] when NHWC) */
		dnnl_status_t st = g->src_cl ? dnnl_sgemm('T', 'T', KO, P, IC, 1.0f, g->w, KO, x, IC, 0.0f, col, P)
					     : dnnl_sgemm('T', 'N', KO, P, IC, 1.0f, g->w, KO, x, P, 0.0f, col, P);
		if (st != dnnl_success)
			return seterr(err, errlen, RT_EDNNL, "rt_conv_run: sgemm failed (%d)", (int)st);
		/* each output row of channel o: its bias, then its taps in order, each adding
		 * the tap's input row at ox = ix*sw - pw + tx*dw (rows in parallel where
		 * this unit is built with OpenMP: an artifact) */
#ifdef _OPENMP
#pragma omp parallel for collapse(2) num_threads(nt) if (nt > 1 && OP * OC > 32768) schedule(static)
#endif
		for (int64_t o = 0; o < OC; o++)
			for (int64_t oy = 0; oy < oh; oy++) {
				float *r = y + (o * oh + oy) * ow;
				const float b = g->bias ? g->bias[o] : 0.0f;
				for (int64_t ox = 0; ox < ow; ox++)
					r[ox] = b;
				for (int64_t ty = 0; ty < kh; ty++) {
					const int64_t ny = oy + ph - ty * dh;
					if (ny < 0 || ny % sh || ny / sh >= ih)
						continue;
					for (int64_t tx = 0; tx < kw; tx++) {
						const int64_t off = tx * dw - pw;
						if (ow - 1 - off < 0)
							continue;
						const int64_t ix0 = off >= 0 ? 0 : (-off + sw - 1) / sw;
						int64_t ix1 = (ow - 1 - off) / sw + 1;
						if (ix1 > iw)
							ix1 = iw;
						const float *cv = col + (o * K + ty * kw + tx) * P + (ny / sh) * iw;
						for (int64_t ix = ix0; ix < ix1; ix++)
							r[ix * sw + off] += cv[ix];
					}
				}
			}
	}
	return RT_OK;
}

/* ------------------------------------------------------------------ */
/* coil's Winograd F(4x4,3x3) for NHWC f32 convs                       */

/* oneDNN 2.6 has Winograd kernels on AVX-512 only; below it a dense 3x3
 * stride-1 conv runs its direct jit:avx2 kernel (66-90 GFLOP/s on an AVX2
 * EPYC, one thread), which is most of resnet18's and densenet's time.  This
 * runs them as Winograd F(4x4,3x3) (Lavin & Gray): each 6x6 input tile d
 * becomes V = B^T d B, the 36 points are 36 products V_p [tiles x ic] x U_p
 * [ic x oc] with U = G g G^T packed once, and each output tile is A^T M A,
 * with the bias and the post-ops applied on the way out.  Tiles go in
 * blocks whose V and M stay in cache (~2 MB), each block's three steps split
 * over the threads.  Measured there, one thread, relu fused: resnet18's
 * 64x56x56 3x3 2.6-3.5 ms -> 1.5, 128x28x28 3.3 -> 1.2, 256x14x14 3.4 ->
 * 1.7, 512x7x7 4.9 -> 3.4; densenet's 128->32 at 56x56 3.0 -> 1.8 (the
 * products run at ~90 GFLOP/s, the machine's FMA rate).  Rounding as
 * oneDNN's own F(4x4,3x3): relative errors ~1e-5.
 *
 * Grouped convs run the same way, each point's product block-diagonal: an
 * oc block of U (bw wide, within one group) times that group's columns of
 * V.  With few channels a group the transforms weigh more against the
 * products, and U is 4x the weights' bytes: against oneDNN's jit:avx2 (one
 * thread, paired) 448 g8 (56 a group) at 28x28 5.6 -> 3.0 ms, 120 g5 at 56x56
 * 2.2 -> 1.4, 336 g14 at 28x28 1.9 -> 1.4, 8 x 320 g20 at 14x14 (16 a
 * group) 3.3 -> 2.8, but 8 x 512 g32 at 14x14 5.3 -> 5.8 and, in models at
 * batch 1, 16 a group at 16 tiles or 49 slower than oneDNN: by default
 * grouped convs take it with 64 tiles or more, and 24 channels a group or at
 * most 768 channels in and out (regnet_x_3_2gf at batch 8 773 -> 596 ms,
 * regnet_y_800mf 237 -> 221).
 *
 * Taken for f32, 2-d, 3x3, stride 1, no dilation, NHWC on both sides,
 * channels multiples of 8 (a group's too, 16 or more in), post-ops among
 * the eltwise kinds below and a residual sum; by default only where oneDNN
 * has no Winograd (below AVX-512) and this unit is built with FMA (an
 * x86-64-v3 or wider target).  RT_CWINO=0 (or RT_WINOGRAD=0) in the
 * environment turns it off, RT_CWINO=1 takes it wherever it applies (tests). */
typedef float cw_v8 __attribute__((vector_size(32)));
typedef float cw_v8u __attribute__((vector_size(32), aligned(4)));
typedef int cw_v8i __attribute__((vector_size(32)));
#ifdef __FMA__
#define CW_FMA(a, b, c) ((cw_v8)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#else
#define CW_FMA(a, b, c) ((a) * (b) + (c))
#endif
#define CW_LD(p) ((cw_v8)(*(const cw_v8u *)(p)))
#define CW_ST(p, v) (*(cw_v8u *)(p) = (v))
#define CW_SPLAT(s) ((cw_v8){(s), (s), (s), (s), (s), (s), (s), (s)})
/* m ? a : b per lane, m a comparison's result */
#define CW_SEL(m, a, b) ((cw_v8)(((m) & (cw_v8i)(a)) | (~(m) & (cw_v8i)(b))))
/* the same as one instruction (CW_BLEND), and min / max that give b where
 * either is NaN (vminps / vmaxps) */
#ifdef __AVX2__
#define CW_BLEND(m, a, b) ((cw_v8)_mm256_blendv_ps((__m256)(b), (__m256)(a), (__m256)(m)))
#define CW_MIN(a, b) ((cw_v8)_mm256_min_ps((__m256)(a), (__m256)(b)))
#define CW_MAX(a, b) ((cw_v8)_mm256_max_ps((__m256)(a), (__m256)(b)))
#else
#define CW_BLEND(m, a, b) CW_SEL(m, a, b)
#define CW_MIN(a, b) CW_SEL((a) < (b), a, b)
#define CW_MAX(a, b) CW_SEL((a) > (b), a, b)
#endif
#define CW_WS_BYTES ((int64_t)2 << 20) /* V and M of a block of tiles */

struct cwino {
	int64_t n, ic, oc, ih, iw, oh, ow, pt, pl, th, tw, tiles, tb;
	int64_t groups, icg, bw; /* icg = ic / groups; bw: oc block width, 16, or 8 where a group's oc is not a multiple of 16 */
	dnnl_memory_t u_mem; /* U: per point p, oc in blocks of bw (the last of 16 may be 8), each [icg][bw] */
	const float *u;
	float *bias; /* [oc], or NULL */
	int npost, res;  /* res: the RT_ADD_SAME post-op, or -1 */
	rt_post post[RT_MAX_POST];
	size_t ws_bytes;
};

/* Whether a kernel of coil's own (switched by env, "0" off, "1" wherever it
 * applies) is taken: by default where oneDNN's ISA is below AVX-512 and this
 * unit is built with AVX2 and FMA. */
static int cw_wanted(const char *env)
{
#if defined(__FMA__) && defined(__AVX2__)
	return env_switch(env, below_avx512());
#else
	return env_switch(env, 0);
#endif
}

/* f32 NHWC on both sides, oneDNN's first implementation asked for, and post-ops among those cw_posts applies */
static int cw_conv_ok(const rt_conv_desc *d)
{
	if (d->dtype != RT_F32 || d->q || d->transposed || d->nsp != 2 || d->impl ||
	    !(d->channels_last || (d->src_nhwc && d->dst_nhwc)))
		return 0;
	int nsum = 0;
	for (int i = 0; i < d->npost; ++i)
		switch (d->post[i].kind) {
		case RT_RELU: case RT_LEAKY_RELU: case RT_HARDSWISH: case RT_HARDSIGMOID: case RT_LINEAR:
			break;
		case RT_CLAMP:
			if (!(d->post[i].a <= d->post[i].b))
				return 0; /* (oneDNN's path says why) */
			break;
		case RT_ADD_SAME:
			if (nsum++)
				return 0;
			break;
		default:
			return 0;
		}
	return 1;
}

static int conv_cwino_ok(const rt_conv_desc *d)
{
	const char *e = getenv("RT_WINOGRAD");
	const char *f = getenv("RT_CWINO");
	const int64_t g = d->groups ? d->groups : 1, tiles = d->n * ((d->out[0] + 3) / 4) * ((d->out[1] + 3) / 4);
	if ((e && !strcmp(e, "0")) || !cw_wanted("RT_CWINO") || !cw_conv_ok(d) || d->no_wino || d->ic % 8 || d->oc % 8 ||
	    (g > 1 && (d->ic / g % 8 || d->ic / g < 16 || d->oc / g % 8)))
		return 0;
	/* grouped, by default: 64 tiles or more, and 24 channels a group or few channels in all (see above) */
	if (g > 1 && !(f && !strcmp(f, "1")) && (tiles < 64 || (d->ic / g < 24 && d->ic + d->oc > 768)))
		return 0;
	for (int i = 0; i < 2; ++i)
		if (d->k[i] != 3 || (d->stride[i] ? d->stride[i] : 1) != 1 || (d->dil[i] ? d->dil[i] : 1) != 1)
			return 0;
	return 1;
}

/* U = G g G^T for each (o, i) kernel g of PyTorch's [oc, ic / groups, 3, 3] */
static void cwino_pack(const cwino *cw, const float *w, float *u)
{
	static const double G[6][3] = {{1. / 4, 0, 0},         {-1. / 6, -1. / 6, -1. / 6}, {-1. / 6, 1. / 6, -1. / 6},
				       {1. / 24, 1. / 12, 1. / 6}, {1. / 24, -1. / 12, 1. / 6}, {0, 0, 1}};
	const int64_t C = cw->icg, K = cw->oc, bw = cw->bw;
	for (int64_t o = 0; o < K; o++) {
		const int64_t k0 = o / bw * bw, wd = K - k0 >= bw ? bw : 8, kk = o - k0;
		for (int64_t i = 0; i < C; i++) {
			const float *g = w + (o * C + i) * 9;
			double t[6][3];
			for (int a = 0; a < 6; a++)
				for (int b = 0; b < 3; b++)
					t[a][b] = G[a][0] * g[b] + G[a][1] * g[3 + b] + G[a][2] * g[6 + b];
			for (int a = 0; a < 6; a++)
				for (int b = 0; b < 6; b++)
					u[(a * 6 + b) * C * K + k0 * C + i * wd + kk] =
						(float)(t[a][0] * G[b][0] + t[a][1] * G[b][1] + t[a][2] * G[b][2]);
		}
	}
}

/* B^T x on six vectors (one row or column of a tile) */
#define CW_BT(x0, x1, x2, x3, x4, x5, o)                                                                               \
	do {                                                                                                           \
		const cw_v8 f4_ = CW_SPLAT(4.f), f5_ = CW_SPLAT(5.f), f2_ = CW_SPLAT(2.f);                               \
		const cw_v8 a_ = (x4) - (x2) * f4_, b_ = (x3) - (x1) * f4_, c_ = (x4) - (x2), d_ = ((x3) - (x1)) * f2_;  \
		(o)[0] = CW_FMA(x0, f4_, x4) - (x2) * f5_;                                                             \
		(o)[1] = a_ + b_;                                                                                      \
		(o)[2] = a_ - b_;                                                                                      \
		(o)[3] = c_ + d_;                                                                                      \
		(o)[4] = c_ - d_;                                                                                      \
		(o)[5] = CW_FMA(x1, f4_, x5) - (x3) * f5_;                                                             \
	} while (0)

/* A^T m on six vectors -> four */
#define CW_AT(m0, m1, m2, m3, m4, m5, o)                                                                               \
	do {                                                                                                           \
		const cw_v8 p_ = (m1) + (m2), q_ = (m1) - (m2), r_ = (m3) + (m4), s_ = (m3) - (m4);                      \
		(o)[0] = (m0) + p_ + r_;                                                                               \
		(o)[1] = CW_FMA(s_, CW_SPLAT(2.f), q_);                                                                \
		(o)[2] = CW_FMA(r_, CW_SPLAT(4.f), p_);                                                                \
		(o)[3] = CW_FMA(s_, CW_SPLAT(8.f), q_) + (m5);                                                         \
	} while (0)

/* V[p][ti][:] for tile t (6x6 inputs at (4 ty - pt, 4 tx - pl), zeros outside) */
static void cwino_in(const cwino *cw, const float *x, int64_t t, float *V, int64_t ti)
{
	const int64_t C = cw->ic, per = cw->th * cw->tw, n = t / per, r = t % per;
	const int64_t y0 = r / cw->tw * 4 - cw->pt, x0 = r % cw->tw * 4 - cw->pl, pstride = cw->tb * C;
	const float *xb = x + n * cw->ih * cw->iw * C;
	int ok[6][6];
	for (int i = 0; i < 6; i++)
		for (int j = 0; j < 6; j++)
			ok[i][j] = y0 + i >= 0 && y0 + i < cw->ih && x0 + j >= 0 && x0 + j < cw->iw;
	for (int64_t c = 0; c < C; c += 8) {
		cw_v8 d[6][6], t1[6][6], o[6];
		for (int i = 0; i < 6; i++)
			for (int j = 0; j < 6; j++)
				d[i][j] = ok[i][j] ? CW_LD(xb + ((y0 + i) * cw->iw + x0 + j) * C + c) : CW_SPLAT(0.f);
		for (int j = 0; j < 6; j++) {
			CW_BT(d[0][j], d[1][j], d[2][j], d[3][j], d[4][j], d[5][j], o);
			for (int i = 0; i < 6; i++)
				t1[i][j] = o[i];
		}
		float *vp = V + ti * C + c;
		for (int i = 0; i < 6; i++) {
			CW_BT(t1[i][0], t1[i][1], t1[i][2], t1[i][3], t1[i][4], t1[i][5], o);
			for (int j = 0; j < 6; j++)
				CW_ST(vp + (i * 6 + j) * pstride, o[j]);
		}
	}
}

/* The post-ops on v, in order; res: the residual at v's place */
static inline __attribute__((always_inline)) void cw_posts(const rt_post *post, int npost, cw_v8 *vp,
							   const float *res)
{
	cw_v8 v = *vp;
	const cw_v8 z = CW_SPLAT(0.f);
	for (int i = 0; i < npost; i++) {
		const rt_post *q = &post[i];
		const cw_v8 a = CW_SPLAT(q->a), b = CW_SPLAT(q->b);
		switch (q->kind) {
		case RT_ADD_SAME: v += CW_LD(res); continue;
		case RT_RELU: v = CW_SEL(v > z, v, z); break;
		case RT_LEAKY_RELU: v = CW_SEL(v > z, v, v * a); break;
		case RT_CLAMP: v = CW_SEL(v < a, a, v), v = CW_SEL(v > b, b, v); break;
		case RT_LINEAR: v = CW_FMA(v, a, b); break;
		case RT_HARDSWISH:
		case RT_HARDSIGMOID: {
			cw_v8 h = CW_FMA(v, CW_SPLAT(1.f / 6), CW_SPLAT(.5f));
			h = CW_SEL(h < z, z, h), h = CW_SEL(h > CW_SPLAT(1.f), CW_SPLAT(1.f), h);
			v = q->kind == RT_HARDSWISH ? v * h : h;
			break;
		}
		default: break;
		}
		if (q->scale != 0 && q->scale != 1)
			v *= CW_SPLAT(q->scale);
	}
	*vp = v;
}

/* y's tile t from M[p][ti][:]: A^T M A + bias, the post-ops */
static void cwino_out(const cwino *cw, const float *M, int64_t t, int64_t ti, float *y, const float *res)
{
	const int64_t K = cw->oc, per = cw->th * cw->tw, n = t / per, r = t % per;
	const int64_t oy0 = r / cw->tw * 4, ox0 = r % cw->tw * 4, pstride = cw->tb * K;
	const int64_t base = n * cw->oh * cw->ow * K;
	const int hy = cw->oh - oy0 < 4 ? (int)(cw->oh - oy0) : 4, hx = cw->ow - ox0 < 4 ? (int)(cw->ow - ox0) : 4;
	for (int64_t k = 0; k < K; k += 8) {
		const float *mp = M + ti * K + k;
		cw_v8 t1[4][6], o[4];
		for (int j = 0; j < 6; j++) {
			CW_AT(CW_LD(mp + j * pstride), CW_LD(mp + (6 + j) * pstride), CW_LD(mp + (12 + j) * pstride),
			      CW_LD(mp + (18 + j) * pstride), CW_LD(mp + (24 + j) * pstride), CW_LD(mp + (30 + j) * pstride), o);
			for (int i = 0; i < 4; i++)
				t1[i][j] = o[i];
		}
		const cw_v8 bv = cw->bias ? CW_LD(cw->bias + k) : CW_SPLAT(0.f);
		for (int i = 0; i < hy; i++) {
			CW_AT(t1[i][0], t1[i][1], t1[i][2], t1[i][3], t1[i][4], t1[i][5], o);
			for (int j = 0; j < hx; j++) {
				const int64_t at = base + ((oy0 + i) * cw->ow + ox0 + j) * K + k;
				cw_v8 v = o[j] + bv;
				cw_posts(cw->post, cw->npost, &v, res ? res + at : NULL);
				CW_ST(y + at, v);
			}
		}
	}
}

/* m[R rows][W] = v[R rows][C] x u[C][W] (rows C apart, m's K apart): R x W/8
 * accumulators in named registers (an array of them the compiler kept in
 * memory at some R), u's row loaded once for the R rows */
#define CW_ROW(r)                                                                                                      \
	if (R > r) {                                                                                                   \
		const float s_ = v[r * vs + c];                                                                         \
		const cw_v8 a_ = CW_SPLAT(s_);                                                                         \
		lo##r = CW_FMA(a_, ul, lo##r);                                                                         \
		if (W == 16)                                                                                           \
			hi##r = CW_FMA(a_, uh, hi##r);                                                                 \
	}
#define CW_STROW(r)                                                                                                    \
	if (R > r) {                                                                                                   \
		CW_ST(m + r * K, lo##r);                                                                               \
		if (W == 16)                                                                                           \
			CW_ST(m + r * K + 8, hi##r);                                                                   \
	}
static inline __attribute__((always_inline)) void cwino_kern(int R, int W, int64_t C, const float *v, int64_t vs,
							     const float *u, float *m, int64_t K)
{
	cw_v8 lo0 = CW_SPLAT(0.f), lo1 = lo0, lo2 = lo0, lo3 = lo0, lo4 = lo0, lo5 = lo0;
	cw_v8 hi0 = lo0, hi1 = lo0, hi2 = lo0, hi3 = lo0, hi4 = lo0, hi5 = lo0;
	for (int64_t c = 0; c < C; c++) {
		const cw_v8 ul = CW_LD(u + c * W), uh = W == 16 ? CW_LD(u + c * W + 8) : ul;
		CW_ROW(0) CW_ROW(1) CW_ROW(2) CW_ROW(3) CW_ROW(4) CW_ROW(5)
	}
	CW_STROW(0) CW_STROW(1) CW_STROW(2) CW_STROW(3) CW_STROW(4) CW_STROW(5)
}
#undef CW_ROW
#undef CW_STROW

static void cwino_gemm(int R, int W, int64_t C, const float *v, int64_t vs, const float *u, float *m, int64_t K)
{
#define CW_K(r)                                                                                                        \
	case r:                                                                                                        \
		if (W == 16)                                                                                           \
			cwino_kern(r, 16, C, v, vs, u, m, K);                                                          \
		else                                                                                                   \
			cwino_kern(r, 8, C, v, vs, u, m, K);                                                           \
		break
	switch (R) {
		CW_K(1); CW_K(2); CW_K(3); CW_K(4); CW_K(5); CW_K(6);
	default: break;
	}
#undef CW_K
}

static void cwino_run(const cwino *cw, const float *x, float *y, const float *res, float *ws, int nt)
{
	const int64_t C = cw->ic, K = cw->oc, T = cw->tiles, TB = cw->tb, bw = cw->bw, nkb = (K + bw - 1) / bw;
	const int64_t icg = cw->icg, ocg = K / cw->groups;
	float *V = ws, *M = ws + 36 * TB * C;
	(void)nt;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
	for (int64_t t0 = 0; t0 < T; t0 += TB) {
		const int64_t tb = T - t0 < TB ? T - t0 : TB, nrb = (tb + 5) / 6;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
		for (int64_t i = 0; i < tb; i++)
			cwino_in(cw, x, t0 + i, V, i);
#ifdef _OPENMP
#pragma omp for schedule(static) collapse(2)
#endif
		for (int64_t p = 0; p < 36; p++)
			for (int64_t kb = 0; kb < nkb; kb++) {
				/* (a block lies in one group: bw divides the group's oc) */
				const int64_t k0 = kb * bw, W = K - k0 >= bw ? bw : 8, c0 = k0 / ocg * icg;
				const float *u = cw->u + p * icg * K + k0 * icg;
				for (int64_t rb = 0; rb < nrb; rb++) {
					const int64_t r0 = rb * 6, R = tb - r0 < 6 ? tb - r0 : 6;
					cwino_gemm((int)R, (int)W, icg, V + p * TB * C + r0 * C + c0, C, u,
						   M + p * TB * K + r0 * K + k0, K);
				}
			}
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
		for (int64_t i = 0; i < tb; i++)
			cwino_out(cw, M, t0 + i, i, y, res);
	}
}

static void cwino_free(rt_ctx *ctx, cwino *cw)
{
	if (!cw)
		return;
	if (cw->u_mem && !unshare(ctx, cw->u_mem))
		dnnl_memory_destroy(cw->u_mem);
	free(cw->bias);
	free(cw);
}

/* U shared by weight_key across shapes (it depends on the weights alone) */
static int cwino_create(rt_ctx *ctx, rt_conv *c, const rt_conv_desc *d, const void *weight, const void *bias,
			char *err, size_t errlen)
{
	int rc = RT_OK;
	float *u = NULL;
	cwino *cw = calloc(1, sizeof *cw);
	if (!cw)
		return seterr(err, errlen, RT_ENOMEM, "rt_conv_create: out of memory");
	cw->n = d->n, cw->ic = d->ic, cw->oc = d->oc, cw->ih = d->in[0], cw->iw = d->in[1];
	cw->oh = d->out[0], cw->ow = d->out[1], cw->pt = d->pad_l[0], cw->pl = d->pad_l[1];
	cw->th = (cw->oh + 3) / 4, cw->tw = (cw->ow + 3) / 4, cw->tiles = cw->n * cw->th * cw->tw;
	cw->groups = d->groups > 1 ? d->groups : 1, cw->icg = d->ic / cw->groups;
	cw->bw = d->oc / cw->groups % 16 ? 8 : 16;
	int64_t tb = CW_WS_BYTES / (36 * 4 * (cw->ic + cw->oc)) / 6 * 6;
	cw->tb = tb < 12 ? 12 : tb;
	if (cw->tb > cw->tiles)
		cw->tb = cw->tiles;
	cw->ws_bytes = round64((size_t)(36 * cw->tb * (cw->ic + cw->oc)) * sizeof(float));
	cw->npost = d->npost, cw->res = -1;
	for (int i = 0; i < d->npost; ++i) {
		cw->post[i] = d->post[i];
		if (d->post[i].kind == RT_ADD_SAME)
			cw->res = i;
	}
	const int64_t nu = 36 * cw->icg * d->oc;
	dnnl_memory_desc_t umd;
	DN(dnnl_memory_desc_init_by_tag(&umd, 1, (dnnl_dims_t){nu}, dnnl_f32, dnnl_a));
	if (d->has_bias && !(cw->bias = malloc((size_t)d->oc * sizeof(float))))
		FAIL(RT_ENOMEM, "rt_conv_create: out of memory");
	if (cw->bias)
		memcpy(cw->bias, bias, (size_t)d->oc * sizeof(float));
	if (weight) {
		if (!(u = malloc((size_t)nu * sizeof(float))))
			FAIL(RT_ENOMEM, "rt_conv_create: out of memory");
		cwino_pack(cw, weight, u);
	}
	if ((rc = pack_shared(ctx, d->weight_key, &umd, &umd, u, &cw->u_mem, err, errlen)))
		goto fail;
	void *h = NULL;
	DN(dnnl_memory_get_data_handle(cw->u_mem, &h));
	cw->u = h;
	if ((rc = ctx_reserve(ctx, cw->ws_bytes, err, errlen)))
		goto fail;
	free(u);
	c->cw = cw;
	c->p.npost = d->npost; /* (rt_conv_run checks the residual is given) */
	if (cw->res >= 0)
		c->p.role[cw->res] = ROLE_SUM;
	c->weight_bytes = (size_t)nu * sizeof(float);
	c->ws_bytes = cw->ws_bytes;
	return RT_OK;
fail:
	free(u);
	cwino_free(ctx, cw);
	return rc;
}

/* ------------------------------------------------------------------ */
/* coil's grouped conv: 2 or 4 channels a group, or multiples of 8    */

/* oneDNN 2.6's AVX2 kernels take groups of 8 channels or more; groups of
 * 4 (resnext50_32x4d's first stage, every grouped conv of resnext101_64x4d)
 * fell back to its gemm kernel, 3 GFLOP/s: resnext50's three 128-channel
 * g32 3x3 convs at 56x56 took 8-9 ms each, a fifth of the model at one
 * thread.  Here each 8 output channels (2 or 4 groups) are one vector: per
 * tap, the input pixel's 8 channels are loaded once and each input channel
 * of a group spread over its group's lanes by an in-lane shuffle, times
 * the packed weights [oc/8][tap][ci][8]; bias and post-ops as cw_posts.
 * Any kernel size, stride, padding and dilation; f32 NHWC on both sides,
 * ic = oc.  By default where oneDNN's ISA is below AVX-512 (cw_wanted);
 * RT_CGRP=0 / 1 turns it off / on. */
typedef struct cgrp {
	rt_conv_desc d;
	float *w;    /* [oc/8][kh*kw][cpg][8]; wide: per panel [kh*kw][icg][its width] */
	float *bias; /* [oc], or NULL */
	int res;     /* the RT_ADD_SAME post-op, or -1 */
	int wide;    /* conv_cgrp_wide */
	int64_t icg, npan, *pan; /* wide: panel p's first oc pan[p], its width pan[p+1] - pan[p] (24, 16 or 8) */
} cgrp;

#define CG8_MAX_ICG 1024 /* cg8_zero's floats */

/* A group's channels multiples of 8, in and out (cg8_run).  RT_CGRP8=1
 * takes it wherever it applies (tests).  By default (cw_wanted: below
 * AVX-512) only where it beat oneDNN 2.6's jit:avx2 on an AVX2 EPYC (Zen 3,
 * one thread, interleaved in one process, three rounds): 16 channels a
 * group in and out, 3x3: stride 2 over 56 or more columns, one or two
 * images: regnet_y_800mf's 64 g4 at 112x112 0.88-0.94 -> 0.73-0.81 ms at
 * one image (1.16-1.25 ms in the model -> 0.95-1.07), 1.12-1.68x at two,
 * its 144 g9 at 56x56 1.04-1.17x at one, 1.27-1.33x at two.  It lost
 * elsewhere: the same stride 2 over 28 or 14 columns (320 g20, 784 g49,
 * 512 g32: 0.71-0.97x; the gathered border tiles weigh more there), 32
 * channels a group (1024 g32 0.6-0.9x), 8 a group (resnext50's 256 g32,
 * 0.7-0.95x), batches of 8 (64 g4 0.81-0.97x against one image at a time
 * blocked, conv_blocked_ok).
 * And stride 1 over 14x14 or fewer outputs with a batch: in regnet_y_800mf
 * at batch 8 (profiled, two rounds each) its 784 g49 at 7x7 3.1-3.5 -> 2.3-2.4
 * ms, seven 320 g20 at 14x14 23.6-25.5 -> 21.2-22.3 (against coil's
 * Winograd), resnext50's four 512 g32 at 14x14 20.4 -> 19.4; at one image
 * it came out even or behind (regnet's seven 2.2-2.5 ms both ways,
 * resnext50's four 2.6-2.8 -> 2.7-3.5), and over 28x28 behind Winograd
 * (144 g9 9.2 -> 9.8-11.1).  24 a group (regnet_x/y_1_6gf, y_3_2gf) runs
 * in 24-wide panels (12 accumulators, 4 pixels a tile; as two 16+8 panels
 * it had lost 0.77-0.99x): in regnet_x_1_6gf (profiled in the model,
 * forced on against off, bias-normalized) its 72 g3 at 112x112 stride 2
 * 1.44x at one image, 1.05x at two, 168 g7 at 56x56 stride 2 1.12x at one;
 * its 912 g38 at 7x7 stride 1 1.2-1.4x at batch 8; lost at 14x14 stride 1
 * with a batch (408 g17 0.80-0.88x), at 28x28 and 56x56 stride 1 (coil's
 * Winograd, 0.65-0.80x), about even at 28 or 14 columns stride 2.  The
 * whole model with these rules against RT_CGRP8=0 (interleaved, 5-9
 * rounds), at one image and at 8: regnet_x_1_6gf 0.87-1.02x (two runs)
 * and 1.02x, regnet_y_1_6gf 1.09x and 0.98x, regnet_y_3_2gf 1.03x and
 * 1.02x. */
static int conv_cgrp_wide(const rt_conv_desc *d)
{
	const int64_t g = d->groups ? d->groups : 1;
	return g > 1 && d->ic != g && d->ic / g % 8 == 0 && d->oc / g % 8 == 0 && d->ic / g <= CG8_MAX_ICG;
}

static int conv_cgrp_ok(const rt_conv_desc *d)
{
	const int64_t g = d->groups ? d->groups : 1;
	if (g < 2 || !cw_conv_ok(d) || d->oc % 8)
		return 0;
	if (conv_cgrp_wide(d)) {
		const char *e = getenv("RT_CGRP8");
		if (e && !strcmp(e, "1"))
			return 1;
		const int64_t cg = d->ic / g;
		if (!cw_wanted("RT_CGRP8") || (cg != 16 && cg != 24) || d->oc != d->ic || d->k[0] != 3 || d->k[1] != 3 ||
		    d->dil[0] > 1 || d->dil[1] > 1 || d->stride[0] != d->stride[1])
			return 0;
		return d->stride[0] == 2 ? d->n <= 2 && d->in[1] >= 56
				         : d->stride[0] <= 1 && d->n >= 2 && d->out[0] * d->out[1] <= (cg == 16 ? 196 : 49);
	}
	return cw_wanted("RT_CGRP") && d->ic == d->oc && (d->ic / g == 2 || d->ic / g == 4);
}

#ifdef __clang__
#define CW_DUP4(v, i) __builtin_shufflevector(v, v, i, i, i, i, (i) + 4, (i) + 4, (i) + 4, (i) + 4)
#define CW_DUP2(v, i) __builtin_shufflevector(v, v, i, i, (i) + 2, (i) + 2, (i) + 4, (i) + 4, (i) + 6, (i) + 6)
#else
#define CW_DUP4(v, i) __builtin_shuffle(v, (cw_v8i){i, i, i, i, (i) + 4, (i) + 4, (i) + 4, (i) + 4})
#define CW_DUP2(v, i) __builtin_shuffle(v, (cw_v8i){i, i, (i) + 2, (i) + 2, (i) + 4, (i) + 4, (i) + 6, (i) + 6})
#endif

/* Output pixel (oy, ox)'s 8-channel block into acc (and acc2): every tap
 * checked against the borders */
#define CG_TAP(acc, acc2, xv, wt)                                                                                      \
	do {                                                                                                           \
		if (cpg == 4) {                                                                                        \
			acc = CW_FMA(CW_DUP4(xv, 0), CW_LD(wt), acc);                                                  \
			acc2 = CW_FMA(CW_DUP4(xv, 1), CW_LD((wt) + 8), acc2);                                          \
			acc = CW_FMA(CW_DUP4(xv, 2), CW_LD((wt) + 16), acc);                                           \
			acc2 = CW_FMA(CW_DUP4(xv, 3), CW_LD((wt) + 24), acc2);                                         \
		} else {                                                                                               \
			acc = CW_FMA(CW_DUP2(xv, 0), CW_LD(wt), acc);                                                  \
			acc2 = CW_FMA(CW_DUP2(xv, 1), CW_LD((wt) + 8), acc2);                                          \
		}                                                                                                      \
	} while (0)

/* One output row's 8-channel block b: the pixels whose taps all read inside
 * the row four at a time (eight accumulator chains, each weight vector
 * loaded once for the four), the others one by one with the borders checked */
static inline __attribute__((always_inline)) void cgrp_row(const cgrp *q, int cpg, const float *x, float *y,
							   const float *res, int64_t n, int64_t oy, int64_t b)
{
	const rt_conv_desc *d = &q->d;
	const int64_t C = d->oc, IH = d->in[0], IW = d->in[1], OW = d->out[1], KH = d->k[0], KW = d->k[1];
	const int64_t sh = d->stride[0] ? d->stride[0] : 1, sw = d->stride[1] ? d->stride[1] : 1;
	const int64_t dh = d->dil[0] ? d->dil[0] : 1, dw = d->dil[1] ? d->dil[1] : 1, pw = d->pad_l[1];
	const float *xb = x + n * IH * IW * C + b * 8, *wb = q->w + b * KH * KW * cpg * 8;
	const cw_v8 bv = q->bias ? CW_LD(q->bias + b * 8) : CW_SPLAT(0.f), z = CW_SPLAT(0.f);
	const int64_t row = (n * d->out[0] + oy) * OW;
	/* interior: ox*sw - pw >= 0 and ox*sw - pw + (KW-1)*dw <= IW-1 */
	int64_t lo = (pw + sw - 1) / sw, hi = IW - 1 + pw - (KW - 1) * dw;
	hi = hi < 0 ? 0 : hi / sw + 1;
	if (hi > OW)
		hi = OW;
	if (lo > hi)
		lo = hi;
	for (int64_t ox = 0; ox < OW;) {
		cw_v8 v[4];
		int np = 1;
		if (ox >= lo && ox + 4 <= hi) {
			cw_v8 a0 = bv, a1 = bv, a2 = bv, a3 = bv, b0 = z, b1 = z, b2 = z, b3 = z;
			for (int64_t ky = 0; ky < KH; ky++) {
				const int64_t iy = oy * sh - d->pad_l[0] + ky * dh;
				if (iy < 0 || iy >= IH)
					continue;
				const float *xr = xb + (iy * IW + ox * sw - pw) * C;
				for (int64_t kx = 0; kx < KW; kx++) {
					const float *xp = xr + kx * dw * C, *wt = wb + (ky * KW + kx) * cpg * 8;
					const cw_v8 x0 = CW_LD(xp), x1 = CW_LD(xp + sw * C), x2 = CW_LD(xp + 2 * sw * C),
						    x3 = CW_LD(xp + 3 * sw * C);
					CG_TAP(a0, b0, x0, wt);
					CG_TAP(a1, b1, x1, wt);
					CG_TAP(a2, b2, x2, wt);
					CG_TAP(a3, b3, x3, wt);
				}
			}
			v[0] = a0 + b0, v[1] = a1 + b1, v[2] = a2 + b2, v[3] = a3 + b3;
			np = 4;
		} else {
			cw_v8 a0 = bv, b0 = z;
			for (int64_t ky = 0; ky < KH; ky++) {
				const int64_t iy = oy * sh - d->pad_l[0] + ky * dh;
				if (iy < 0 || iy >= IH)
					continue;
				for (int64_t kx = 0; kx < KW; kx++) {
					const int64_t ix = ox * sw - pw + kx * dw;
					if (ix < 0 || ix >= IW)
						continue;
					const cw_v8 x0 = CW_LD(xb + (iy * IW + ix) * C);
					CG_TAP(a0, b0, x0, wb + (ky * KW + kx) * cpg * 8);
				}
			}
			v[0] = a0 + b0;
		}
		for (int k = 0; k < np; k++) {
			const int64_t at = (row + ox + k) * C + b * 8;
			cw_posts(d->post, d->npost, &v[k], q->res >= 0 ? res + at : NULL);
			CW_ST(y + at, v[k]);
		}
		ox += np;
	}
}
#undef CG_TAP

/* Wide groups (channels a group multiples of 8): a panel of 16 output
 * channels (8 where a group's oc is not a multiple of 16) of one group,
 * times T output pixels at a time (6 for 16 channels, 12 for 8: twelve
 * accumulators), per tap and input channel of the group one broadcast a
 * pixel and one load a weight vector for the T.  An image's output pixels
 * are tiled as one run of OH x OW, so small images waste few lanes; a tile
 * within one row whose taps all read inside it addresses its pixels by the
 * stride, any other (borders, across rows, the last) by a pointer a pixel
 * and tap, a zero row where the tap reads padding, storing its first cnt. */
static const float cg8_zero[CG8_MAX_ICG] __attribute__((aligned(64)));

static inline __attribute__((always_inline)) void cg8_tile(const cgrp *q, const float *xi, float *y, const float *res,
							   int64_t p, int64_t n, int64_t s, int cnt, int W2, int T,
							   int gather)
{
	const rt_conv_desc *d = &q->d;
	const int64_t C = d->ic, OC = d->oc, IH = d->in[0], IW = d->in[1], OW = d->out[1], KH = d->k[0],
		      KW = d->k[1], icg = q->icg, oc0 = q->pan[p];
	const int64_t sh = d->stride[0] ? d->stride[0] : 1, sw = d->stride[1] ? d->stride[1] : 1;
	const int64_t dh = d->dil[0] ? d->dil[0] : 1, dw = d->dil[1] ? d->dil[1] : 1;
	const int64_t ph = d->pad_l[0], pw = d->pad_l[1];
	const float *xg = xi + oc0 / (OC / d->groups) * icg, *wp = q->w + oc0 * KH * KW * icg;
	const cw_v8 z = CW_SPLAT(0.f), b0 = q->bias ? CW_LD(q->bias + oc0) : z,
		    b1 = q->bias && W2 >= 2 ? CW_LD(q->bias + oc0 + 8) : z,
		    b2 = q->bias && W2 == 3 ? CW_LD(q->bias + oc0 + 16) : z;
	cw_v8 acc[12][3];
#pragma GCC unroll 12
	for (int t = 0; t < T; t++)
		acc[t][0] = b0, acc[t][1] = b1, acc[t][2] = b2;
	const int64_t oy = s / OW, ox = s % OW;
	int64_t iy0[12], ix0[12]; /* gather: pixel t's first tap's input row and column */
	if (gather)
#pragma GCC unroll 12
		for (int t = 0, py = oy, px = ox; t < T; t++) {
			iy0[t] = t < cnt ? py * sh - ph : -((int64_t)1 << 40), ix0[t] = px * sw - pw;
			if (++px == OW)
				px = 0, py++;
		}
	for (int64_t ky = 0; ky < KH; ky++) {
		const int64_t iy = oy * sh - ph + ky * dh;
		if (!gather && (iy < 0 || iy >= IH))
			continue;
		for (int64_t kx = 0; kx < KW; kx++) {
			const float *wt = wp + (ky * KW + kx) * icg * 8 * W2;
			const float *xq[12];
			const float *x0 = gather ? xg : xg + (iy * IW + ox * sw - pw + kx * dw) * C;
			const int64_t xs = sw * C;
			if (gather)
#pragma GCC unroll 12
				for (int t = 0; t < T; t++) {
					const int64_t jy = iy0[t] + ky * dh, jx = ix0[t] + kx * dw;
					xq[t] = jy >= 0 && jy < IH && jx >= 0 && jx < IW ? xg + (jy * IW + jx) * C : cg8_zero;
				}
			/* the next tile's lines for this tap (a group's slice of a pixel is its own
			 * lines, which no prefetcher sees coming across the pixels' stride) */
#pragma GCC unroll 12
			for (int t = 0; t < T; t++)
				__builtin_prefetch((const void *)((uintptr_t)(gather ? xq[t] : x0 + t * xs) +
								  (uintptr_t)(T * xs) * sizeof(float)));
			for (int64_t i = 0; i < icg; i++) {
				const cw_v8 w0 = CW_LD(wt + i * 8 * W2), w1 = W2 >= 2 ? CW_LD(wt + i * 8 * W2 + 8) : z,
					    w2 = W2 == 3 ? CW_LD(wt + i * 8 * W2 + 16) : z;
#pragma GCC unroll 12
				for (int t = 0; t < T; t++) {
					const cw_v8 xv = CW_SPLAT(gather ? xq[t][i] : x0[t * xs + i]);
					acc[t][0] = CW_FMA(xv, w0, acc[t][0]);
					if (W2 >= 2)
						acc[t][1] = CW_FMA(xv, w1, acc[t][1]);
					if (W2 == 3)
						acc[t][2] = CW_FMA(xv, w2, acc[t][2]);
				}
			}
		}
	}
	const int64_t base = (n * d->out[0] * OW + s) * OC + oc0;
#pragma GCC unroll 12
	for (int t = 0; t < T; t++) /* the next tile's output lines */
		__builtin_prefetch((const void *)((uintptr_t)(y + base + (T + t) * OC)), 1);
	for (int t = 0; t < (gather ? cnt : T); t++)
		for (int h = 0; h < W2; h++) {
			const int64_t at = base + t * OC + h * 8;
			cw_v8 v = acc[t][h];
			cw_posts(d->post, d->npost, &v, q->res >= 0 ? res + at : NULL);
			CW_ST(y + at, v);
		}
}

/* Panel p over output rows [r0, r1) of image n, T pixels a tile */
static inline __attribute__((always_inline)) void cg8_rows(const cgrp *q, const float *x, float *y, const float *res,
							   int64_t p, int64_t n, int64_t r0, int64_t r1, int W2, int T)
{
	const rt_conv_desc *d = &q->d;
	const int64_t IW = d->in[1], OW = d->out[1], KW = d->k[1];
	const int64_t sw = d->stride[1] ? d->stride[1] : 1, dw = d->dil[1] ? d->dil[1] : 1, pw = d->pad_l[1];
	const float *xi = x + n * d->in[0] * IW * d->ic;
	/* the columns whose taps all read inside the row: ox*sw - pw >= 0, ox*sw - pw + (KW-1)*dw <= IW-1 */
	const int64_t lo = (pw + sw - 1) / sw, hi0 = IW - 1 + pw - (KW - 1) * dw, hi = hi0 < 0 ? 0 : hi0 / sw + 1;
	for (int64_t s = r0 * OW, e = r1 * OW; s < e; s += T) {
		const int64_t ox = s % OW;
		const int cnt = (int)(e - s < T ? e - s : T);
		if (cnt == T && ox >= lo && ox + T <= hi)
			cg8_tile(q, xi, y, res, p, n, s, T, W2, T, 0);
		else
			cg8_tile(q, xi, y, res, p, n, s, cnt, W2, T, 1);
	}
}

/* Blocks of output rows whose input rows fit ~128 kB, each block's panels
 * in turn (each thread a run of (block, panel)): a panel's weights stay in
 * L1 over its block's tiles.  Panels of different groups read disjoint
 * lines of the input, so it is read from memory once whatever the order;
 * the prefetch in cg8_tile is what keeps it coming. */
static void cg8_run(const cgrp *q, const float *x, float *y, const float *res, int nt)
{
	const rt_conv_desc *d = &q->d;
	const int64_t OH = d->out[0], sh = d->stride[0] ? d->stride[0] : 1;
	const int64_t row = sh * d->in[1] * d->ic * (int64_t)sizeof(float);
	int64_t R = ((int64_t)128 << 10) / (row > 0 ? row : 1);
	R = R < 1 ? 1 : R > OH ? OH : R;
	const int64_t bpi = (OH + R - 1) / R, nblk = d->n * bpi;
	(void)nt;
#ifdef _OPENMP
#pragma omp parallel for collapse(2) schedule(static) num_threads(nt) if (nt > 1)
#endif
	for (int64_t b = 0; b < nblk; b++)
		for (int64_t p = 0; p < q->npan; p++) {
			const int64_t n = b / bpi, r0 = b % bpi * R, r1 = r0 + R < OH ? r0 + R : OH;
			const int64_t wd = q->pan[p + 1] - q->pan[p];
			if (wd == 24)
				cg8_rows(q, x, y, res, p, n, r0, r1, 3, 4);
			else if (wd == 16)
				cg8_rows(q, x, y, res, p, n, r0, r1, 2, 6);
			else
				cg8_rows(q, x, y, res, p, n, r0, r1, 1, 12);
		}
}

static void cgrp_run(const cgrp *q, const float *x, float *y, const float *res, int nt)
{
	const rt_conv_desc *d = &q->d;
	if (q->wide) {
		cg8_run(q, x, y, res, nt);
		return;
	}
	const int64_t rows = d->n * d->out[0], nb = d->oc / 8;
	const int cpg = (int)(d->ic / d->groups);
	(void)nt;
#ifdef _OPENMP
#pragma omp parallel for collapse(2) schedule(static) num_threads(nt) if (nt > 1)
#endif
	for (int64_t r = 0; r < rows; r++)
		for (int64_t b = 0; b < nb; b++) {
			if (cpg == 4)
				cgrp_row(q, 4, x, y, res, r / d->out[0], r % d->out[0], b);
			else
				cgrp_row(q, 2, x, y, res, r / d->out[0], r % d->out[0], b);
		}
}

static void cgrp_free(cgrp *q)
{
	if (q)
		free(q->w), free(q->bias), free(q->pan), free(q);
}

static int cgrp_create(rt_conv *c, const rt_conv_desc *d, const float *weight, const float *bias, char *err,
		       size_t errlen)
{
	const int64_t C = d->oc, cpg = d->ic / d->groups, taps = d->k[0] * d->k[1];
	cgrp *q = calloc(1, sizeof *q);
	if (q) {
		q->w = malloc((size_t)(C * taps * cpg) * sizeof(float));
		q->bias = d->has_bias ? malloc((size_t)C * sizeof(float)) : NULL;
	}
	if (!q || !q->w || (d->has_bias && !q->bias)) {
		cgrp_free(q);
		return seterr(err, errlen, RT_ENOMEM, "rt_conv_create: out of memory");
	}
	q->d = *d;
	q->res = -1;
	if ((q->wide = conv_cgrp_wide(d))) {
		/* a group's oc in panels of 16, the last 8 where it is not a multiple
		 * of 16; of 24 where it is a multiple of 24 and not of 16 (regnet_x) */
		const int64_t ocg = C / d->groups, pw = ocg % 16 && ocg % 24 == 0 ? 24 : 16, per = (ocg + pw - 1) / pw;
		q->icg = cpg, q->npan = d->groups * per;
		if (!(q->pan = malloc((size_t)(q->npan + 1) * sizeof *q->pan))) {
			cgrp_free(q);
			return seterr(err, errlen, RT_ENOMEM, "rt_conv_create: out of memory");
		}
		for (int64_t p = 0; p < q->npan; p++)
			q->pan[p] = p / per * ocg + p % per * pw;
		q->pan[q->npan] = C;
		/* PyTorch's [oc][icg][kh][kw] -> per panel [tap][icg][width], the panel at its first oc x taps x icg */
		for (int64_t p = 0; p < q->npan; p++) {
			const int64_t o0 = q->pan[p], wd = q->pan[p + 1] - o0;
			for (int64_t k = o0; k < o0 + wd; k++)
				for (int64_t t = 0; t < taps; t++)
					for (int64_t i = 0; i < cpg; i++)
						q->w[o0 * taps * cpg + (t * cpg + i) * wd + k - o0] =
							weight[(k * cpg + i) * taps + t];
		}
	} else
		/* PyTorch's [oc][cpg][kh][kw] -> [oc/8][tap][ci][8] */
		for (int64_t k = 0; k < C; k++)
			for (int64_t t = 0; t < taps; t++)
				for (int64_t i = 0; i < cpg; i++)
					q->w[((k / 8 * taps + t) * cpg + i) * 8 + k % 8] = weight[(k * cpg + i) * taps + t];
	if (q->bias)
		memcpy(q->bias, bias, (size_t)C * sizeof(float));
	c->p.npost = d->npost;
	for (int i = 0; i < d->npost; ++i)
		if (d->post[i].kind == RT_ADD_SAME)
			q->res = i, c->p.role[i] = ROLE_SUM;
	c->cg = q;
	c->weight_bytes = (size_t)(C * taps * cpg) * sizeof(float);
	return RT_OK;
}

static int conv_create(rt_ctx *ctx, const rt_conv_desc *d, const void *weight, const void *bias, rt_conv **out,
		       int image, char *err, size_t errlen);

/* Kernel taps that only ever read padding (a 3x3 kernel over an image one
 * row high, the last layers of a U-Net's frequency axis): per spatial dim
 * the taps [t0, t1) some output reads a real input with; when that is fewer
 * than k, the conv runs with those taps alone and the padding shrunk to
 * match (the same sums less terms that were zero).  t gets the trimmed
 * desc, *wt the trimmed weights (malloc'd); 1 when trimmed, 0 when not (or
 * when the trimmed desc would need a negative padding), -1 out of memory. */
static int conv_trim(const rt_conv_desc *d, rt_conv_desc *t, const void *weight, void **wt)
{
	int64_t t0[3] = {0}, t1[3] = {0}, any = 0;
	if (d->transposed || d->nsp < 1 || d->nsp > 3)
		return 0;
	*t = *d;
	for (int i = 0; i < d->nsp; ++i) {
		const int64_t s = d->stride[i] ? d->stride[i] : 1, dl = d->dil[i] ? d->dil[i] : 1;
		t0[i] = d->k[i], t1[i] = 0;
		for (int64_t k = 0; k < d->k[i]; ++k) {
			/* some output o in [0, out) with 0 <= o*s - pad_l + k*dl < in */
			const int64_t base = k * dl - d->pad_l[i];
			const int64_t olo = base >= 0 ? 0 : (-base + s - 1) / s, ohi = (d->in[i] - 1 - base) / s;
			if (d->in[i] - 1 - base >= 0 && olo <= ohi && olo < d->out[i])
				t0[i] = k < t0[i] ? k : t0[i], t1[i] = k + 1;
		}
		if (t1[i] <= t0[i] || t0[i] * dl > d->pad_l[i])
			return 0;
		const int64_t k2 = t1[i] - t0[i], pl = d->pad_l[i] - t0[i] * dl;
		const int64_t need = (d->out[i] - 1) * s + dl * (k2 - 1) + 1, pr = need - d->in[i] - pl;
		t->k[i] = k2, t->pad_l[i] = pl, t->pad_r[i] = pr > 0 ? pr : 0;
		if ((d->in[i] + pl + t->pad_r[i] - dl * (k2 - 1) - 1) / s + 1 != d->out[i])
			return 0;
		any |= k2 < d->k[i];
	}
	if (!any)
		return 0;
	const size_t es = d->q ? 1 : d->dtype == RT_BF16 && !d->wei_f32 ? 2 : 4;
	const int64_t g = d->groups ? d->groups : 1, rows = d->oc * (d->ic / g);
	int64_t kk[3] = {1, 1, 1}, nk[3] = {1, 1, 1};
	for (int i = 0; i < d->nsp; ++i)
		kk[i] = d->k[i], nk[i] = t->k[i];
	char *w = malloc((size_t)(rows * nk[0] * nk[1] * nk[2]) * es + 1);
	if (!w)
		return -1;
	const char *src = weight;
	for (int64_t r = 0; r < rows; ++r)
		for (int64_t a = 0; a < nk[0]; ++a)
			for (int64_t b = 0; b < nk[1]; ++b)
				memcpy(w + (size_t)(((r * nk[0] + a) * nk[1] + b) * nk[2]) * es,
				       src + (size_t)(((r * kk[0] + a + t0[0]) * kk[1] + b + t0[1]) * kk[2] + t0[2]) * es,
				       (size_t)nk[2] * es);
	/* packed weights are shared by key and layout: another trim of the same
	 * conv (another shape) is other weights */
	if (d->weight_key)
		t->weight_key = d->weight_key ^ (0x9e3779b97f4a7c15ull * (uint64_t)(1 + t0[0] + 61 * t0[1] + 3721 * t0[2] +
										   226981 * (nk[0] + 61 * nk[1] + 3721 * nk[2])));
	*wt = w;
	return 1;
}

/* A 1-d conv as a 2-d one of height 1 (the same bytes in either layout, the
 * weights' too): oneDNN 2.6 has no depthwise kernel for 1-d, and runs a
 * depthwise 1-d conv on its grouped kernel's 16x16 blocks at 0.4 GFLOP/s
 * (ConvTasNet's g512 k3 over 1001 steps: 7.1 ms; as 2-d, jit_dw).  Not with
 * a broadcast binary post-op (its operand's dims would need the new one). */
static int conv_as_2d(const rt_conv_desc *d, rt_conv_desc *t)
{
	if (d->nsp != 1)
		return 0;
	for (int i = 0; i < d->npost; ++i)
		if (d->post[i].kind >= RT_ADD_BCAST)
			return 0;
	*t = *d;
	t->nsp = 2;
	t->in[1] = d->in[0], t->out[1] = d->out[0], t->k[1] = d->k[0], t->stride[1] = d->stride[0];
	t->pad_l[1] = d->pad_l[0], t->pad_r[1] = d->pad_r[0], t->dil[1] = d->dil[0], t->out_pad[1] = d->out_pad[0];
	t->in[0] = t->out[0] = t->k[0] = t->stride[0] = t->dil[0] = 1;
	t->pad_l[0] = t->pad_r[0] = t->out_pad[0] = 0;
	return 1;
}

static int gemv_enabled(void)
{
	const char *e = getenv("RT_GEMV");
	return !(e && *e == '0');
}

/* A dense 1x1 conv over one pixel of one image (squeeze-excite's two convs
 * after the global pool) is a matrix-vector product: the gemv of rt_matmul
 * on the weight as [oc, ic] rows (PyTorch's layout).  Any binary operand a
 * [1, oc, 1...] dst can take is per-channel or scalar: [1, oc] or [1, 1]. */
static int conv_gemv_ok(const rt_conv_desc *d)
{
	if (!gemv_enabled() || d->dtype != RT_F32 || d->q || d->transposed || (d->groups && d->groups != 1) ||
	    d->n != 1)
		return 0;
	for (int i = 0; i < d->nsp; ++i)
		if (d->in[i] != 1 || d->out[i] != 1 || d->k[i] != 1 || d->pad_l[i] || d->pad_r[i])
			return 0;
	return 1;
}

static int conv_gemv_create(rt_ctx *ctx, rt_conv *c, const rt_conv_desc *d, const void *weight,
			    const void *bias, char *err, size_t errlen)
{
	rt_matmul_desc m;
	memset(&m, 0, sizeof m);
	m.dtype = RT_F32;
	m.m = 1, m.k = d->ic, m.n = d->oc;
	m.b_trans = m.b_const = 1;
	m.has_bias = m.bias_const = d->has_bias;
	m.alpha = m.beta = 1;
	m.npost = d->npost;
	for (int i = 0; i < d->npost; ++i) {
		m.post[i] = d->post[i];
		if (d->post[i].kind >= RT_ADD_BCAST) {
			int64_t e = 1;
			for (int j = 0; j < d->post[i].rank && j < 8; ++j)
				e *= d->post[i].dims[j];
			m.post[i].rank = 2, m.post[i].dims[0] = 1, m.post[i].dims[1] = e;
			for (int j = 2; j < 8; ++j)
				m.post[i].dims[j] = 0;
		}
	}
	int rc = rt_matmul_create(ctx, &m, weight, bias, &c->mm, err, errlen);
	if (rc == RT_OK)
		c->weight_bytes = rt_matmul_weight_bytes(c->mm);
	return rc;
}

/* ------------------------------------------------------------------ */
/* a strided 1-d conv as a 1x1 conv over its windows                   */

/* oneDNN 2.6's brgconv runs a 1-d conv of stride 2 at 70-77 GFLOP/s one
 * thread on AVX-512 (HuBERT's and wav2vec2's feature extractor, 512 -> 512
 * channels, kernel 3 or 2: 3199 -> 1599 frames in 35 ms on a Zen 4), its
 * 1x1 kernel and matmul at ~110.  In NWC the window of output t is kw
 * whole frames from frame t * stride, kw * ic contiguous floats: copied
 * out a row an output (the windows overlap where kw > stride), the conv is
 * a 1x1 conv of kw * ic channels over the outputs, with the weights [oc][ic]
 * [kw] repacked [oc][kw][ic] and the conv's bias and post-ops as they are.
 * An NCW source is reordered NWC first (the staging an NWC primitive needed
 * anyway), the dst is the inner conv's (which reorders it where the caller
 * wants NCW).  Dense, f32, stride 2 or more, no padding or dilation, 64 or
 * more channels in, on RT_PATH_AUTO without a chosen implementation;
 * RT_CONV_COL=0 turns it off. */
static int conv_create_trim(rt_ctx *ctx, const rt_conv_desc *d, const void *weight, const void *bias, rt_conv **out,
			    char *err, size_t errlen);

typedef struct conv_col {
	rt_conv *inner;
	int64_t n, ic, tin, tout, kw, sw;
	dnnl_primitive_t r;    /* NCW -> NWC, or NULL (the source is NWC) */
	dnnl_memory_t u, v;
	size_t off_v, off_a;   /* workspace: the NWC source, the windows */
	char impl[80];         /* "coil:windows+" and the inner conv's */
} conv_col;

static int conv_col_ok(const rt_conv_desc *d, const void *weight)
{
	const char *e = getenv("RT_CONV_COL");
	if ((e && !strcmp(e, "0")) || !weight || d->nsp != 1 || d->dtype != RT_F32 || d->q || d->transposed ||
	    (d->groups && d->groups != 1) || d->ic < 64 || d->path != RT_PATH_AUTO || d->impl ||
	    conv_check(d, NULL, 0) != RT_OK)
		return 0;
	if ((d->stride[0] ? d->stride[0] : 1) < 2 || d->k[0] < 2 || d->pad_l[0] || d->pad_r[0] ||
	    (d->dil[0] ? d->dil[0] : 1) != 1)
		return 0;
	for (int i = 0; i < d->npost; ++i)
		if (d->post[i].kind >= RT_ADD_BCAST)
			return 0;
	return 1;
}

static void conv_col_free(conv_col *q)
{
	if (!q)
		return;
	rt_conv_destroy(q->inner);
	if (q->r)
		dnnl_primitive_destroy(q->r);
	if (q->u)
		dnnl_memory_destroy(q->u);
	if (q->v)
		dnnl_memory_destroy(q->v);
	free(q);
}

static int conv_col_create(rt_ctx *ctx, const rt_conv_desc *d, const void *weight, const void *bias, rt_conv **out,
			   char *err, size_t errlen)
{
	int rc = RT_OK;
	const int64_t kw = d->k[0], ic = d->ic, oc = d->oc, K = kw * ic;
	rt_conv *c = calloc(1, sizeof *c);
	conv_col *q = calloc(1, sizeof *q);
	float *w = malloc((size_t)(oc * K) * sizeof *w);
	if (!c || !q || !w) {
		free(c), free(q), free(w);
		return seterr(err, errlen, RT_ENOMEM, "rt_conv_create: out of memory");
	}
	c->col = q;
	c->p.ctx = ctx;
	q->n = d->n, q->ic = ic, q->tin = d->in[0], q->tout = d->out[0], q->kw = kw, q->sw = d->stride[0];
	const float *w0 = weight;
	for (int64_t o = 0; o < oc; o++)
		for (int64_t j = 0; j < kw; j++)
			for (int64_t i = 0; i < ic; i++)
				w[(o * kw + j) * ic + i] = w0[(o * ic + i) * kw + j];
	rt_conv_desc t;
	memset(&t, 0, sizeof t);
	t.dtype = RT_F32, t.nsp = 2, t.n = d->n, t.ic = K, t.oc = oc, t.groups = 1;
	for (int i = 0; i < 2; i++)
		t.k[i] = t.stride[i] = t.dil[i] = 1, t.in[i] = t.out[i] = i ? q->tout : 1;
	t.has_bias = d->has_bias, t.channels_last = d->channels_last, t.path = RT_PATH_AUTO;
	t.src_nhwc = !d->channels_last, t.dst_nhwc = d->channels_last ? 0 : d->dst_nhwc;
	t.npost = d->npost;
	memcpy(t.post, d->post, sizeof t.post);
	rc = conv_create_trim(ctx, &t, w, bias, &q->inner, err, errlen);
	free(w);
	if (rc)
		goto fail;
	c->weight_bytes = q->inner->weight_bytes;
	snprintf(q->impl, sizeof q->impl, "coil:windows+%s", rt_conv_impl(q->inner));
	c->p.npost = q->inner->p.npost;
	memcpy(c->p.role, q->inner->p.role, sizeof c->p.role);
	size_t ws = round64(q->inner->ws_bytes);
	if (!d->channels_last && !d->src_nhwc) {
		dnnl_memory_desc_t um, vm;
		const int64_t dims[3] = {d->n, ic, q->tin};
		static const int nwc[3] = {0, 2, 1};
		DN(md_dense(&um, 3, dims, NULL, dnnl_f32));
		DN(md_dense(&vm, 3, dims, nwc, dnnl_f32));
		DN(dnnl_memory_create(&q->u, &um, ctx->engine, DNNL_MEMORY_NONE));
		DN(dnnl_memory_create(&q->v, &vm, ctx->engine, DNNL_MEMORY_NONE));
		if ((rc = reorder_make(ctx, &um, &vm, &q->r, err, errlen)))
			goto fail;
		q->off_v = ws;
		ws += round64((size_t)(d->n * ic * q->tin) * sizeof(float));
	}
	q->off_a = ws;
	ws += round64((size_t)(d->n * q->tout * K) * sizeof(float));
	c->ws_bytes = ws;
	if ((rc = ctx_reserve(ctx, ws, err, errlen)))
		goto fail;
	*out = c;
	return RT_OK;
fail:
	rt_conv_destroy(c);
	return rc;
}

static int conv_col_run(rt_conv *c, const void *src, void *dst, const void *const *post_src, char *err, size_t errlen)
{
	const conv_col *q = c->col;
	rt_ctx *ctx = c->p.ctx;
	char *ws = ctx->ws;
	const float *x = src;
	int rc = RT_OK;
	if (q->r) {
		x = (const float *)(ws + q->off_v);
		if ((rc = reorder_exec(ctx, q->r, q->u, src, q->v, (void *)x, err, errlen)))
			return rc;
		DN(dnnl_stream_wait(ctx->stream));
	}
	float *a = (float *)(ws + q->off_a);
	const int64_t K = q->kw * q->ic, rows = q->n * q->tout;
	const size_t bytes = (size_t)K * sizeof(float);
#ifdef _OPENMP
	const int nt = ctx->nthreads > 0 ? ctx->nthreads : omp_get_max_threads();
#pragma omp parallel for num_threads(nt) if (nt > 1 && rows * K >= 65536) schedule(static)
#endif
	for (int64_t r = 0; r < rows; r++) {
		const int64_t img = r / q->tout, t = r % q->tout;
		memcpy(a + r * K, x + (img * q->tin + t * q->sw) * q->ic, bytes);
	}
	return rt_conv_run(q->inner, a, dst, post_src, err, errlen);
fail:
	return rc;
}

static int conv_create_trim(rt_ctx *ctx, const rt_conv_desc *d, const void *weight, const void *bias, rt_conv **out,
			    char *err, size_t errlen)
{
	rt_conv_desc t, t2;
	void *wt = NULL;
	const char *e = getenv("RT_CONV_TRIM"); /* RT_CONV_TRIM=0: every tap (measurement switch) */
	const char *e2 = getenv("RT_CONV_1D"); /* RT_CONV_1D=1: 1-d convs as they are */
	if (d && conv_col_ok(d, weight))
		return conv_col_create(ctx, d, weight, bias, out, err, errlen);
	if (d && !(e2 && !strcmp(e2, "1")) && conv_check(d, NULL, 0) == RT_OK && conv_as_2d(d, &t2))
		d = &t2;
	if (!d || !weight || (e && !strcmp(e, "0")) || conv_check(d, NULL, 0) != RT_OK)
		return conv_create(ctx, d, weight, bias, out, 0, err, errlen);
	int tr = conv_trim(d, &t, weight, &wt);
	if (tr < 0)
		return seterr(err, errlen, RT_ENOMEM, "rt_conv_create: out of memory");
	int rc = conv_create(ctx, tr ? &t : d, tr ? wt : weight, bias, out, 0, err, errlen);
	free(wt);
	return rc;
}

/* A SiLU in an f32 conv's post-ops, below AVX-512: oneDNN 2.6's AVX2
 * kernels compute it inside the conv at ~0.8-1.2 ns an element (1x1 conv
 * 16 -> 96 at 112x112, efficientnet_b0's largest: 0.57 ms bare, 1.9 with
 * swish, one thread on an AVX2 EPYC), a vmath pass over the result at
 * ~0.75 (exact to 2.5 ulp, subnormal results rounded once), and a residual
 * sum after it sends the conv to oneDNN's reference kernel (efficientnet_v2_s's
 * two 24-channel 3x3 convs at 112x112: 440 ms each).  Here the conv runs
 * the post-ops before the SiLU and tail_apply applies the rest to dst: the
 * SiLU at ~0.45 ns an element (silu8), the others with the product's
 * epilogue code, a residual read where it lies (the conv then writes the
 * workspace).  A 3x3 conv so also runs coil's Winograd (conv_cwino_ok
 * takes no SiLU).  Taken where the post-ops from the SiLU on are eltwise
 * and at most one residual sum, not for a one-pixel 1x1 conv (the gemv
 * applies them itself); by default where oneDNN's ISA is below AVX-512
 * (cw_wanted); RT_FAST_SILU=0 / 1 turns it off / on.  Returns the SiLU's
 * index, or -1. */
static int conv_tail_at(const rt_conv_desc *d)
{
	if (!d || d->dtype != RT_F32 || d->q || conv_check(d, NULL, 0) != RT_OK || conv_gemv_ok(d) ||
	    !cw_wanted("RT_FAST_SILU"))
		return -1;
	int at = -1, nres = 0;
	for (int i = 0; i < d->npost; ++i) {
		if (at < 0 && d->post[i].kind == RT_SILU)
			at = i;
		if (at >= 0 && (d->post[i].kind > RT_ADD_SAME || (d->post[i].kind == RT_ADD_SAME && nres++)))
			return -1;
	}
	return at;
}

static void tail_apply(const post_tail *t, const float *x, float *y, const float *res, int nt);

/* oneDNN 2.6's conv and matmul kernels below AVX-512 take no residual sum
 * after another post-op (an eltwise, a product, a broadcast add) and fall
 * back to the reference kernel, ~1000x slower (x + act(conv(x)),
 * x + act(x W^T + b)).  Where an object
 * comes out as that, it is made again with the post-ops before the sum, and
 * the sum and the eltwise post-ops after it are applied by the runtime
 * (tail_apply, the primitive's result then in the workspace).  The sum's
 * index in post[0..npost), or -1 when there is no such split. */
static int sum_tail_at(const rt_post *post, int npost)
{
	int at = -1;
	for (int i = 0; i < npost; ++i) {
		const enum rt_post_kind k = post[i].kind;
		if (at < 0 && k == RT_ADD_SAME && i > 0)
			at = i;
		else if (at >= 0 && k >= RT_ADD_SAME)
			return -1;
	}
	return at;
}

/* t gets post[at..npost) over count floats; with a residual among them, the
 * workspace past *ws_bytes (which grows by the result's bytes) */
static int tail_make(rt_ctx *ctx, post_tail *t, const rt_post *post, int at, int npost, int64_t count,
		     size_t *ws_bytes, char *err, size_t errlen)
{
	t->count = count, t->res = t->res_at = -1, t->n = 0;
	for (int i = at; i < npost; ++i) {
		if (post[i].kind == RT_ADD_SAME)
			t->res = t->n, t->res_at = i;
		t->op[t->n++] = post[i];
	}
	if (t->res < 0)
		return RT_OK;
	t->off = round64(*ws_bytes);
	*ws_bytes = t->off + (size_t)count * sizeof(float);
	return ctx_reserve(ctx, *ws_bytes, err, errlen);
}

/* Runs the primitive through run(obj, to) into dst, or into the workspace
 * when t has a residual, then t's post-ops into dst */
static int tail_run(const post_tail *t, rt_ctx *ctx, const void *const *post_src, void *dst,
		    int (*run)(void *obj, void *to, char *err, size_t errlen), void *obj, char *err, size_t errlen)
{
	const float *res = t->res >= 0 && post_src ? post_src[t->res_at] : NULL;
	if (t->res >= 0 && !res)
		return seterr(err, errlen, RT_EINVAL, "post-op %d needs post_src[%d]", t->res_at, t->res_at);
	float *to = res ? (float *)((char *)ctx->ws + t->off) : dst;
	int rc = run(obj, to, err, errlen);
	if (rc == RT_OK) {
#ifdef _OPENMP
		const int nt = ctx->nthreads > 0 ? ctx->nthreads : omp_get_max_threads();
#else
		const int nt = 1;
#endif
		tail_apply(t, to, dst, res, nt);
	}
	return rc;
}

RT_API int rt_conv_create(rt_ctx *ctx, const rt_conv_desc *d, const void *weight,
			  const void *bias, rt_conv **out, char *err, size_t errlen)
{
	int at = conv_tail_at(d), rc;
	if (at < 0) { /* a sum after another post-op, where oneDNN offers its reference kernel (sum_tail_at) */
		rc = conv_create_trim(ctx, d, weight, bias, out, err, errlen);
		if (rc || !d || d->dtype != RT_F32 || d->q || (at = sum_tail_at(d->post, d->npost)) < 0 ||
		    strncmp(rt_conv_impl(*out), "ref", 3))
			return rc;
		rt_conv_destroy(*out);
		*out = NULL;
	}
	rt_conv_desc ds = *d;
	ds.npost = at;
	rc = conv_create_trim(ctx, &ds, weight, bias, out, err, errlen);
	if (rc != RT_OK)
		return rc;
	rt_conv *c = *out;
	int64_t count = d->n * d->oc;
	for (int i = 0; i < d->nsp; ++i)
		count *= d->out[i];
	if ((rc = tail_make(ctx, &c->tail, d->post, at, d->npost, count, &c->ws_bytes, err, errlen))) {
		rt_conv_destroy(c);
		*out = NULL;
	}
	return rc;
}

/* oneDNN 2.6's Winograd kernels transform the whole batch at once where
 * their tile-blocked schedule does not fit the sizes (W_S_G_D): a
 * scratchpad of ~2.25x src + dst, 206 MB for one of resnet18's 64-channel
 * convs at 27 x 78x78, where 32 images of 78x78 took the blocked schedule
 * and 7 MB.  The workspace then grew with whichever sizes came (resnet18
 * over 1,000 random sizes: 222 -> 280 MiB).  Such a conv runs in chunks of
 * images instead: the most images that divide the batch (one primitive, so
 * one weights layout) whose scratchpad fits RT_WINO_SCRATCH, estimated in
 * proportion to the images.  (Chunking the blocked schedule's staging as
 * well ran resnet18 at batch 16-32 4-7% slower.)  RT_WINO_CHUNK=0 in the
 * environment keeps every conv whole.  Returns 1 when c stays whole, else
 * RT_OK or the error. */
#define RT_WINO_SCRATCH ((size_t)32 << 20)

static int conv_split(rt_ctx *ctx, rt_conv *c, const rt_conv_desc *d, int64_t nb, int image, const void *weight,
		      const void *bias, char *err, size_t errlen);

static int conv_chunk(rt_ctx *ctx, rt_conv *c, const rt_conv_desc *d, const void *weight, const void *bias,
		      char *err, size_t errlen)
{
	const char *e = getenv("RT_WINO_CHUNK");
	const double ws = (double)c->p.scratch_bytes;
	if ((e && !strcmp(e, "0")) || d->n < 2 || ws <= (double)RT_WINO_SCRATCH)
		return 1;
	for (int i = 0; i < d->npost; ++i)
		if (d->post[i].kind >= RT_ADD_BCAST) /* (Winograd takes none: conv_wino_ok) */
			return 1;
	int64_t nb = 1;
	for (int64_t k = d->n - 1; k >= 2 && nb == 1; --k)
		if (d->n % k == 0 && ws * (double)k / (double)d->n <= (double)RT_WINO_SCRATCH)
			nb = k;
	return conv_split(ctx, c, d, nb, 0, weight, bias, err, errlen);
}

/* c run as d->n / nb calls of one object for nb images (c->chunk; image:
 * made as conv_blocked_ok's one image) */
static int conv_split(rt_ctx *ctx, rt_conv *c, const rt_conv_desc *d, int64_t nb, int image, const void *weight,
		      const void *bias, char *err, size_t errlen)
{
	rt_conv_desc dn = *d;
	dn.n = nb;
	prim_reset(&c->p);
	c->wino = c->via = 0;
	int rc = conv_create(ctx, &dn, weight, bias, &c->chunk, image, err, errlen);
	if (rc)
		return rc;
	int64_t si = d->ic, so = d->oc;
	for (int i = 0; i < d->nsp; ++i)
		si *= d->in[i], so *= d->out[i];
	for (int i = 0; i < d->npost; ++i)
		c->img_post[i] = d->post[i].kind == RT_ADD_SAME;
	c->nb = nb;
	c->nchunk = d->n / nb;
	c->img_src = (size_t)si * sizeof(float);
	c->img_dst = (size_t)so * sizeof(float);
	c->weight_bytes = c->chunk->weight_bytes;
	c->ws_bytes = c->chunk->ws_bytes;
	return RT_OK;
}

static int conv_create(rt_ctx *ctx, const rt_conv_desc *d, const void *weight, const void *bias, rt_conv **out,
		       int image, char *err, size_t errlen)
{
	int rc = RT_OK, prev = 0, entered = 0;
	dnnl_post_ops_t po = NULL;
	dnnl_primitive_attr_t attr = NULL;
	rt_conv *c = NULL;
	if (!out)
		return seterr(err, errlen, RT_EINVAL, "rt_conv_create: out is NULL");
	*out = NULL;
	if (!ctx || !d || (!weight && !d->weight_key) || (d->has_bias && !bias))
		return seterr(err, errlen, RT_EINVAL,
			      "rt_conv_create: NULL ctx, desc, weight or bias");
	if ((rc = conv_check(d, err, errlen)))
		return rc;
	if (!weight && (d->q || conv_gemv_ok(d) || conv_gemm_ok(d) || conv_cgrp_ok(d))) /* kernels that pack their own */
		return seterr(err, errlen, RT_EAGAIN, "rt_conv_create: this conv needs its weights");
	c = calloc(1, sizeof *c);
	if (!c)
		return seterr(err, errlen, RT_ENOMEM, "rt_conv_create: out of memory");
	c->p.ctx = ctx;
	if (conv_gemv_ok(d)) {
		if ((rc = conv_gemv_create(ctx, c, d, weight, bias, err, errlen))) {
			free(c);
			return rc;
		}
		*out = c;
		return RT_OK;
	}
	if (conv_gemm_ok(d)) {
		if ((rc = deconv_gemm_create(ctx, c, d, weight, bias, err, errlen))) {
			free(c);
			return rc;
		}
		*out = c;
		return RT_OK;
	}
	if (conv_cgrp_ok(d)) {
		if ((rc = cgrp_create(c, d, weight, bias, err, errlen))) {
			free(c);
			return rc;
		}
		*out = c;
		return RT_OK;
	}
	if (conv_cwino_ok(d)) {
		if ((rc = cwino_create(ctx, c, d, weight, bias, err, errlen))) {
			free(c);
			return rc;
		}
		*out = c;
		return RT_OK;
	}
	prev = threads_enter(ctx), entered = 1;
	c->p.ws_later = 1; /* reserved below, with the via buffers */

	const int nsp = d->nsp, nd = nsp + 2;
	const int64_t g = d->groups ? d->groups : 1;
	const int bf = d->dtype == RT_BF16;
	const dnnl_data_type_t dt = rt_dnnl_dt(d->dtype);
	/* bf16: weights as given (bf16, or f32 when wei_f32), reordered into
	 * bf16; the bias in f32.  int8: s8 weights */
	const dnnl_data_type_t wdt = d->q ? dnnl_s8 : bf && !d->wei_f32 ? dnnl_bf16 : dnnl_f32;
	float *bias32 = NULL;
	for (int i = 0; bf && d->dst_f32 && i < d->npost; ++i)
		if (d->post[i].kind == RT_ADD_SAME)
			FAIL(RT_EUNSUP, "rt_conv: an f32 dst with a residual sum (it accumulates in the dst's type)");
	c->via = !d->channels_last && (d->q || conv_via_nhwc(d)); /* int8 runs NHWC */
	c->src_nhwc = c->via && d->src_nhwc;
	c->dst_nhwc = c->via && d->dst_nhwc;
	if (!d->channels_last && ((d->path == RT_PATH_NHWC && !d->tuned) || d->src_nhwc || d->dst_nhwc) && !c->via)
		FAIL(RT_EUNSUP, "rt_conv: RT_PATH_NHWC with a binary operand that is not "
				"scalar, per-channel or dst-shaped");
	const int nhwc = d->channels_last || c->via; /* the primitive's layout */
	int64_t sdims[5], ddims[5], wdims[6];
	int nchw_order[5], nhwc_order[5], w_order[6];
	const int *u_src_order = nchw_order, *u_dst_order = nchw_order; /* via: the caller's layouts */
	sdims[0] = ddims[0] = d->n;
	sdims[1] = d->ic, ddims[1] = d->oc;
	for (int i = 0; i < nd; ++i)
		nchw_order[i] = i;
	nhwc_order[0] = 0, nhwc_order[nd - 1] = 1;
	for (int i = 0; i < nsp; ++i) {
		sdims[2 + i] = d->in[i], ddims[2 + i] = d->out[i];
		nhwc_order[1 + i] = 2 + i;
	}
	const int *act_order = nhwc ? nhwc_order : nchw_order;

	/* oneDNN weights are logical [g,] o, i, k... for conv and deconv alike.
	 * PyTorch stores conv weights [g*o, i, k] (same order) and transposed
	 * ones [g*i, o, k]: physical order g, i, o, k. */
	const int gw = g > 1, wnd = nd + gw;
	if (gw)
		wdims[0] = g;
	wdims[gw] = d->oc / g, wdims[gw + 1] = d->ic / g;
	for (int i = 0; i < nsp; ++i)
		wdims[gw + 2 + i] = d->k[i];
	for (int i = 0; i < wnd; ++i)
		w_order[i] = i;
	if (d->transposed)
		w_order[gw] = gw + 1, w_order[gw + 1] = gw;

	dnnl_memory_desc_t src_md, dst_md, wuser_md, wany_md, bias_md, bin_md[RT_MAX_POST];
	int bin_idx[RT_MAX_POST] = {0};
	dnnl_dims_t strides, dil, pl, pr;
	for (int i = 0; i < nsp; ++i) {
		strides[i] = d->stride[i] ? d->stride[i] : 1;
		dil[i] = (d->dil[i] ? d->dil[i] : 1) - 1;
		pl[i] = d->pad_l[i];
		pr[i] = d->pad_r[i] - (d->transposed ? d->out_pad[i] : 0);
	}
	const dnnl_data_type_t ddt = d->q ? rt_dnnl_dt(d->q->dst) : bf && d->dst_f32 ? dnnl_f32 : dt; /* dst's */
	DN(md_dense(&src_md, nd, sdims, act_order, dt));
	DN(md_dense(&dst_md, nd, ddims, act_order, ddt));
	DN(md_dense(&wuser_md, wnd, wdims, w_order, wdt));
	{
		dnnl_dims_t wd;
		for (int i = 0; i < wnd; ++i)
			wd[i] = wdims[i];
		DN(dnnl_memory_desc_init_by_tag(&wany_md, wnd, wd, d->q ? dnnl_s8 : dt, dnnl_format_tag_any));
	}
	if (d->has_bias)
		DN(md_dense(&bias_md, 1, &d->oc, NULL, dnnl_f32));
	if (d->has_bias && wdt == dnnl_bf16) {
		if (!(bias32 = malloc((size_t)d->oc * sizeof *bias32)))
			FAIL(RT_ENOMEM, "rt_conv_create: out of memory");
		for (int64_t i = 0; i < d->oc; ++i)
			bias32[i] = bf16_f32(((const uint16_t *)bias)[i]);
		bias = bias32;
	}

	DN(dnnl_post_ops_create(&po));
	if ((rc = build_post_ops(po, 0, d->npost, d->post, nd, ddims, act_order, nhwc, &c->p,
				 bin_md, bin_idx, dt, d->q, err, errlen)))
		goto fail;
	if (!(attr = make_attr(po, &rc, err, errlen)))
		goto fail;
	if (d->q && (rc = quant_attr(attr, d->q, d->oc, 1, err, errlen)))
		goto fail;

	const dnnl_memory_desc_t *bmd = d->has_bias ? &bias_md : NULL;
	if (d->transposed) {
		dnnl_deconvolution_desc_t od;
		DN(dnnl_dilated_deconvolution_forward_desc_init(
			&od, dnnl_forward_inference, dnnl_deconvolution_direct, &src_md,
			&wany_md, bmd, &dst_md, strides, dil, pl, pr));
		if ((rc = prim_finish(&c->p, &od, attr, bin_md, bin_idx, err, errlen,
				      "deconvolution")))
			goto fail;
	} else {
		/* Winograd first where it may apply, dilated depthwise and some grouped convs (conv_blocked_ok):
		 * they pick their own (blocked) activation layout and the caller's
		 * side is reordered (via); a depthwise one only where oneDNN has a
		 * jit kernel for it. */
		dnnl_convolution_desc_t od;
		const int blk = bf || d->q ? 0 : conv_wino_ok(d) ? 1 : conv_blocked_ok(d, image);
		if (blk == 3) { /* one image at a time */
			if ((rc = conv_split(ctx, c, d, 1, 1, weight, bias, err, errlen)))
				goto fail;
			goto done;
		}
		if (blk) {
			dnnl_memory_desc_t sany, dany;
			dnnl_dims_t sd, dd;
			for (int i = 0; i < nd; ++i)
				sd[i] = sdims[i], dd[i] = ddims[i];
			DN(dnnl_memory_desc_init_by_tag(&sany, nd, sd, dnnl_f32, dnnl_format_tag_any));
			DN(dnnl_memory_desc_init_by_tag(&dany, nd, dd, dnnl_f32, dnnl_format_tag_any));
			DN(dnnl_dilated_convolution_forward_desc_init(
				&od, dnnl_forward_inference, blk == 1 ? dnnl_convolution_winograd : dnnl_convolution_direct,
				&sany, &wany_md, bmd, &dany, strides, dil, pl, pr));
			/* a jit kernel, in its blocked layout: over `any` oneDNN lists its
			 * NHWC brgconv first for some grouped shapes (g32 1024x14x14: 1.85
			 * ms, jit 1.05) */
			c->p.prefer = blk == 2 ? "jit" : NULL;
			if (prim_finish(&c->p, &od, attr, bin_md, bin_idx, err, errlen, "convolution") == RT_OK &&
			    (blk == 1 || !strncmp(prim_impl(&c->p), "jit", 3))) {
				const int *uo = d->channels_last || d->src_nhwc ? nhwc_order : nchw_order;
				src_md = *dnnl_primitive_desc_query_md(c->p.pd, dnnl_query_src_md, 0);
				dst_md = *dnnl_primitive_desc_query_md(c->p.pd, dnnl_query_dst_md, 0);
				c->wino = 1, c->via = 1, c->src_nhwc = c->dst_nhwc = 0;
				u_src_order = uo;
				u_dst_order = d->channels_last || d->dst_nhwc ? nhwc_order : nchw_order;
				if (blk == 1 && (rc = conv_chunk(ctx, c, d, weight, bias, err, errlen)) != 1) {
					if (rc)
						goto fail;
					goto done;
				}
				rc = RT_OK;
			} else {
				prim_free(&c->p);
				memset(c->p.mem, 0, sizeof c->p.mem);
				c->p.pd = NULL, c->p.prim = NULL;
			}
		}
		if (!c->wino) {
			/* Not pinned to the layout other shapes packed (as matmuls are):
			 * a conv's best kernel, and so its weights' layout, depends on
			 * the spatial sizes, and a forced layout fell back to kernels
			 * 10x slower (resnet18 at 287x287 after 164x164).  Shapes whose
			 * kernels agree still share one packed copy. */
			DN(dnnl_dilated_convolution_forward_desc_init(
				&od, dnnl_forward_inference, dnnl_convolution_direct, &src_md,
				&wany_md, bmd, &dst_md, strides, dil, pl, pr));
			c->p.impl = d->impl;
			c->p.prefer = conv_dw_jit(d) ? "jit_dw" : NULL;
			if ((rc = prim_finish(&c->p, &od, attr, bin_md, bin_idx, err, errlen,
					      "convolution")))
				goto fail;
		}
	}

	const dnnl_memory_desc_t *wmd =
		dnnl_primitive_desc_query_md(c->p.pd, dnnl_query_weights_md, 0);
	if (!wmd)
		FAIL(RT_EDNNL, "oneDNN: cannot query the weights descriptor");
	if ((rc = pack_shared(ctx, d->weight_key, &wuser_md, wmd, weight, &c->p.mem[ARG_WEI], err,
			       errlen)))
		goto fail;
	c->p.arg_id[ARG_WEI] = DNNL_ARG_WEIGHTS;
	c->weight_bytes = dnnl_memory_desc_get_size(wmd);
	if (d->q && (rc = quant_mems(&c->p, d->q, err, errlen)))
		goto fail;
	if (d->has_bias) {
		const dnnl_memory_desc_t *bq =
			dnnl_primitive_desc_query_md(c->p.pd, dnnl_query_weights_md, 1);
		if (!bq)
			FAIL(RT_EDNNL, "oneDNN: cannot query the bias descriptor");
		if ((rc = pack(ctx, &bias_md, bq, bias, &c->p.mem[ARG_BIAS], err, errlen)))
			goto fail;
		c->p.arg_id[ARG_BIAS] = DNNL_ARG_BIAS;
	}

	/* workspace: [scratchpad | src | dst | dst-shaped operands] (via only) */
	c->ws_bytes = round64(c->p.scratch_bytes);
	if (c->via) {
		dnnl_memory_desc_t usrc_md, udst_md;
		DN(md_dense(&usrc_md, nd, sdims, u_src_order, dt));
		DN(md_dense(&udst_md, nd, ddims, u_dst_order, ddt));
		DN(dnnl_memory_create(&c->e.u_src, &usrc_md, ctx->engine, DNNL_MEMORY_NONE));
		DN(dnnl_memory_create(&c->e.u_dst, &udst_md, ctx->engine, DNNL_MEMORY_NONE));
		if ((rc = reorder_make(ctx, &usrc_md, &src_md, &c->e.r_in, err, errlen)) ||
		    (rc = reorder_make(ctx, &dst_md, &udst_md, &c->e.r_out, err, errlen)))
			goto fail;
		/* a side that is NHWC already is not staged (the stem of an NHWC
		 * chain: its dst staging was 166 MB at resnet18's 27 x 309x309) */
		c->e.off_src = c->ws_bytes;
		c->ws_bytes += c->src_nhwc ? 0 : round64(dnnl_memory_desc_get_size(&src_md));
		c->e.off_dst = c->ws_bytes;
		c->ws_bytes += c->dst_nhwc ? 0 : round64(c->p.dst_bytes);
		int need_res = 0;
		for (int i = 0; i < d->npost; ++i) {
			if (c->p.role[i] == ROLE_SUM)
				need_res = 1;
			if (c->p.role[i] != ROLE_BIN)
				continue;
			int full = 1;
			for (int j = 0; j < nd; ++j)
				full &= bin_md[i].dims[j] == ddims[j];
			/* dst-shaped with more than one non-unit dim: layouts differ */
			int nonunit = 0;
			for (int j = 0; j < nd; ++j)
				nonunit += ddims[j] != 1;
			if (full && nonunit > 1) {
				c->bin_full[i] = need_res = 1;
				c->off_bin[i] = c->ws_bytes;
				c->ws_bytes += round64(c->p.dst_bytes);
			}
		}
		if (need_res && (rc = reorder_make(ctx, &udst_md, &dst_md, &c->r_res, err, errlen)))
			goto fail;
	}
	if ((rc = ctx_reserve(ctx, c->ws_bytes, err, errlen)))
		goto fail;
done:
	free(bias32);
	dnnl_primitive_attr_destroy(attr);
	dnnl_post_ops_destroy(po);
	threads_leave(ctx, prev);
	*out = c;
	return RT_OK;
fail:
	free(bias32);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	if (po)
		dnnl_post_ops_destroy(po);
	if (entered)
		threads_leave(ctx, prev);
	rt_conv_destroy(c);
	return rc;
}

static int conv_run_via(rt_conv *c, const void *src, void *dst, const void *const *post_src,
			char *err, size_t errlen)
{
	int rc = RT_OK;
	prim *p = &c->p;
	char *ws = p->ctx->ws;
	void *ptr[MAX_ARGS] = {0};
	ptr[ARG_SRC] = c->src_nhwc ? (void *)src : ws + c->e.off_src;
	ptr[ARG_DST] = c->dst_nhwc ? (void *)dst : ws + c->e.off_dst;
	if (!c->src_nhwc && (rc = reorder_exec(p->ctx, c->e.r_in, c->e.u_src, src, p->mem[ARG_SRC],
					       ptr[ARG_SRC], err, errlen)))
		return rc;
	for (int i = 0; i < p->npost; ++i) {
		if (c->dst_nhwc && p->role[i] == ROLE_SUM) {
			if (post_src[i] != dst)
				memcpy(dst, post_src[i], p->dst_bytes);
		} else if (c->dst_nhwc && p->role[i] == ROLE_BIN)
			ptr[ARG_POST0 + i] = (void *)post_src[i];
		else if (p->role[i] == ROLE_SUM)
			rc = reorder_exec(p->ctx, c->r_res, c->e.u_dst, post_src[i], p->mem[ARG_DST],
					  ptr[ARG_DST], err, errlen);
		else if (p->role[i] == ROLE_BIN && c->bin_full[i])
			rc = reorder_exec(p->ctx, c->r_res, c->e.u_dst, post_src[i],
					  p->mem[ARG_POST0 + i], ptr[ARG_POST0 + i] = ws + c->off_bin[i],
					  err, errlen);
		else if (p->role[i] == ROLE_BIN)
			ptr[ARG_POST0 + i] = (void *)post_src[i];
		if (rc)
			return rc;
	}
	if ((rc = prim_exec(p, ptr, MAX_ARGS, err, errlen)))
		return rc;
	if (c->dst_nhwc)
		return RT_OK;
	if ((rc = reorder_exec(p->ctx, c->e.r_out, p->mem[ARG_DST], ptr[ARG_DST], c->e.u_dst, dst, err,
			       errlen)))
		return rc;
	DN(dnnl_stream_wait(p->ctx->stream));
fail:
	return rc;
}

static int conv_run(rt_conv *c, const void *src, void *dst, const void *const *post_src, char *err, size_t errlen);

struct conv_call {
	rt_conv *c;
	const void *src;
	const void *const *post_src;
};

static int conv_call_run(void *obj, void *to, char *err, size_t errlen)
{
	const struct conv_call *a = obj;
	return conv_run(a->c, a->src, to, a->post_src, err, errlen);
}

RT_API int rt_conv_run(rt_conv *c, const void *src, void *dst, const void *const *post_src,
		       char *err, size_t errlen)
{
	if (!c || !c->tail.n)
		return conv_run(c, src, dst, post_src, err, errlen);
	struct conv_call a = {c, src, post_src};
	return tail_run(&c->tail, c->p.ctx, post_src, dst, conv_call_run, &a, err, errlen);
}

static int conv_run(rt_conv *c, const void *src, void *dst, const void *const *post_src, char *err, size_t errlen)
{
	if (!c || !src || !dst)
		return seterr(err, errlen, RT_EINVAL, "rt_conv_run: NULL conv, src or dst");
	for (int i = 0; i < c->p.npost; ++i)
		if (c->p.role[i] != ROLE_NONE && !(post_src && post_src[i]))
			return seterr(err, errlen, RT_EINVAL, "post-op %d needs post_src[%d]", i,
				      i);
	if (c->mm)
		return rt_matmul_run(c->mm, 1, src, NULL, NULL, dst, post_src, err, errlen);
	if (c->col) {
		int prev = threads_enter(c->p.ctx), rc = conv_col_run(c, src, dst, post_src, err, errlen);
		threads_leave(c->p.ctx, prev);
		return rc;
	}
	if (c->chunk) {
		const void *ps[RT_MAX_POST] = {0};
		int rc = RT_OK;
		for (int64_t k = 0; k < c->nchunk && rc == RT_OK; ++k) {
			const size_t i0 = (size_t)(k * c->nb);
			for (int i = 0; i < c->p.npost; ++i)
				ps[i] = !post_src || !post_src[i] ? NULL
					: c->img_post[i] ? (const char *)post_src[i] + i0 * c->img_dst : post_src[i];
			rc = rt_conv_run(c->chunk, (const char *)src + i0 * c->img_src, (char *)dst + i0 * c->img_dst,
					 ps, err, errlen);
		}
		return rc;
	}
	int rc, prev = threads_enter(c->p.ctx);
#ifdef _OPENMP
	const int nt = c->p.ctx->nthreads > 0 ? c->p.ctx->nthreads : omp_get_max_threads(); /* coil's own kernels */
#else
	const int nt = 1;
#endif
	if (c->cg) {
		cgrp_run(c->cg, src, dst, c->cg->res >= 0 ? post_src[c->cg->res] : NULL, nt);
		rc = RT_OK;
	} else if (c->cw) {
		cwino_run(c->cw, src, dst, c->cw->res >= 0 ? post_src[c->cw->res] : NULL, c->p.ctx->ws, nt);
		rc = RT_OK;
	} else if (c->dg) {
		rc = deconv_gemm_run(c, src, dst, err, errlen);
	} else if (c->via) {
		rc = conv_run_via(c, src, dst, post_src, err, errlen);
	} else {
		void *ptr[MAX_ARGS] = {0};
		bind_posts(&c->p, post_src, dst, ptr);
		ptr[ARG_SRC] = (void *)src;
		ptr[ARG_DST] = dst;
		rc = prim_exec(&c->p, ptr, MAX_ARGS, err, errlen);
	}
	threads_leave(c->p.ctx, prev);
	return rc;
}

RT_API void rt_conv_destroy(rt_conv *c)
{
	if (!c)
		return;
	if (c->mm) {
		rt_matmul_destroy(c->mm);
		free(c);
		return;
	}
	if (c->col) {
		conv_col_free(c->col);
		free(c);
		return;
	}
	if (c->dg) {
		free(c->dg->w), free(c->dg->bias), free(c->dg);
		free(c);
		return;
	}
	if (c->cg) {
		cgrp_free(c->cg);
		free(c);
		return;
	}
	if (c->cw) {
		cwino_free(c->p.ctx, c->cw);
		free(c);
		return;
	}
	rt_conv_destroy(c->chunk);
	if (unshare(c->p.ctx, c->p.mem[ARG_WEI]))
		c->p.mem[ARG_WEI] = NULL;
	prim_free(&c->p);
	edges_free(&c->e);
	if (c->r_res)
		dnnl_primitive_destroy(c->r_res);
	free(c);
}

RT_API size_t rt_conv_scratch_bytes(const rt_conv *c) { return c ? c->ws_bytes : 0; }
RT_API size_t rt_conv_weight_bytes(const rt_conv *c) { return c ? c->weight_bytes : 0; }
RT_API const char *rt_conv_impl(const rt_conv *c)
{
	return !c ? "" : c->chunk ? rt_conv_impl(c->chunk) : c->col ? c->col->impl : c->mm ? rt_matmul_impl(c->mm) : c->dg ? "coil:gemm_col2im" : c->cw ? "coil:wino_4x4"
		: c->cg ? "coil:group_nhwc" : prim_impl(&c->p);
}
RT_API int rt_conv_via_nhwc(const rt_conv *c) { return !c ? 0 : c->chunk ? c->chunk->via : c->via; }
RT_API int rt_conv_blocked(const rt_conv *c) { return !c ? 0 : c->chunk ? c->chunk->wino : c->wino; }

/* ------------------------------------------------------------------ */
/* matmul                                                              */

struct rt_matmul {
	prim p;
	int b_const, bias_rt;  /* bias_rt: bias given at run */
	float bias_scale;      /* applied to a run-time bias (1: pass through) */
	float *bias_buf;       /* scaled copy of a run-time bias (f32) */
	size_t bias_elems;
	int64_t m;             /* the desc's m; m_runtime: the m a and c are bound at */
	int m_runtime;
	/* m_runtime: what a's and c's descriptors are made from at each new m */
	int nd, a_order[6];
	int64_t adims[6], cdims[6];
	dnnl_data_type_t dt, cdt;
	/* int8 dynamic (rt_quant.dynamic): the weights' scales and the bias (real units), the
	 * per-run output scales and bias in the accumulator's units, the quantized a */
	int dyn, dyn_s8;
	int32_t dyn_qmin, dyn_qmax, dyn_zp;
	int64_t dyn_n;
	float dyn_eps;
	float *dyn_wscale, *dyn_bias, *dyn_oscale, *dyn_bq;
	void *dyn_a;
	size_t dyn_elems;
	/* sgemm (see mm_sgemm_ok): dnnl_sgemm on the packed (plain) b, then sgp, a binary add
	 * of sg_bias (beta * bias, or zeros) into c in place carrying the post-ops */
	int sg, sg_btrans, sg_sum; /* sg_sum: the residual sum's post-op index, or -1 */
	int64_t sg_ldb;            /* b's leading dimension (sg_pad) */
	float sg_alpha, *sg_bias;
	prim sgp;
	struct mm_epi *epi; /* cg: the post-ops, applied by the runtime */
	int cg;             /* coil's own product (cgemm_run) on b packed in p.mem[ARG_WEI] */
	/* gemv (see mm_gemv_ok): b as [n, k] rows, alpha, beta*bias; the post-ops run here */
	int gemv, gemv_nt, panels;
	int64_t k, n;
	float *gw, *gbias, galpha;
	size_t gw_bytes;
	rt_post post[RT_MAX_POST];
	post_tail tail; /* a residual sum after another post-op, and what follows (mm_tail_at) */
	size_t tail_ws;  /* workspace with the tail's result */
};

/* The range of a[0..ne), starting from [0, 0] (a NaN is passed over). */
static void range_f32(const float *a, size_t ne, float *plo, float *phi)
{
	size_t i = 0;
	float lo = 0, hi = 0;
#ifdef __AVX512F__
	/* (min_ps/max_ps return their second operand where the first is NaN) */
	__m512 vl = _mm512_setzero_ps(), vh = _mm512_setzero_ps();
	for (; i + 16 <= ne; i += 16) {
		const __m512 v = _mm512_loadu_ps(a + i);
		vl = _mm512_min_ps(v, vl), vh = _mm512_max_ps(v, vh);
	}
	lo = _mm512_reduce_min_ps(vl), hi = _mm512_reduce_max_ps(vh);
#endif
	for (; i < ne; ++i) {
		lo = a[i] < lo ? a[i] : lo;
		hi = a[i] > hi ? a[i] : hi;
	}
	*plo = lo, *phi = hi;
}

/* q[0..ne) = clamp(rint(a * inv) + z, qmin, qmax) as u8 or s8. */
static void quantize_f32(const float *a, size_t ne, float inv, float z, float qmin, float qmax, int s8, void *q)
{
	uint8_t *qu = q;
	int8_t *qs = q;
	size_t i = 0;
#ifdef __AVX512F__
	const __m512 vi = _mm512_set1_ps(inv), vz = _mm512_set1_ps(z), vmin = _mm512_set1_ps(qmin),
		     vmax = _mm512_set1_ps(qmax);
	for (; i + 16 <= ne; i += 16) {
		__m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(a + i), vi),
						_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
		v = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(v, vz), vmin), vmax); /* NaN: qmin */
		const __m512i k = _mm512_cvtps_epi32(v);
		if (s8)
			_mm_storeu_si128((__m128i *)(qs + i), _mm512_cvtsepi32_epi8(k));
		else
			_mm_storeu_si128((__m128i *)(qu + i), _mm512_cvtusepi32_epi8(k));
	}
#endif
	for (; i < ne; ++i) {
		float v = rintf(a[i] * inv) + z;
		v = v >= qmin ? v : qmin; /* NaN: qmin */
		v = v <= qmax ? v : qmax;
		if (s8)
			qs[i] = (int8_t)v;
		else
			qu[i] = (uint8_t)v;
	}
}

#define DYN_CHUNK 32768 /* elements per task of a dynamic matmul's range and quantize */
#ifdef _OPENMP /* (artifacts build the rt with -fopenmp; its unit test does not) */
#define RT_OMP(x) _Pragma(x)
#else
#define RT_OMP(x)
#endif

/* A dynamic matmul's src: its qparams from its range and its quantized copy
 * in mm->dyn_a (in chunks over the context's threads); the output scales and
 * bias in the accumulator's units. */
static void mm_quantize(rt_matmul *mm, const float *a, int64_t n)
{
	const size_t ne = mm->dyn_elems;
	const int64_t nc = (int64_t)((ne + DYN_CHUNK - 1) / DYN_CHUNK);
	const int nt = nc > 1 && mm->p.ctx->nthreads > 1 ? mm->p.ctx->nthreads : 1;
	(void)nt;
	float lo = 0, hi = 0;
	RT_OMP("omp parallel for num_threads(nt) if (nt > 1) schedule(static) reduction(min : lo) reduction(max : hi)")
	for (int64_t c = 0; c < nc; ++c) {
		const size_t b = (size_t)c * DYN_CHUNK, e = b + DYN_CHUNK < ne ? b + DYN_CHUNK : ne;
		float l, h;
		range_f32(a + b, e - b, &l, &h);
		lo = l < lo ? l : lo, hi = h > hi ? h : hi;
	}
	const float qmin = (float)mm->dyn_qmin, qmax = (float)mm->dyn_qmax;
	float s = (hi - lo) / (qmax - qmin);
	s = s > mm->dyn_eps ? s : mm->dyn_eps;
	float z = qmin - rintf(lo / s);
	z = z < qmin ? qmin : z > qmax ? qmax : z;
	mm->dyn_zp = (int32_t)z;
	const float inv = 1.0f / s;
	RT_OMP("omp parallel for num_threads(nt) if (nt > 1) schedule(static)")
	for (int64_t c = 0; c < nc; ++c) {
		const size_t b = (size_t)c * DYN_CHUNK, e = b + DYN_CHUNK < ne ? b + DYN_CHUNK : ne;
		quantize_f32(a + b, e - b, inv, z, qmin, qmax, mm->dyn_s8, (char *)mm->dyn_a + b);
	}
	for (int64_t o = 0; o < n; ++o) {
		mm->dyn_oscale[o] = s * mm->dyn_wscale[o];
		if (mm->dyn_bias)
			mm->dyn_bq[o] = (float)((double)mm->dyn_bias[o] / ((double)s * mm->dyn_wscale[o]));
	}
}

/* An m_runtime matmul's a and c memories for m rows. */
static int mm_bind_m(rt_matmul *mm, int64_t m, char *err, size_t errlen)
{
	int rc = RT_OK, nb = mm->nd - 2;
	dnnl_memory_desc_t a_md, c_md;
	mm->adims[nb] = mm->cdims[nb] = m;
	DN(md_dense(&a_md, mm->nd, mm->adims, mm->a_order, mm->dt));
	DN(md_dense(&c_md, mm->nd, mm->cdims, NULL, mm->cdt));
	for (int i = ARG_SRC; i <= ARG_DST; i += ARG_DST - ARG_SRC) {
		if (mm->p.mem[i])
			dnnl_memory_destroy(mm->p.mem[i]);
		mm->p.mem[i] = NULL;
	}
	mm->m = 0;
	DN(dnnl_memory_create(&mm->p.mem[ARG_SRC], &a_md, mm->p.ctx->engine, DNNL_MEMORY_NONE));
	DN(dnnl_memory_create(&mm->p.mem[ARG_DST], &c_md, mm->p.ctx->engine, DNNL_MEMORY_NONE));
	mm->p.dst_bytes = dnnl_memory_desc_get_size(&c_md);
	mm->m = m;
	return RT_OK;
fail:
	return rc;
}

/* A matmul of one row with constant weights (a classifier at batch 1, an
 * SE block's convs, a decoder step) is a stream over the weights: oneDNN's
 * brgemm reads its blocked copy at ~14 GB/s on one Zen 4 core where a
 * plain stream reads at ~20, so alexnet's and vgg's classifiers, most of
 * their time at batch 1, ran 30% under the bandwidth.  Two layouts, by k:
 * long rows ([n, k], four dotted at a time) where the prefetchers keep up
 * with four streams; under RT_GEMV_ROWS_K, where four short streams start
 * cold too often, panels of 64 outputs ([k][64], the last 16..64 wide and
 * zero-padded) read as one stream (measured cold: 960x1280 0.30 ms
 * against 0.37 as rows; 4096x9216 8.7 ms against 7.3).  Split over threads
 * by outputs, each computed by one thread in a fixed order: the same bits
 * at any thread count.  The post-ops are applied per element here.
 * RT_GEMV=0 in the environment turns it off. */
#define RT_GEMV_ROWS_K 2048
#define RT_GEMV_PANEL 64

static int mm_gemv_ok(const rt_matmul_desc *d)
{
	return gemv_enabled() && d->dtype == RT_F32 && !d->q && !d->nbatch && d->b_const && !d->m_runtime &&
	       !d->a_trans && d->m == 1 && (!d->has_bias || (d->bias_const && !d->bias_full));
}

/* The post-ops of coil's own product (cgemm_run) applied on each tile of c
 * as it is written, in 8-lane code with vmath's functions (the generated
 * kernels' own exp, tanh, sigmoid, gelu).  post_src[i] as rt_matmul_run
 * takes them; the residual taken as sgemm's beta would be (skip) passed
 * over.  (As a pass over c after dnnl_sgemm it measured no faster than
 * oneDNN's binary pass it would replace: ~1.7-1.9 ns an element with an
 * erf GELU on an AVX2 EPYC either way, vmath's gelu itself ~1.7 in L1.) */
typedef struct mm_epi {
	const float *bias; /* [n] (beta * bias), or NULL */
	int npost, skip;
	rt_post post[RT_MAX_POST];
	int64_t bm[RT_MAX_POST], bn[RT_MAX_POST]; /* binary operand i broadcast as [bm][bn] over [m][n] */
} mm_epi;

/* An eltwise post-op on one float (the gemv's and the tails') */
static float epi_elt1(const rt_post *q, float x)
{
	float y = x;
	switch (q->kind) {
	case RT_RELU: y = x > 0 ? x : 0; break;
	case RT_LEAKY_RELU: y = x > 0 ? x : q->a * x; break;
	case RT_GELU_ERF: y = coil_geluf(x); break;
	case RT_GELU_TANH: y = 0.5f * x * (1 + coil_tanhf(0.7978845608f * (x + 0.044715f * x * x * x))); break;
	case RT_SILU: y = x * coil_sigmoidf(x); break;
	case RT_SIGMOID: y = coil_sigmoidf(x); break;
	case RT_TANH: y = coil_tanhf(x); break;
	case RT_HARDSWISH: y = x * fminf(fmaxf(x + 3, 0), 6) / 6; break;
	case RT_HARDSIGMOID: y = fminf(fmaxf(x / 6 + 0.5f, 0), 1); break;
	case RT_CLAMP: y = fminf(fmaxf(x, q->a), q->b); break;
	case RT_ELU: y = x > 0 ? x : q->a * expm1f(x); break;
	case RT_LINEAR: y = q->a * x + q->b; break;
	case RT_ROUND: y = nearbyintf(x); break;
	default: break;
	}
	return q->scale != 0 && q->scale != 1 ? y * q->scale : y;
}

static inline __attribute__((always_inline)) void epi_elt8(const rt_post *q, cw_v8 *vp)
{
#ifdef __AVX2__
	cw_v8 v = *vp;
	const cw_v8 z = CW_SPLAT(0.f), h = CW_SPLAT(.5f), one = CW_SPLAT(1.f);
	switch (q->kind) {
	case RT_GELU_ERF: v = (cw_v8)coil_gelu8((__m256)v); break;
	case RT_GELU_TANH: {
		const cw_v8 t = (cw_v8)coil_tanh8((__m256)(CW_SPLAT(0.7978845608f) * CW_FMA(CW_SPLAT(0.044715f) * v, v * v, v)));
		v = h * v * (one + t);
		break;
	}
	case RT_SILU: v = v * (cw_v8)coil_sigmoid8((__m256)v); break;
	case RT_SIGMOID: v = (cw_v8)coil_sigmoid8((__m256)v); break;
	case RT_TANH: v = (cw_v8)coil_tanh8((__m256)v); break;
	case RT_ELU: v = CW_SEL(v > z, v, CW_SPLAT(q->a) * ((cw_v8)coil_exp8((__m256)v) - one)); break;
	case RT_ROUND: v = (cw_v8)_mm256_round_ps((__m256)v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); break;
	default: /* the kinds the conv kernels take */
		cw_posts(q, 1, &v, NULL);
		*vp = v;
		return;
	}
	if (q->scale != 0 && q->scale != 1)
		v *= CW_SPLAT(q->scale);
	*vp = v;
#else
	for (int l = 0; l < 8; l++)
		(*vp)[l] = epi_elt1(q, (*vp)[l]);
#endif
}

/* x * sigmoid(x) as x / (1 + exp(-x)), exp(-x) limited to [2^-126, 2^127]:
 * within 2 ulp of it where that is 1e-35 or more in size, within 1.1e-36
 * below; x below -88 divides by inf: -0 (it was x / e^88 there, -2.06 for
 * -FLT_MAX), and -inf NaN like eager's x / (1 + exp(-x)) (conv_tail_at).
 * The clamps as vminps / vmaxps (a NaN -x gives the bound; x / d stays
 * NaN), 2^fn from the rounding constant's bits (no convert), x below -88
 * one blend, and exp(r) on |r| <= ln2/2 as 1 + r + r^2 q(r), q of degree 4
 * (0.1 ulp of the float result; Cephes' degree 5 had 0.02): every float
 * sampled 1 in 97 the same 2 ulp, 0.57 -> 0.44 ns an element in L1 on an
 * AVX2 EPYC, interleaved.  efficientnet_b0 takes 6.2M SiLUs an image here
 * (every conv's, depthwise ones too): per kernel in one process, b1 14.6
 * -> 13.1 ms at one thread, 7.9 -> 7.5 at two, b8 108 -> 101 at one. */
static inline __attribute__((always_inline)) void silu8(cw_v8 *vp)
{
	const cw_v8 x = *vp, big = CW_SPLAT(12582912.f); /* 1.5 * 2^23: fb's low bits hold fn */
	const cw_v8 t = CW_MAX(CW_MIN(-x, CW_SPLAT(88.f)), CW_SPLAT(-87.f));
	const cw_v8 fb = CW_FMA(t, CW_SPLAT(1.44269504088896341f), big), fn = fb - big;
	cw_v8 r = CW_FMA(fn, CW_SPLAT(-0.693359375f), t);
	r = CW_FMA(fn, CW_SPLAT(2.12194440e-4f), r);
	cw_v8 p = CW_FMA(CW_SPLAT(1.37805939e-3f), r, CW_SPLAT(8.37312452e-3f));
	p = CW_FMA(p, r, CW_SPLAT(4.16695364e-2f));
	p = CW_FMA(p, r, CW_SPLAT(1.66664720e-1f));
	p = CW_FMA(p, r, CW_SPLAT(4.99999851e-1f));
	p = CW_FMA(CW_FMA(p, r, CW_SPLAT(1.f)), r, CW_SPLAT(1.f));
	const cw_v8i e2 = ((cw_v8i)fb - (cw_v8i)big + 127) << 23; /* 2^fn, fn in [-126, 127] */
	const cw_v8 d = CW_FMA(p, (cw_v8)e2, CW_SPLAT(1.f));
	*vp = x / CW_BLEND(x < CW_SPLAT(-88.f), CW_SPLAT(INFINITY), d);
}

/* t's post-ops on v (r: the residual's 8 floats there) */
static inline __attribute__((always_inline)) void tail_vec(const post_tail *t, cw_v8 *v, const float *r)
{
	for (int q = 0; q < t->n; q++) {
		const rt_post *o = &t->op[q];
		if (o->kind == RT_ADD_SAME)
			*v += CW_LD(r);
		else if (o->kind == RT_SILU) {
			silu8(v);
			if (o->scale != 0 && o->scale != 1)
				*v *= CW_SPLAT(o->scale);
		} else
			epi_elt8(o, v);
	}
}

/* y = t's post-ops over x (x == y, or the workspace with res the
 * residual), element by element; a SiLU alone and a SiLU and the residual
 * in loops of their own */
static void tail_apply(const post_tail *t, const float *x, float *y, const float *res, int nt)
{
	const int64_t n = t->count, nv = n / 8;
	const int plain = t->op[0].kind == RT_SILU && (t->op[0].scale == 0 || t->op[0].scale == 1);
	const int kind = plain && t->n == 1 ? 1 : plain && t->n == 2 && t->res == 1 ? 2 : 0;
	(void)nt;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1 && n > 65536)
#endif
	{
#ifdef _OPENMP
		const int64_t th = omp_get_thread_num(), nth = omp_get_num_threads();
#else
		const int64_t th = 0, nth = 1;
#endif
		const int64_t i0 = nv * th / nth * 8, i1 = nv * (th + 1) / nth * 8;
		if (kind == 1)
			for (int64_t i = i0; i < i1; i += 8) {
				cw_v8 v = CW_LD(x + i);
				silu8(&v);
				CW_ST(y + i, v);
			}
		else if (kind == 2)
			for (int64_t i = i0; i < i1; i += 8) {
				cw_v8 v = CW_LD(x + i);
				silu8(&v);
				CW_ST(y + i, v + CW_LD(res + i));
			}
		else
			for (int64_t i = i0; i < i1; i += 8) {
				cw_v8 v = CW_LD(x + i);
				tail_vec(t, &v, res ? res + i : NULL);
				CW_ST(y + i, v);
			}
	}
	if (nv * 8 < n) { /* the last elements, through a vector of 8 */
		float xb[8] = {0}, rb[8] = {0};
		const int64_t at = nv * 8, w = n - at;
		memcpy(xb, x + at, (size_t)w * sizeof(float));
		if (res)
			memcpy(rb, res + at, (size_t)w * sizeof(float));
		cw_v8 v = CW_LD(xb);
		tail_vec(t, &v, rb);
		CW_ST(xb, v);
		memcpy(y + at, xb, (size_t)w * sizeof(float));
	}
}

/* *vp (element (i, j..j+8) of an m x n result) combined with binary post-op q's operand */
static inline __attribute__((always_inline)) void epi_bin(const mm_epi *e, int q, cw_v8 *vp, int64_t i, int64_t j,
							  int64_t n, const void *const *src)
{
	const rt_post *o = &e->post[q];
	const float *s = src[q];
	const cw_v8 v = *vp, w = o->kind == RT_ADD_SAME ? CW_LD(s + i * n + j)
				: e->bn[q] == 1 ? CW_SPLAT(s[e->bm[q] == 1 ? 0 : i])
						: CW_LD(s + (e->bm[q] == 1 ? 0 : i * n) + j);
	*vp = o->kind <= RT_ADD_BCAST ? v + w : o->kind == RT_MUL_BCAST ? v * w : o->kind == RT_SUB_BCAST ? v - w : v / w;
}

/* Element (i, j..j+8) of an m x n result: the bias, the post-ops */
static inline __attribute__((always_inline)) void epi_vec(const mm_epi *e, cw_v8 *vp, int64_t i, int64_t j, int64_t n,
							  const void *const *src)
{
	cw_v8 v = *vp;
	if (e->bias)
		v += CW_LD(e->bias + j);
	for (int q = 0; q < e->npost; q++) {
		const rt_post *o = &e->post[q];
		if (q == e->skip)
			continue;
		if (o->kind < RT_ADD_SAME) {
			epi_elt8(o, &v);
			continue;
		}
		epi_bin(e, q, &v, i, j, n, src);
	}
	*vp = v;
}

/* c[i][j0, j0 + nv) of an m x n result (c: row i), in place */
static inline __attribute__((always_inline)) void epi_row(const mm_epi *e, float *c, int64_t i, int64_t j0, int64_t nv,
							  int64_t n, const void *const *src)
{
	int64_t j = j0;
	for (; j + 8 <= j0 + nv; j += 8) {
		cw_v8 v = CW_LD(c + j);
		epi_vec(e, &v, i, j, n, src);
		CW_ST(c + j, v);
	}
	for (; j < j0 + nv; j++) {
		float x = c[j] + (e->bias ? e->bias[j] : 0.f);
		for (int q = 0; q < e->npost; q++) {
			const rt_post *o = &e->post[q];
			if (q == e->skip)
				continue;
			if (o->kind < RT_ADD_SAME) {
				x = epi_elt1(o, x);
				continue;
			}
			const float *s = src[q];
			const float w = o->kind == RT_ADD_SAME ? s[i * n + j]
					: s[(e->bm[q] == 1 ? 0 : i * e->bn[q]) + (e->bn[q] == 1 ? 0 : j)];
			x = o->kind <= RT_ADD_BCAST ? x + w : o->kind == RT_MUL_BCAST ? x * w : o->kind == RT_SUB_BCAST ? x - w : x / w;
		}
		c[j] = x;
	}
}

/* coil's own product for the sgemm path where dnnl_sgemm is slow: few rows
 * (m <= 96; convnext's last stage, 49x768 @ 768x3072, took it 3.2-5.5 ms,
 * here 2.9-3.0; with the bias and GELU 6.0 -> 3.4-3.8 ms, before sg_pad,
 * which brought sgemm to 2.6-3.1 there: the two are now within this
 * machine's noise on few rows, 8x768 @ 768x3072 0.77-0.94 against
 * 0.72-0.81 with GELU, 49x3072 @ 3072x768 3.6-3.7 against 3.3-3.6).  More
 * rows are left to sgemm: its product alone is within ~10% of this one
 * there, but the epilogue on each tile costs more than oneDNN's pass over c
 * where k is short (3136x96 @ 96x384 with the bias and GELU: 4.5-5.8 ms
 * against 3.7).  b packed
 * once as [n/16][k][16] (zeros past n) in place of oneDNN's plain copy, each
 * 6x16 tile of c summed over the whole k in registers (cwino's kernel) and
 * written through the epilogue.  RT_CGEMM=0 / 1 as RT_CWINO. */
#define CG_ROW(r)                                                                                                      \
	if (R > r) {                                                                                                   \
		const float s_ = a[r * K + k];                                                                         \
		const cw_v8 a_ = CW_SPLAT(s_);                                                                         \
		lo##r = CW_FMA(a_, ul, lo##r);                                                                         \
		hi##r = CW_FMA(a_, uh, hi##r);                                                                         \
	}
#define CG_STROW(r)                                                                                                    \
	if (R > r)                                                                                                     \
		CW_ST(t + r * 16, lo##r * al), CW_ST(t + r * 16 + 8, hi##r * al);
static inline __attribute__((always_inline)) void cgemm_tile(int R, int64_t K, const float *a, const float *b,
							     float *t, float alpha)
{
	cw_v8 lo0 = CW_SPLAT(0.f), lo1 = lo0, lo2 = lo0, lo3 = lo0, lo4 = lo0, lo5 = lo0;
	cw_v8 hi0 = lo0, hi1 = lo0, hi2 = lo0, hi3 = lo0, hi4 = lo0, hi5 = lo0;
	for (int64_t k = 0; k < K; k++) {
		const cw_v8 ul = CW_LD(b + k * 16), uh = CW_LD(b + k * 16 + 8);
		CG_ROW(0) CG_ROW(1) CG_ROW(2) CG_ROW(3) CG_ROW(4) CG_ROW(5)
	}
	const cw_v8 al = CW_SPLAT(alpha);
	CG_STROW(0) CG_STROW(1) CG_STROW(2) CG_STROW(3) CG_STROW(4) CG_STROW(5)
}
#undef CG_ROW
#undef CG_STROW

/* The R x 16 tile t written to c at (i0, j0) through the epilogue, each
 * post-op over the whole tile in turn: 2R independent vectors, where one
 * vector at a time through every post-op left a GELU's latency exposed
 * (3136x96 @ 96x384 with the bias and GELU 7.3-8.0 -> 4.5-5.8 ms, AVX2 EPYC) */
static inline __attribute__((always_inline)) void epi_tile(const mm_epi *e, const float *t, int R, int64_t i0,
							   int64_t j0, int64_t n, float *c, const float *res,
							   const void *const *src)
{
	cw_v8 v[12];
	for (int x = 0; x < 2 * R; x++) {
		const int64_t i = i0 + x / 2, j = j0 + x % 2 * 8;
		v[x] = CW_LD(t + x * 8);
		if (res)
			v[x] += CW_LD(res + i * n + j);
		if (e->bias)
			v[x] += CW_LD(e->bias + j);
	}
	for (int q = 0; q < e->npost; q++) {
		const rt_post *o = &e->post[q];
		if (q == e->skip)
			continue;
		if (o->kind < RT_ADD_SAME) {
			for (int x = 0; x < 2 * R; x++)
				epi_elt8(o, &v[x]);
			continue;
		}
		for (int x = 0; x < 2 * R; x++)
			epi_bin(e, q, &v[x], i0 + x / 2, j0 + x % 2 * 8, n, src);
	}
	for (int x = 0; x < 2 * R; x++)
		CW_ST(c + (i0 + x / 2) * n + j0 + x % 2 * 8, v[x]);
}

/* c[i0.., j0..j0+16) from the tile t: the residual sgemm would take (beta 1), the epilogue */
static void cgemm_block(const mm_epi *e, int R, int64_t K, int64_t N, const float *a, const float *bp, float *c,
			int64_t i0, int64_t j0, float alpha, const float *res, const void *const *src)
{
	float t[6 * 16] __attribute__((aligned(32)));
	switch (R) {
	case 6: cgemm_tile(6, K, a, bp, t, alpha); break;
	case 5: cgemm_tile(5, K, a, bp, t, alpha); break;
	case 4: cgemm_tile(4, K, a, bp, t, alpha); break;
	case 3: cgemm_tile(3, K, a, bp, t, alpha); break;
	case 2: cgemm_tile(2, K, a, bp, t, alpha); break;
	default: cgemm_tile(1, K, a, bp, t, alpha); break;
	}
	const int64_t nv = N - j0 < 16 ? N - j0 : 16;
	if (nv == 16) {
		epi_tile(e, t, R, i0, j0, N, c, res, src);
		return;
	}
	for (int r = 0; r < R; r++) { /* the last columns */
		float *cr = c + (i0 + r) * N;
		const float *rr = res ? res + (i0 + r) * N : NULL;
		for (int64_t j = 0; j < nv; j++)
			cr[j0 + j] = t[r * 16 + j] + (rr ? rr[j0 + j] : 0.f);
		epi_row(e, cr, i0 + r, j0, nv, N, src);
	}
}

/* c = alpha a b (+ res), then the epilogue; rows of a K apart.  Up to 96
 * rows every column block walks all rows (a stays in cache), more in chunks
 * of 48 against every column block. */
static void cgemm_run(const mm_epi *e, int64_t M, int64_t N, int64_t K, const float *a, const float *bp, float *c,
		      float alpha, const float *res, const void *const *src, int nt)
{
	const int64_t nb = (N + 15) / 16, mc = M <= 96 ? M : 48, nm = (M + mc - 1) / mc;
	(void)nt;
#ifdef _OPENMP
#pragma omp parallel for collapse(2) schedule(static) num_threads(nt) if (nt > 1)
#endif
	for (int64_t ib = 0; ib < nm; ib++)
		for (int64_t jb = 0; jb < nb; jb++)
			for (int64_t i = ib * mc; i < (ib + 1) * mc && i < M; i += 6) {
				const int64_t R = M - i < 6 ? M - i : 6;
				cgemm_block(e, (int)R, K, N, a + i * K, bp + jb * K * 16, c, i, jb * 16, alpha, res, src);
			}
}

/* Below AVX-512 oneDNN 2.6 runs f32 matmuls on its gemm-based kernel (gemm:jit),
 * which on an AVX2 EPYC took 1.5-2x the time its own sgemm takes for the same
 * products (convnext's 49x768 @ 768x3072: 5.9 ms in-model against 3.2;
 * 196x384 @ 384x1536: 4.7 against 3.0).  There a matmul with a constant b, a
 * fixed m > 1, no batch and a constant [n] bias or none runs as dnnl_sgemm on
 * b's packed (plain) copy, then one binary add of the scaled bias (zeros
 * without one) into c in place that carries the post-ops (the same oneDNN
 * post-op code, binary operands included); a residual sum after additions
 * only (bias, then residual: swin's projections) is sgemm's beta = 1 on c
 * holding the residual.  oneDNN 2.6's gemm:jit takes no sum after a binary
 * post-op and fell back to its reference kernel there, ~1000x slower (swin_t
 * at one thread: 53 s).  RT_SGEMM=0 in the environment turns it off. */
static int mm_sgemm_ok(const rt_matmul_desc *d)
{
	const char *e = getenv("RT_SGEMM");
	if ((e && !strcmp(e, "0")) || d->dtype != RT_F32 || d->q || !d->b_const || d->m_runtime || d->nbatch ||
	    d->a_trans || d->m < 2 || (d->has_bias && (!d->bias_const || d->bias_full)))
		return 0;
	/* a residual sum after additions only: it goes first, into sgemm's c */
	for (int i = 0, adds = 1; i < d->npost; ++i) {
		if (d->post[i].kind == RT_ADD_SAME && !adds)
			return 0;
		adds &= d->post[i].kind == RT_ADD_BCAST;
	}
	return 1;
}

/* b as cgemm_run takes it, [n/16][k][16] (zeros past n), in place of the
 * plain copy in p.mem[ARG_WEI] (shared by weight key, as that was) */
static int cgemm_pack(rt_matmul *mm, const rt_matmul_desc *d, char *err, size_t errlen)
{
	int rc = RT_OK;
	void *h = NULL;
	const int64_t K = d->k, N = d->n, nb = (N + 15) / 16;
	float *bp = calloc((size_t)(nb * K * 16), sizeof(float));
	dnnl_memory_t m = NULL;
	dnnl_memory_desc_t md;
	if (!bp)
		FAIL(RT_ENOMEM, "rt_matmul: out of memory");
	DN(dnnl_memory_get_data_handle(mm->p.mem[ARG_WEI], &h));
	const float *w = h;
	for (int64_t j = 0; j < N; j++)
		for (int64_t k = 0; k < K; k++)
			bp[(j / 16 * K + k) * 16 + j % 16] = mm->sg_btrans ? w[j * K + k] : w[k * N + j];
	DN(dnnl_memory_desc_init_by_tag(&md, 1, (dnnl_dims_t){nb * K * 16}, dnnl_f32, dnnl_a));
	if ((rc = pack_shared(mm->p.ctx, d->weight_key, &md, &md, bp, &m, err, errlen)))
		goto fail;
	if (!unshare(mm->p.ctx, mm->p.mem[ARG_WEI]))
		dnnl_memory_destroy(mm->p.mem[ARG_WEI]);
	mm->p.mem[ARG_WEI] = m;
	mm->cg = 1;
fail:
	free(bp);
	return rc;
}

/* dnnl_sgemm reads a plain b whose rows are a multiple of 2 KB apart at up to
 * 1.6x its time (4K aliasing: 128x768 @ 768x3072 11.1 -> 6.8 ms, 49x768 @
 * 768x3072 3.5 -> 2.6, 128x256 @ 256x1024 1.0 -> 0.73 with 16 floats more a
 * row, AVX2 EPYC): such a b is copied with its rows 16 floats longer, in
 * place of the plain copy (shared by weight key, as that was). */
static int sg_pad(rt_matmul *mm, const rt_matmul_desc *d, char *err, size_t errlen)
{
	int rc = RT_OK;
	void *h = NULL;
	const int64_t rows = mm->sg_btrans ? d->n : d->k, ld = mm->sg_btrans ? d->k : d->n;
	mm->sg_ldb = ld;
	if (ld % 512)
		return RT_OK;
	float *bp = malloc((size_t)(rows * (ld + 16)) * sizeof(float));
	dnnl_memory_t m = NULL;
	dnnl_memory_desc_t md;
	if (!bp)
		FAIL(RT_ENOMEM, "rt_matmul: out of memory");
	DN(dnnl_memory_get_data_handle(mm->p.mem[ARG_WEI], &h));
	for (int64_t r = 0; r < rows; r++) {
		memcpy(bp + r * (ld + 16), (const float *)h + r * ld, (size_t)ld * sizeof(float));
		memset(bp + r * (ld + 16) + ld, 0, 16 * sizeof(float));
	}
	DN(dnnl_memory_desc_init_by_tag(&md, 2, (dnnl_dims_t){rows, ld + 16}, dnnl_f32, dnnl_ab));
	if ((rc = pack_shared(mm->p.ctx, d->weight_key, &md, &md, bp, &m, err, errlen)))
		goto fail;
	if (!unshare(mm->p.ctx, mm->p.mem[ARG_WEI]))
		dnnl_memory_destroy(mm->p.mem[ARG_WEI]);
	mm->p.mem[ARG_WEI] = m;
	mm->sg_ldb = ld + 16;
fail:
	free(bp);
	return rc;
}

/* The sgemm path's setup, once the matmul's own primitive is made and b packed:
 * taken where that primitive is gemm:jit (or oneDNN's reference kernel, its
 * answer to post-op chains its fast kernels do not take) and b's packed copy is
 * plain; else nothing changes. */
static int sgemm_setup(rt_matmul *mm, const rt_matmul_desc *d, const float *bias, float alpha, float beta,
		       char *err, size_t errlen)
{
	int rc = RT_OK;
	dnnl_post_ops_t po = NULL;
	dnnl_primitive_attr_t attr = NULL;
	const dnnl_memory_desc_t *w = NULL;
	const char *impl = prim_impl(&mm->p);
	if ((strncmp(impl, "gemm:jit", 8) && strncmp(impl, "ref", 3)) || dnnl_memory_get_memory_desc(mm->p.mem[ARG_WEI], &w) || !w ||
	    w->format_kind != dnnl_blocked || w->format_desc.blocking.inner_nblks)
		return RT_OK;
	const dnnl_dims_t *st = &w->format_desc.blocking.strides;
	if ((*st)[0] == d->n && (*st)[1] == 1)
		mm->sg_btrans = 0;
	else if ((*st)[0] == 1 && (*st)[1] == d->k)
		mm->sg_btrans = 1;
	else
		return RT_OK;
	dnnl_memory_desc_t c_md, v_md, bin_md[RT_MAX_POST];
	int bin_idx[RT_MAX_POST] = {0};
	const int64_t cd[2] = {d->m, d->n}, vd[2] = {1, d->n};
	prim *p = &mm->sgp;
	p->ctx = mm->p.ctx;
	rt_post post[RT_MAX_POST];
	mm->sg_sum = -1;
	for (int i = 0; i < d->npost; ++i) { /* the sum done by sgemm: an identity here, the indices kept */
		post[i] = d->post[i];
		if (post[i].kind == RT_ADD_SAME)
			post[i] = (rt_post){.kind = RT_LINEAR, .a = 1}, mm->sg_sum = i;
	}
	if (!(mm->sg_bias = calloc((size_t)d->n, sizeof(float))))
		FAIL(RT_ENOMEM, "rt_matmul: out of memory");
	for (int64_t j = 0; d->has_bias && j < d->n; ++j)
		mm->sg_bias[j] = beta * bias[j];
	if (d->m <= 96 && cw_wanted("RT_CGEMM")) { /* few rows: coil's own product, its post-ops on each tile */
		mm_epi *e = calloc(1, sizeof *e);
		if (!(mm->epi = e))
			FAIL(RT_ENOMEM, "rt_matmul: out of memory");
		e->bias = d->has_bias ? mm->sg_bias : NULL;
		e->npost = d->npost, e->skip = mm->sg_sum;
		for (int i = 0; i < d->npost; ++i) {
			int64_t dm[2] = {1, 1};
			e->post[i] = d->post[i];
			if (d->post[i].kind > RT_ADD_SAME)
				bin_dims(&d->post[i], 2, dm);
			e->bm[i] = dm[0], e->bn[i] = dm[1];
		}
		mm->sg = 1, mm->sg_alpha = alpha, mm->k = d->k, mm->n = d->n;
		if ((rc = cgemm_pack(mm, d, err, errlen)))
			goto fail;
		goto done;
	}
	DN(md_dense(&c_md, 2, cd, NULL, dnnl_f32));
	DN(md_dense(&v_md, 2, vd, NULL, dnnl_f32));
	DN(dnnl_post_ops_create(&po));
	if ((rc = build_post_ops(po, 0, d->npost, post, 2, cd, NULL, 0, p, bin_md, bin_idx, dnnl_f32, NULL, err,
				 errlen)))
		goto fail;
	if (!(attr = make_attr(po, &rc, err, errlen)))
		goto fail;
	dnnl_binary_desc_t bd;
	DN(dnnl_binary_desc_init(&bd, dnnl_binary_add, &c_md, &v_md, &c_md));
	if ((rc = prim_finish(p, &bd, attr, bin_md, bin_idx, err, errlen, "binary")))
		goto fail;
	if (!strncmp(prim_impl(p), "ref", 3)) { /* a slow pass would undo the gain */
		prim_free(p);
		memset(p, 0, sizeof *p);
		free(mm->sg_bias);
		mm->sg_bias = NULL;
		goto done;
	}
	DN(dnnl_memory_create(&p->mem[ARG_WEI], &v_md, p->ctx->engine, mm->sg_bias));
	p->arg_id[ARG_WEI] = DNNL_ARG_SRC_1;
	if ((rc = sg_pad(mm, d, err, errlen))) /* the matmul's own primitive is not run past here */
		goto fail;
	mm->sg = 1, mm->sg_alpha = alpha, mm->k = d->k, mm->n = d->n;
done:
	rc = RT_OK;
fail: /* (and done) */
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	if (po)
		dnnl_post_ops_destroy(po);
	return rc;
}

static int sgemm_run(rt_matmul *mm, const float *a, float *c, const void *const *post_src, char *err,
		     size_t errlen)
{
	int rc = RT_OK;
	void *b = NULL;
	DN(dnnl_memory_get_data_handle(mm->p.mem[ARG_WEI], &b));
	const dnnl_dim_t M = mm->m, N = mm->n, K = mm->k;
	const float *r = mm->sg_sum >= 0 ? post_src[mm->sg_sum] : NULL;
	if (mm->cg) {
#ifdef _OPENMP
		const int nt = mm->p.ctx->nthreads > 0 ? mm->p.ctx->nthreads : omp_get_max_threads();
#else
		const int nt = 1;
#endif
		cgemm_run(mm->epi, M, N, K, a, b, c, mm->sg_alpha, r, post_src, nt);
		return RT_OK;
	}
	if (r && r != c)
		memcpy(c, r, (size_t)(M * N) * sizeof *c);
	DN(dnnl_sgemm('N', mm->sg_btrans ? 'T' : 'N', M, N, K, mm->sg_alpha, a, K, b, mm->sg_ldb, r ? 1.f : 0.f,
		      c, N));
	void *ptr[MAX_ARGS] = {0};
	bind_posts(&mm->sgp, post_src, c, ptr);
	ptr[ARG_SRC] = c, ptr[ARG_DST] = c;
	return prim_exec(&mm->sgp, ptr, MAX_ARGS, err, errlen);
fail:
	return rc;
}

static float gemv_post(const rt_matmul *mm, float x, int64_t j, const float *const *src)
{
	for (int q = 0; q < mm->p.npost; ++q) {
		const rt_post *o = &mm->post[q];
		if (mm->p.role[q] == ROLE_SUM) {
			x += src[q][j];
			continue;
		}
		if (mm->p.role[q] == ROLE_BIN) {
			int64_t dm[2];
			bin_dims(o, 2, dm);
			const float v = src[q][dm[1] == 1 ? 0 : j];
			x = o->kind == RT_ADD_BCAST ? x + v : o->kind == RT_MUL_BCAST ? x * v
			  : o->kind == RT_SUB_BCAST ? x - v : x / v;
			continue;
		}
		x = epi_elt1(o, x);
	}
	return x;
}

static void gemv_store(const rt_matmul *mm, float *c, int64_t j, int64_t nj, const float *s,
		       const float *const *src)
{
	for (int64_t t = 0; t < nj; ++t) {
		const float v = mm->galpha * s[t] + (mm->gbias ? mm->gbias[j + t] : 0);
		c[j + t] = mm->p.npost ? gemv_post(mm, v, j + t, src) : v;
	}
}

/* c[j0..j1) from [n, k] rows, four at a time */
static void gemv_rows(const rt_matmul *mm, const float *x, float *c, int64_t j0, int64_t j1,
		      const float *const *src)
{
	const int64_t K = mm->k;
	for (int64_t j = j0; j < j1; j += 4) {
		const int64_t nj = j1 - j < 4 ? j1 - j : 4;
		const float *w0 = mm->gw + j * K;
		const float *w1 = nj > 1 ? w0 + K : w0, *w2 = nj > 2 ? w0 + 2 * K : w0,
			    *w3 = nj > 3 ? w0 + 3 * K : w0;
		float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#ifdef _OPENMP
#pragma omp simd reduction(+ : s0, s1, s2, s3)
#endif
		for (int64_t k = 0; k < K; ++k) {
			const float xk = x[k];
			s0 += w0[k] * xk, s1 += w1[k] * xk, s2 += w2[k] * xk, s3 += w3[k] * xk;
		}
		const float s[4] = {s0, s1, s2, s3};
		gemv_store(mm, c, j, nj, s, src);
	}
}

/* one panel of W outputs: [k][W] */
static inline void gemv_panel(const float *restrict P, const float *restrict x, int64_t K, int W,
			      float *restrict acc)
{
	for (int t = 0; t < W; ++t)
		acc[t] = 0;
	for (int64_t k = 0; k < K; ++k) {
		const float xk = x[k];
		for (int t = 0; t < W; ++t)
			acc[t] += P[k * W + t] * xk;
	}
}

/* c[64 p0 .. 64 p1) from panels p0..p1 */
static void gemv_panels(const rt_matmul *mm, const float *x, float *c, int64_t p0, int64_t p1,
			const float *const *src)
{
	const int64_t K = mm->k, N = mm->n;
	float acc[RT_GEMV_PANEL];
	for (int64_t p = p0; p < p1; ++p) {
		const int64_t j = p * RT_GEMV_PANEL, nj = N - j < RT_GEMV_PANEL ? N - j : RT_GEMV_PANEL;
		const float *P = mm->gw + j * K;
		switch ((nj + 15) / 16) { /* constant widths: the inner loop in vector registers */
		case 1: gemv_panel(P, x, K, 16, acc); break;
		case 2: gemv_panel(P, x, K, 32, acc); break;
		case 3: gemv_panel(P, x, K, 48, acc); break;
		default: gemv_panel(P, x, K, 64, acc); break;
		}
		gemv_store(mm, c, j, nj, acc, src);
	}
}

static void gemv_run(const rt_matmul *mm, const float *a, float *c, const void *const *post_src)
{
	const float *const *src = (const float *const *)post_src;
	const int64_t unit = mm->panels ? RT_GEMV_PANEL : 4, nu = (mm->n + unit - 1) / unit;
#ifdef _OPENMP
	/* a thread is worth it past ~64 KiB of weights */
	const int nt = mm->gemv_nt > 1 && mm->n * mm->k >= 16384 ? mm->gemv_nt : 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
	{
#ifdef _OPENMP
		const int t = nt > 1 ? omp_get_thread_num() : 0, T = nt > 1 ? omp_get_num_threads() : 1;
#else
		const int t = 0, T = 1;
#endif
		const int64_t u0 = nu * t / T, u1 = nu * (t + 1) / T;
		if (u0 < u1 && mm->panels)
			gemv_panels(mm, a, c, u0, u1, src);
		else if (u0 < u1)
			gemv_rows(mm, a, c, 4 * u0, 4 * u1 < mm->n ? 4 * u1 : mm->n, src);
	}
}

/* b (as given: [k, n], or [n, k] with b_trans) into rows or panels; the bias times beta */
static int gemv_setup(rt_matmul *mm, const rt_matmul_desc *d, const float *b, const float *bias,
		      float alpha, float beta, char *err, size_t errlen)
{
	const int64_t K = d->k, N = d->n;
	mm->gemv = 1;
	mm->k = K, mm->n = N, mm->galpha = alpha;
	mm->panels = K < RT_GEMV_ROWS_K;
#ifdef _OPENMP
	mm->gemv_nt = mm->p.ctx->nthreads > 0 ? mm->p.ctx->nthreads : omp_get_max_threads();
#endif
	memcpy(mm->post, d->post, sizeof mm->post);
	/* panels: every one 64 wide but the last, rounded up to 16 */
	const int64_t np = mm->panels ? (N + 15) / 16 * 16 : N;
	mm->gw_bytes = (size_t)np * (size_t)K * sizeof(float);
	mm->gw = aligned_alloc(64, round64(mm->gw_bytes));
	if (!mm->gw)
		return seterr(err, errlen, RT_ENOMEM, "rt_matmul: out of memory");
	for (int64_t j = 0; j < np; ++j) {
		const int64_t j0 = j / RT_GEMV_PANEL * RT_GEMV_PANEL,
			      w = np - j0 < RT_GEMV_PANEL ? np - j0 : RT_GEMV_PANEL;
		for (int64_t k = 0; k < K; ++k) {
			const float v = j >= N ? 0 : d->b_trans ? b[j * K + k] : b[k * N + j];
			if (mm->panels)
				mm->gw[j0 * K + k * w + (j - j0)] = v;
			else
				mm->gw[j * K + k] = v;
		}
	}
	if (d->has_bias) {
		if (!(mm->gbias = malloc((size_t)N * sizeof(float))))
			return seterr(err, errlen, RT_ENOMEM, "rt_matmul: out of memory");
		for (int64_t j = 0; j < N; ++j)
			mm->gbias[j] = beta * bias[j];
	}
	return RT_OK;
}

static int mm_create(rt_ctx *ctx, const rt_matmul_desc *d, const void *b_const_data, const void *bias_const,
		     rt_matmul **out, char *err, size_t errlen);

/* sum_tail_at for a matmul: not for an m given at run (refused there
 * instead) or int8 */
static int mm_tail_at(const rt_matmul_desc *d)
{
	return !d || d->q || d->dtype != RT_F32 || d->m_runtime ? -1 : sum_tail_at(d->post, d->npost);
}

RT_API int rt_matmul_create(rt_ctx *ctx, const rt_matmul_desc *d, const void *b_const_data,
			    const void *bias_const, rt_matmul **out, char *err, size_t errlen)
{
	int rc = mm_create(ctx, d, b_const_data, bias_const, out, err, errlen);
	const int at = rc == RT_OK ? mm_tail_at(d) : -1;
	if (at < 0 || strncmp(rt_matmul_impl(*out), "ref", 3))
		return rc;
	rt_matmul_destroy(*out);
	*out = NULL;
	rt_matmul_desc ds = *d;
	ds.npost = at;
	if ((rc = mm_create(ctx, &ds, b_const_data, bias_const, out, err, errlen)))
		return rc;
	rt_matmul *mm = *out;
	int64_t count = d->m * d->n;
	for (int i = 0; i < d->nbatch; ++i)
		count *= d->batch_a[i] > d->batch_b[i] ? d->batch_a[i] : d->batch_b[i];
	mm->tail_ws = mm->p.scratch_bytes > mm->sgp.scratch_bytes ? mm->p.scratch_bytes : mm->sgp.scratch_bytes;
	if ((rc = tail_make(ctx, &mm->tail, d->post, at, d->npost, count, &mm->tail_ws, err, errlen))) {
		rt_matmul_destroy(mm);
		*out = NULL;
	}
	return rc;
}

static int mm_create(rt_ctx *ctx, const rt_matmul_desc *d, const void *b_const_data, const void *bias_const,
		     rt_matmul **out, char *err, size_t errlen)
{
	int rc = RT_OK, prev = 0, entered = 0;
	dnnl_post_ops_t po = NULL;
	dnnl_primitive_attr_t attr = NULL;
	rt_matmul *mm = NULL;
	float *scaled = NULL;
	if (!out)
		return seterr(err, errlen, RT_EINVAL, "rt_matmul_create: out is NULL");
	*out = NULL;
	if (!ctx || !d)
		return seterr(err, errlen, RT_EINVAL, "rt_matmul_create: NULL ctx or desc");
	if (d->q && quant_check(d->q, d->dtype, 1, err, errlen) != RT_OK)
		return RT_EINVAL;
	if (d->q && int8_check(err, errlen) != RT_OK)
		return RT_EUNSUP;
	if (!d->q && d->dtype != RT_F32 && d->dtype != RT_BF16)
		return seterr(err, errlen, RT_EUNSUP, "rt_matmul: dtype %d not supported",
			      (int)d->dtype);
	if (d->q && (!d->b_const || d->m_runtime || (d->has_bias && !d->bias_const) || d->nbatch))
		return seterr(err, errlen, RT_EUNSUP, "rt_matmul: int8 needs a constant b and bias, a fixed m, no batch");
	const int bf = d->dtype == RT_BF16;
	const dnnl_data_type_t dt = rt_dnnl_dt(d->dtype);
	for (int i = 0; bf && d->dst_f32 && i < d->npost; ++i)
		if (d->post[i].kind == RT_ADD_SAME)
			return seterr(err, errlen, RT_EUNSUP, "rt_matmul: an f32 c with a residual sum");
	if (d->nbatch < 0 || d->nbatch > RT_MAX_BATCH)
		return seterr(err, errlen, RT_EINVAL, "rt_matmul: nbatch %d not in 0..%d",
			      d->nbatch, RT_MAX_BATCH);
	if (d->m < 1 || d->k < 1 || d->n < 1)
		return seterr(err, errlen, RT_EINVAL, "rt_matmul: m, k, n must be positive");
	for (int i = 0; i < d->nbatch; ++i)
		if (d->batch_a[i] < 1 || d->batch_b[i] < 1 ||
		    (d->batch_a[i] != d->batch_b[i] && d->batch_a[i] != 1 && d->batch_b[i] != 1))
			return seterr(err, errlen, RT_EINVAL,
				      "rt_matmul: batch dim %d: %lld vs %lld", i,
				      (long long)d->batch_a[i], (long long)d->batch_b[i]);
	if (d->b_const && !b_const_data)
		return seterr(err, errlen, RT_EINVAL, "rt_matmul: b_const without data");
	if (d->has_bias && d->bias_const && !bias_const)
		return seterr(err, errlen, RT_EINVAL, "rt_matmul: bias_const without data");
	const float alpha = d->alpha == 0 && d->beta == 0 ? 1 : d->alpha;
	const float beta = d->alpha == 0 && d->beta == 0 ? 1 : d->beta;
	if (d->has_bias && alpha == 0)
		return seterr(err, errlen, RT_EUNSUP, "rt_matmul: alpha = 0 with a bias");
	if (d->m_runtime && d->has_bias && d->bias_full)
		return seterr(err, errlen, RT_EUNSUP, "rt_matmul: a run-time m with an [m, n] bias");
	for (int i = 0; d->m_runtime && i < d->npost; ++i) {
		int64_t bd[DNNL_MAX_NDIMS];
		bin_dims(&d->post[i], d->nbatch + 2, bd);
		if (d->post[i].kind >= RT_ADD_BCAST && d->post[i].rank >= 2 && bd[d->nbatch] != 1)
			return seterr(err, errlen, RT_EUNSUP,
				      "rt_matmul: a run-time m with post-op %d's operand over m", i);
	}

	mm = calloc(1, sizeof *mm);
	if (!mm)
		return seterr(err, errlen, RT_ENOMEM, "rt_matmul_create: out of memory");
	mm->p.ctx = ctx;
	mm->m = d->m;
	mm->m_runtime = mm->p.rt_dims = d->m_runtime != 0;
	prev = threads_enter(ctx), entered = 1;

	const int nb = d->nbatch, nd = nb + 2;
	int64_t adims[6], bdims[6], cdims[6], biasdims[6];
	int a_order[6], b_order[6];
	for (int i = 0; i < nb; ++i) {
		adims[i] = d->batch_a[i], bdims[i] = d->batch_b[i];
		cdims[i] = adims[i] > bdims[i] ? adims[i] : bdims[i];
		biasdims[i] = 1;
	}
	adims[nb] = cdims[nb] = d->m_runtime ? DNNL_RUNTIME_DIM_VAL : d->m;
	adims[nb + 1] = bdims[nb] = d->k;
	bdims[nb + 1] = cdims[nb + 1] = d->n;
	biasdims[nb] = d->bias_full ? d->m : 1, biasdims[nb + 1] = d->n;
	for (int i = 0; i < nd; ++i)
		a_order[i] = b_order[i] = i;
	if (d->a_trans)
		a_order[nb] = nb + 1, a_order[nb + 1] = nb;
	if (d->b_trans)
		b_order[nb] = nb + 1, b_order[nb + 1] = nb;

	dnnl_memory_desc_t a_md, b_md, bany_md, c_md, bias_md, bin_md[RT_MAX_POST];
	int bin_idx[RT_MAX_POST] = {0};
	DN(md_dense(&a_md, nd, adims, a_order, dt));
	const dnnl_data_type_t bdt = d->q ? dnnl_s8 : dt;
	DN(md_dense(&b_md, nd, bdims, b_order, bdt));
	DN(md_dense(&c_md, nd, cdims, NULL, d->q ? rt_dnnl_dt(d->q->dst) : bf && d->dst_f32 ? dnnl_f32 : dt));
	if (d->b_const) {
		dnnl_dims_t bd;
		for (int i = 0; i < nd; ++i)
			bd[i] = bdims[i];
		DN(dnnl_memory_desc_init_by_tag(&bany_md, nd, bd, bdt, dnnl_format_tag_any));
	} else {
		bany_md = b_md;
	}
	/* bf16: a constant bias goes in f32 (converted here), a run-time one as given */
	if (d->has_bias)
		DN(md_dense(&bias_md, nd, biasdims, NULL, bf && !d->bias_const ? dnnl_bf16 : dnnl_f32));

	/* c = alpha*(a@b) + beta*bias = linear_alpha(a@b + (beta/alpha)*bias) */
	DN(dnnl_post_ops_create(&po));
	int lead = 0;
	if (alpha != 1) {
		DN(dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_linear, alpha, 0.f));
		lead = 1;
	}
	const float bscale = d->has_bias ? beta / alpha : 1;
	if (bf && d->has_bias && !d->bias_const && bscale != 1)
		FAIL(RT_EUNSUP, "rt_matmul: a bf16 run-time bias with beta/alpha %g != 1", (double)bscale);
	if ((rc = build_post_ops(po, lead, d->npost, d->post, nd, cdims, NULL, 0, &mm->p, bin_md,
				 bin_idx, dt, d->q, err, errlen)))
		goto fail;
	if (mm_gemv_ok(d)) {
		if ((rc = gemv_setup(mm, d, b_const_data, bias_const, alpha, beta, err, errlen)))
			goto fail;
		dnnl_post_ops_destroy(po);
		threads_leave(ctx, prev);
		*out = mm;
		return RT_OK;
	}
	if (!(attr = make_attr(po, &rc, err, errlen)))
		goto fail;
	if (d->q && (rc = quant_attr(attr, d->q, d->n, nd - 1, err, errlen)))
		goto fail;
	dnnl_matmul_desc_t od;
	/* constant B: the layout its packed copy already has, if the primitive takes it */
	const dnnl_memory_desc_t *pin = d->b_const && !d->m_runtime ? shared_md(ctx, d->weight_key, &bany_md) : NULL;
	if (pin && (dnnl_matmul_desc_init(&od, &a_md, pin, d->has_bias ? &bias_md : NULL, &c_md) != dnnl_success ||
		    prim_finish(&mm->p, &od, attr, bin_md, bin_idx, NULL, 0, "matmul") != RT_OK ||
		    strncmp(prim_impl(&mm->p), "brg", 3))) {
		/* only where the same fast kernel takes it (brgemm's B layout does
		 * not depend on M), never a fallback to a slower one */
		prim_reset(&mm->p);
		pin = NULL;
	}
	if (!pin) {
		DN(dnnl_matmul_desc_init(&od, &a_md, &bany_md, d->has_bias ? &bias_md : NULL, &c_md));
		if ((rc = prim_finish(&mm->p, &od, attr, bin_md, bin_idx, err, errlen, "matmul")))
			goto fail;
	}
	if (d->m_runtime) {
		/* oneDNN takes a run-time m in its shape-generic GEMM (gemm:jit);
		 * where it cannot, it offers its reference kernel: refused */
		if (!strncmp(prim_impl(&mm->p), "ref", 3))
			FAIL(RT_EUNSUP, "rt_matmul: oneDNN has no fast kernel for a run-time m here");
		mm->nd = nd;
		for (int i = 0; i < nd; ++i)
			mm->adims[i] = adims[i], mm->cdims[i] = cdims[i], mm->a_order[i] = a_order[i];
		mm->dt = dt;
		mm->cdt = bf && d->dst_f32 ? dnnl_f32 : dt;
		mm->m = 0;
	}

	mm->p.arg_id[ARG_WEI] = DNNL_ARG_WEIGHTS;
	mm->b_const = d->b_const;
	if (d->b_const) {
		const dnnl_memory_desc_t *wmd =
			dnnl_primitive_desc_query_md(mm->p.pd, dnnl_query_weights_md, 0);
		if (!wmd)
			FAIL(RT_EDNNL, "oneDNN: cannot query the weights descriptor");
		/* a generic object's plain copy is its own: never a layout to pin others to */
		const uint64_t key = d->weight_key && d->m_runtime ? d->weight_key | 1ull << 63 : d->weight_key;
		if ((rc = pack_shared(ctx, key, &b_md, wmd, b_const_data, &mm->p.mem[ARG_WEI], err, errlen)))
			goto fail;
		if (d->q && (rc = quant_mems(&mm->p, d->q, err, errlen)))
			goto fail;
	} else {
		DN(dnnl_memory_create(&mm->p.mem[ARG_WEI], &b_md, ctx->engine, DNNL_MEMORY_NONE));
	}
	if (d->q && d->q->dynamic) {
		/* the output scales, zero point and bias change with each run's src */
		dnnl_memory_desc_t s_md;
		mm->dyn = 1, mm->dyn_s8 = d->dtype == RT_S8;
		mm->dyn_qmin = d->q->qmin, mm->dyn_qmax = d->q->qmax, mm->dyn_eps = d->q->eps;
		mm->dyn_elems = (size_t)d->m * (size_t)d->k;
		mm->dyn_n = d->n;
		mm->dyn_wscale = malloc((size_t)d->n * sizeof(float));
		mm->dyn_oscale = malloc((size_t)d->n * sizeof(float));
		mm->dyn_a = malloc(mm->dyn_elems);
		if (d->has_bias) {
			mm->dyn_bias = malloc((size_t)d->n * sizeof(float));
			mm->dyn_bq = malloc((size_t)d->n * sizeof(float));
		}
		if (!mm->dyn_wscale || !mm->dyn_oscale || !mm->dyn_a || (d->has_bias && (!mm->dyn_bias || !mm->dyn_bq)))
			FAIL(RT_ENOMEM, "rt_matmul: out of memory");
		memcpy(mm->dyn_wscale, d->q->scale, (size_t)d->n * sizeof(float));
		if (d->has_bias)
			memcpy(mm->dyn_bias, bias_const, (size_t)d->n * sizeof(float));
		DN(md_dense(&s_md, 1, &d->n, NULL, dnnl_f32));
		DN(dnnl_memory_create(&mm->p.mem[ARG_OSCALE], &s_md, ctx->engine, DNNL_MEMORY_NONE));
		mm->p.arg_id[ARG_OSCALE] = DNNL_ARG_ATTR_OUTPUT_SCALES;
	}
	if (d->has_bias && mm->dyn) {
		mm->p.arg_id[ARG_BIAS] = DNNL_ARG_BIAS;
		DN(dnnl_memory_create(&mm->p.mem[ARG_BIAS], &bias_md, ctx->engine, DNNL_MEMORY_NONE));
	} else if (d->has_bias) {
		mm->p.arg_id[ARG_BIAS] = DNNL_ARG_BIAS;
		mm->bias_elems = (size_t)biasdims[nb] * (size_t)biasdims[nb + 1];
		if (d->bias_const) {
			const float *src = bias_const;
			if (bscale != 1 || bf) {
				scaled = malloc(mm->bias_elems * sizeof *scaled);
				if (!scaled)
					FAIL(RT_ENOMEM, "rt_matmul: out of memory");
				for (size_t i = 0; i < mm->bias_elems; ++i)
					scaled[i] = (bf ? bf16_f32(((const uint16_t *)bias_const)[i])
							: ((const float *)bias_const)[i]) * bscale;
				src = scaled;
			}
			if ((rc = pack(ctx, &bias_md, &bias_md, src, &mm->p.mem[ARG_BIAS], err,
				       errlen)))
				goto fail;
		} else {
			mm->bias_rt = 1;
			mm->bias_scale = bscale;
			if (bscale != 1) {
				mm->bias_buf = malloc(mm->bias_elems * sizeof *mm->bias_buf);
				if (!mm->bias_buf)
					FAIL(RT_ENOMEM, "rt_matmul: out of memory");
			}
			DN(dnnl_memory_create(&mm->p.mem[ARG_BIAS], &bias_md, ctx->engine,
					      DNNL_MEMORY_NONE));
		}
	}
	if (mm_sgemm_ok(d) && (rc = sgemm_setup(mm, d, bias_const, alpha, beta, err, errlen)))
		goto fail;
	free(scaled);
	dnnl_primitive_attr_destroy(attr);
	dnnl_post_ops_destroy(po);
	threads_leave(ctx, prev);
	*out = mm;
	return RT_OK;
fail:
	free(scaled);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	if (po)
		dnnl_post_ops_destroy(po);
	if (entered)
		threads_leave(ctx, prev);
	rt_matmul_destroy(mm);
	return rc;
}

static int mm_run(rt_matmul *mm, int64_t m, const void *a, const void *b, const void *bias, void *c,
		  const void *const *post_src, char *err, size_t errlen);

struct mm_call {
	rt_matmul *mm;
	int64_t m;
	const void *a, *b, *bias;
	const void *const *post_src;
};

static int mm_call_run(void *obj, void *to, char *err, size_t errlen)
{
	const struct mm_call *q = obj;
	return mm_run(q->mm, q->m, q->a, q->b, q->bias, to, q->post_src, err, errlen);
}

RT_API int rt_matmul_run(rt_matmul *mm, int64_t m, const void *a, const void *b, const void *bias,
			 void *c, const void *const *post_src, char *err, size_t errlen)
{
	if (!mm || !mm->tail.n)
		return mm_run(mm, m, a, b, bias, c, post_src, err, errlen);
	struct mm_call q = {mm, m, a, b, bias, post_src};
	return tail_run(&mm->tail, mm->p.ctx, post_src, c, mm_call_run, &q, err, errlen);
}

static int mm_run(rt_matmul *mm, int64_t m, const void *a, const void *b, const void *bias, void *c,
		  const void *const *post_src, char *err, size_t errlen)
{
	if (!mm || !a || !c)
		return seterr(err, errlen, RT_EINVAL, "rt_matmul_run: NULL matmul, a or c");
	if (mm->m_runtime ? m < 1 : m != 0 && m != mm->m)
		return seterr(err, errlen, RT_EINVAL, "rt_matmul_run: m = %lld, the object takes %lld",
			      (long long)m, (long long)mm->m);
	if (mm->m_runtime && m != mm->m) {
		int rc = mm_bind_m(mm, m, err, errlen);
		if (rc)
			return rc;
	}
	for (int i = 0; mm->gemv && i < mm->p.npost; ++i)
		if (mm->p.role[i] != ROLE_NONE && !(post_src && post_src[i]))
			return seterr(err, errlen, RT_EINVAL, "post-op %d needs post_src[%d]", i, i);
	if (mm->gemv) {
		gemv_run(mm, a, c, post_src);
		return RT_OK;
	}
	if (!mm->b_const && !b)
		return seterr(err, errlen, RT_EINVAL, "rt_matmul_run: b is NULL");
	if (mm->bias_rt && !bias)
		return seterr(err, errlen, RT_EINVAL, "rt_matmul_run: bias is NULL");
	for (int i = 0; i < mm->p.npost; ++i)
		if (mm->p.role[i] != ROLE_NONE && !(post_src && post_src[i]))
			return seterr(err, errlen, RT_EINVAL, "post-op %d needs post_src[%d]", i,
				      i);
	if (mm->sg) {
		int prev = threads_enter(mm->p.ctx);
		int rc = sgemm_run(mm, a, c, post_src, err, errlen);
		threads_leave(mm->p.ctx, prev);
		return rc;
	}
	void *ptr[MAX_ARGS] = {0};
	bind_posts(&mm->p, post_src, c, ptr);
	ptr[ARG_SRC] = (void *)a;
	ptr[ARG_DST] = c;
	if (mm->dyn) {
		mm_quantize(mm, a, mm->dyn_n);
		ptr[ARG_SRC] = mm->dyn_a;
		ptr[ARG_ZSRC] = &mm->dyn_zp;
		ptr[ARG_OSCALE] = mm->dyn_oscale;
		ptr[ARG_BIAS] = mm->dyn_bq;
	}
	if (!mm->b_const)
		ptr[ARG_WEI] = (void *)b;
	if (mm->bias_rt) {
		if (mm->bias_buf) {
			for (size_t i = 0; i < mm->bias_elems; ++i) /* f32 (bf16 takes no scale) */
				mm->bias_buf[i] = ((const float *)bias)[i] * mm->bias_scale;
			ptr[ARG_BIAS] = mm->bias_buf;
		} else {
			ptr[ARG_BIAS] = (void *)bias;
		}
	}
	int prev = threads_enter(mm->p.ctx);
	int rc = prim_exec(&mm->p, ptr, MAX_ARGS, err, errlen);
	threads_leave(mm->p.ctx, prev);
	return rc;
}

RT_API void rt_matmul_destroy(rt_matmul *mm)
{
	if (!mm)
		return;
	if (mm->b_const && unshare(mm->p.ctx, mm->p.mem[ARG_WEI]))
		mm->p.mem[ARG_WEI] = NULL;
	prim_free(&mm->p);
	free(mm->bias_buf);
	free(mm->dyn_wscale), free(mm->dyn_bias), free(mm->dyn_oscale), free(mm->dyn_bq), free(mm->dyn_a);
	free(mm->gw), free(mm->gbias);
	prim_free(&mm->sgp);
	free(mm->sg_bias);
	free(mm->epi);
	free(mm);
}

RT_API size_t rt_matmul_scratch_bytes(const rt_matmul *mm)
{
	return !mm ? 0 : mm->tail_ws > mm->p.scratch_bytes ? mm->tail_ws : mm->p.scratch_bytes;
}

RT_API size_t rt_matmul_weight_bytes(const rt_matmul *mm)
{
	const dnnl_memory_desc_t *md = NULL;
	if (mm && mm->gemv)
		return mm->gw_bytes;
	if (!mm || !mm->b_const || !mm->p.mem[ARG_WEI] || dnnl_memory_get_memory_desc(mm->p.mem[ARG_WEI], &md) || !md)
		return 0;
	return dnnl_memory_desc_get_size(md);
}
RT_API const char *rt_matmul_impl(const rt_matmul *mm)
{
	return !mm ? "" : mm->gemv ? "coil:gemv" : mm->cg ? "coil:gemm" : mm->sg ? "coil:sgemm" : prim_impl(&mm->p);
}

/* ------------------------------------------------------------------ */
/* pooling                                                             */

struct rt_pool {
	prim p;
	size_t ws_bytes;
	int src_nhwc, dst_nhwc, nhwc;        /* caller layouts; the primitive's */
	edges e;
	rt_pool_desc d; /* own: coil's loop (own_pool) in place of the primitive */
	int own;
};

/* coil's f32 pooling, NHWC on both sides (below AVX-512 by default,
 * RT_OWN_POOL): per output pixel, 32 channels at a time held in registers
 * over the window's taps, then the 8s left together, then one.  oneDNN
 * 2.6's jit:avx2 NHWC max pool took 3.5-6x as long (one thread: resnet's
 * stem pool, 64 channels 112 -> 56, 0.92 against 0.18 ms; densenet's 2x2
 * average 0.22 against 0.05; 3x3 stride-1 averages at par).  A max pool's
 * NaN wins as in eager (a flag per lane beside the max); an average sums in
 * tap order and multiplies by one over the window (RT_POOL_AVG_INCL,
 * oneDNN's rule) or over its taps inside the input. */
#ifdef __AVX__
#define PL_MAX(m, v) ((cw_v8)_mm256_max_ps((__m256)(v), (__m256)(m))) /* m if either is NaN */
#else
#define PL_MAX(m, v) CW_SEL((v) > (m), (v), (m))
#endif
/* nv vectors of 8 channels from c0 at output pixel y: acc over the taps */
#define PL_BLOCK(nv)                                                                                                   \
	for (; c0 + 8 * (nv) <= C; c0 += 8 * (nv)) {                                                                   \
		cw_v8 a0 = CW_SPLAT(init), a1 = a0, a2 = a0, a3 = a0;                                                  \
		cw_v8i n0 = {0}, n1 = n0, n2 = n0, n3 = n0;                                                            \
		for (int64_t h = h0; h < h1; h += dh)                                                                  \
			for (int64_t w = w0; w < w1; w += dw) {                                                        \
				const float *px = x + (h * W + w) * C + c0;                                            \
				PL_ACC(a0, n0, 0);                                                                     \
				if ((nv) > 1)                                                                          \
					PL_ACC(a1, n1, 1);                                                             \
				if ((nv) > 2)                                                                          \
					PL_ACC(a2, n2, 2);                                                             \
				if ((nv) > 3)                                                                          \
					PL_ACC(a3, n3, 3);                                                             \
			}                                                                                              \
		PL_OUT(a0, n0, 0);                                                                                     \
		if ((nv) > 1)                                                                                          \
			PL_OUT(a1, n1, 1);                                                                             \
		if ((nv) > 2)                                                                                          \
			PL_OUT(a2, n2, 2);                                                                             \
		if ((nv) > 3)                                                                                          \
			PL_OUT(a3, n3, 3);                                                                             \
	}
#define PL_ACC(a, nn, j)                                                                                               \
	(avg ? (void)((a) += CW_LD(px + (j) * 8))                                                                      \
	     : (void)((a) = PL_MAX(a, CW_LD(px + (j) * 8)), (nn) |= (CW_LD(px + (j) * 8) != CW_LD(px + (j) * 8))))
#define PL_OUT(a, nn, j) CW_ST(y + c0 + (j) * 8, avg ? (a) * CW_SPLAT(rdiv) : CW_SEL(nn, CW_SPLAT(NAN), a))

static inline __attribute__((always_inline)) void own_pool_px(const rt_pool_desc *d, const float *x, float *y,
							       int64_t h0, int64_t h1, int64_t w0, int64_t w1,
							       int64_t dh, int64_t dw, float div, const int avg)
{
	const int64_t C = d->c, W = d->in[1];
	const float init = avg ? 0.f : -INFINITY, rdiv = 1.f / div;
	int64_t c0 = 0;
	PL_BLOCK(4)
	switch ((C - c0) / 8) { /* the 1-3 vectors left, over the taps once */
	case 3: PL_BLOCK(3) break;
	case 2: PL_BLOCK(2) break;
	case 1: PL_BLOCK(1) break;
	}
	for (; c0 < C; c0++) {
		float m = init;
		for (int64_t h = h0; h < h1; h += dh)
			for (int64_t w = w0; w < w1; w += dw) {
				const float v = x[(h * W + w) * C + c0];
				if (avg)
					m += v;
				else if (v > m || isnan(v))
					m = v;
			}
		y[c0] = avg ? m * rdiv : m;
	}
}

/* the taps of one dim's window at output o: [*t0, *t1) of input positions in steps of d */
static inline void pool_taps(int64_t o, int64_t s, int64_t p, int64_t k, int64_t d, int64_t in, int64_t *t0, int64_t *t1)
{
	const int64_t lo = o * s - p;
	if (d == 1) { /* (no division: it cost more than a small pixel's taps) */
		*t0 = lo < 0 ? 0 : lo, *t1 = lo + k < in ? lo + k : in;
		return;
	}
	int64_t k0 = lo < 0 ? (-lo + d - 1) / d : 0, k1 = k;
	if (lo + (k1 - 1) * d >= in)
		k1 = (in - 1 - lo) / d + 1;
	if (k1 < k0)
		k1 = k0;
	*t0 = lo + k0 * d, *t1 = lo + k1 * d;
}

static void own_pool(const rt_pool *pl, const float *x, float *y)
{
	const rt_pool_desc *d = &pl->d;
	const int64_t H = d->in[0], W = d->in[1], OH = d->out[0], OW = d->out[1], C = d->c;
	const int64_t dh = d->dil[0] ? d->dil[0] : 1, dw = d->dil[1] ? d->dil[1] : 1;
#ifdef _OPENMP
	const int nt = pl->p.ctx->nthreads > 0 ? pl->p.ctx->nthreads : omp_get_max_threads();
#else
	const int nt = 1;
#endif
	const int64_t rows = d->n * OH;
	(void)nt;
	RT_OMP("omp parallel for num_threads(nt) if (nt > 1 && rows * OW * C * d->k[0] * d->k[1] > 65536) schedule(static)")
	for (int64_t r = 0; r < rows; r++) {
		const int64_t n = r / OH, oh = r % OH;
		int64_t h0, h1;
		pool_taps(oh, d->stride[0], d->pad_l[0], d->k[0], dh, H, &h0, &h1);
		const float *xn = x + n * H * W * C;
		float *yr = y + r * OW * C;
		for (int64_t ow = 0; ow < OW; ow++) {
			int64_t w0, w1;
			pool_taps(ow, d->stride[1], d->pad_l[1], d->k[1], dw, W, &w0, &w1);
			if (d->kind == RT_POOL_MAX) {
				own_pool_px(d, xn, yr + ow * C, h0, h1, w0, w1, dh, dw, 1.f, 0);
				continue;
			}
			const float div = d->kind == RT_POOL_AVG_INCL ? (float)(d->k[0] * d->k[1])
					  : (float)((h1 - h0 + dh - 1) / dh * ((w1 - w0 + dw - 1) / dw));
			own_pool_px(d, xn, yr + ow * C, h0, h1, w0, w1, dh, dw, div, 1);
		}
	}
}

RT_API int rt_pool_create(rt_ctx *ctx, const rt_pool_desc *d, rt_pool **out, char *err,
			  size_t errlen)
{
	int rc = RT_OK, prev = 0, entered = 0;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_post_ops_t po = NULL;
	rt_pool *pl = NULL;
	if (!out)
		return seterr(err, errlen, RT_EINVAL, "rt_pool_create: out is NULL");
	*out = NULL;
	if (!ctx || !d)
		return seterr(err, errlen, RT_EINVAL, "rt_pool_create: NULL ctx or desc");
	if (d->dtype != RT_F32 && d->dtype != RT_BF16 && !((d->dtype == RT_U8 || d->dtype == RT_S8) && d->kind == RT_POOL_MAX))
		return seterr(err, errlen, RT_EUNSUP, "rt_pool: dtype %d not supported", (int)d->dtype);
	const dnnl_data_type_t dt = rt_dnnl_dt(d->dtype);
	if (d->kind < RT_POOL_MAX || d->kind > RT_POOL_AVG_EXCL)
		return seterr(err, errlen, RT_EINVAL, "rt_pool: unknown kind %d", (int)d->kind);
	if (d->n < 1 || d->c < 1)
		return seterr(err, errlen, RT_EINVAL, "rt_pool: n and c must be positive");
	for (int i = 0; i < 2; ++i) {
		int64_t dil = d->dil[i] ? d->dil[i] : 1, span = dil * (d->k[i] - 1) + 1;
		if (d->in[i] < 1 || d->k[i] < 1 || d->stride[i] < 1 || dil < 1 || d->pad_l[i] < 0 ||
		    d->pad_r[i] < 0 || d->pad_l[i] >= span || d->pad_r[i] >= span)
			return seterr(err, errlen, RT_EINVAL, "rt_pool: bad window in spatial dim %d", i);
		int64_t num = d->in[i] + d->pad_l[i] + d->pad_r[i] - span;
		if (num < 0 || d->out[i] != num / d->stride[i] + 1)
			return seterr(err, errlen, RT_EINVAL,
				      "rt_pool: spatial dim %d: out is %lld, expected %lld", i,
				      (long long)d->out[i], (long long)(num < 0 ? 0 : num / d->stride[i] + 1));
	}
	pl = calloc(1, sizeof *pl);
	if (!pl)
		return seterr(err, errlen, RT_ENOMEM, "rt_pool_create: out of memory");
	pl->p.ctx = ctx;
	pl->d = *d;
	if (d->dtype == RT_F32 && d->src_nhwc && d->dst_nhwc && cw_wanted("RT_OWN_POOL")) {
		pl->own = 1;
		*out = pl;
		return RT_OK;
	}
	prev = threads_enter(ctx), entered = 1;
	pl->src_nhwc = d->src_nhwc, pl->dst_nhwc = d->dst_nhwc;
	/* oneDNN 2.6 pools u8/s8 fast only channels-last (NCHW: its reference kernel, ~200x slower) */
	pl->nhwc = d->src_nhwc || d->dst_nhwc || d->dtype == RT_U8 || d->dtype == RT_S8;
	static const int nchw[4] = {0, 1, 2, 3}, nhwc[4] = {0, 2, 3, 1};
	const int *po_ = pl->nhwc ? nhwc : nchw;
	int64_t sdims[4] = {d->n, d->c, d->in[0], d->in[1]}, ddims[4] = {d->n, d->c, d->out[0], d->out[1]};
	dnnl_memory_desc_t smd, dmd;
	DN(md_dense(&smd, 4, sdims, po_, dt));
	DN(md_dense(&dmd, 4, ddims, po_, dt));
	dnnl_dims_t strides, kernel, dil, pad_l, pad_r;
	for (int i = 0; i < 2; ++i) {
		strides[i] = d->stride[i], kernel[i] = d->k[i];
		dil[i] = (d->dil[i] ? d->dil[i] : 1) - 1;
		pad_l[i] = d->pad_l[i], pad_r[i] = d->pad_r[i];
	}
	dnnl_alg_kind_t alg = d->kind == RT_POOL_MAX ? dnnl_pooling_max
			      : d->kind == RT_POOL_AVG_INCL ? dnnl_pooling_avg_include_padding
			      : dnnl_pooling_avg_exclude_padding;
	dnnl_pooling_v2_desc_t od;
	DN(dnnl_pooling_v2_forward_desc_init(&od, dnnl_forward_inference, alg, &smd, &dmd, strides,
					     kernel, dil, pad_l, pad_r));
	DN(dnnl_post_ops_create(&po));
	if (!(attr = make_attr(po, &rc, err, errlen)))
		goto fail;
	if ((rc = prim_finish(&pl->p, &od, attr, NULL, NULL, err, errlen, "pooling")))
		goto fail;
	/* the side whose caller layout is not the primitive's goes through the workspace */
	pl->ws_bytes = round64(pl->p.scratch_bytes);
	if (pl->nhwc && !pl->src_nhwc) {
		dnnl_memory_desc_t u;
		DN(md_dense(&u, 4, sdims, nchw, dt));
		DN(dnnl_memory_create(&pl->e.u_src, &u, ctx->engine, DNNL_MEMORY_NONE));
		if ((rc = reorder_make(ctx, &u, &smd, &pl->e.r_in, err, errlen)))
			goto fail;
		pl->e.off_src = pl->ws_bytes;
		pl->ws_bytes += round64(dnnl_memory_desc_get_size(&smd));
	}
	if (pl->nhwc && !pl->dst_nhwc) {
		dnnl_memory_desc_t u;
		DN(md_dense(&u, 4, ddims, nchw, dt));
		DN(dnnl_memory_create(&pl->e.u_dst, &u, ctx->engine, DNNL_MEMORY_NONE));
		if ((rc = reorder_make(ctx, &dmd, &u, &pl->e.r_out, err, errlen)))
			goto fail;
		pl->e.off_dst = pl->ws_bytes;
		pl->ws_bytes += round64(pl->p.dst_bytes);
	}
	if ((rc = ctx_reserve(ctx, pl->ws_bytes, err, errlen)))
		goto fail;
	dnnl_primitive_attr_destroy(attr);
	dnnl_post_ops_destroy(po);
	threads_leave(ctx, prev);
	*out = pl;
	return RT_OK;
fail:
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	if (po)
		dnnl_post_ops_destroy(po);
	if (entered)
		threads_leave(ctx, prev);
	rt_pool_destroy(pl);
	return rc;
}

RT_API int rt_pool_run(rt_pool *pl, const void *src, void *dst, char *err, size_t errlen)
{
	if (!pl || !src || !dst)
		return seterr(err, errlen, RT_EINVAL, "rt_pool_run: NULL pool, src or dst");
	if (pl->own) {
		own_pool(pl, src, dst);
		return RT_OK;
	}
	int rc = RT_OK, prev = threads_enter(pl->p.ctx);
	char *ws = pl->p.ctx->ws;
	void *ptr[MAX_ARGS] = {0};
	ptr[ARG_SRC] = pl->e.r_in ? ws + pl->e.off_src : (void *)src;
	ptr[ARG_DST] = pl->e.r_out ? ws + pl->e.off_dst : (void *)dst;
	if (pl->e.r_in && (rc = reorder_exec(pl->p.ctx, pl->e.r_in, pl->e.u_src, src, pl->p.mem[ARG_SRC],
					   ptr[ARG_SRC], err, errlen)))
		goto out;
	if ((rc = prim_exec(&pl->p, ptr, MAX_ARGS, err, errlen)))
		goto out;
	if (pl->e.r_out) {
		if ((rc = reorder_exec(pl->p.ctx, pl->e.r_out, pl->p.mem[ARG_DST], ptr[ARG_DST], pl->e.u_dst,
				       dst, err, errlen)))
			goto out;
		DN(dnnl_stream_wait(pl->p.ctx->stream));
	}
fail:
out:
	threads_leave(pl->p.ctx, prev);
	return rc;
}

RT_API void rt_pool_destroy(rt_pool *pl)
{
	if (!pl)
		return;
	prim_free(&pl->p);
	edges_free(&pl->e);
	free(pl);
}

RT_API size_t rt_pool_scratch_bytes(const rt_pool *pl) { return pl ? pl->ws_bytes : 0; }
RT_API const char *rt_pool_impl(const rt_pool *pl) { return !pl ? "" : pl->own ? "coil:pool" : prim_impl(&pl->p); }
