/* A bump allocator: everything a graph (or a compile) owns lives in one arena
 * and is freed at once.  Allocation failure returns NULL. */
#ifndef COIL_ARENA_H
#define COIL_ARENA_H

#include <stddef.h>

typedef struct coil_arena coil_arena;

coil_arena *arena_create(void);
void arena_destroy(coil_arena *a); /* accepts NULL */
void *arena_alloc(coil_arena *a, size_t n);  /* zeroed, 16-byte aligned */
char *arena_strdup(coil_arena *a, const char *s);
char *arena_printf(coil_arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
