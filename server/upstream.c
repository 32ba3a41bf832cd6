/* The tiers above this coild (--upstream URL, repeatable; docs/fleet.md)
 * and the other nodes of its farm (--peer URL).
 * On a miss the artifact of a key is asked of them in order, before a
 * compile builds it or a fetch answers 404.  libcoil does the asking, into
 * this server's own cache directory, through the same checks as any client
 * (coil_fetch over the tier list: the metadata's key, the bytes' SHA-256
 * against the ETag and the metadata, and with --trusted-key a signature by a
 * trusted key); nothing that fails them is stored.  Every request carries
 * X-Coil-Via, the nodes it has passed through with this one last: a fetch
 * that has passed this node already is not passed on, so tiers that list
 * each other ask at most once around.  The nodes of one farm are one
 * another's --peer: asked only for a request that came from a client, so a
 * key compiled on a node that does not own it (a compile without X-Coil-Key
 * lands anywhere) is found by its owner in one hop. */
#include "server/server.h"

#include <stdlib.h>
#include <string.h>

#include "client/fleet.h"
#include "coil/coil.h"

/* Does the comma-separated list via name node? */
static int via_has(const char *via, const char *node)
{
	size_t n = strlen(node);
	for (const char *p = via; p && *p;) {
		p += strspn(p, " ,");
		size_t m = strcspn(p, " ,");
		if (m == n && !strncmp(p, node, n))
			return 1;
		p += m;
	}
	return 0;
}

int upstream_fill(coild *s, const char *key, const char *via)
{
	/* How many hops a fetch may take: a chain of tiers deeper than this is
	 * a loop nobody meant. */
	int first = !via || !*via, hops = 0;
	for (const char *p = via; p && *p; p++)
		hops += *p == ',';
	char chain[UPSTREAM_MAX_HOPS * 40];
	if (via && strlen(via) + strlen(s->node_id) + 2 > sizeof chain)
		return 0; /* a chain that would lose this node's name is not passed on */
	char list[2 * CONFIG_LIST_MAX + 2] = "";
	if (first && s->cfg.peers[0])
		snprintf(list, sizeof list, "%s", s->cfg.peers);
	if (s->cfg.upstream[0] && !via_has(via, s->node_id) && (first || hops + 1 < UPSTREAM_MAX_HOPS))
		snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? " " : "", s->cfg.upstream);
	if (!list[0])
		return 0;
	snprintf(chain, sizeof chain, "%s%s%s", via && *via ? via : "", via && *via ? "," : "", s->node_id);
	coil_client_opts o = {
		.cache_dir = s->cfg.cache_dir,
		.cache_budget = s->cfg.budget,
		.timeout_ms = UPSTREAM_TIMEOUT_MS,
		.connect_timeout_ms = UPSTREAM_CONNECT_TIMEOUT_MS,
		.retries = -1,
		.trusted_keys = s->cfg.trusted_keys[0] ? s->cfg.trusted_keys : NULL,
		.trusted_keys_file = s->cfg.trusted_keys_file,
	};
	coil_client *c = NULL;
	char path[4096];
	int got = coil_client_create(list, NULL, &o, &c) == 0 && coil_client_set_via(c, chain) == 0 &&
		  coil_fetch(c, key, NULL, path, sizeof path) == 0;
	if (got) {
		atomic_fetch_add(&s->metrics.upstream_fills, 1);
		fprintf(stderr, "coild: upstream: %s filled from %s\n", key, coil_client_tier_used(c));
	} else if (strstr(coil_last_error(), "HTTP 404 (not_found)")) {
		atomic_fetch_add(&s->metrics.upstream_misses, 1);
	} else {
		/* unreachable, refused or failing a check: logged, and the miss
		 * goes on as if no tier had it */
		atomic_fetch_add(&s->metrics.upstream_errors, 1);
		char msg[1024];
		snprintf(msg, sizeof msg, "%s", coil_last_error());
		one_line(msg);
		fprintf(stderr, "coild: upstream: %s: %s\n", key, msg);
	}
	coil_client_destroy(c);
	return got;
}
