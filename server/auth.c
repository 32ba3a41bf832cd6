/* Bearer tokens: a file of "TOKEN role,role" lines, each token with its roles
 * (compile, read, admin).  Without a tokens file every route is open.  The
 * file holds secrets: coild refuses one that others than its owner may read
 * or write. */
#include "server/server.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct {
	const char *name;
	unsigned role;
} role_names[] = {{"compile", ROLE_COMPILE}, {"read", ROLE_READ}, {"admin", ROLE_ADMIN}};

void auth_roles_text(unsigned roles, char *buf, size_t cap)
{
	size_t used = 0;
	buf[0] = 0;
	for (size_t i = 0; i < sizeof role_names / sizeof role_names[0]; i++)
		if (roles & role_names[i].role) {
			int n = snprintf(buf + used, cap - used, "%s'%s'", used ? " or " : "", role_names[i].name);
			if (n < 0 || (size_t)n >= cap - used)
				return;
			used += (size_t)n;
		}
}

/* Parse "role,role" into a mask; -1 if a name is unknown. */
static int parse_roles(char *s, unsigned *mask, const char **bad)
{
	*mask = 0;
	char *save;
	for (char *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		unsigned r = 0;
		for (size_t i = 0; i < sizeof role_names / sizeof role_names[0]; i++)
			if (!strcmp(tok, role_names[i].name))
				r = role_names[i].role;
		if (!r) {
			*bad = tok;
			return -1;
		}
		*mask |= r;
	}
	return *mask ? 0 : -1;
}

static int add(coild_auth *a, const char *token, unsigned roles)
{
	char **t = realloc(a->tokens, (size_t)(a->n + 1) * sizeof *t);
	if (!t)
		return -1;
	a->tokens = t;
	unsigned *r = realloc(a->roles, (size_t)(a->n + 1) * sizeof *r);
	if (!r)
		return -1;
	a->roles = r;
	if (!(a->tokens[a->n] = strdup(token)))
		return -1;
	a->roles[a->n++] = roles;
	return 0;
}

int auth_parse(coild_auth *a, const char *text, size_t len, const char *name, coil_err *err)
{
	memset(a, 0, sizeof *a);
	char line[1024];
	int lineno = 0, ret = 0;
	size_t pos = 0;
	while (ret == 0 && pos < len) {
		/* One line (a longer one is read in 1023-byte pieces, as fgets did). */
		size_t n = 0;
		while (pos < len && n < sizeof line - 1) {
			char ch = text[pos++];
			line[n++] = ch;
			if (ch == '\n')
				break;
		}
		line[n] = 0;
		lineno++;
		if (strlen(line) != n) {
			ret = coil_err_input(err, "tokens file %s:%d: contains a NUL byte", name, lineno);
			break;
		}
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		char *save, *token = strtok_r(line, " \t\r\n", &save);
		if (!token)
			continue;
		char *roles = strtok_r(NULL, " \t\r\n", &save);
		unsigned mask;
		const char *bad = NULL;
		if (strlen(token) < 8)
			ret = coil_err_input(err, "tokens file %s:%d: a token needs at least 8 characters", name, lineno);
		else if (!roles)
			ret = coil_err_input(err, "tokens file %s:%d: token has no roles (want 'TOKEN role,role')", name,
					lineno);
		else if (strtok_r(NULL, " \t\r\n", &save))
			ret = coil_err_input(err, "tokens file %s:%d: extra words after the roles", name, lineno);
		else if (parse_roles(roles, &mask, &bad) != 0)
			ret = coil_err_input(err, "tokens file %s:%d: unknown role '%.40s' (roles: compile, read, admin)",
					name, lineno, bad ? bad : "");
		else if (add(a, token, mask) != 0)
			ret = coil_err_input(err, "tokens file %s: out of memory", name);
	}
	if (ret == 0 && a->n == 0)
		ret = coil_err_input(err, "tokens file %s has no tokens", name);
	if (ret != 0)
		auth_free(a);
	return ret;
}

int auth_load(coild_auth *a, const char *path, coil_err *err)
{
	memset(a, 0, sizeof *a);
	FILE *f = fopen(path, "r");
	if (!f)
		return coil_errc(err, COIL_E_IO, "tokens file %s: cannot open", path);
	struct stat st;
	if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
		fclose(f);
		return coil_err_input(err, "tokens file %s is not a regular file", path);
	}
	if (st.st_mode & (S_IRGRP | S_IWGRP | S_IROTH | S_IWOTH)) {
		fclose(f);
		return coil_err_input(err, "tokens file %s is readable or writable by others than its owner (mode %04o):"
				      " it holds secrets; chmod 600 %s", path, (unsigned)(st.st_mode & 07777), path);
	}
	char *text = NULL;
	size_t len = 0, cap = 0;
	int ret = 0;
	for (;;) {
		if (len == cap) {
			if (cap >= ((size_t)1 << 24)) {
				ret = coil_err_input(err, "tokens file %s is larger than 16 MiB", path);
				break;
			}
			cap = cap ? 2 * cap : 4096;
			char *p = realloc(text, cap);
			if (!p) {
				ret = coil_err_input(err, "tokens file %s: out of memory", path);
				break;
			}
			text = p;
		}
		size_t k = fread(text + len, 1, cap - len, f);
		len += k;
		if (k == 0)
			break;
	}
	if (ret == 0 && ferror(f))
		ret = coil_errc(err, COIL_E_IO, "tokens file %s: cannot read", path);
	fclose(f);
	if (ret == 0)
		ret = auth_parse(a, text, len, path, err);
	free(text);
	return ret;
}

void auth_free(coild_auth *a)
{
	for (int i = 0; i < a->n; i++) {
		/* scrub the secret before freeing it */
		memset(a->tokens[i], 0, strlen(a->tokens[i]));
		free(a->tokens[i]);
	}
	free(a->tokens);
	free(a->roles);
	memset(a, 0, sizeof *a);
}

/* Compare without an early exit, so timing does not reveal a prefix. */
static int same_secret(const char *a, size_t alen, const char *b)
{
	size_t blen = strlen(b);
	unsigned char diff = alen != blen;
	for (size_t i = 0; i < alen; i++)
		diff |= (unsigned char)a[i] ^ (unsigned char)b[i < blen ? i : 0];
	return diff == 0;
}

int auth_find(const coild_auth *a, const char *authorization)
{
	if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
		return -1;
	const char *tok = authorization + 7;
	while (*tok == ' ')
		tok++;
	size_t len = strlen(tok);
	while (len && isspace((unsigned char)tok[len - 1]))
		len--;
	int found = -1;
	for (int i = 0; i < a->n; i++)
		if (same_secret(tok, len, a->tokens[i]))
			found = i;
	return found;
}

int auth_check(const coild_auth *a, const char *authorization, unsigned need)
{
	if (a->n == 0 || need == 0)
		return 0;
	int i = auth_find(a, authorization);
	if (i < 0)
		return 401;
	return a->roles[i] & need ? 0 : 403;
}
