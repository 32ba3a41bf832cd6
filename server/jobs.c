/* The compile queue.
 *
 * A job compiles one plan (one cache key).  Submitting a plan whose key has a
 * job queued or running joins that job instead (single flight within this
 * process; compile_plan_run's per-key file lock does the same across
 * processes sharing the cache).  At most cfg.queue jobs wait for one of the
 * cfg.workers threads; a submit beyond that is refused and answered 503.
 *
 * Tenants (a token, or a client address when there are no tokens) share the
 * workers: one runs at most cfg.max_jobs_per_tenant jobs at once (by default
 * every worker but one), and a worker takes the oldest queued job whose
 * tenant is under that share, so a tenant with long compiles cannot hold
 * every worker while another waits.  One tenant may also have at most half
 * of cfg.queue jobs waiting (429 beyond).  A job is readable by the tokens
 * that submitted or joined it.
 *
 * Every job sits in one table (newest first) until it has been finished for
 * cfg.job_ttl_s seconds and nobody references it.  References: the table's
 * own, one per request holding the job, one while a worker runs it; the last
 * release frees it.  Synchronous requests suspend their connection on the job
 * and are resumed when it finishes.  One mutex guards all of it.
 *
 * Stopping (server_stop): jobs_cancel refuses new jobs and fails the queued
 * ones; jobs_drain waits, until a deadline, for the running ones; what still
 * runs then is given up (jobs_abandon): its waiters are answered now, and the
 * worker finishes it unwatched while the process exits. */
#include "server/server.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* Most jobs kept in the table; beyond it the oldest finished ones go first. */
#define JOBS_MAX 4096

struct job {
	char id[JOB_ID_HEX + 1];
	char key[65];
	job_state state;
	compile_plan *plan;   /* owned until a worker has run it */
	compile_result res;
	coil_err err;         /* JOB_FAILED */
	char tenant[TENANT_MAX];
	int *readers;         /* tokens that submitted or joined it (none without tokens) */
	int nreaders;
	int refs;
	int in_table;
	int abandoned;        /* given up by jobs_abandon while running */
	int64_t created_ms, started_ms, finished_ms;
	struct MHD_Connection **waiters;
	int nwaiters, capwaiters;
	job *next;            /* in the table */
	job *qnext;           /* in the FIFO */
};

const char *job_state_name(job_state st)
{
	switch (st) {
	case JOB_QUEUED: return "queued";
	case JOB_RUNNING: return "running";
	case JOB_DONE: return "done";
	case JOB_FAILED: return "failed";
	}
	return "?";
}

/* 128 random bits as hex; falls back on a counter mixed with time if the
 * kernel has no entropy to give (ids need to be unguessable, not secret
 * keys: job results are also readable by key). */
static void new_id(jobs *q, char id[JOB_ID_HEX + 1])
{
	unsigned char raw[JOB_ID_HEX / 2];
	if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
		uint64_t a = (uint64_t)clock_ms64() * 0x9E3779B97F4A7C15ull ^ ++q->seq;
		for (size_t i = 0; i < sizeof raw; i++)
			raw[i] = (unsigned char)(a >> (8 * (i % 8))) ^ (unsigned char)i;
	}
	for (size_t i = 0; i < sizeof raw; i++)
		snprintf(id + 2 * i, 3, "%02x", raw[i]);
}

static void job_free(job *j)
{
	if (j->plan)
		compile_plan_free(j->plan);
	free(j->waiters);
	free(j->readers);
	free(j);
}

/* Under q->mu: let token (-1: none) read j; -1 out of memory. */
static int add_reader(job *j, int token)
{
	if (token < 0)
		return 0;
	for (int i = 0; i < j->nreaders; i++)
		if (j->readers[i] == token)
			return 0;
	int *p = realloc(j->readers, (size_t)(j->nreaders + 1) * sizeof *p);
	if (!p)
		return -1;
	j->readers = p;
	j->readers[j->nreaders++] = token;
	return 0;
}

/* Under q->mu: jobs of tenant running, and queued. */
static int tenant_running(const jobs *q, const char *tenant)
{
	int n = 0;
	for (int i = 0; i < q->nworkers; i++)
		n += q->running[i] && !strcmp(q->running[i]->tenant, tenant);
	return n;
}

static int tenant_queued(const jobs *q, const char *tenant)
{
	int n = 0;
	for (const job *j = q->head; j; j = j->qnext)
		n += !strcmp(j->tenant, tenant);
	return n;
}

/* Under q->mu: the oldest queued job whose tenant runs fewer than its share,
 * taken off the FIFO; NULL if none may run now. */
static job *pick(jobs *q)
{
	job *prev = NULL;
	for (job *j = q->head; j; prev = j, j = j->qnext) {
		if (tenant_running(q, j->tenant) >= q->share)
			continue;
		if (prev)
			prev->qnext = j->qnext;
		else
			q->head = j->qnext;
		if (q->tail == j)
			q->tail = prev;
		j->qnext = NULL;
		return j;
	}
	return NULL;
}

/* Under q->mu. */
static void unref(job *j)
{
	if (--j->refs == 0)
		job_free(j);
}

/* Under q->mu: drop finished jobs older than the TTL, and the oldest finished
 * ones while the table is over JOBS_MAX. */
static void expire(jobs *q)
{
	int64_t cutoff = clock_ms64() - (int64_t)q->s->cfg.job_ttl_s * 1000;
	job **pp = &q->all;
	int seen = 0;
	while (*pp) {
		job *j = *pp;
		int finished = j->state == JOB_DONE || j->state == JOB_FAILED;
		seen++;
		if (finished && (j->finished_ms < cutoff || seen > JOBS_MAX)) {
			*pp = j->next;
			j->in_table = 0;
			q->njobs--;
			unref(j);
			continue;
		}
		pp = &j->next;
	}
}

void jobs_view(jobs *q, job *j, job_view *out)
{
	pthread_mutex_lock(&q->mu);
	memcpy(out->id, j->id, sizeof out->id);
	memcpy(out->key, j->key, sizeof out->key);
	out->state = j->state;
	out->res = j->res;
	out->err = j->err;
	int64_t start = j->started_ms ? j->started_ms : clock_ms64();
	out->queued_ms = (double)(start - j->created_ms);
	pthread_mutex_unlock(&q->mu);
}

job *jobs_submit(jobs *q, compile_plan *plan, const char *tenant, int token, int *joined, int *refused)
{
	*joined = 0;
	*refused = ERR_UNAVAILABLE;
	pthread_mutex_lock(&q->mu);
	job *j = NULL;
	if (q->stopping)
		goto out;
	for (job *it = q->all; it; it = it->next)
		if ((it->state == JOB_QUEUED || it->state == JOB_RUNNING) && !strcmp(it->key, plan->key)) {
			*refused = COIL_E_RESOURCE;
			if (add_reader(it, token) != 0)
				goto out;
			j = it;
			j->refs++;
			*joined = 1;
			*refused = 0;
			goto out;
		}
	/* A tenant with half the queue waiting: not now (the queue is for all). */
	int qshare = (q->s->cfg.queue + 1) / 2;
	*refused = ERR_TOO_MANY;
	if (qshare > 0 && tenant_queued(q, tenant) >= qshare)
		goto out;
	/* Full: every worker busy and cfg.queue jobs waiting behind them. */
	*refused = COIL_E_RESOURCE;
	if (q->nqueued + q->nrunning >= q->nworkers + q->s->cfg.queue)
		goto out;
	expire(q);
	if (!(j = calloc(1, sizeof *j)) || add_reader(j, token) != 0) {
		free(j); /* out of memory: COIL_E_RESOURCE too */
		j = NULL;
		goto out;
	}
	snprintf(j->tenant, sizeof j->tenant, "%s", tenant);
	new_id(q, j->id);
	memcpy(j->key, plan->key, sizeof j->key);
	j->state = JOB_QUEUED;
	j->plan = plan;
	plan = NULL;
	j->refs = 2; /* the table's and the caller's */
	j->in_table = 1;
	j->created_ms = clock_ms64();
	j->next = q->all;
	q->all = j;
	q->njobs++;
	if (q->tail)
		q->tail->qnext = j;
	else
		q->head = j;
	q->tail = j;
	q->nqueued++;
	*refused = 0;
	pthread_cond_signal(&q->work);
out:
	pthread_mutex_unlock(&q->mu);
	if (plan)
		compile_plan_free(plan);
	return j;
}

job *jobs_find(jobs *q, const char *id, int token)
{
	pthread_mutex_lock(&q->mu);
	expire(q);
	job *j = q->all;
	while (j && strcmp(j->id, id))
		j = j->next;
	int reader = token < 0;
	for (int i = 0; j && i < j->nreaders; i++)
		reader |= j->readers[i] == token;
	if (!reader)
		j = NULL;
	if (j)
		j->refs++;
	pthread_mutex_unlock(&q->mu);
	return j;
}

void jobs_release(jobs *q, job *j)
{
	if (!j)
		return;
	pthread_mutex_lock(&q->mu);
	unref(j);
	pthread_mutex_unlock(&q->mu);
}

int jobs_wait(jobs *q, job *j, struct MHD_Connection *conn)
{
	int suspended = 0;
	pthread_mutex_lock(&q->mu);
	if (j->state == JOB_QUEUED || j->state == JOB_RUNNING) {
		if (j->nwaiters == j->capwaiters) {
			int cap = j->capwaiters ? 2 * j->capwaiters : 8;
			void *p = realloc(j->waiters, (size_t)cap * sizeof *j->waiters);
			if (!p)
				goto out; /* answered now, as if finished: the handler reports the state */
			j->waiters = p;
			j->capwaiters = cap;
		}
		j->waiters[j->nwaiters++] = conn;
		/* Suspending under the lock orders it before the resume in finish(). */
		MHD_suspend_connection(conn);
		suspended = 1;
	}
out:
	pthread_mutex_unlock(&q->mu);
	return suspended;
}

void jobs_depth(jobs *q, int *queued, int *running)
{
	pthread_mutex_lock(&q->mu);
	*queued = q->nqueued;
	*running = q->nrunning;
	pthread_mutex_unlock(&q->mu);
}

/* Below this many free bytes on the cache's file system, a compile that ran
 * out of something ran out of disk: 507, not 503 (cache/compile.c's margin). */
#define DISK_LOW ((int64_t)4 << 20)

/* Under q->mu: take j's waiters, to resume once the lock is released. */
static struct MHD_Connection **take_waiters(job *j, int *n)
{
	struct MHD_Connection **w = j->waiters;
	*n = j->nwaiters;
	j->waiters = NULL;
	j->nwaiters = j->capwaiters = 0;
	return w;
}

static void resume(struct MHD_Connection **w, int n)
{
	for (int i = 0; i < n; i++)
		MHD_resume_connection(w[i]);
	free(w);
}

/* Under q->mu: j failed because the server is stopping. */
static void give_up(job *j, const char *msg)
{
	j->state = JOB_FAILED;
	memset(&j->err, 0, sizeof j->err);
	j->err.code = (coil_code)ERR_UNAVAILABLE;
	snprintf(j->err.msg, sizeof j->err.msg, "%s", msg);
	j->finished_ms = clock_ms64();
}

/* Record the outcome and wake the waiters. */
static void finish(jobs *q, job *j, int rc, const compile_result *res, const coil_err *err)
{
	coild_metrics *m = &q->s->metrics;
	if (rc == 0 && !res->hit) {
		atomic_fetch_add(&m->compiles, 1);
		metrics_compile_time(m, res->compile_ms / 1e3);
	} else if (rc != 0) {
		atomic_fetch_add(&m->compile_failures, 1);
	}
	pthread_mutex_lock(&q->mu);
	if (j->abandoned) {
		/* answered already: the server is exiting */
	} else if (rc == 0) {
		j->res = *res;
		j->state = JOB_DONE;
		j->finished_ms = clock_ms64();
	} else {
		j->state = JOB_FAILED;
		j->err = *err;
		if (!j->err.msg[0])
			snprintf(j->err.msg, sizeof j->err.msg, "compile failed (no message)");
		j->finished_ms = clock_ms64();
	}
	if (j->plan)
		compile_plan_free(j->plan);
	j->plan = NULL;
	q->nrunning--;
	for (int i = 0; i < q->nworkers; i++)
		if (q->running[i] == j)
			q->running[i] = NULL;
	pthread_cond_broadcast(&q->work); /* its tenant's share is free again */
	pthread_cond_broadcast(&q->idle);
	int n;
	struct MHD_Connection **w = take_waiters(j, &n);
	pthread_mutex_unlock(&q->mu);
	resume(w, n);
}

typedef struct {
	jobs *q;
	coil_cache *cache;
	int index;            /* into q->running */
} worker_arg;

static void *worker(void *arg)
{
	worker_arg *wa = arg;
	jobs *q = wa->q;
	coil_cache *c = wa->cache;
	int index = wa->index;
	free(wa);
	for (;;) {
		pthread_mutex_lock(&q->mu);
		job *j;
		while (!(j = pick(q)) && !q->stopping)
			pthread_cond_wait(&q->work, &q->mu);
		if (!j) { /* stopping, and nothing left that may run */
			pthread_mutex_unlock(&q->mu);
			break;
		}
		q->running[index] = j;
		q->nqueued--;
		q->nrunning++;
		j->state = JOB_RUNNING;
		j->started_ms = clock_ms64();
		j->refs++;
		compile_plan *plan = j->plan;
		pthread_mutex_unlock(&q->mu);

		compile_result res;
		coil_err err = {0};
		memset(&res, 0, sizeof res);
		/* A miss asks the tiers above first (it then runs as a hit);
		 * the compile itself is never passed on. */
		if (!q->test_fail_oom)
			upstream_fill(q->s, plan->key, NULL);
		int rc = q->test_fail_oom ? coil_err_oom(&err) : compile_plan_run(c, plan, &res, &err);
		/* A failure for want of something, on a full disk: the disk. */
		int64_t room;
		if (rc != 0 && (err.code == COIL_E_RESOURCE || err.code == COIL_E_IO || err.code == COIL_E_COMPILER) &&
		    (room = cache_free_bytes(c)) >= 0 && room < DISK_LOW)
			err.code = (coil_code)ERR_DISK_FULL;
		finish(q, j, rc, &res, &err);
		jobs_release(q, j);
	}
	cache_close(c);
	return NULL;
}

int jobs_start(jobs *q, coild *s, coil_err *err)
{
	memset(q, 0, sizeof *q);
	q->s = s;
	/* Test-only (tests/test_server.c): every compile fails as if out of
	 * memory.  Off unless the variable is set; coild says so at start. */
	const char *oom = getenv("COILD_TEST_FAIL_COMPILE_OOM");
	q->test_fail_oom = oom && !strcmp(oom, "1");
	if (q->test_fail_oom)
		fprintf(stderr, "coild: TEST HOOK COILD_TEST_FAIL_COMPILE_OOM=1: every compile fails with out of memory\n");
	pthread_mutex_init(&q->mu, NULL);
	pthread_cond_init(&q->work, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* jobs_drain's deadline is clock_ms64()'s */
	pthread_cond_init(&q->idle, &ca);
	pthread_condattr_destroy(&ca);
	q->share = s->cfg.max_jobs_per_tenant ? s->cfg.max_jobs_per_tenant
					      : s->cfg.workers > 1 ? s->cfg.workers - 1 : 1;
	if (!(q->threads = calloc((size_t)s->cfg.workers, sizeof *q->threads)) ||
	    !(q->running = calloc((size_t)s->cfg.workers, sizeof *q->running))) {
		free(q->threads);
		q->threads = NULL;
		return coil_err_oom(err);
	}
	for (int i = 0; i < s->cfg.workers; i++) {
		worker_arg *wa = malloc(sizeof *wa);
		if (!wa) {
			jobs_stop(q);
			return coil_err_oom(err);
		}
		wa->q = q;
		wa->index = i;
		if (cache_open(s->cfg.cache_dir, s->cfg.budget, &wa->cache, err) != 0) {
			free(wa);
			jobs_stop(q);
			return -1;
		}
		if (pthread_create(&q->threads[i], NULL, worker, wa) != 0) {
			cache_close(wa->cache);
			free(wa);
			jobs_stop(q);
			return coil_errf(err, "cannot start compile worker %d", i);
		}
		q->nworkers++;
	}
	return 0;
}

void jobs_cancel(jobs *q)
{
	pthread_mutex_lock(&q->mu);
	q->stopping = 1;
	pthread_cond_broadcast(&q->work);
	job *j;
	while ((j = q->head)) {
		q->head = j->qnext;
		if (!q->head)
			q->tail = NULL;
		j->qnext = NULL;
		q->nqueued--;
		give_up(j, "the server is shutting down: this compile was cancelled before it started; retry on"
			   " another server");
		compile_plan_free(j->plan);
		j->plan = NULL;
		int n;
		struct MHD_Connection **w = take_waiters(j, &n);
		pthread_mutex_unlock(&q->mu);
		resume(w, n);
		pthread_mutex_lock(&q->mu);
	}
	pthread_mutex_unlock(&q->mu);
}

int jobs_drain(jobs *q, int64_t deadline_ms)
{
	struct timespec until = {deadline_ms / 1000, (long)(deadline_ms % 1000) * 1000000L};
	pthread_mutex_lock(&q->mu);
	while (q->nrunning > 0 && clock_ms64() < deadline_ms)
		pthread_cond_timedwait(&q->idle, &q->mu, &until);
	int n = q->nrunning;
	pthread_mutex_unlock(&q->mu);
	return n;
}

void jobs_abandon(jobs *q)
{
	pthread_mutex_lock(&q->mu);
	for (int i = 0; i < q->nworkers; i++) {
		job *j = q->running[i];
		if (!j || j->abandoned)
			continue;
		j->abandoned = 1;
		give_up(j, "the server stopped before this compile finished (its --grace ran out); retry on another"
			   " server");
		int n;
		struct MHD_Connection **w = take_waiters(j, &n);
		pthread_mutex_unlock(&q->mu);
		resume(w, n);
		pthread_mutex_lock(&q->mu);
		i = -1; /* the lock was let go: look again from the start */
	}
	pthread_mutex_unlock(&q->mu);
}

void jobs_stop(jobs *q)
{
	pthread_mutex_lock(&q->mu);
	q->stopping = 1;
	pthread_cond_broadcast(&q->work);
	pthread_mutex_unlock(&q->mu);
	for (int i = 0; i < q->nworkers; i++)
		pthread_join(q->threads[i], NULL);
	free(q->threads);
	free(q->running);
	q->threads = NULL;
	q->running = NULL;
	q->nworkers = 0;
	/* Drop the table's references; requests still holding a job free it. */
	pthread_mutex_lock(&q->mu);
	while (q->all) {
		job *j = q->all;
		q->all = j->next;
		j->in_table = 0;
		unref(j);
	}
	q->njobs = 0;
	pthread_mutex_unlock(&q->mu);
	pthread_cond_destroy(&q->idle);
	pthread_cond_destroy(&q->work);
	pthread_mutex_destroy(&q->mu);
}
