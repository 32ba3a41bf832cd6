/* Per-key compile locks: flock on DIR/locks/<key>.lock.  flock locks belong
 * to an open file description, so two handles in one process exclude each
 * other just as two processes do.
 *
 * Lock files that nobody holds are deleted by cache_reconcile().  That is safe
 * because a locker, once it holds the lock, checks that the file it locked is
 * still the one at the path; if the file was unlinked meanwhile it starts
 * over, so two lockers never hold locks on different files for one key. */
#include "cache/cache_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static int lock_key(coil_cache *c, const char *key, int nonblock, int *fd_out, coil_err *err)
{
	const char *fn = nonblock ? "cache_trylock_key" : "cache_lock_key";
	*fd_out = -1;
	if (cache_check_key(key, err) != 0)
		return coil_err_prefix(err, "%s", fn);
	char path[PATH_MAX];
	if (cache_lock_path(c, key, path, sizeof path, err))
		return coil_err_prefix(err, "%s", fn);
	for (;;) {
		int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (fd < 0)
			return coil_errc(err, coil_code_of_errno(errno), "%s: cannot open %s: %s", fn, path, strerror(errno));
		int rc;
		while ((rc = flock(fd, LOCK_EX | (nonblock ? LOCK_NB : 0))) != 0 && errno == EINTR)
			;
		if (rc != 0) {
			int e = errno;
			close(fd);
			if (nonblock && e == EWOULDBLOCK)
				return 1;
			return coil_errc(err, coil_code_of_errno(e), "%s: cannot lock %s: %s", fn, path, strerror(e));
		}
		if (cache_fs_still_linked(fd, path)) {
			*fd_out = fd;
			return 0;
		}
		close(fd); /* a cleanup removed it while we waited: take the new one */
	}
}

int cache_lock_key(coil_cache *c, const char *key, int *fd_out, coil_err *err)
{
	return lock_key(c, key, 0, fd_out, err);
}

int cache_trylock_key(coil_cache *c, const char *key, int *fd_out, coil_err *err)
{
	return lock_key(c, key, 1, fd_out, err);
}

void cache_unlock_key(int fd)
{
	if (fd < 0)
		return;
	flock(fd, LOCK_UN);
	close(fd);
}

int cache_locks_cleanup(coil_cache *c, coil_err *err)
{
	char locks[PATH_MAX];
	DIR *d = cache_opendir(c, "locks", locks, sizeof locks, err);
	if (!d)
		return -1;
	struct dirent *e;
	while ((e = readdir(d))) {
		char key[CACHE_KEY_HEX + 1], path[PATH_MAX];
		if (!cache_key_of_name(e->d_name, ".lock", key) || cache_lock_path(c, key, path, sizeof path, NULL))
			continue;
		int fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			continue;
		/* Unlink only while holding the lock, so no holder loses it. */
		if (flock(fd, LOCK_EX | LOCK_NB) == 0 && cache_fs_still_linked(fd, path))
			cache_fs_unlink(path);
		close(fd);
	}
	closedir(d);
	return 0;
}
