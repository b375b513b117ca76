// SPDX-License-Identifier: MIT
/*
 * emb_meminfo.c: kvrt_space_mem_info() for an embedded space: what
 * emb_backing.c counted, checked against what the kernel shows in
 * /proc/self/smaps, in numbers and in one summary line.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "pool/embedded/embedded.h"

/*
 * What the kernel says about the VMAs inside [lo, hi), from
 * /proc/self/smaps: AnonHugePages (THP) and Locked (mlock'd) bytes.
 * -errno when smaps cannot be read.
 */
static int smaps_scan(uintptr_t lo, uintptr_t hi, uint64_t *thp, uint64_t *locked)
{
	char line[512];
	bool inside = false, at_start = true;
	FILE *f;

	*thp = *locked = 0;
	f = fopen("/proc/self/smaps", "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		bool start = at_start;
		uintptr_t a, b;
		unsigned long long kb;

		/* A line longer than the buffer arrives in pieces: parse only starts. */
		at_start = strchr(line, '\n') != NULL;
		if (!start)
			continue;
		/* VMA headers are "start-end perms ...", field lines "Name: value". */
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &a, &b) == 2) {
			inside = a >= lo && b <= hi;
			continue;
		}
		if (!inside)
			continue;
		if (sscanf(line, "AnonHugePages: %llu kB", &kb) == 1)
			*thp += (uint64_t)kb * 1024;
		else if (sscanf(line, "Locked: %llu kB", &kb) == 1)
			*locked += (uint64_t)kb * 1024;
	}
	fclose(f);
	return 0;
}

/* The system THP mode, e.g. "madvise", from the bracketed word. */
static void thp_mode(char *buf, size_t len)
{
	char line[128], *a, *b;
	ssize_t n;
	int fd;

	snprintf(buf, len, "unknown");
	fd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(buf, len, "absent");
		return;
	}
	n = read(fd, line, sizeof(line) - 1);
	close(fd);
	if (n <= 0)
		return;
	line[n] = '\0';
	a = strchr(line, '[');
	b = a ? strchr(a, ']') : NULL;
	if (a && b)
		snprintf(buf, len, "%.*s", (int)(b - a - 1), a + 1);
}

/* bytes as "1.5 GiB", "3.0 MiB" or "512 B". */
static void bytes_human(char *buf, size_t len, uint64_t bytes)
{
	if (bytes >= (1ULL << 30) && !(bytes % (1ULL << 20)))
		snprintf(buf, len, "%.1f GiB", (double)bytes / (1ULL << 30));
	else if (bytes >= (1ULL << 20))
		snprintf(buf, len, "%.1f MiB", (double)bytes / (1ULL << 20));
	else
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
}

/* " (why)" for a mechanism that did not cover everything, else "". */
static void shortfall_reason(char *buf, size_t len, uint32_t disabled_bit, const char *flag,
		const struct kvrt *k, int err, const char *call)
{
	if (k->flags & disabled_bit)
		snprintf(buf, len, " (not asked for: %s)", flag);
	else if (err)
		snprintf(buf, len, " (%s: %s)", call, strerror(err));
	else
		buf[0] = '\0';
}

/* snprintf that may truncate, on purpose: the summary is bounded. */
__attribute__((format(printf, 3, 4)))
static void snprintf_trunc(char *buf, size_t len, const char *f, ...)
{
	va_list ap;

	va_start(ap, f);
	vsnprintf(buf, len, f, ap);
	va_end(ap);
}

int emb_mem_info(struct kvrt_space *space, struct kvrt_mem_info *m)
{
	struct emb_client *s = to_emb(space);
	struct emb_space *es = s->es;
	struct kvrt *k = s->space.k;
	char h[4][32], w[4][160], mode[32];
	uint64_t thp, locked, asked_locked, hugetlb;
	struct rlimit lim;
	int sm;

	sm = smaps_scan((uintptr_t)es->base, (uintptr_t)es->base + es->reserve_bytes, &thp,
			&locked);
	thp_mode(mode, sizeof(mode));

	pthread_mutex_lock(&es->lock);
	m->kind = KVRT_MEM_EMBEDDED;
	m->backed_bytes = es->mapped_bytes;
	m->hugetlb_bytes = hugetlb = es->hugetlb_bytes;
	asked_locked = es->locked_bytes;	/* hugetlb chunks + successful mlocks */
	m->hugetlb_errno = es->hugetlb_errno;
	m->thp_errno = es->thp_errno;
	m->mlock_errno = es->mlock_errno;
	m->numa_errno = es->numa_errno;
	m->disabled = k->flags & KVRT_OPEN_FLAGS;
	shortfall_reason(w[0], sizeof(w[0]), KVRT_OPEN_NO_HUGETLB, "KVRT_OPEN_NO_HUGETLB", k,
	    es->hugetlb_errno, es->hugetlb_step ? es->hugetlb_step : "mmap(MAP_HUGETLB)");
	shortfall_reason(w[1], sizeof(w[1]), KVRT_OPEN_NO_THP, "KVRT_OPEN_NO_THP", k, es->thp_errno,
	    "madvise(MADV_HUGEPAGE)");
	shortfall_reason(w[2], sizeof(w[2]), KVRT_OPEN_NO_MLOCK, "KVRT_OPEN_NO_MLOCK", k, es->mlock_errno,
	    "mlock");
	if (es->numa_errno)
		snprintf_trunc(w[3], sizeof(w[3]), ", numa policy not applied (mbind: %s)",
		    strerror(es->numa_errno));
	else
		w[3][0] = '\0';
	pthread_mutex_unlock(&es->lock);

	/*
	 * Locked bytes as the kernel counts them (hugetlb pages are never
	 * swapped and are not VM_LOCKED, so they are added).  An mlock that
	 * returned 0 without locking anything (sanitizers interpose mlock) is
	 * reported as such rather than believed.
	 */
	if (sm == 0) {
		m->locked_bytes = locked + hugetlb;
		m->thp_bytes = thp;
		if (m->locked_bytes < asked_locked && !w[2][0])
			snprintf_trunc(w[2], sizeof(w[2]),
			    " (mlock returned 0 for %llu B but the kernel shows them unlocked: "
			    "mlock is interposed, e.g. by a sanitizer)",
			    (unsigned long long)(asked_locked - m->locked_bytes));
	} else {
		m->locked_bytes = asked_locked;
	}
	if (m->mlock_errno && !getrlimit(RLIMIT_MEMLOCK, &lim) && lim.rlim_cur != RLIM_INFINITY) {
		size_t n = strlen(w[2]);

		if (n && w[2][n - 1] == ')')
			snprintf_trunc(w[2] + n - 1, sizeof(w[2]) - n + 1, ", RLIMIT_MEMLOCK %llu B)",
			    (unsigned long long)lim.rlim_cur);
	}
	bytes_human(h[0], sizeof(h[0]), m->backed_bytes);
	bytes_human(h[1], sizeof(h[1]), m->hugetlb_bytes);
	bytes_human(h[2], sizeof(h[2]), m->thp_bytes);
	bytes_human(h[3], sizeof(h[3]), m->locked_bytes);
	snprintf_trunc(m->summary, sizeof(m->summary),
	    "embedded: %s backed; hugetlb %s%s; thp %s%s (system: %s); locked %s%s%s",
	    h[0], h[1], w[0], sm ? "unknown (no /proc/self/smaps)" : h[2], w[1], mode, h[3],
	    w[2], w[3]);
	return 0;
}
