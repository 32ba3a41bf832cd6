#include "common/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int verr(coil_err *e, coil_code code, const char *fmt, va_list ap)
{
	if (!e)
		return -1;
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	e->code = code;
	e->node[0] = 0;
	return -1;
}

int coil_errc(coil_err *e, coil_code code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verr(e, code, fmt, ap);
	va_end(ap);
	return -1;
}

int coil_errf(coil_err *e, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verr(e, COIL_E_INTERNAL, fmt, ap);
	va_end(ap);
	return -1;
}

int coil_err_input(coil_err *e, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verr(e, COIL_E_INPUT, fmt, ap);
	va_end(ap);
	return -1;
}

int coil_err_oom(coil_err *e)
{
	return coil_errc(e, COIL_E_RESOURCE, "out of memory");
}

int coil_err_prefix(coil_err *e, const char *fmt, ...)
{
	if (!e)
		return -1;
	char pre[256], old[sizeof e->msg];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(pre, sizeof pre, fmt, ap);
	va_end(ap);
	memcpy(old, e->msg, sizeof old);
	if (snprintf(e->msg, sizeof e->msg, "%s: %s", pre, old) >= (int)sizeof e->msg)
		memcpy(e->msg + sizeof e->msg - 4, "...", 4);
	if (e->code == COIL_OK)
		e->code = COIL_E_INTERNAL;
	return -1;
}

void coil_err_node(coil_err *e, const char *node_id)
{
	if (e)
		snprintf(e->node, sizeof e->node, "%s", node_id ? node_id : "");
}

const char *coil_code_name(coil_code code)
{
	static const char *const names[COIL_NCODES] = {
		[COIL_OK] = "ok",
		[COIL_E_INPUT] = "bad_input",
		[COIL_E_UNSUPPORTED] = "unsupported",
		[COIL_E_LIMIT] = "limit",
		[COIL_E_RESOURCE] = "resource_exhausted",
		[COIL_E_IO] = "io",
		[COIL_E_COMPILER] = "compiler",
		[COIL_E_TIMEOUT] = "timeout",
		[COIL_E_INTERNAL] = "internal",
	};
	return (unsigned)code < COIL_NCODES && names[code] ? names[code] : "internal";
}

coil_code coil_code_of_errno(int e)
{
	return e == ENOSPC || e == EDQUOT || e == ENOMEM || e == EFBIG ? COIL_E_RESOURCE : COIL_E_IO;
}
