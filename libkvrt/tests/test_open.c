// SPDX-License-Identifier: MIT
/*
 * kvrt_open: version, backend choice (options, $KVRT_BACKEND, $KVRT_DEVICE,
 * absent and non-kvpool devices), what kvrt_backend_info says and why,
 * option errors, logging only through the callback, independent handles.
 * Runs without kvpool.ko: the device paths used here are never kvpool.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvrt.h"
#include "../../selftests/tap.h"

TEST(version)
{
	char want[32];

	snprintf(want, sizeof(want), "%d.%d.%d", KVRT_VERSION_MAJOR, KVRT_VERSION_MINOR,
		 KVRT_VERSION_PATCH);
	CHECK(!strcmp(kvrt_version(), want));
	CHECK_EQ(kvrt_version_number(), KVRT_VERSION_NUMBER);
	CHECK_EQ(KVRT_VERSION_NUMBER, KVRT_VERSION_MAJOR * 10000 + KVRT_VERSION_MINOR * 100 +
		 KVRT_VERSION_PATCH);
}

static int try_open(struct kvrt **k, enum kvrt_backend b, const char *dev)
{
	struct kvrt_open_opts o = { .backend = b, .device = dev };

	*k = NULL;
	return kvrt_open(k, &o);
}

TEST(auto_falls_back_to_embedded_and_says_why)
{
	struct kvrt *k;

	unsetenv("KVRT_BACKEND");
	CHECK_EQ(try_open(&k, KVRT_BACKEND_AUTO, "/nonexistent/kvpool"), 0);
	REQUIRE(k);
	CHECK_EQ(kvrt_backend(k), KVRT_BACKEND_EMBEDDED);
	CHECK(!strcmp(kvrt_backend_info(k),
		      "embedded: /nonexistent/kvpool: No such file or directory"));
	kvrt_close(k);
	/* A device that is there but is not kvpool. */
	CHECK_EQ(try_open(&k, KVRT_BACKEND_AUTO, "/dev/null"), 0);
	REQUIRE(k);
	CHECK_EQ(kvrt_backend(k), KVRT_BACKEND_EMBEDDED);
	CHECK(!strncmp(kvrt_backend_info(k), "embedded: /dev/null: KVPOOL_IOC_INFO: ", 38));
	tap_diag("%s", kvrt_backend_info(k));
	kvrt_close(k);
}

TEST(forcing_kmod_without_the_device)
{
	struct kvrt *k = (struct kvrt *)&k;

	unsetenv("KVRT_BACKEND");
	CHECK_EQ(try_open(&k, KVRT_BACKEND_KMOD, "/nonexistent/kvpool"), -ENODEV);
	CHECK(k == NULL);
	CHECK_EQ(try_open(&k, KVRT_BACKEND_KMOD, "/dev/null"), -ENODEV);
	/* Through the environment, device path too. */
	setenv("KVRT_BACKEND", "kmod", 1);
	setenv("KVRT_DEVICE", "/nonexistent/kvpool", 1);
	CHECK_EQ(kvrt_open(&k, NULL), -ENODEV);
	unsetenv("KVRT_DEVICE");
	unsetenv("KVRT_BACKEND");
}

/* An open that must land on the embedded backend. */
struct embedded_case {
	const char *what;
	const char *env;		/* $KVRT_BACKEND, NULL: unset */
	bool no_opts;			/* kvrt_open(&k, NULL) */
	enum kvrt_backend backend;	/* else the options' backend and device */
	const char *device;
	bool check_backend;		/* kvrt_backend() must say embedded */
	const char *info;		/* what kvrt_backend_info() must say, NULL: not checked */
};

static void expect_embedded(const struct embedded_case *c)
{
	struct kvrt *k = NULL;
	int ret;

	if (c->env)
		setenv("KVRT_BACKEND", c->env, 1);
	else
		unsetenv("KVRT_BACKEND");
	ret = c->no_opts ? kvrt_open(&k, NULL) : try_open(&k, c->backend, c->device);
	CHECKF(ret == 0, "%s: kvrt_open = %d", c->what, ret);
	if (!k) {
		if (!ret)
			tap_failf("%s: 0 but no handle", c->what);
		return;
	}
	if (c->check_backend)
		CHECKF(kvrt_backend(k) == KVRT_BACKEND_EMBEDDED, "%s: backend %d, want embedded",
		       c->what, (int)kvrt_backend(k));
	if (c->info)
		CHECKF(!strcmp(kvrt_backend_info(k), c->info), "%s: info \"%s\", want \"%s\"",
		       c->what, kvrt_backend_info(k), c->info);
	kvrt_close(k);
}

TEST(forcing_embedded)
{
	static const struct embedded_case cases[] = {
		{ "option embedded", NULL, false, KVRT_BACKEND_EMBEDDED, NULL, true,
		  "embedded: forced by kvrt_open_opts.backend" },
		{ "KVRT_BACKEND=embedded", "embedded", true, 0, NULL, false,
		  "embedded: forced by KVRT_BACKEND=embedded" },
		/* The option wins over the environment. */
		{ "option embedded over KVRT_BACKEND=kmod", "kmod", false, KVRT_BACKEND_EMBEDDED,
		  "/nonexistent", true, NULL },
		/* "auto" and empty mean the default choice. */
		{ "KVRT_BACKEND=auto", "auto", false, KVRT_BACKEND_AUTO, "/nonexistent", false,
		  "embedded: /nonexistent: No such file or directory" },
		{ "KVRT_BACKEND empty", "", false, KVRT_BACKEND_AUTO, "/nonexistent", false, NULL },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_embedded(&cases[i]);
	unsetenv("KVRT_BACKEND");
}

TEST(device_from_the_environment)
{
	struct kvrt *k;

	unsetenv("KVRT_BACKEND");
	setenv("KVRT_DEVICE", "/nonexistent/elsewhere", 1);
	CHECK_EQ(kvrt_open(&k, NULL), 0);
	REQUIRE(k);
	CHECK(!strcmp(kvrt_backend_info(k),
		      "embedded: /nonexistent/elsewhere: No such file or directory"));
	kvrt_close(k);
	/* An explicit device wins over the environment. */
	CHECK_EQ(try_open(&k, KVRT_BACKEND_AUTO, "/nonexistent/mine"), 0);
	REQUIRE(k);
	CHECK(!strcmp(kvrt_backend_info(k), "embedded: /nonexistent/mine: No such file or directory"));
	kvrt_close(k);
	unsetenv("KVRT_DEVICE");
}

TEST(open_errors)
{
	struct kvrt_open_opts o;
	struct kvrt *k = (struct kvrt *)&k;
	char longpath[600];

	CHECK_EQ(kvrt_open(NULL, NULL), -EINVAL);
	memset(&o, 0, sizeof(o));
	o.flags = 1U << 3;
	CHECK_EQ(kvrt_open(&k, &o), -EINVAL);
	CHECK(k == NULL);
	memset(&o, 0, sizeof(o));
	o.reserved0 = 1;
	CHECK_EQ(kvrt_open(&k, &o), -EINVAL);
	memset(&o, 0, sizeof(o));
	o.reserved[3] = 1;
	CHECK_EQ(kvrt_open(&k, &o), -EINVAL);
	memset(&o, 0, sizeof(o));
	o.backend = (enum kvrt_backend)3;
	CHECK_EQ(kvrt_open(&k, &o), -EINVAL);
	memset(&o, 0, sizeof(o));
	o.log_level = -1;
	CHECK_EQ(kvrt_open(&k, &o), -EINVAL);
	setenv("KVRT_BACKEND", "gpu", 1);
	CHECK_EQ(kvrt_open(&k, NULL), -EINVAL);
	unsetenv("KVRT_BACKEND");
	memset(longpath, 'a', sizeof(longpath) - 1);
	longpath[0] = '/';
	longpath[sizeof(longpath) - 1] = '\0';
	memset(&o, 0, sizeof(o));
	o.device = longpath;
	CHECK_EQ(kvrt_open(&k, &o), -ENAMETOOLONG);
	/* Defined NULL behaviour. */
	kvrt_close(NULL);
	CHECK_EQ(kvrt_backend(NULL), KVRT_BACKEND_AUTO);
	CHECK(kvrt_backend_info(NULL) != NULL);
}

struct logbuf {
	int calls;
	int last_level;
	char last[512];
};

static void logger(void *arg, int level, const char *msg)
{
	struct logbuf *b = arg;

	b->calls++;
	b->last_level = level;
	snprintf(b->last, sizeof(b->last), "%s", msg);
}

TEST(logging_only_through_the_callback)
{
	struct logbuf b = { 0 };
	struct kvrt_open_opts o = { .device = "/nonexistent", .log = logger, .log_arg = &b };
	struct kvrt *k;
	char path[] = "/tmp/kvrt-stderr-XXXXXX";
	int fd = mkstemp(path), saved = dup(2);
	off_t len;

	REQUIRE(fd >= 0 && saved >= 0);
	unsetenv("KVRT_BACKEND");
	fflush(stderr);
	dup2(fd, 2);
	/* No callback: nothing anywhere, failures included. */
	CHECK_EQ(try_open(&k, KVRT_BACKEND_KMOD, "/nonexistent"), -ENODEV);
	CHECK_EQ(try_open(&k, KVRT_BACKEND_AUTO, "/nonexistent"), 0);
	kvrt_close(k);
	/* With one: the backend line at INFO, the kmod failure at ERR. */
	CHECK_EQ(kvrt_open(&k, &o), 0);
	CHECK_EQ(b.calls, 1);
	CHECK_EQ(b.last_level, KVRT_LOG_INFO);
	CHECK(strstr(b.last, "embedded: /nonexistent: No such file or directory") != NULL);
	kvrt_close(k);
	o.backend = KVRT_BACKEND_KMOD;
	CHECK_EQ(kvrt_open(&k, &o), -ENODEV);
	CHECK_EQ(b.last_level, KVRT_LOG_ERR);
	/* Below the level: filtered. */
	b.calls = 0;
	o.backend = KVRT_BACKEND_AUTO;
	o.log_level = KVRT_LOG_WARNING;
	CHECK_EQ(kvrt_open(&k, &o), 0);
	CHECK_EQ(b.calls, 0);
	kvrt_close(k);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	len = lseek(fd, 0, SEEK_END);
	CHECK_EQ(len, 0);
	close(fd);
	unlink(path);
}

/* Embedded namespaces belong to their handle. */
TEST(handles_are_independent)
{
	struct kvrt *a, *b;
	struct kvrt_space *sa, *sb, *sx;
	struct kvrt_space_opts o = { .name = "same-name", .flags = KVRT_SPACE_CREATE | KVRT_SPACE_EXCL,
				     .mode = 0600, .block_bytes = 4096, .quota_bytes = 1 << 20 };
	struct kvrt_space_info ia, ib;

	REQUIRE(try_open(&a, KVRT_BACKEND_EMBEDDED, NULL) == 0);
	REQUIRE(try_open(&b, KVRT_BACKEND_EMBEDDED, NULL) == 0);
	CHECK_EQ(kvrt_space_open(a, &o, &sa), 0);
	CHECK_EQ(kvrt_space_open(b, &o, &sb), 0);	/* not EEXIST: another namespace */
	CHECK_EQ(kvrt_space_open(a, &o, &sx), -EEXIST);
	REQUIRE(kvrt_space_info(sa, &ia) == 0 && kvrt_space_info(sb, &ib) == 0);
	CHECK_EQ(ia.created, 1);
	CHECK_EQ(ib.created, 1);
	CHECK(kvrt_space_base(sa) != kvrt_space_base(sb));
	/* Closing a handle closes its spaces (ASan would see a leak otherwise). */
	kvrt_close(a);
	CHECK_EQ(kvrt_space_info(sb, &ib), 0);
	kvrt_space_close(sb);
	kvrt_close(b);
}

/* kvrt.h: a device path of 256 bytes or more is -ENAMETOOLONG, given or from the environment. */
TEST(a_device_path_of_256_bytes_is_enametoolong)
{
	struct kvrt_open_opts o = { .backend = KVRT_BACKEND_EMBEDDED };
	struct kvrt *k = (struct kvrt *)&k;
	char path[257];

	memset(path, 'a', sizeof(path));
	path[0] = '/';
	path[255] = '\0';		/* 255 bytes: fits */
	o.device = path;
	CHECK_EQ(kvrt_open(&k, &o), 0);
	kvrt_close(k);
	path[255] = 'a';
	path[256] = '\0';		/* 256 bytes */
	k = (struct kvrt *)&k;
	CHECK_EQ(kvrt_open(&k, &o), -ENAMETOOLONG);
	CHECK(k == NULL);
	o.device = NULL;
	setenv("KVRT_DEVICE", path, 1);
	CHECK_EQ(kvrt_open(&k, &o), -ENAMETOOLONG);
	unsetenv("KVRT_DEVICE");
}

int main(void)
{
	RUN(version);
	RUN(auto_falls_back_to_embedded_and_says_why);
	RUN(forcing_kmod_without_the_device);
	RUN(forcing_embedded);
	RUN(device_from_the_environment);
	RUN(open_errors);
	RUN(a_device_path_of_256_bytes_is_enametoolong);
	RUN(logging_only_through_the_callback);
	RUN(handles_are_independent);
	return tap_done("test_open");
}
