/* File helpers for the cache: directories, fsync, temp files, comparing. */
#include "cache/cache_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int64_t cache_now(void)
{
	return (int64_t)time(NULL);
}

int cache_fs_mkdir(const char *path, int *created, coil_err *err)
{
	if (created)
		*created = 0;
	if (mkdir(path, 0777) == 0) {
		if (created)
			*created = 1;
		return 0;
	}
	struct stat st;
	if (errno == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return 0;
	if (errno == EEXIST)
		return coil_errf(err, "%s exists and is not a directory", path);
	return coil_errf(err, "cannot create directory %s: %s", path, strerror(errno));
}

int cache_fs_mkdirs(const char *path, coil_err *err)
{
	char buf[PATH_MAX];
	size_t n = strlen(path);
	if (n >= sizeof buf)
		return coil_errf(err, "path too long: %s", path);
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		int rc = cache_fs_mkdir(buf, NULL, err);
		*p = '/';
		if (rc != 0)
			return -1;
	}
	return cache_fs_mkdir(buf, NULL, err);
}

int cache_fs_fsync_dir(const char *path, coil_err *err)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return coil_errf(err, "cannot open directory %s: %s", path, strerror(errno));
	int rc = fsync(fd);
	int e = errno;
	close(fd);
	if (rc != 0)
		return coil_errf(err, "fsync %s: %s", path, strerror(e));
	return 0;
}

int cache_fs_write_all(int fd, const void *p, size_t n, const char *path, coil_err *err)
{
	const char *s = p;
	while (n > 0) {
		ssize_t w = write(fd, s, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return coil_errf(err, "cannot write %s: %s", path, strerror(errno));
		s += w;
		n -= (size_t)w;
	}
	return 0;
}

int cache_fs_tmp_create(coil_cache *c, const char *suffix, char *buf, size_t cap, int *fd_out,
			coil_err *err)
{
	/* pid and a per-handle sequence number make a name distinct among this
	 * process's handles; O_EXCL settles any remaining clash (another host's
	 * process with the same pid, a handle in the same process) by retrying. */
	for (int attempt = 0; attempt < 1000; attempt++) {
		int n = snprintf(buf, cap, "%s/tmp/%ld-%u%s.tmp", c->dir, (long)getpid(),
				 c->tmp_seq++, suffix);
		if (n < 0 || (size_t)n >= cap)
			return coil_errf(err, "cache path too long under %s", c->dir);
		int fd = open(buf, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd >= 0) {
			*fd_out = fd;
			return 0;
		}
		if (errno != EEXIST)
			return coil_errf(err, "cannot create %s: %s", buf, strerror(errno));
	}
	return coil_errf(err, "cannot create a temp file in %s/tmp: all names taken", c->dir);
}

int cache_fs_same_bytes(const char *path, const void *data, size_t len, coil_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		return coil_errf(err, "cannot open %s: %s", path, strerror(errno));
	}
	const unsigned char *want = data;
	unsigned char buf[65536];
	size_t off = 0;
	int same = 1;
	for (;;) {
		ssize_t n = read(fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			close(fd);
			return coil_errf(err, "cannot read %s: %s", path, strerror(e));
		}
		if (n == 0)
			break;
		if ((size_t)n > len - off || memcmp(buf, want + off, (size_t)n) != 0) {
			same = 0;
			break;
		}
		off += (size_t)n;
	}
	close(fd);
	return same && off == len;
}

int cache_fs_unlink(const char *path)
{
	if (unlink(path) == 0 || errno == ENOENT)
		return 0;
	return -1;
}
