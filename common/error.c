#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int coil_errf(coil_err *e, const char *fmt, ...)
{
	if (!e)
		return -1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	return -1;
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
	return -1;
}
