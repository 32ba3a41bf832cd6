/* Signed artifacts: Ed25519 keys and signatures "name:base64" (see sign.h). */
#include "cache/sign.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "cache/cache.h"
#include "coil/artifact.h" /* COIL_ABI_VERSION */

#define SEED_LEN 32
#define PUB_LEN 32
#define SIG_LEN 64
/* Largest key file read (a secret is ~100 bytes). */
#define KEY_FILE_MAX 4096
/* Largest trusted keys file. */
#define TRUST_FILE_MAX (1 << 20)

struct coil_signer {
	char name[SIGN_NAME_MAX + 1];
	char pub[SIGN_STR_MAX];
	EVP_PKEY *pkey;
};

typedef struct trusted {
	char name[SIGN_NAME_MAX + 1];
	EVP_PKEY *pkey;
} trusted;

struct coil_trust {
	int n;
	trusted *keys;
};

static int name_valid(const char *s, size_t n)
{
	if (n == 0 || n > SIGN_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

/* Base64 of n bytes into out (cap >= 4 * ceil(n / 3) + 1). */
static void b64_encode(const unsigned char *in, size_t n, char *out)
{
	EVP_EncodeBlock((unsigned char *)out, in, (int)n);
}

/* Decode exactly want bytes from the base64 text s[0..n); -1 if malformed
 * or another length. */
static int b64_decode(const char *s, size_t n, unsigned char *out, size_t want)
{
	if (n == 0 || n % 4 || n > 4 * ((want + 2) / 3))
		return -1;
	unsigned char buf[96];
	int got = EVP_DecodeBlock(buf, (const unsigned char *)s, (int)n);
	if (got < 0)
		return -1;
	size_t pad = (s[n - 1] == '=') + (n > 1 && s[n - 2] == '=');
	if ((size_t)got - pad != want) {
		OPENSSL_cleanse(buf, sizeof buf);
		return -1;
	}
	memcpy(out, buf, want);
	OPENSSL_cleanse(buf, sizeof buf);
	return 0;
}

/* "name:base64" into its name and want decoded bytes; -1 if malformed. */
static int split_named(const char *s, size_t len, char name[SIGN_NAME_MAX + 1], unsigned char *bytes, size_t want)
{
	const char *colon = memchr(s, ':', len);
	if (!colon || !name_valid(s, (size_t)(colon - s)))
		return -1;
	size_t nl = (size_t)(colon - s);
	memcpy(name, s, nl);
	name[nl] = 0;
	return b64_decode(colon + 1, len - nl - 1, bytes, want);
}

static void format_named(const char *name, const unsigned char *bytes, size_t n, char out[SIGN_STR_MAX])
{
	char b64[128];
	b64_encode(bytes, n, b64);
	snprintf(out, SIGN_STR_MAX, "%s:%s", name, b64);
}

/* ---- keys ---- */

static int write_file(const char *path, const char *text, mode_t mode, coil_err *err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		return coil_errc(err, coil_code_of_errno(errno), "%s: %s", path,
				 errno == EEXIST ? "already exists (not overwritten)" : strerror(errno));
	size_t n = strlen(text);
	int ok = fchmod(fd, mode) == 0 && write(fd, text, n) == (ssize_t)n && fsync(fd) == 0;
	int e = errno;
	ok = close(fd) == 0 && ok;
	if (!ok) {
		unlink(path);
		return coil_errc(err, coil_code_of_errno(e), "%s: cannot write: %s", path, strerror(e));
	}
	return 0;
}

int sign_keygen(const char *name, const char *secret_path, const char *public_path, char pub_out[SIGN_STR_MAX],
		coil_err *err)
{
	if (!name || !name_valid(name, strlen(name)))
		return coil_err_input(err, "key name '%.80s' must be 1..%d characters of A-Z a-z 0-9 . _ -",
				      name ? name : "", SIGN_NAME_MAX);
	EVP_PKEY *pk = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	if (!pk)
		return coil_errf(err, "cannot generate an Ed25519 key (OpenSSL)");
	unsigned char raw[SEED_LEN + PUB_LEN];
	size_t sl = SEED_LEN, pl = PUB_LEN;
	int rc = -1;
	char secret[SIGN_STR_MAX + 2];
	if (EVP_PKEY_get_raw_private_key(pk, raw, &sl) != 1 || sl != SEED_LEN ||
	    EVP_PKEY_get_raw_public_key(pk, raw + SEED_LEN, &pl) != 1 || pl != PUB_LEN) {
		coil_errf(err, "cannot read the generated key (OpenSSL)");
		goto out;
	}
	format_named(name, raw, sizeof raw, secret);
	strcat(secret, "\n");
	format_named(name, raw + SEED_LEN, PUB_LEN, pub_out);
	if (write_file(secret_path, secret, 0600, err) != 0)
		goto out;
	char pub[SIGN_STR_MAX + 2];
	snprintf(pub, sizeof pub, "%s\n", pub_out);
	if (write_file(public_path, pub, 0644, err) != 0) {
		unlink(secret_path);
		goto out;
	}
	rc = 0;
out:
	OPENSSL_cleanse(raw, sizeof raw);
	OPENSSL_cleanse(secret, sizeof secret);
	EVP_PKEY_free(pk);
	return rc;
}

int sign_key_load(const char *path, coil_signer **out, coil_err *err)
{
	*out = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return coil_errc(err, COIL_E_IO, "signing key %s: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return coil_err_input(err, "signing key %s: not a regular file", path);
	}
	if (st.st_mode & 077) {
		close(fd);
		return coil_err_input(err, "signing key %s: group or others may access it (mode %03o); chmod 600 it",
				      path, (unsigned)(st.st_mode & 0777));
	}
	char buf[KEY_FILE_MAX + 1];
	ssize_t n = read(fd, buf, KEY_FILE_MAX + 1);
	close(fd);
	if (n < 0 || n > KEY_FILE_MAX) {
		OPENSSL_cleanse(buf, sizeof buf);
		return coil_err_input(err, "signing key %s: cannot read it, or larger than %d bytes", path, KEY_FILE_MAX);
	}
	size_t len = (size_t)n;
	while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' '))
		len--;
	coil_signer *s = calloc(1, sizeof *s);
	unsigned char raw[SEED_LEN + PUB_LEN], pub[PUB_LEN];
	size_t pl = PUB_LEN;
	int rc = -1;
	if (!s) {
		coil_err_oom(err);
		goto out;
	}
	if (split_named(buf, len, s->name, raw, sizeof raw) != 0) {
		coil_err_input(err, "signing key %s: not a secret key 'name:base64' of %d bytes (see coil keygen)", path,
			       SEED_LEN + PUB_LEN);
		goto out;
	}
	s->pkey = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, raw, SEED_LEN);
	if (!s->pkey || EVP_PKEY_get_raw_public_key(s->pkey, pub, &pl) != 1 || memcmp(pub, raw + SEED_LEN, PUB_LEN)) {
		coil_err_input(err, "signing key %s: its public half does not match its secret (a damaged key file)",
			       path);
		goto out;
	}
	format_named(s->name, pub, PUB_LEN, s->pub);
	*out = s;
	s = NULL;
	rc = 0;
out:
	OPENSSL_cleanse(buf, sizeof buf);
	OPENSSL_cleanse(raw, sizeof raw);
	sign_key_free(s);
	return rc;
}

void sign_key_free(coil_signer *s)
{
	if (!s)
		return;
	EVP_PKEY_free(s->pkey);
	OPENSSL_cleanse(s, sizeof *s);
	free(s);
}

const char *sign_key_name(const coil_signer *s)
{
	return s->name;
}

const char *sign_key_public(const coil_signer *s)
{
	return s->pub;
}

/* ---- signing ---- */

static int target_valid(const char *t)
{
	if (!t || !*t || strlen(t) > 63)
		return 0;
	for (; *t; t++)
		if (!((*t >= 'a' && *t <= 'z') || (*t >= '0' && *t <= '9') || *t == '-' || *t == '_'))
			return 0;
	return 1;
}

int sign_message(char *buf, size_t cap, const char *key, const char *sha256, const char *target, int abi)
{
	if (!cache_key_valid(key) || !cache_key_valid(sha256) || !target_valid(target) || abi < 0)
		return -1;
	int n = snprintf(buf, cap, "coil-artifact-v1\nkey=%s\nsha256=%s\ntarget=%s\nabi=%d\n", key, sha256, target, abi);
	return n < 0 || (size_t)n >= cap ? -1 : n;
}

int sign_artifact(const coil_signer *s, const char *key, const char *sha256, const char *target,
		  char sig_out[SIGN_STR_MAX], coil_err *err)
{
	char msg[256];
	int n = sign_message(msg, sizeof msg, key, sha256, target, COIL_ABI_VERSION);
	if (n < 0)
		return coil_errf(err, "sign: malformed key, sha256 or target '%.64s'", target ? target : "");
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char sig[SIG_LEN];
	size_t sl = sizeof sig;
	int ok = ctx && EVP_DigestSignInit(ctx, NULL, NULL, NULL, s->pkey) == 1 &&
		 EVP_DigestSign(ctx, sig, &sl, (const unsigned char *)msg, (size_t)n) == 1 && sl == SIG_LEN;
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return coil_errf(err, "sign: Ed25519 signing failed (OpenSSL)");
	format_named(s->name, sig, SIG_LEN, sig_out);
	return 0;
}

/* ---- trust ---- */

coil_trust *trust_new(void)
{
	return calloc(1, sizeof(coil_trust));
}

void trust_free(coil_trust *t)
{
	if (!t)
		return;
	for (int i = 0; i < t->n; i++)
		EVP_PKEY_free(t->keys[i].pkey);
	free(t->keys);
	free(t);
}

int trust_count(const coil_trust *t)
{
	return t ? t->n : 0;
}

static const trusted *trust_find(const coil_trust *t, const char *name)
{
	for (int i = 0; i < t->n; i++)
		if (!strcmp(t->keys[i].name, name))
			return &t->keys[i];
	return NULL;
}

/* Add s[0..len). */
static int trust_add_n(coil_trust *t, const char *s, size_t len, const char *from, coil_err *err)
{
	char name[SIGN_NAME_MAX + 1];
	unsigned char pub[PUB_LEN];
	/* never quoted past its name: it could be a secret key given by mistake */
	if (split_named(s, len, name, pub, sizeof pub) != 0)
		return coil_err_input(err, "%s: the key named '%.*s' (%zu characters) is not a public key 'name:base64' "
					   "of %d bytes", from, (int)strcspn(s, ":") > 64 ? 64 : (int)strcspn(s, ":"), s, len,
				      PUB_LEN);
	if (trust_find(t, name))
		return coil_err_input(err, "%s: two trusted keys are named '%s'", from, name);
	trusted *k = realloc(t->keys, (size_t)(t->n + 1) * sizeof *k);
	if (!k)
		return coil_err_oom(err);
	t->keys = k;
	EVP_PKEY *pk = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, PUB_LEN);
	if (!pk)
		return coil_err_input(err, "%s: key '%s' is not an Ed25519 public key", from, name);
	snprintf(t->keys[t->n].name, sizeof t->keys[t->n].name, "%s", name);
	t->keys[t->n++].pkey = pk;
	return 0;
}

int trust_add(coil_trust *t, const char *pub, const char *from, coil_err *err)
{
	return trust_add_n(t, pub, strlen(pub), from, err);
}

int trust_add_list(coil_trust *t, const char *list, const char *from, coil_err *err)
{
	const char *p = list;
	while (*p) {
		if (*p == '#') {
			p += strcspn(p, "\n");
			continue;
		}
		size_t sp = strspn(p, " \t\r\n");
		if (sp) {
			p += sp;
			continue;
		}
		size_t n = strcspn(p, " \t\r\n#");
		if (trust_add_n(t, p, n, from, err) != 0)
			return -1;
		p += n;
	}
	return 0;
}

int trust_add_file(coil_trust *t, const char *path, coil_err *err)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return coil_errc(err, COIL_E_IO, "trusted keys file %s: %s", path, strerror(errno));
	char *buf = malloc(TRUST_FILE_MAX + 1);
	size_t n = buf ? fread(buf, 1, TRUST_FILE_MAX + 1, f) : 0;
	int bad = ferror(f);
	fclose(f);
	if (!buf)
		return coil_err_oom(err);
	if (bad || n > TRUST_FILE_MAX) {
		free(buf);
		return coil_err_input(err, "trusted keys file %s: cannot read it, or larger than %d bytes", path,
				      TRUST_FILE_MAX);
	}
	buf[n] = 0;
	char from[CACHE_PATH_MAX + 32];
	snprintf(from, sizeof from, "trusted keys file %s", path);
	int rc = trust_add_list(t, buf, from, err);
	free(buf);
	return rc;
}

int trust_from_env(coil_trust **out, coil_err *err)
{
	*out = NULL;
	const char *list = getenv("COIL_TRUSTED_KEYS"), *file = getenv("COIL_TRUSTED_KEYS_FILE");
	if ((!list || !*list) && (!file || !*file))
		return 0;
	coil_trust *t = trust_new();
	if (!t)
		return coil_err_oom(err);
	if ((list && *list && trust_add_list(t, list, "COIL_TRUSTED_KEYS", err) != 0) ||
	    (file && *file && trust_add_file(t, file, err) != 0)) {
		trust_free(t);
		return -1;
	}
	*out = t;
	return 0;
}

int trust_verify(const coil_trust *t, const char *key, const char *sha256, const char *target, const char *sig,
		 coil_err *err)
{
	if (!sig || !*sig)
		return coil_err_input(err, "artifact %.64s is unsigned, and trusted keys are configured; refusing it", key);
	char name[SIGN_NAME_MAX + 1];
	unsigned char raw[SIG_LEN];
	if (split_named(sig, strlen(sig), name, raw, sizeof raw) != 0)
		return coil_err_input(err, "artifact %.64s: malformed signature (not 'name:base64' of %d bytes); refusing it",
				      key, SIG_LEN);
	const trusted *k = trust_find(t, name);
	if (!k) {
		char names[256] = "";
		for (int i = 0; i < t->n; i++)
			snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", i ? ", " : "",
				 t->keys[i].name);
		return coil_err_input(err, "artifact %.64s is signed by key '%s', which is not trusted (trusted: %s); "
					   "refusing it", key, name, names);
	}
	char msg[256];
	int n = sign_message(msg, sizeof msg, key, sha256, target, COIL_ABI_VERSION);
	if (n < 0)
		return coil_err_input(err, "artifact %.64s: malformed sha256 or target '%.64s'; refusing it", key,
				      target ? target : "");
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	int ok = ctx && EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, k->pkey) == 1 &&
		 EVP_DigestVerify(ctx, raw, SIG_LEN, (const unsigned char *)msg, (size_t)n) == 1;
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return coil_err_input(err, "artifact %.64s: bad signature by key '%s' (not made for this key, sha256 %.12s..., "
					   "target %s and ABI %d: tampered or substituted); refusing it",
				      key, name, sha256, target, COIL_ABI_VERSION);
	return 0;
}

int trust_resolve(const char *list, const char *file, coil_trust **out, coil_err *err)
{
	*out = NULL;
	if (!list && !file)
		return trust_from_env(out, err);
	coil_trust *t = trust_new();
	if (!t)
		return coil_err_oom(err);
	if ((list && trust_add_list(t, list, "trusted keys", err) != 0) || (file && trust_add_file(t, file, err) != 0)) {
		trust_free(t);
		return -1;
	}
	*out = t;
	return 0;
}

/* ---- cache entries ---- */

int cache_entry_verify(coil_cache *c, const coil_trust *t, const char *key, char sha256[65], char target[64],
		       char sig[SIGN_STR_MAX], coil_err *err)
{
	char *meta = NULL;
	int rc = cache_get_meta(c, key, &meta, sha256, NULL, err);
	if (rc != 1)
		return rc;
	json_t *m = meta ? json_loads(meta, 0, NULL) : NULL;
	free(meta);
	const char *tg = json_string_value(json_object_get(m, "target"));
	const char *sg = json_string_value(json_object_get(m, "signature"));
	snprintf(target, 64, "%s", tg && strlen(tg) < 64 ? tg : "");
	snprintf(sig, SIGN_STR_MAX, "%s", sg && strlen(sg) < SIGN_STR_MAX ? sg : "");
	json_decref(m);
	if (trust_count(t) && trust_verify(t, key, sha256, target, sig, err) != 0)
		return -1;
	return 1;
}
