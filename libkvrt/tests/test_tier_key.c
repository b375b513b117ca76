// SPDX-License-Identifier: MIT
/*
 * test_tier_key: the tenant's tier key.  kvrt_tier_key_create() makes a
 * file that only its owner can read and never overwrites one; the key
 * loader refuses what another could have written; the tags and blind
 * names equal an independent reference (tests/tier_mac_ref.py: Python's
 * hmac and Poly1305 written from RFC 8439, not OpenSSL), and a tag
 * changes with every input it binds.  The tag and loader are internal: the
 * plain build (linked against libkvrt.so, as engines are) skips them, the
 * ASan build links the library's objects and runs them.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvrt.h"
#include "tier/tier_mac.h"
#include "../../selftests/tap.h"

/* Resolved only where the library's internals are linked in (the ASan build). */
#pragma weak kvrt_tier_mac
#pragma weak kvrt_tier_mac_ok
#pragma weak kvrt_tier_blind_name
#pragma weak kvrt_tier_key_derive
#pragma weak kvrt_tier_key_from_file

static char dir[] = "/tmp/kvrt-tier-key-XXXXXX";

static char *path_in(const char *name)
{
	static char buf[4][256];
	static unsigned int n;
	char *p = buf[n++ % 4];

	snprintf(p, sizeof(buf[0]), "%s/%s", dir, name);
	return p;
}

static void hex(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

static bool internals(void)
{
	if (kvrt_tier_mac && kvrt_tier_key_from_file)
		return true;
	tap_skip("internal; the ASan build of this test runs it");
	return false;
}

TEST(created_key_is_the_owners_alone_and_never_overwritten)
{
	const char *p = path_in("key"), *q = path_in("key2");
	uint8_t a[64], b[64];
	struct stat st;
	mode_t old = umask(0);
	int fd;

	CHECK_EQ(kvrt_tier_key_create(NULL), -EINVAL);
	REQUIRE(kvrt_tier_key_create(p) == 0);
	umask(old);
	REQUIRE(stat(p, &st) == 0);
	CHECK_EQ(st.st_mode & 07777, 0600);
	CHECK_EQ(st.st_size, 32);
	CHECK_EQ(kvrt_tier_key_create(p), -EEXIST);
	REQUIRE(kvrt_tier_key_create(q) == 0);
	fd = open(p, O_RDONLY);
	CHECK_EQ(read(fd, a, sizeof(a)), 32);
	close(fd);
	fd = open(q, O_RDONLY);
	CHECK_EQ(read(fd, b, sizeof(b)), 32);
	close(fd);
	CHECK(memcmp(a, b, 32));
	/* A symlink where the key would go is not followed: the target stays absent. */
	REQUIRE(symlink(path_in("target"), path_in("link")) == 0);
	CHECK_EQ(kvrt_tier_key_create(path_in("link")), -EEXIST);
	CHECK(access(path_in("target"), F_OK) && errno == ENOENT);
	CHECK_EQ(kvrt_tier_key_create(path_in("no/such/dir/key")), -ENOENT);
}

TEST(key_file_refuses_what_another_could_have_written)
{
	uint8_t k1[32], k2[32];
	const char *p = path_in("key"), *lax = path_in("lax"), *small = path_in("small");
	int fd;

	if (!internals())
		return;
	REQUIRE(access(p, F_OK) == 0 || kvrt_tier_key_create(p) == 0);
	REQUIRE(kvrt_tier_key_from_file(p, k1) == 0);
	REQUIRE(kvrt_tier_key_from_file(p, k2) == 0);
	CHECK(!memcmp(k1, k2, 32));
	CHECK_EQ(kvrt_tier_key_from_file(path_in("link"), k2), -ELOOP);
	CHECK_EQ(kvrt_tier_key_from_file(path_in("absent"), k2), -ENOENT);
	CHECK_EQ(kvrt_tier_key_from_file(dir, k2), -EINVAL);
	fd = open(lax, O_WRONLY | O_CREAT | O_EXCL, 0600);
	CHECK_EQ(write(fd, k1, 32), 32);
	close(fd);
	CHECK_EQ(kvrt_tier_key_from_file(lax, k2), 0);
	CHECK_EQ(chmod(lax, 0640), 0);
	CHECK_EQ(kvrt_tier_key_from_file(lax, k2), -EPERM);
	CHECK_EQ(chmod(lax, 0604), 0);
	CHECK_EQ(kvrt_tier_key_from_file(lax, k2), -EPERM);
	if (geteuid() == 0) {
		CHECK_EQ(chmod(lax, 0600), 0);
		CHECK_EQ(chown(lax, 65534, 65534), 0);
		CHECK_EQ(kvrt_tier_key_from_file(lax, k2), -EPERM);
	}
	fd = open(small, O_WRONLY | O_CREAT | O_EXCL, 0600);
	CHECK_EQ(write(fd, k1, KVRT_TIER_KEY_FILE_MIN - 1), KVRT_TIER_KEY_FILE_MIN - 1);
	close(fd);
	CHECK_EQ(kvrt_tier_key_from_file(small, k2), -EINVAL);
}

/* The inputs of tests/tier_mac_ref.py. */
static void ref_inputs(uint8_t key[32], uint8_t id[32], uint8_t h[32], uint8_t nonce[16],
		       uint8_t *data, size_t len)
{
	for (unsigned int i = 0; i < 32; i++) {
		key[i] = (uint8_t)i;
		id[i] = (uint8_t)(0x40 + i);
		h[i] = (uint8_t)(0x80 + i);
	}
	for (unsigned int i = 0; i < 16; i++)
		nonce[i] = (uint8_t)(0xc0 + i);
	for (size_t i = 0; i < len; i++)
		data[i] = (uint8_t)((i * 7 + 3) & 0xff);
}

TEST(tags_and_names_equal_the_reference)
{
	uint8_t key[32], id[32], h[32], nonce[16], data[4099], tag[16], name[32], derived[32];
	struct kvrt_tier_bind b = { id, h, nonce };
	char s[65];

	if (!internals())
		return;
	ref_inputs(key, id, h, nonce, data, sizeof(data));
	REQUIRE(kvrt_tier_mac(key, &b, data, sizeof(data), tag) == 0);
	hex(tag, 16, s);
	CHECKF(!strcmp(s, "05a16b8dec15298b53fae480bbb0c0f7"), "tag %s", s);
	REQUIRE(kvrt_tier_mac(key, &b, data, 0, tag) == 0);
	hex(tag, 16, s);
	CHECKF(!strcmp(s, "d644971dfd1cf54ff911cc41fba5aec3"), "empty tag %s", s);
	REQUIRE(kvrt_tier_blind_name(key, id, h, name) == 0);
	hex(name, 32, s);
	CHECKF(!strcmp(s, "dc8983633ee7a79620ab519dbfc6095f862e568249ddbd6806896039939cedba"),
	       "name %s", s);
	REQUIRE(kvrt_tier_key_derive("kvrt test label", "user\0secret", 11, derived) == 0);
	hex(derived, 32, s);
	CHECKF(!strcmp(s, "840ed39c53b2f0d7401114deba4c73f178e068dc486ad2af4b8e68afd214a70e"),
	       "derived %s", s);
}

TEST(a_tag_changes_with_everything_it_binds)
{
	uint8_t key[32], id[32], h[32], nonce[16], data[4099], tag[16];
	uint8_t *fields[] = { key, id, h, nonce, data, data + sizeof(data) - 1 };
	struct kvrt_tier_bind b = { id, h, nonce };

	if (!internals())
		return;
	ref_inputs(key, id, h, nonce, data, sizeof(data));
	REQUIRE(kvrt_tier_mac(key, &b, data, sizeof(data), tag) == 0);
	CHECK(kvrt_tier_mac_ok(key, &b, data, sizeof(data), tag));
	for (unsigned int f = 0; f < sizeof(fields) / sizeof(fields[0]); f++) {
		fields[f][0] ^= 1;
		CHECKF(!kvrt_tier_mac_ok(key, &b, data, sizeof(data), tag), "field %u", f);
		fields[f][0] ^= 1;
	}
	CHECK(!kvrt_tier_mac_ok(key, &b, data, sizeof(data) - 1, tag));
	tag[15] ^= 0x80;
	CHECK(!kvrt_tier_mac_ok(key, &b, data, sizeof(data), tag));
}

int main(void)
{
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	RUN(created_key_is_the_owners_alone_and_never_overwritten);
	RUN(key_file_refuses_what_another_could_have_written);
	RUN(tags_and_names_equal_the_reference);
	RUN(a_tag_changes_with_everything_it_binds);
	char cmd[sizeof(dir) + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd))
		tap_diag("could not remove %s", dir);
	return tap_done("test_tier_key");
}
