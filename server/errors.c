/* Every error coild answers, in one table: the code (a coil_code from the
 * module that failed, or a refusal of the server's own), its name in the
 * JSON body, and its HTTP status.  Nothing else in server/ picks an error
 * status, and nothing picks one from a message's text (docs/api.md, issue
 * #15).
 *
 * 4xx: the request is at fault and sending it again will not help (429: not
 * now).  5xx: the server is; 503 means "try again" (queue full, out of
 * memory, stopping), 507 a full disk that needs an operator. */
#include "server/server.h"

static const struct {
	const char *name; /* NULL: coil_code_name()'s */
	unsigned status;
} table[ERR_NCODES] = {
	[COIL_OK] = {NULL, 500}, /* an error without a code is a bug */
	[COIL_E_INPUT] = {NULL, 400},
	[COIL_E_UNSUPPORTED] = {NULL, 422},
	[COIL_E_LIMIT] = {NULL, 413},
	[COIL_E_RESOURCE] = {NULL, 503},
	[COIL_E_IO] = {NULL, 500},
	[COIL_E_COMPILER] = {NULL, 500}, /* coil generated C its compiler refused: coil's fault */
	[COIL_E_TIMEOUT] = {NULL, 504},
	[COIL_E_INTERNAL] = {NULL, 500},
	[ERR_NOT_FOUND] = {"not_found", 404},
	[ERR_METHOD] = {"method_not_allowed", 405},
	[ERR_UNAUTHORIZED] = {"unauthorized", 401},
	[ERR_FORBIDDEN] = {"forbidden", 403},
	[ERR_MEDIA_TYPE] = {"unsupported_media_type", 415},
	[ERR_TOO_MANY] = {"too_many_requests", 429},
	[ERR_UNAVAILABLE] = {"unavailable", 503},
	[ERR_DISK_FULL] = {"resource_exhausted", 507},
};

unsigned err_status(int code)
{
	return code > COIL_OK && code < ERR_NCODES ? table[code].status : 500;
}

const char *err_name(int code)
{
	if (code <= COIL_OK || code >= ERR_NCODES)
		return "internal";
	return table[code].name ? table[code].name : coil_code_name((coil_code)code);
}
