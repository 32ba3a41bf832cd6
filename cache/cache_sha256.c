#include "cache/cache_sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

struct cache_sha256 {
	EVP_MD_CTX *ctx;
};

cache_sha256 *cache_sha256_new(coil_err *err)
{
	cache_sha256 *h = malloc(sizeof *h);
	if (!h || !(h->ctx = EVP_MD_CTX_new())) {
		free(h);
		coil_errc(err, COIL_E_RESOURCE, "sha256: out of memory");
		return NULL;
	}
	if (EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
		cache_sha256_free(h);
		coil_errc(err, COIL_E_IO, "sha256: EVP_DigestInit_ex failed");
		return NULL;
	}
	return h;
}

int cache_sha256_update(cache_sha256 *h, const void *data, size_t len, coil_err *err)
{
	if (len && EVP_DigestUpdate(h->ctx, data, len) != 1)
		return coil_errc(err, COIL_E_IO, "sha256: EVP_DigestUpdate failed");
	return 0;
}

int cache_sha256_final(cache_sha256 *h, char hex[65], coil_err *err)
{
	static const char digits[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	if (EVP_DigestFinal_ex(h->ctx, md, &n) != 1 || n != 32)
		return coil_errc(err, COIL_E_IO, "sha256: EVP_DigestFinal_ex failed");
	for (unsigned i = 0; i < 32; i++) {
		hex[2 * i] = digits[md[i] >> 4];
		hex[2 * i + 1] = digits[md[i] & 15];
	}
	hex[64] = '\0';
	return 0;
}

void cache_sha256_free(cache_sha256 *h)
{
	if (!h)
		return;
	EVP_MD_CTX_free(h->ctx);
	free(h);
}

int cache_sha256_bytes(const void *data, size_t len, char hex[65], coil_err *err)
{
	cache_sha256 *h = cache_sha256_new(err);
	if (!h)
		return -1;
	int rc = cache_sha256_update(h, data, len, err);
	if (rc == 0)
		rc = cache_sha256_final(h, hex, err);
	cache_sha256_free(h);
	return rc;
}

int cache_sha256_file(const char *path, char hex[65], coil_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return coil_errc(err, coil_code_of_errno(errno), "sha256: cannot open %s: %s", path, strerror(errno));
	cache_sha256 *h = cache_sha256_new(err);
	if (!h) {
		close(fd);
		return -1;
	}
	unsigned char buf[65536];
	int rc = 0;
	for (;;) {
		ssize_t n = read(fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = coil_errc(err, coil_code_of_errno(errno), "sha256: cannot read %s: %s", path, strerror(errno));
			break;
		}
		if (n == 0)
			break;
		if ((rc = cache_sha256_update(h, buf, (size_t)n, err)) != 0)
			break;
	}
	if (rc == 0)
		rc = cache_sha256_final(h, hex, err);
	cache_sha256_free(h);
	close(fd);
	return rc;
}
