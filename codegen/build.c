/* build: the system C compiler, run with fork/exec in a private temp dir and
 * killed after a timeout, turns the generated C into a shared object. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "codegen/codegen.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void rm_dir(const char *dir, const char *c_path, const char *log_path)
{
	unlink(c_path);
	unlink(log_path);
	rmdir(dir);
}

int build_so(const char *src, const char *cc, const char *opt, const char *tflags, int werror, int timeout_s,
	     const char *out_so, double *secs, coil_err *err)
{
	char dir[] = "/tmp/coil-build-XXXXXX", c_path[64], log_path[64], tf[256];
	if (!mkdtemp(dir))
		return coil_errf(err, "build: mkdtemp: %s", strerror(errno));
	snprintf(c_path, sizeof c_path, "%s/model.c", dir);
	snprintf(log_path, sizeof log_path, "%s/cc.log", dir);
	FILE *f = fopen(c_path, "w");
	if (!f || fputs(src, f) < 0 || fclose(f)) {
		rm_dir(dir, c_path, log_path);
		return coil_errf(err, "build: cannot write %s", c_path);
	}
	/* argv: cc opt -fPIC -shared -fopenmp -fno-math-errno <target flags> [-W...] -o out model.c -lm */
	const char *argv[32];
	int n = 0;
	argv[n++] = cc ? cc : "cc";
	argv[n++] = opt ? opt : "-O3";
	argv[n++] = "-std=c11";
	argv[n++] = "-fPIC";
	argv[n++] = "-shared";
	argv[n++] = "-fopenmp";
	argv[n++] = "-fno-math-errno";
	argv[n++] = "-fvisibility=hidden";
	snprintf(tf, sizeof tf, "%s", tflags ? tflags : "");
	for (char *save = NULL, *t = strtok_r(tf, " ", &save); t && n < 20; t = strtok_r(NULL, " ", &save))
		argv[n++] = t;
	if (werror) {
		argv[n++] = "-Wall";
		argv[n++] = "-Wextra";
		argv[n++] = "-Werror";
		argv[n++] = "-Wno-unused-variable";
		argv[n++] = "-Wno-unused-parameter";
	}
	argv[n++] = "-o";
	argv[n++] = out_so;
	argv[n++] = c_path;
	argv[n++] = "-lm";
	argv[n] = NULL;
	double t0 = now();
	pid_t pid = fork();
	if (pid < 0) {
		rm_dir(dir, c_path, log_path);
		return coil_errf(err, "build: fork: %s", strerror(errno));
	}
	if (pid == 0) {
		int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	int status = 0, done = 0;
	int limit = timeout_s > 0 ? timeout_s : 120;
	while (!done) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid) {
			done = 1;
		} else if (r < 0 && errno != EINTR) {
			break;
		} else if (now() - t0 > limit) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			rm_dir(dir, c_path, log_path);
			return coil_errf(err, "build: %s timed out after %d s", argv[0], limit);
		} else {
			struct timespec ts = {0, 2000000};
			nanosleep(&ts, NULL);
		}
	}
	*secs = now() - t0;
	if (!done || !WIFEXITED(status) || WEXITSTATUS(status)) {
		char log[300] = "";
		FILE *lf = fopen(log_path, "r");
		if (lf) {
			size_t k = fread(log, 1, sizeof log - 1, lf);
			log[k] = 0;
			fclose(lf);
		}
		for (char *p = log; *p; p++)
			if (*p == '\n')
				*p = ' ';
		rm_dir(dir, c_path, log_path);
		return coil_errf(err, "build: %s failed (status %d): %s", argv[0], WIFEXITED(status) ? WEXITSTATUS(status) : -1, log);
	}
	rm_dir(dir, c_path, log_path);
	return 0;
}
