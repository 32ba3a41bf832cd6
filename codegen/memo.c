/* The memo table of the kernel emitters (emit_c.c, vec.c): the C name of a
 * value already rendered at an index, valid in the scope that rendered it. */
#include <string.h>

#include "codegen/emit.h"

char *memo_get(const emit_memo *t, int v, const char *key)
{
	for (int i = t->n - 1; i >= 0; i--)
		if (t->m[i].v == v && !strcmp(t->m[i].key, key))
			return t->m[i].name;
	return NULL;
}

char *memo_put(emit_memo *t, coil_arena *a, int v, char *key, char *name)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 256;
		struct emit_memo_ent *m = arena_alloc(a, (size_t)t->cap * sizeof *m);
		if (t->n)
			memcpy(m, t->m, (size_t)t->n * sizeof *m);
		t->m = m;
	}
	t->m[t->n++] = (struct emit_memo_ent){v, t->depth, key, name};
	return name;
}

void memo_pop(emit_memo *t)
{
	while (t->n && t->m[t->n - 1].depth >= t->depth)
		t->n--;
	t->depth--;
}
