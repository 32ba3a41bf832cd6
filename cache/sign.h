/* Signed artifacts (the Nix model): Ed25519 through OpenSSL's EVP, with named
 * keys written "name:base64".
 *
 *   secret key file   "name:BASE64(32-byte seed || 32-byte public key)\n",
 *                     mode 0600 (a file group or others may read is refused)
 *   public key        "name:BASE64(32-byte public key)"
 *   signature         "name:BASE64(64-byte Ed25519 signature)"
 *
 * What is signed is one canonical byte string (sign_message), never JSON:
 *
 *   "coil-artifact-v1\nkey=KEY\nsha256=SHA256\ntarget=TARGET\nabi=ABI\n"
 *
 * KEY and SHA256 are 64 lowercase hex digits, TARGET a resolved target name
 * (codegen/target.c), ABI the artifact ABI version in decimal
 * (COIL_ABI_VERSION).  A verifier builds the string from what it expects (the
 * key it asked for, the SHA-256 of the bytes it holds, the target it is about
 * to check, its own ABI version), so a signature made for any other artifact,
 * target or ABI does not verify.
 *
 * A trust set holds the public keys a client accepts (several at once, for
 * rotation); the secret never leaves sign_key_load's structure: no message
 * here quotes a key file's contents. */
#ifndef COIL_CACHE_SIGN_H
#define COIL_CACHE_SIGN_H

#include <stddef.h>

#include "common/error.h"

/* Longest key name; names are [A-Za-z0-9._-]+. */
#define SIGN_NAME_MAX 64
/* A signature or public key string "name:base64" fits in this (with its NUL). */
#define SIGN_STR_MAX 200

typedef struct coil_signer coil_signer;
typedef struct coil_trust coil_trust;

/* Make a key pair named name: the secret into secret_path (created 0600, not
 * overwriting an existing file), the public key into public_path (0644) and
 * into pub_out.  0, or -1 with err. */
int sign_keygen(const char *name, const char *secret_path, const char *public_path, char pub_out[SIGN_STR_MAX],
		coil_err *err);

/* Read a secret key file.  Refused: a file group or others may read or
 * write, a malformed one (the message names the file, never its bytes). */
int sign_key_load(const char *path, coil_signer **out, coil_err *err);
void sign_key_free(coil_signer *s); /* accepts NULL; wipes the secret */
const char *sign_key_name(const coil_signer *s);
/* Its public key, "name:base64". */
const char *sign_key_public(const coil_signer *s);

/* The canonical string above into buf (cap bytes); its length, or -1 when
 * an argument is malformed. */
int sign_message(char *buf, size_t cap, const char *key, const char *sha256, const char *target, int abi);

/* Sign an artifact: sig_out = "name:base64". */
int sign_artifact(const coil_signer *s, const char *key, const char *sha256, const char *target,
		  char sig_out[SIGN_STR_MAX], coil_err *err);

/* ---- trust ---- */

coil_trust *trust_new(void); /* NULL when out of memory */
void trust_free(coil_trust *t); /* accepts NULL */
int trust_count(const coil_trust *t); /* 0 for NULL */
/* Add one public key "name:base64" (from names the source in messages).  A
 * second key with a name already present is refused. */
int trust_add(coil_trust *t, const char *pub, const char *from, coil_err *err);
/* Add every key of a list separated by spaces, tabs or newlines ('#' starts
 * a comment up to the end of its line). */
int trust_add_list(coil_trust *t, const char *list, const char *from, coil_err *err);
/* trust_add_list of a file's contents. */
int trust_add_file(coil_trust *t, const char *path, coil_err *err);
/* The trust of the environment: COIL_TRUSTED_KEYS (a list) and
 * COIL_TRUSTED_KEYS_FILE (a file), both when both are set.  *out is NULL
 * when neither is set (no trust configured: nothing is checked). */
int trust_from_env(coil_trust **out, coil_err *err);

/* The trust of a front end: the keys of list and/or file when either is
 * given, else trust_from_env's. */
int trust_resolve(const char *list, const char *file, coil_trust **out, coil_err *err);

/* key's entry in cache c: its sha256 (from the index), and the target and
 * signature its metadata holds ("" when absent); with keys in t, the
 * signature verified over them.  1 present (and trusted), 0 absent, -1 with
 * err (COIL_E_INPUT: refused, see trust_verify). */
struct coil_cache;
int cache_entry_verify(struct coil_cache *c, const coil_trust *t, const char *key, char sha256[65], char target[64],
		       char sig[SIGN_STR_MAX], coil_err *err);

/* Check signature sig ("name:base64", NULL or "" for none) of the artifact
 * key/sha256/target for this ABI version (COIL_ABI_VERSION).  0 when a
 * trusted key made it; -1 with err (COIL_E_INPUT) naming why not: unsigned,
 * signed by a key not trusted, a malformed signature, or one that does not
 * verify (the artifact, its sha256 or its target were changed, or it was
 * signed for something else). */
int trust_verify(const coil_trust *t, const char *key, const char *sha256, const char *target, const char *sig,
		 coil_err *err);

#endif
