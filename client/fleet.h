/* libcoil's calls for coil's own programs (not part of include/coil): what
 * coild needs to ask its upstreams through the same client, and what the CLI
 * reports of a tier list.
 *
 * A client's URL may be a tier list, "URL URL ..." (spaces or commas),
 * nearest first: coil_fetch asks each in order for an artifact, coil_compile
 * asks every tier but the last for the key this client makes of the graph
 * and compiles on the last (docs/fleet.md). */
#ifndef COIL_CLIENT_FLEET_H
#define COIL_CLIENT_FLEET_H

#include "coil/coil.h"

/* The most URLs a tier list holds. */
#define COIL_MAX_TIERS 8

/* Send "X-Coil-Via: via" with every request from now on (a comma-separated
 * list of the coild node ids a fetch has passed through, so that tiers which
 * list each other do not ask in circles). */
int coil_client_set_via(coil_client *c, const char *via);
/* The URL of the tier that answered the last successful compile or fetch. */
const char *coil_client_tier_used(const coil_client *c);

#endif
