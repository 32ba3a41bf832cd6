/* memplan: intermediates (buffers that are not graph inputs, params,
 * constants or outputs) get slots in one arena, reused by liveness over the
 * kernel schedule.  A free slot is reused when its size is the same
 * expression, or both are static and it is large enough.  Slot offsets are
 * laid out at run time from the symbol values (64-byte aligned); the arena's
 * size is sum(slot bytes) + 64 per slot. */
#include <string.h>

#include "codegen/ir.h"

static coil_dim bytes_of(const ir_node *n, coil_err *err)
{
	coil_dim b = dim_const((int64_t)dtype_size(n->dtype));
	for (int i = 0; i < n->rank; i++)
		dim_mul(&b, &b, &n->shape[i], err);
	return b;
}

/* Last kernel reading node v's buffer: found by walking each kernel inline. */
static void mark_reads(coil_ir *ir, int v, int k, int *last, char *seen)
{
	ir_node *n = &ir->nodes[v];
	if (seen[v])
		return;
	seen[v] = 1;
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
		mark_reads(ir, s[i], k, last, seen);
}

int ir_memplan(coil_ir *ir, coil_err *err)
{
	int *last = arena_alloc(ir->arena, (size_t)(ir->n + 1) * sizeof(int));
	int *slot_free = arena_alloc(ir->arena, (size_t)(ir->n + 1) * sizeof(int));
	ir->slots = arena_alloc(ir->arena, (size_t)(ir->n + 1) * sizeof(ir_slot));
	char *seen = arena_alloc(ir->arena, (size_t)ir->n + 1);
	if (!last || !slot_free || !ir->slots || !seen)
		return coil_errf(err, "out of memory");
	for (int v = 0; v < ir->n; v++)
		last[v] = -1;
	for (int k = 0; k < ir->nk; k++) {
		ir_kernel *K = &ir->ks[k];
		memset(seen, 0, (size_t)ir->n);
		for (int i = 0; i < K->nreds; i++)
			mark_reads(ir, K->reds[i], k, last, seen);
		for (int i = 0; i < K->nouts; i++)
			mark_reads(ir, K->outs[i], k, last, seen);
	}
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
			int64_t bs, fs;
			int s = -1;
			for (int j = 0; j < ir->nslots && s < 0; j++) {
				if (slot_free[j] >= k)
					continue;
				if (dim_eq(&ir->slots[j].bytes, &b) ||
				    (dim_is_const(&b, &bs) && dim_is_const(&ir->slots[j].bytes, &fs) && fs >= bs))
					s = j;
			}
			if (s < 0) {
				s = ir->nslots++;
				ir->slots[s].bytes = b;
			}
			n->slot = s;
			/* busy until its last reader (at least this kernel) */
			slot_free[s] = last[w[i]] > k ? last[w[i]] : k;
		}
	}
	coil_dim total = dim_const(0), pad = dim_const(64);
	for (int j = 0; j < ir->nslots; j++) {
		if (dim_add(&total, &total, &ir->slots[j].bytes, err) || dim_add(&total, &total, &pad, err))
			return -1;
	}
	ir->arena_bytes = total;
	return 0;
}
