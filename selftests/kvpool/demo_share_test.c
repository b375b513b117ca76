// SPDX-License-Identifier: GPL-2.0
/*
 * demo_share_test: kvrt-demo, the engine of tools/kvrt-demo, against the
 * real module, run as two processes one after the other.  The first
 * (--role first) creates a persistent space and publishes its prompts'
 * blocks; the second (--role second) joins it and must hit blocks the
 * first published; both must pass their own equivalence check (tokens
 * with the cache == a full recomputation) and generate the same tokens.
 * Also: both at once (dedup races between two processes publishing the
 * same prompts) change no token, a run without a role leaves no space
 * behind, and a space warmed by `kvrt-demo warm` serves a fresh process's
 * very first request.  run-vm.sh puts every
 * static tools/NAME/NAME in the guest's /bin; the test skips without it.
 */
#include "kvpool_util.h"

#include <stdarg.h>

#define DEMO		"/bin/kvrt-demo"
#define OUT_MAX		(64 * 1024)

FIXTURE(demo) {
	char space[KVPOOL_NAME_MAX];
	char *out;
};

FIXTURE_SETUP(demo)
{
	if (access(DEMO, X_OK))
		SKIP(return, DEMO " missing: build it with 'make tools'");
	if (access(KV_DEV, R_OK | W_OK))
		SKIP(return, KV_DEV " missing: kvpool.ko is not loaded");
	kv_name(self->space, sizeof(self->space), "demo-share");
	self->out = calloc(1, OUT_MAX);
	ASSERT_NE(NULL, self->out);
}

FIXTURE_TEARDOWN(demo)
{
	/* a failed run may have left the persistent space (ENOENT when not) */
	if (self->space[0])
		kv_destroy_name(self->space);
	free(self->out);
}

/*
 * Start kvrt-demo (its subcommand sub first unless NULL) on the tiny preset
 * with the kmod backend and the extra arguments (a va_list,
 * NULL-terminated); its stdout and stderr go to *rfd.  Returns its pid, or
 * -errno.
 */
static pid_t demo_vstart(const char *sub, const char *space, int *rfd, va_list ap)
{
	const char *argv[24] = { DEMO, "--backend", "kmod", "--preset", "tiny", "--space", space,
				 "--no-progress" };
	int argc = 8, fd[2];
	pid_t pid;

	if (sub) {
		memmove(argv + 2, argv + 1, sizeof(*argv) * 7);
		argv[1] = sub;
		argc++;
	}
	while (argc < 23 && (argv[argc] = va_arg(ap, const char *)))
		argc++;
	argv[argc] = NULL;
	if (pipe(fd))
		return -errno;
	pid = fork();
	if (pid < 0) {
		close(fd[0]);
		close(fd[1]);
		return -errno;
	}
	if (pid == 0) {
		dup2(fd[1], STDOUT_FILENO);
		dup2(fd[1], STDERR_FILENO);
		close(fd[0]);
		close(fd[1]);
		execv(DEMO, (char *const *)argv);
		_exit(127);
	}
	close(fd[1]);
	*rfd = fd[0];
	return pid;
}

static pid_t demo_start(const char *space, int *rfd, ...)
{
	va_list ap;
	pid_t pid;

	va_start(ap, rfd);
	pid = demo_vstart(NULL, space, rfd, ap);
	va_end(ap);
	return pid;
}

/* Read its output to the end into out, then wait: kv_wait's status. */
static int demo_finish(pid_t pid, int rfd, char *out, size_t len)
{
	size_t used = 0;
	ssize_t n;

	while (used + 1 < len && (n = read(rfd, out + used, len - 1 - used)) > 0)
		used += (size_t)n;
	out[used] = '\0';
	close(rfd);
	return kv_wait(pid);
}

/* Start and finish: the exit status, or -errno. */
static int run_demo(const char *space, char *out, size_t len, ...)
{
	va_list ap;
	pid_t pid;
	int rfd;

	va_start(ap, len);
	pid = demo_vstart(NULL, space, &rfd, ap);
	va_end(ap);
	if (pid < 0)
		return pid;
	return demo_finish(pid, rfd, out, len);
}

/* kvrt-demo warm, as run_demo. */
static int run_warm(const char *space, char *out, size_t len, ...)
{
	va_list ap;
	pid_t pid;
	int rfd;

	va_start(ap, len);
	pid = demo_vstart("warm", space, &rfd, ap);
	va_end(ap);
	if (pid < 0)
		return pid;
	return demo_finish(pid, rfd, out, len);
}

/* key=VALUE of the "summary:" line as a number (base 10, or 16 for tokens). */
static long long field(const char *out, const char *key, int base)
{
	const char *s = strstr(out, "\nsummary: ");
	char pat[64];

	if (!s)
		return -1;
	snprintf(pat, sizeof(pat), " %s=", key);
	s = strstr(s, pat);
	if (!s)
		return -1;
	return (long long)strtoull(s + strlen(pat), NULL, base);
}

/*
 * The summary line alone, for the log.  stderr: the harness ends each test
 * with _exit(), which would drop what stdout still buffers.
 */
static void log_summary(const char *who, const char *out)
{
	const char *s = strstr(out, "\nsummary: "), *e;

	if (!s) {
		fprintf(stderr, "# %s: no summary line\n", who);
		return;
	}
	s++;
	e = strchr(s, '\n');
	fprintf(stderr, "# %s: %.*s\n", who, (int)(e ? e - s : (long)strlen(s)), s);
}

/* The run of who exited 0 (its summary logged) and passed its equivalence check. */
static void demo_passed(struct __test_metadata *_metadata, const char *who, int rc,
			const char *out)
{
	ASSERT_EQ(0, rc) TH_LOG("%s: exit %d:\n%s", who, rc, out);
	log_summary(who, out);
	ASSERT_NE(NULL, strstr(out, "\nequivalence: PASS")) TH_LOG("%s:\n%s", who, out);
}

/* The space name is gone: a join finds nothing. */
static void expect_no_space(struct __test_metadata *_metadata, const char *name)
{
	int fd = kv_open_join(name, NULL);

	EXPECT_EQ(-ENOENT, fd) TH_LOG("%s is still there", name);
	if (fd >= 0)
		close(fd);
}

TEST_F_TIMEOUT(demo, second_process_hits_first, 240)
{
	long long inserted, shared, shared_blocks, tokens1;
	struct kvpool_space_stats st;
	int fd, rc;

	RETURN_IF_SKIPPED();
	rc = run_demo(self->space, self->out, OUT_MAX, "--role", "first", "--expect-hits", NULL);
	demo_passed(_metadata, "first", rc, self->out);
	ASSERT_NE(NULL, strstr(self->out, "summary: backend=kmod "))
		TH_LOG("first did not run on the module:\n%s", self->out);
	inserted = field(self->out, "inserted", 10);
	tokens1 = field(self->out, "tokens", 16);
	ASSERT_GT(inserted, 0) TH_LOG("first published nothing:\n%s", self->out);
	ASSERT_KV_CHECK_OK();

	/* the first is gone; its space persists with the published blocks cached */
	fd = kv_open_join(self->space, NULL);
	ASSERT_GE(fd, 0) TH_LOG("join %s: %s", self->space, strerror(-fd));
	ASSERT_EQ(0, kv_space_stats(fd, &st));
	EXPECT_EQ(0, st.published_blocks);
	EXPECT_GE(st.cached_blocks, (__u64)inserted);
	close(fd);

	rc = run_demo(self->space, self->out, OUT_MAX, "--role", "second", "--expect-hits",
		      "--expect-shared-hits", NULL);
	demo_passed(_metadata, "second", rc, self->out);
	shared = field(self->out, "shared_hits", 10);
	shared_blocks = field(self->out, "shared_blocks", 10);
	ASSERT_GT(shared, 0) TH_LOG("second:\n%s", self->out);
	/* distinct blocks hit that another process published: the first's */
	ASSERT_GT(shared_blocks, 0);
	ASSERT_LE(shared_blocks, inserted) TH_LOG("more shared blocks than the first published");
	/* same weights, same requests: the same tokens in both processes */
	ASSERT_EQ(tokens1, field(self->out, "tokens", 16));
	fprintf(stderr, "# second process: %lld block hits on %lld distinct blocks of the %lld the "
		       "first published\n", shared, shared_blocks, inserted);

	/* the second destroyed the space on exit */
	expect_no_space(_metadata, self->space);
	self->space[0] = '\0';
	ASSERT_KV_CHECK_OK();
}

/*
 * The second starts as soon as the first has created the space, so both
 * look up and publish the same system prompt at about the same time: each
 * block is inserted by one of them and deduplicated by the other.  Which
 * one wins is timing; the tokens must not depend on it.
 */
TEST_F_TIMEOUT(demo, both_at_once, 240)
{
	struct timespec ts = { 0, 2 * 1000 * 1000 };
	char *out1 = calloc(1, OUT_MAX);
	int fd = -1, rfd, rc1, rc2, i;
	pid_t pid;

	RETURN_IF_SKIPPED();
	ASSERT_NE(NULL, out1);
	pid = demo_start(self->space, &rfd, "--role", "first", NULL);
	ASSERT_GE(pid, 0);
	/* wait for the space (joining it for a moment is harmless) */
	for (i = 0; i < 5000 && fd < 0; i++) {
		fd = kv_open_join(self->space, NULL);
		if (fd < 0)
			nanosleep(&ts, NULL);
	}
	if (fd >= 0)
		close(fd);
	/* a few KiB of output each: the pipes do not fill while the second runs */
	rc2 = run_demo(self->space, self->out, OUT_MAX, "--role", "second", "--expect-hits",
		       NULL);
	rc1 = demo_finish(pid, rfd, out1, OUT_MAX);
	ASSERT_GE(fd, 0) TH_LOG("the first never created %s:\n%s", self->space, out1);
	log_summary("first", out1);
	log_summary("second", self->out);
	ASSERT_EQ(0, rc1) TH_LOG("first: exit %d:\n%s", rc1, out1);
	ASSERT_EQ(0, rc2) TH_LOG("second: exit %d:\n%s", rc2, self->out);
	ASSERT_NE(NULL, strstr(out1, "\nequivalence: PASS"));
	ASSERT_NE(NULL, strstr(self->out, "\nequivalence: PASS"));
	ASSERT_EQ(field(out1, "tokens", 16), field(self->out, "tokens", 16));
	ASSERT_GT(field(out1, "inserted", 10) + field(self->out, "inserted", 10), 0);
	free(out1);
	ASSERT_KV_CHECK_OK();
}

TEST_F_TIMEOUT(demo, single_run_leaves_nothing, 240)
{
	int rc;

	RETURN_IF_SKIPPED();
	rc = run_demo(self->space, self->out, OUT_MAX, "--expect-hits", NULL);
	demo_passed(_metadata, "single", rc, self->out);
	ASSERT_EQ(0, field(self->out, "shared_hits", 10));
	/* not persistent: the space went with the process */
	expect_no_space(_metadata, self->space);
	ASSERT_KV_CHECK_OK();
}

/*
 * kvrt-demo warm publishes the workload's system prompt into a persistent
 * space and exits; a fresh kvrt-demo joining that space (--role second:
 * join only) must find the system prompt's blocks for its very first
 * request, which no process before it served, and pass its equivalence
 * check with them.
 */
TEST_F_TIMEOUT(demo, warmed_space_serves_first_request, 240)
{
	char prompts[96], want[64];
	struct kvpool_space_stats st;
	long long published;
	const char *first;
	int fd, rc;
	FILE *f;

	RETURN_IF_SKIPPED();
	/* the prompt file: the serving workload's system prompt (96 tokens, 6 blocks) */
	rc = run_warm(self->space, self->out, OUT_MAX, "--print-workload-prompt", NULL);
	ASSERT_EQ(0, rc) TH_LOG("--print-workload-prompt: exit %d:\n%s", rc, self->out);
	snprintf(prompts, sizeof(prompts), "/tmp/%s.prompts", self->space);
	f = fopen(prompts, "w");
	ASSERT_NE(NULL, f);
	fputs(self->out, f);
	ASSERT_EQ(0, fclose(f));

	rc = run_warm(self->space, self->out, OUT_MAX, "--prompts", prompts, "--priority", "90",
		      NULL);
	ASSERT_EQ(0, rc) TH_LOG("warm: exit %d:\n%s", rc, self->out);
	log_summary("warm", self->out);
	ASSERT_NE(NULL, strstr(self->out, "summary: backend=kmod "));
	published = field(self->out, "published", 10);
	ASSERT_EQ(6, published) TH_LOG("warm:\n%s", self->out);
	ASSERT_EQ(6, field(self->out, "computed", 10));

	/* the warm process is gone; the space persists with the blocks cached */
	fd = kv_open_join(self->space, NULL);
	ASSERT_GE(fd, 0) TH_LOG("join %s: %s", self->space, strerror(-fd));
	ASSERT_EQ(0, kv_space_stats(fd, &st));
	EXPECT_EQ(0, st.published_blocks);
	EXPECT_EQ(6, st.cached_blocks);
	close(fd);

	/* warming again computes nothing */
	rc = run_warm(self->space, self->out, OUT_MAX, "--prompts", prompts, NULL);
	ASSERT_EQ(0, rc) TH_LOG("second warm: exit %d:\n%s", rc, self->out);
	EXPECT_EQ(6, field(self->out, "present", 10));
	EXPECT_EQ(0, field(self->out, "computed", 10));
	unlink(prompts);

	rc = run_demo(self->space, self->out, OUT_MAX, "--role", "second", "--expect-shared-hits",
		      NULL);
	demo_passed(_metadata, "engine", rc, self->out);
	/* its first request: every system prompt block from the warmed space */
	snprintf(want, sizeof(want), "\nfirst request: %lld of ", published);
	first = strstr(self->out, want);
	ASSERT_NE(NULL, first) TH_LOG("engine (want '%s'):\n%s", want + 1, self->out);
	fprintf(stderr, "# %.*s\n", (int)strcspn(first + 1, "\n"), first + 1);
	ASSERT_GE(field(self->out, "shared_hits", 10), published);

	/* --role second destroyed the space on exit */
	expect_no_space(_metadata, self->space);
	self->space[0] = '\0';
	ASSERT_KV_CHECK_OK();
}

TEST_HARNESS_MAIN
