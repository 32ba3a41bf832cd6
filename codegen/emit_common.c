/* What every emitter (emit_c.c, vec.c, extern.c, emit_dnnl.c) spells the same
 * way: C type names, buffer names, the index of a kept-dims output, and user
 * text inside a C string. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

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

/* s as the inside of a C string literal that is also a printf format:
 * user text (input names, node ids) never reaches the C unescaped. */
char *emit_cfmt(coil_arena *a, const char *s)
{
	size_t n = strlen(s);
	char *o = arena_alloc(a, 4 * n + 1), *p = o;
	if (!o)
		return "?";
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '%') {
			*p++ = '%';
			*p++ = '%';
		} else if (isalnum(ch) || strchr(" _-+*/()[]<>=.,:;'", ch))
			*p++ = (char)ch;
		else
			p += sprintf(p, "\\%03o", ch);
	}
	*p = 0;
	return o;
}
