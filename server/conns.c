/* Connection deadlines: what libmicrohttpd's idle timeout does not catch.
 *
 * libmicrohttpd closes a connection only once it has been idle for its
 * timeout, so a client that trickles a byte now and then keeps it, and its
 * slot, for ever; a few thousand such clients hold every slot.  Here each
 * connection has a record (from libmicrohttpd's connection notifications):
 * what it is doing (waiting for a request's headers, receiving a body, being
 * handled) since when, and how much body has come.  A sweep thread closes
 * the connections
 *   - whose request headers are not all in --header-timeout seconds after
 *     the connection opened or its previous request ended (bytes trickling
 *     in do not extend it: the clock starts once, not at each byte), and
 *   - whose body, once --header-timeout seconds old, averages less than
 *     --min-body-rate bytes a second,
 * and, at the next sweep, those waiting for a request whose client has hung
 * up.
 * Closing is shutdown(2) of the socket: libmicrohttpd sees the end of the
 * stream on its own thread and cleans up as after a client hanging up.  A
 * connection being handled (waiting for its compile, or sending a response)
 * is not swept; libmicrohttpd's idle timeout still covers a stalled reader.
 * How many connections one address may hold is libmicrohttpd's
 * MHD_OPTION_PER_IP_CONNECTION_LIMIT (--max-conns-per-ip, http.c).  The
 * record also carries, from the URI log callback to the request's first
 * callback, whether its raw target was clean (conns_target). */
#include "server/server.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>

struct conn_rec {
	struct MHD_Connection *conn;
	int fd;
	enum conn_phase phase;
	int64_t since_ms;     /* when the phase began */
	uint64_t body;        /* bytes of body in CONN_BODY */
	int closed;           /* shut down by the sweep */
	int dirty_target;     /* the current request's raw target has a control character */
	conn_rec *prev, *next;
};

/* The record of a connection, as libmicrohttpd keeps it for us. */
static conn_rec *rec_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci = conn ? MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT)
						  : NULL;
	return ci ? ci->socket_context : NULL;
}

void conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
		  enum MHD_ConnectionNotificationCode code)
{
	conns *c = cls;
	conn_rec *r = *socket_context;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		if (!ci || !(r = calloc(1, sizeof *r)))
			return; /* not swept: the idle timeout still applies */
		r->conn = conn;
		r->fd = ci->connect_fd;
		r->phase = CONN_HEADERS;
		r->since_ms = clock_ms64();
		pthread_mutex_lock(&c->mu);
		r->next = c->all;
		if (c->all)
			c->all->prev = r;
		c->all = r;
		pthread_mutex_unlock(&c->mu);
		*socket_context = r;
		return;
	}
	if (code != MHD_CONNECTION_NOTIFY_CLOSED || !r)
		return;
	/* libmicrohttpd closes the socket after this returns: once the record
	 * is unlinked, the sweep cannot shut down a reused descriptor. */
	pthread_mutex_lock(&c->mu);
	if (r->prev)
		r->prev->next = r->next;
	else
		c->all = r->next;
	if (r->next)
		r->next->prev = r->prev;
	pthread_mutex_unlock(&c->mu);
	*socket_context = NULL;
	free(r);
}

void conns_phase(conns *c, struct MHD_Connection *conn, enum conn_phase phase)
{
	conn_rec *r = rec_of(conn);
	if (!r)
		return;
	pthread_mutex_lock(&c->mu);
	r->phase = phase;
	r->since_ms = clock_ms64();
	r->body = 0;
	pthread_mutex_unlock(&c->mu);
}

void conns_body(conns *c, struct MHD_Connection *conn, size_t n)
{
	conn_rec *r = rec_of(conn);
	if (!r)
		return;
	pthread_mutex_lock(&c->mu);
	r->body += n;
	pthread_mutex_unlock(&c->mu);
}

void conns_target(conns *c, struct MHD_Connection *conn, int clean)
{
	conn_rec *r = rec_of(conn);
	if (!r)
		return;
	pthread_mutex_lock(&c->mu);
	r->dirty_target = !clean;
	pthread_mutex_unlock(&c->mu);
}

int conns_target_clean(conns *c, struct MHD_Connection *conn)
{
	conn_rec *r = rec_of(conn);
	if (!r)
		return 1;
	pthread_mutex_lock(&c->mu);
	int clean = !r->dirty_target;
	pthread_mutex_unlock(&c->mu);
	return clean;
}

/* Has the client of fd hung up, with nothing left unread? */
static int peer_gone(int fd)
{
	struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
	int pending = 0;
	return poll(&pf, 1, 0) == 1 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR)) &&
	       ioctl(fd, FIONREAD, &pending) == 0 && pending == 0;
}

/* Under c->mu: is r to be closed (0: no, 1: headers late, 2: body slow,
 * 3: waiting for a request from a client that has hung up)?  libmicrohttpd
 * 0.9.75 leaves a kept-alive connection whose client half-closed and then
 * closed it in CLOSE_WAIT until its idle timeout; it still counts against
 * --max-conns-per-ip, so it is reclaimed here at the next sweep. */
static int overdue(const conns *c, const conn_rec *r, int64_t now, int64_t every)
{
	int64_t age = now - r->since_ms;
	if (r->closed || r->phase == CONN_BUSY)
		return 0;
	if (r->phase == CONN_HEADERS && age >= every && peer_gone(r->fd))
		return 3;
	if (age <= c->header_ms)
		return 0;
	if (r->phase == CONN_HEADERS)
		return 1;
	return c->min_rate && (double)r->body * 1000.0 < (double)c->min_rate * (double)age ? 2 : 0;
}

static void *sweeper(void *arg)
{
	conns *c = arg;
	int64_t every = c->header_ms / 4 < 1000 ? c->header_ms / 4 : 1000;
	pthread_mutex_lock(&c->mu);
	while (!c->stopping) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += (long)(every % 1000) * 1000000L;
		until.tv_sec += every / 1000 + until.tv_nsec / 1000000000L;
		until.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&c->wake, &c->mu, &until);
		int64_t now = clock_ms64();
		int n[4] = {0, 0, 0, 0};
		for (conn_rec *r = c->all; r && !c->stopping; r = r->next) {
			int why = overdue(c, r, now, every);
			if (why) {
				shutdown(r->fd, SHUT_RDWR);
				r->closed = 1;
				n[why]++;
			}
		}
		if (n[1] || n[2]) {
			atomic_fetch_add(&c->closed_headers, (uint64_t)n[1]);
			atomic_fetch_add(&c->closed_body, (uint64_t)n[2]);
			pthread_mutex_unlock(&c->mu);
			fprintf(stderr, "coild: closed %d connections whose headers were not in within %lld s, %d whose"
					" body came slower than %llu bytes/s\n",
				n[1], (long long)c->header_ms / 1000, n[2], (unsigned long long)c->min_rate);
			pthread_mutex_lock(&c->mu);
		}
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

int conns_start(conns *c, const coild_config *cfg, coil_err *err)
{
	memset(c, 0, sizeof *c);
	c->header_ms = (int64_t)cfg->header_timeout_s * 1000;
	c->min_rate = cfg->min_body_rate;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->wake, NULL);
	if (pthread_create(&c->sweeper, NULL, sweeper, c) != 0) {
		pthread_cond_destroy(&c->wake);
		pthread_mutex_destroy(&c->mu);
		return coil_errc(err, COIL_E_RESOURCE, "cannot start the connection sweeper thread");
	}
	c->started = 1;
	return 0;
}

void conns_stop(conns *c)
{
	if (!c->started)
		return;
	pthread_mutex_lock(&c->mu);
	c->stopping = 1;
	pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->sweeper, NULL);
	c->started = 0;
	/* libmicrohttpd has stopped: its close notifications freed every record */
	pthread_cond_destroy(&c->wake);
	pthread_mutex_destroy(&c->mu);
}
