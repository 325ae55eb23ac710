/*
 * taskenv.c: the collector's variables in a step's task env, from root's
 * record, pure C. A variable the user set stays; GYM_OTEL_OWNED remembers
 * (by hash) the values the plugin set, so that a later step on a node
 * without a record takes out only those.
 *
 * TRACEPARENT (OpenTelemetry's environment variables as context carriers,
 * W3C trace-context) is the step's span as the supervisor answered it
 * (phase.c), so that each process's first span is a child of its Slurm
 * step. A value the plugin did not set (the user's, or a parent process's
 * of its own) is kept, silently but for a debug line in slurmd's log; one
 * the plugin set for another step (the batch script's, inherited by an
 * srun) is replaced, or taken out when this step has no context. No
 * TRACESTATE and no BAGGAGE are set.
 *
 * OTEL_RESOURCE_ATTRIBUTES gets the job's identity as the collector stamps
 * it (the record's resattr= lines: Lens' keys, values percent-encoded by
 * the prolog), each only where its key is not in the variable yet: SDKs
 * let a later duplicate win, and a producer's own value must stay. A value
 * wholly the plugin's (another step's, inherited) is replaced; one the
 * user set keeps every segment and gets the missing keys appended.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "record.h"
#include "taskenv.h"

#define OWNED_ENV "GYM_OTEL_OWNED"
#define TRACEPARENT_ENV "TRACEPARENT"
#define RESATTR_ENV "OTEL_RESOURCE_ATTRIBUTES"
#define ENV_MAX 65536

/* FNV-1a, 32 bits: how GYM_OTEL_OWNED remembers a value the plugin set. */
static uint32_t fnv1a(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 16777619u;
	}
	return h;
}

/* Whether owned ("KEY:hash,...") says the plugin set key to a value of hash h. */
static int owned_by_us(const char *owned, const char *key, uint32_t h)
{
	size_t kl = strlen(key);
	char want[16];
	const char *p = owned;

	snprintf(want, sizeof(want), "%08x", h);
	while (p && *p) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);

		if (n == kl + 9 && !strncmp(p, key, kl) && p[kl] == ':' &&
		    !strncmp(p + kl + 1, want, 8))
			return 1;
		p = comma ? comma + 1 : NULL;
	}
	return 0;
}

/* Appends key:hash(val) to owned (used bytes of ENV_MAX). */
static void own(char *owned, size_t *used, const char *key, const char *val)
{
	int w = snprintf(owned + *used, ENV_MAX - *used, "%s%s:%08x", *used ? "," : "", key, fnv1a(val));

	if (w > 0 && (size_t)w < ENV_MAX - *used)
		*used += w;
}

/* TRACEPARENT: tp (the step's context, or "") unless a value the plugin
 * did not set is there. */
static void traceparent(spank_t sp, const char *tp, const char *owned, char *newowned, size_t *used,
			uint32_t job_id)
{
	static char cur[ENV_MAX];
	spank_err_t rc = spank_getenv(sp, TRACEPARENT_ENV, cur, sizeof(cur));

	if (rc != ESPANK_SUCCESS && rc != ESPANK_ENV_NOEXIST)
		return; /* set, but not readable here (too long): not ours */
	if (rc == ESPANK_SUCCESS && !owned_by_us(owned, TRACEPARENT_ENV, fnv1a(cur))) {
		gos_debug("job %u: %s is set already: kept", job_id, TRACEPARENT_ENV);
		return;
	}
	if (tp[0]) {
		if (spank_setenv(sp, TRACEPARENT_ENV, tp, 1) == ESPANK_SUCCESS)
			own(newowned, used, TRACEPARENT_ENV, tp);
	} else if (rc == ESPANK_SUCCESS) {
		spank_unsetenv(sp, TRACEPARENT_ENV); /* another step's span */
	}
}

/* Whether the OTEL_RESOURCE_ATTRIBUTES value v has a segment of key key
 * (klen bytes): "k=v" items split on ",", the key trimmed of blanks, as the
 * SDKs and Lens read it. */
static int has_resattr(const char *v, const char *key, size_t klen)
{
	while (v && *v) {
		const char *end = strchr(v, ','), *eq;
		size_t n = end ? (size_t)(end - v) : strlen(v);

		eq = memchr(v, '=', n);
		if (eq) {
			const char *k = v, *ke = eq;

			while (k < ke && (*k == ' ' || *k == '\t'))
				k++;
			while (ke > k && (ke[-1] == ' ' || ke[-1] == '\t'))
				ke--;
			if ((size_t)(ke - k) == klen && !memcmp(k, key, klen))
				return 1;
		}
		v = end ? end + 1 : NULL;
	}
	return 0;
}

/* OTEL_RESOURCE_ATTRIBUTES: the record's attributes whose keys are not
 * there yet appended (see the top of the file). */
static void resattrs(spank_t sp, const struct gos_record *r, const char *owned, char *newowned, size_t *used,
		     uint32_t job_id)
{
	static char cur[ENV_MAX], out[ENV_MAX];
	spank_err_t rc;
	size_t n;
	int user, added = 0;

	if (!r->nresattr)
		return;
	rc = spank_getenv(sp, RESATTR_ENV, cur, sizeof(cur));
	if (rc != ESPANK_SUCCESS && rc != ESPANK_ENV_NOEXIST)
		return; /* set, but too long to read here: left alone */
	user = rc == ESPANK_SUCCESS && cur[0] && !owned_by_us(owned, RESATTR_ENV, fnv1a(cur));
	snprintf(out, sizeof(out), "%s", user ? cur : "");
	n = strlen(out);
	for (int i = 0; i < r->nresattr; i++) {
		const char *a = r->resattr[i];
		size_t klen = strcspn(a, "="), alen = strlen(a);

		if (user && has_resattr(cur, a, klen)) {
			gos_debug("job %u: %s has %.*s already: kept", job_id, RESATTR_ENV, (int)klen, a);
			continue;
		}
		if (n + (n ? 1 : 0) + alen >= sizeof(out))
			break;
		if (n)
			out[n++] = ',';
		memcpy(out + n, a, alen + 1);
		n += alen;
		added++;
	}
	if (!added)
		return;
	if (spank_setenv(sp, RESATTR_ENV, out, 1) == ESPANK_SUCCESS && !user)
		own(newowned, used, RESATTR_ENV, out);
}

void gos_taskenv_apply(spank_t sp, const struct gos_record *r, const char *tp, uint32_t job_id,
		       char *kept, size_t keptlen)
{
	static char cur[ENV_MAX], owned[ENV_MAX];
	char newowned[ENV_MAX] = "";
	size_t used = 0;

	if (spank_getenv(sp, OWNED_ENV, owned, sizeof(owned)) != ESPANK_SUCCESS)
		owned[0] = 0;
	for (int i = 0; i < r->nenv; i++) {
		char *kv = r->env[i];
		char *eq = strchr(kv, '=');
		const char *val = eq + 1;
		spank_err_t rc;

		*eq = 0;
		rc = spank_getenv(sp, kv, cur, sizeof(cur));
		if (rc == ESPANK_SUCCESS && !owned_by_us(owned, kv, fnv1a(cur))) {
			size_t kl = strlen(kept);

			gos_debug("job %u: %s is set by the user: kept", job_id, kv);
			snprintf(kept + kl, keptlen - kl, "%s%s", kl ? ", " : "", kv);
		} else if (rc == ESPANK_SUCCESS || rc == ESPANK_ENV_NOEXIST) {
			if (spank_setenv(sp, kv, val, 1) == ESPANK_SUCCESS)
				own(newowned, &used, kv, val);
		}
		*eq = '=';
	}
	traceparent(sp, tp, owned, newowned, &used, job_id);
	resattrs(sp, r, owned, newowned, &used, job_id);
	spank_setenv(sp, OWNED_ENV, newowned, 1);
}

/*
 * No record on this node: a value the plugin set on another node (the
 * batch step's env inherited by an srun here) points at that node's
 * loopback, so take it out; the user's own values stay.
 */
void gos_taskenv_strip(spank_t sp)
{
	static char cur[ENV_MAX], owned[ENV_MAX];
	char *copy, *tok, *save;

	if (spank_getenv(sp, OWNED_ENV, owned, sizeof(owned)) != ESPANK_SUCCESS || !owned[0])
		return;
	copy = strdup(owned);
	for (tok = copy ? strtok_r(copy, ",", &save) : NULL; tok; tok = strtok_r(NULL, ",", &save)) {
		char *colon = strrchr(tok, ':');

		if (!colon)
			continue;
		*colon = 0;
		if (spank_getenv(sp, tok, cur, sizeof(cur)) == ESPANK_SUCCESS &&
		    owned_by_us(owned, tok, fnv1a(cur)))
			spank_unsetenv(sp, tok);
	}
	free(copy);
	spank_unsetenv(sp, OWNED_ENV);
}

/* With a proxy configured, make sure 127.0.0.1 (the collector) bypasses it. */
void gos_taskenv_no_proxy(spank_t sp)
{
	static const char *proxies[] = { "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY" };
	static const char *noproxies[] = { "no_proxy", "NO_PROXY" };
	static char cur[ENV_MAX], buf[ENV_MAX + 32];
	int any = 0;

	for (size_t i = 0; i < sizeof(proxies) / sizeof(*proxies); i++)
		if (spank_getenv(sp, proxies[i], cur, sizeof(cur)) == ESPANK_SUCCESS && cur[0])
			any = 1;
	if (!any)
		return;
	for (size_t i = 0; i < sizeof(noproxies) / sizeof(*noproxies); i++) {
		int has = spank_getenv(sp, noproxies[i], cur, sizeof(cur)) == ESPANK_SUCCESS && cur[0];
		char *tok, *save, *copy;
		int found = 0;

		if (has) {
			copy = strdup(cur);
			for (tok = copy ? strtok_r(copy, ", ", &save) : NULL; tok;
			     tok = strtok_r(NULL, ", ", &save))
				if (!strcmp(tok, "127.0.0.1"))
					found = 1;
			free(copy);
		}
		if (found)
			continue;
		snprintf(buf, sizeof(buf), "%s%s127.0.0.1", has ? cur : "", has ? "," : "");
		spank_setenv(sp, noproxies[i], buf, 1);
	}
}
