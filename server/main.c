/* coild: configuration, signals, start and graceful stop.  SIGTERM or SIGINT
 * stops taking compiles (503, and /healthz answers 503 at once), cancels the
 * queued ones, gives the running ones --grace seconds, answers every request
 * still waiting, and exits 0 within the grace (server_stop).  The cache's
 * stores are crash-safe on their own, so even a kill leaves nothing
 * half-written. */
#include "server/server.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	coild_config cfg;
	coil_err err = {0};
	int rc = config_load(&cfg, argc, argv, &err);
	if (rc == 1)
		return 0;
	if (rc != 0) {
		fprintf(stderr, "coild: %s\n", err.msg);
		return 2;
	}
	/* A server that takes graphs from the network, runs a compiler on them
	 * and writes a cache has no use for root. */
	if (geteuid() == 0 && !cfg.allow_root) {
		fprintf(stderr, "coild: refusing to run as root: run it as an unprivileged user (see "
				"deploy/coild.service), or pass --allow-root (COILD_ALLOW_ROOT=1)\n");
		return 2;
	}

	/* Every thread inherits this mask; the main thread takes the signals
	 * with sigwait, and a client hanging up never raises SIGPIPE. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	coild *s = calloc(1, sizeof *s);
	if (!s) {
		fprintf(stderr, "coild: out of memory\n");
		return 1;
	}
	if (server_start(s, &cfg, &err) != 0) {
		fprintf(stderr, "coild: %s\n", err.msg);
		free(s);
		return 1;
	}
	fprintf(stderr, "coild: listening on %s (port %d), cache %s, %d workers, queue %d, %d http threads%s%s%s\n",
		cfg.listen, s->port, cfg.cache_dir ? cfg.cache_dir : "(default)", cfg.workers, cfg.queue, cfg.threads,
		s->auth.n ? ", tokens required" : "", s->signer ? ", signing with key " : "",
		s->signer ? sign_key_name(s->signer) : "");
	fprintf(stderr, "coild: node %s%s%s%s%s%s\n", s->node_id, cfg.peers[0] ? ", peers " : "", cfg.peers,
		cfg.upstream[0] ? ", upstream " : "", cfg.upstream,
		(cfg.upstream[0] || cfg.peers[0]) && !cfg.trusted_keys[0] && !cfg.trusted_keys_file &&
				!getenv("COIL_TRUSTED_KEYS") && !getenv("COIL_TRUSTED_KEYS_FILE")
			? " (no trusted keys: fetched artifacts are checked by SHA-256 only)"
			: "");

	int sig = 0;
	for (;;) {
		if (sigwait(&set, &sig) != 0)
			continue;
		if (sig == SIGTERM || sig == SIGINT)
			break;
	}
	fprintf(stderr, "coild: %s: stopping: no new compiles, queued ones cancelled, running ones have %d s\n",
		sig == SIGTERM ? "SIGTERM" : "SIGINT", cfg.grace_s);
	int left = server_stop(s);
	if (left) {
		/* Workers are inside those compiles (and their compiler child
		 * processes, which die with us): exit without running exit
		 * handlers under their feet. */
		fprintf(stderr, "coild: stopped; %d compiles still running at the end of the grace were abandoned\n",
			left);
		_exit(0);
	}
	fprintf(stderr, "coild: stopped\n");
	free(s);
	return 0;
}
