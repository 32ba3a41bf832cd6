/* Error reporting shared by every module: a caller-provided buffer that the
 * failing call fills with one precise line.  Functions return 0 on success and
 * -1 (or another negative value they document) on failure. */
#ifndef COIL_ERROR_H
#define COIL_ERROR_H

#include <stddef.h>

typedef struct coil_err {
	char msg[512];
} coil_err;

/* Fill e (which may be NULL) with a printf-style message; returns -1 so that
 * callers can write `return coil_errf(e, ...);`. */
int coil_errf(coil_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefix an existing message: "prefix: old message". Returns -1. */
int coil_err_prefix(coil_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
