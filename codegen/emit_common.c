/* What every emitter (emit_c.c, vec.c, extern.c, emit_dnnl.c) spells the same
 * way: C type names, buffer names, and the index of a kept-dims output. */
#include "codegen/emit.h"

const char *emit_ctype(coil_dtype t)
{
	switch (t) {
	case COIL_F32: return "float";
	case COIL_F64: return "double";
	case COIL_I64: return "int64_t";
	case COIL_I32: return "int32_t";
	case COIL_I8: return "int8_t";
	case COIL_BF16: case COIL_F16: return "uint16_t";
	default: return "uint8_t"; /* u8, bool */
	}
}

const char *emit_vtype(coil_dtype t)
{
	return dtype_is_half(t) ? "float" : emit_ctype(t);
}

const char *emit_half(coil_dtype t)
{
	return t == COIL_BF16 ? "bf16" : "f16";
}

char *emit_buf_name(coil_ir *ir, int v)
{
	const ir_node *n = &ir->nodes[v];
	switch (n->op) {
	case IR_INPUT: return arena_printf(ir->arena, "in%d", n->index);
	case IR_PARAM: return arena_printf(ir->arena, "p%d", n->index);
	case IR_CONST: return arena_printf(ir->arena, "c%d", n->index);
	default: return n->out >= 0 ? arena_printf(ir->arena, "o%d", n->out) : arena_printf(ir->arena, "b%d", v);
	}
}

void emit_kept_index(const ir_node *p, const ir_node *r0, char **outer, char **pidx)
{
	int j = 0;
	for (int d = 0; d < p->rank; d++) {
		if (dim_eq_const(&p->shape[d], 1)) {
			pidx[d] = "0";
			continue;
		}
		while (j < r0->rank && dim_eq_const(&r0->shape[j], 1))
			j++;
		pidx[d] = outer[j++];
	}
}
