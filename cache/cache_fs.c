/* File helpers for the cache: directories, fsync, temp files, comparing. */
#include "cache/cache_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
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
		return coil_errc(err, COIL_E_IO, "%s exists and is not a directory", path);
	return coil_errc(err, coil_code_of_errno(errno), "cannot create directory %s: %s", path, strerror(errno));
}

int cache_fs_mkdirs(const char *path, coil_err *err)
{
	char buf[PATH_MAX];
	size_t n = strlen(path);
	if (n >= sizeof buf)
		return coil_errc(err, COIL_E_IO, "path too long: %s", path);
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
		return coil_errc(err, coil_code_of_errno(errno), "cannot open directory %s: %s", path, strerror(errno));
	int rc = fsync(fd);
	int e = errno;
	close(fd);
	if (rc != 0)
		return coil_errc(err, coil_code_of_errno(e), "fsync %s: %s", path, strerror(e));
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
			return coil_errc(err, coil_code_of_errno(errno), "cannot write %s: %s", path, strerror(errno));
		s += w;
		n -= (size_t)w;
	}
	return 0;
}

int cache_fs_still_linked(int fd, const char *path)
{
	struct stat a, b;
	return fstat(fd, &a) == 0 && lstat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Take fd's flock; 0 when held and fd is still the file at path, 1 when a
 * cleanup unlinked it meanwhile (the caller starts over), -1 on error. */
static int hold(int fd, const char *path)
{
	int rc;
	while ((rc = flock(fd, LOCK_EX)) != 0 && errno == EINTR)
		;
	if (rc != 0)
		return -1;
	return cache_fs_still_linked(fd, path) ? 0 : 1;
}

int cache_fs_tmp_create(coil_cache *c, const char *suffix, char *buf, size_t cap, int *fd_out,
			coil_err *err)
{
	/* pid and a per-handle sequence number make a name distinct among this
	 * process's handles; O_EXCL settles any remaining clash (another host's
	 * process with the same pid, a handle in the same process) by retrying.
	 * The file stays flocked while it is open: that is how a reconcile tells
	 * a store in progress from what a dead process left (cache_fs_sweep_tmp). */
	for (int attempt = 0; attempt < 1000; attempt++) {
		int n = snprintf(buf, cap, "%s/tmp/%ld-%u%s.tmp", c->dir, (long)getpid(),
				 c->tmp_seq++, suffix);
		if (n < 0 || (size_t)n >= cap)
			return coil_errc(err, COIL_E_IO, "cache path too long under %s", c->dir);
		int fd = open(buf, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0 && errno == EEXIST)
			continue;
		if (fd < 0)
			return coil_errc(err, coil_code_of_errno(errno), "cannot create %s: %s", buf, strerror(errno));
		int h = hold(fd, buf);
		if (h == 0) {
			*fd_out = fd;
			return 0;
		}
		int e = errno;
		close(fd);
		if (h < 0) {
			cache_fs_unlink(buf);
			return coil_errc(err, coil_code_of_errno(e), "cannot lock %s: %s", buf, strerror(e));
		}
	}
	return coil_errc(err, COIL_E_IO, "cannot create a temp file in %s/tmp: all names taken", c->dir);
}

int cache_tmpdir_create(coil_cache *c, char *buf, size_t cap, int *fd_out, coil_err *err)
{
	*fd_out = -1;
	for (int attempt = 0; attempt < 100; attempt++) {
		int n = snprintf(buf, cap, "%s/tmp/build-XXXXXX", c->dir);
		if (n < 0 || (size_t)n >= cap)
			return coil_errc(err, COIL_E_IO, "cache path too long under %s", c->dir);
		if (!mkdtemp(buf))
			return coil_errc(err, coil_code_of_errno(errno), "cannot create a build directory in %s/tmp: %s",
					 c->dir, strerror(errno));
		/* Until it is held, another handle's sweep may take the new
		 * directory for a dead build's and remove it: then try again. */
		int fd = open(buf, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT)
			continue;
		int h = fd < 0 ? -1 : hold(fd, buf);
		if (h == 0) {
			*fd_out = fd;
			return 0;
		}
		int e = errno;
		if (fd >= 0)
			close(fd);
		if (h < 0) {
			rmdir(buf);
			return coil_errc(err, coil_code_of_errno(e), "cannot lock %s: %s", buf, strerror(e));
		}
	}
	return coil_errc(err, COIL_E_IO, "cannot create a build directory in %s/tmp", c->dir);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	remove(path);
	return 0;
}

void cache_tmpdir_remove(const char *path, int fd)
{
	if (path && path[0])
		nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	if (fd >= 0)
		close(fd);
}

int cache_fs_sweep_tmp(coil_cache *c, coil_err *err)
{
	char tmp[PATH_MAX];
	DIR *d = cache_opendir(c, "tmp", tmp, sizeof tmp, err);
	if (!d)
		return -1;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char path[PATH_MAX];
		int n = snprintf(path, sizeof path, "%s/%s", tmp, e->d_name);
		struct stat st;
		if (n < 0 || (size_t)n >= sizeof path || lstat(path, &st) != 0)
			continue;
		int isdir = S_ISDIR(st.st_mode);
		if (!isdir && !S_ISREG(st.st_mode))
			continue;
		int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (isdir ? O_DIRECTORY : 0));
		if (fd < 0)
			continue;
		/* Nobody holds it: its writer is gone.  Held while we look, so
		 * no store can be handed this name meanwhile. */
		if (flock(fd, LOCK_EX | LOCK_NB) == 0 && cache_fs_still_linked(fd, path)) {
			if (isdir)
				nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
			else
				cache_fs_unlink(path);
		}
		close(fd);
	}
	closedir(d);
	return 0;
}

int cache_fs_same_bytes(const char *path, const void *data, size_t len, coil_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		return coil_errc(err, coil_code_of_errno(errno), "cannot open %s: %s", path, strerror(errno));
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
			return coil_errc(err, coil_code_of_errno(e), "cannot read %s: %s", path, strerror(e));
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
