/* memplan: intermediates (buffers that are not graph inputs, params,
 * constants or outputs) get slots in one arena, by liveness over the kernel
 * schedule (a slot is alive from its first writer to its last reader).
 *   - Static sizes: a slot per buffer (or per in-place chain), placed at a
 *     fixed offset of the arena's first part by greedy-by-size packing: the
 *     largest first, each at the lowest 64-byte aligned offset clear of the
 *     slots alive at the same time.
 *   - Symbolic sizes: a free slot is reused when its size is the same
 *     expression; their offsets follow the fixed part, laid out at run time
 *     from the symbol values (64-byte aligned, + 64 bytes per slot).
 *
 * In place: a pointwise kernel's buffer takes the slot of an intermediate it
 * reads when this kernel is that buffer's last reader, both have the same
 * dtype and size, and every read of it in the kernel is at the element being
 * written (through pointwise ops of the output's shape and reshapes only: no
 * broadcast, permute, slice), so each element is read before it is
 * overwritten.  Both buffers are marked (inplace, inplace_by) so that the
 * kernel does not declare them restrict.  COIL_INPLACE=0 in the compiler's environment turns
 * this off (measurement switch, not in the cache key).
 *
 * Residual in place: a oneDNN conv or matmul fusion with a residual add
 * (the rt's sum post-op, which accumulates into dst) writes into the
 * residual's slot when that is an intermediate this kernel reads last and
 * only as the residual, of the same dtype and size: the rt then finds dst
 * pre-filled and copies nothing.  The residual and dst have the same layout
 * (lower_dnnl.c's layout pass makes a residual NHWC iff its dst is). */
#include <stdlib.h>
#include <string.h>

#include "codegen/dnnl.h"
#include "codegen/ir.h"

static coil_dim bytes_of(const ir_node *n, coil_err *err)
{
	coil_dim b = dim_const((int64_t)dtype_size(n->dtype));
	for (int i = 0; i < n->rank; i++)
		dim_mul(&b, &b, &n->shape[i], err);
	return b;
}

/* Last kernel reading node v's buffer: found by walking each kernel inline.
 * The params it reaches are read by the run (par_run), except the ones a
 * oneDNN fusion reads only when its object is created. */
static void mark_reads(coil_ir *ir, int v, int k, int *last, char *seen)
{
	ir_node *n = &ir->nodes[v];
	if (seen[v])
		return;
	seen[v] = 1;
	if (n->op == IR_PARAM)
		ir->par_run[n->index] = 1;
	int buf = n->slot >= 0 || n->mat;
	if (buf && n->kernel != k) {
		if (last[v] < k)
			last[v] = k;
		return;
	}
	int cnt;
	const int *s = ir_srcs(n, &cnt);
	if (n->op == IR_EXTERN && n->kernel != k)
		return;
	for (int i = 0; i < cnt; i++)
		if (!(n->op == IR_EXTERN && ir->nodes[s[i]].op == IR_PARAM && dn_create_only(ir, v, i)))
			mark_reads(ir, s[i], k, last, seen);
}

/* How kernel k reads buffers, walking inline from node v: how[b] gets 1 for
 * a read of buffer b at the linear offset being written (same), 2 for any
 * other read.  seen: per node, the `same` values already walked (bits). */
static void reads(coil_ir *ir, int v, int k, int same, char *how, char *seen)
{
	ir_node *n = &ir->nodes[v];
	int bit = same ? 1 : 2;
	if (seen[v] & bit)
		return;
	seen[v] |= (char)bit;
	int buf = n->op == IR_INPUT || n->op == IR_PARAM || n->op == IR_CONST || n->op == IR_EXTERN ||
		  ((n->mat || n->op == IR_REDUCE) && n->kernel != k);
	if (buf) {
		how[v] |= (char)bit;
		return;
	}
	for (int i = 0; i < n->nsrc; i++) {
		ir_node *s = &ir->nodes[n->src[i]];
		int keep = same && (n->op != IR_VIEW || n->sub == V_RESHAPE || n->sub == V_EXPAND);
		if (n->op != IR_VIEW || n->sub == V_EXPAND)
			keep = keep && s->rank == n->rank && dims_equal(s->shape, n->shape, n->rank);
		reads(ir, n->src[i], k, keep, how, seen);
	}
}

/* The buffer whose slot pointwise kernel k's output o may take, or -1. */
static int inplace_src(coil_ir *ir, int k, int o, const int *last, char *how, char *seen, coil_err *err)
{
	ir_node *on = &ir->nodes[o];
	memset(how, 0, (size_t)ir->n);
	memset(seen, 0, (size_t)ir->n);
	reads(ir, o, k, 1, how, seen);
	coil_dim ob = bytes_of(on, err);
	for (int u = 0; u < ir->n; u++) {
		ir_node *un = &ir->nodes[u];
		if (how[u] != 1 || un->slot < 0 || un->out >= 0 || last[u] != k || un->dtype != on->dtype)
			continue;
		coil_dim ub = bytes_of(un, err);
		if (dim_eq(&ub, &ob))
			return u;
	}
	return -1;
}

/* The residual whose slot oneDNN fusion kernel k's output o may take, or -1. */
static int residual_src(coil_ir *ir, int k, int o, const int *last, coil_err *err)
{
	ir_node *on = &ir->nodes[o];
	int r = dn_residual(ir, o);
	if (r < 0)
		return -1;
	int u = on->xsrc[r];
	ir_node *un = &ir->nodes[u];
	if (un->slot < 0 || un->out >= 0 || last[u] != k || un->dtype != on->dtype)
		return -1;
	for (int i = 0; i < on->nx; i++) /* never the conv's src, a matmul operand, another post's */
		if (i != r && on->xsrc[i] == u)
			return -1;
	coil_dim ub = bytes_of(un, err), ob = bytes_of(on, err);
	return dim_eq(&ub, &ob) ? u : -1;
}

/* A free slot (not busy at kernel k) whose size is the expression b, or -1. */
static int free_slot(coil_ir *ir, const int *slot_free, int k, const coil_dim *b)
{
	for (int j = 0; j < ir->nslots; j++)
		if (ir->slots[j].at < 0 && slot_free[j] < k && dim_eq(&ir->slots[j].bytes, b))
			return j;
	return -1;
}

static int by_size(const void *a, const void *b, void *arg)
{
	const ir_slot *s = arg;
	int x = *(const int *)a, y = *(const int *)b;
	int64_t bx = s[x].at, by = s[y].at; /* sizes, before placement */
	return bx != by ? (bx < by ? 1 : -1) : s[x].first != s[y].first ? s[x].first - s[y].first : x - y;
}

static int by_at(const void *a, const void *b, void *arg)
{
	const ir_slot *s = arg;
	int64_t x = s[*(const int *)a].at, y = s[*(const int *)b].at;
	return x < y ? -1 : x > y;
}

/* Greedy by size: each static slot, largest first, at the lowest 64-byte
 * aligned offset where it overlaps no placed slot alive at the same time. */
static int place_static(coil_ir *ir, coil_err *err)
{
	int *ord = arena_alloc(ir->arena, (size_t)(ir->nslots + 1) * sizeof(int)), n = 0;
	int *near = arena_alloc(ir->arena, (size_t)(ir->nslots + 1) * sizeof(int));
	int64_t *size = arena_alloc(ir->arena, (size_t)(ir->nslots + 1) * sizeof(int64_t));
	if (!ord || !near || !size)
		return coil_err_oom(err);
	for (int j = 0; j < ir->nslots; j++) {
		if (ir->slots[j].at < 0)
			continue;
		int64_t b = 0;
		dim_is_const(&ir->slots[j].bytes, &b);
		size[j] = (b + 63) & ~(int64_t)63;
		ir->slots[j].at = size[j];
		ord[n++] = j;
	}
	qsort_r(ord, (size_t)n, sizeof *ord, by_size, ir->slots);
	ir->fixed_bytes = 0;
	for (int i = 0; i < n; i++) {
		ir_slot *s = &ir->slots[ord[i]];
		int nn = 0;
		/* placed slots alive with s, by offset */
		for (int p = 0; p < i; p++) {
			ir_slot *q = &ir->slots[ord[p]];
			if (q->first <= s->last && s->first <= q->last)
				near[nn++] = ord[p];
		}
		qsort_r(near, (size_t)nn, sizeof *near, by_at, ir->slots);
		int64_t off = 0;
		for (int p = 0; p < nn; p++) {
			ir_slot *q = &ir->slots[near[p]];
			if (off + size[ord[i]] <= q->at)
				break;
			if (q->at + size[near[p]] > off)
				off = q->at + size[near[p]];
		}
		s->at = off;
		if (off + size[ord[i]] > ir->fixed_bytes)
			ir->fixed_bytes = off + size[ord[i]];
	}
	return 0;
}

int ir_memplan(coil_ir *ir, coil_err *err)
{
	const char *sw = getenv("COIL_INPLACE");
	int inplace = !(sw && !strcmp(sw, "0"));
	char *how = arena_alloc(ir->arena, (size_t)ir->n + 1), *seen2 = arena_alloc(ir->arena, (size_t)ir->n + 1);
	int *last = arena_alloc(ir->arena, (size_t)(ir->n + 1) * sizeof(int));
	int *slot_free = arena_alloc(ir->arena, (size_t)(ir->n + 1) * sizeof(int));
	ir->slots = arena_alloc(ir->arena, (size_t)(ir->n + 1) * sizeof(ir_slot));
	char *seen = arena_alloc(ir->arena, (size_t)ir->n + 1);
	if (!last || !slot_free || !ir->slots || !seen || !how || !seen2)
		return coil_err_oom(err);
	ir->npar_run = 0;
	for (int v = 0; v < ir->n; v++) {
		last[v] = -1;
		if (ir->nodes[v].op == IR_PARAM && ir->nodes[v].index >= ir->npar_run)
			ir->npar_run = ir->nodes[v].index + 1;
	}
	if (!(ir->par_run = arena_alloc(ir->arena, (size_t)ir->npar_run + 1)))
		return coil_err_oom(err);
	memset(ir->par_run, 0, (size_t)ir->npar_run + 1);
	for (int k = 0; k < ir->nk; k++) {
		ir_kernel *K = &ir->ks[k];
		memset(seen, 0, (size_t)ir->n);
		for (int i = 0; i < K->nreds; i++)
			mark_reads(ir, K->reds[i], k, last, seen);
		for (int i = 0; i < K->nouts; i++)
			mark_reads(ir, K->outs[i], k, last, seen);
	}
	/* a microbatched run's join (microbatch.c): its buffer gathers every chunk's
	 * images, so it is alive from the first kernel of the first chunk on */
	ir->mb_join = -1;
	for (int k = 0; k < ir->nk; k++)
		if (ir->ks[k].kind == K_EXTERN && ir->g->nodes[ir->nodes[ir->ks[k].ext].gnode].op == OP_MB_JOIN)
			ir->mb_join = k;
	ir->nslots = 0;
	for (int k = 0; k < ir->nk; k++) {
		ir_kernel *K = &ir->ks[k];
		int w[2 * 64 + 1], nw = 0;
		/* buffers this kernel writes */
		for (int i = 0; i < K->nouts && nw < 128; i++)
			w[nw++] = K->outs[i];
		for (int i = 0; i < K->nreds && nw < 128; i++)
			if (ir->nodes[K->reds[i]].mat)
				w[nw++] = K->reds[i];
		for (int i = 0; i < nw; i++) {
			ir_node *n = &ir->nodes[w[i]];
			if (n->out >= 0 || !n->mat)
				continue;
			coil_dim b = bytes_of(n, err);
			int s = -1;
			if (inplace && K->kind == K_POINTWISE && K->nouts == 1) {
				int u = inplace_src(ir, k, w[i], last, how, seen2, err);
				if (u >= 0) {
					s = ir->nodes[u].slot;
					ir->nodes[u].inplace_by = n->inplace = k + 1;
				}
			} else if (inplace && K->kind == K_EXTERN && K->nouts == 1 && w[i] == K->ext) {
				int u = residual_src(ir, k, w[i], last, err);
				if (u >= 0) {
					s = ir->nodes[u].slot;
					ir->nodes[u].inplace = n->inplace = k + 1;
				}
			}
			int64_t bs;
			if (s < 0 && !dim_is_const(&b, &bs))
				s = free_slot(ir, slot_free, k, &b);
			if (s < 0) { /* static: a slot of its own, placed below */
				s = ir->nslots++;
				ir->slots[s] = (ir_slot){.bytes = b, .at = dim_is_const(&b, &bs) ? 0 : -1,
							 .first = k == ir->mb_join ? 0 : k};
			}
			n->slot = s;
			/* busy until its last reader (at least this kernel) */
			slot_free[s] = last[w[i]] > k ? last[w[i]] : k;
			ir->slots[s].last = slot_free[s];
		}
	}
	if (place_static(ir, err))
		return -1;
	coil_dim total = dim_const(ir->fixed_bytes), pad = dim_const(64);
	for (int j = 0; j < ir->nslots; j++) {
		if (ir->slots[j].at >= 0)
			continue;
		coil_err e;
		if (dim_add(&total, &total, &ir->slots[j].bytes, &e) || dim_add(&total, &total, &pad, &e))
			ir->arena_unknown = 1; /* run() sums the slots itself; only the description lacks it */
	}
	ir->arena_bytes = total;
	return 0;
}
