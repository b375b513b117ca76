// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * kvrules (kmod/core/kvrules.c): the namespace and event-loss rules that
 * the module and the embedded backend share.  Expected results come from
 * the uAPI's text (include/uapi/linux/kvpool.h), written out case by case,
 * and mode bits from their "rwxr-x---" spelling, not from the code.
 */
#include "kvrules.h"
#include "kvcore.h"
#include "../tap.h"

static void t_rules_name(void)
{
	char longest[KVC_NAME_MAX], too_long[KVC_NAME_MAX + 1];
	static const struct {
		const char *name;
		bool valid;
	} cases[] = {
		{ "a", true },
		{ "llama-3.1_70B", true },
		{ "A.b-c_9", true },
		{ ".", true },
		{ "", false },
		{ "a b", false },
		{ "a/b", false },
		{ "tenant:a", false },
		{ "caf\xc3\xa9", false },	/* UTF-8 é */
		{ "caf\xe9", false },		/* Latin-1 é: the kernel's isalnum() says yes */
		{ "new\nline", false },
		{ "*", false },
	};

	for (unsigned int i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (kvc_space_name_valid(cases[i].name) != cases[i].valid) {
			tap_diag("name \"%s\": expected %s", cases[i].name,
				 cases[i].valid ? "valid" : "invalid");
			tap_ok = false;
		}
	CHECK(!kvc_space_name_valid(NULL));
	memset(longest, 'x', sizeof(longest) - 1);
	longest[sizeof(longest) - 1] = '\0';
	CHECK(kvc_space_name_valid(longest));
	/* No NUL within KVC_NAME_MAX bytes: the reader must not look further. */
	memset(too_long, 'x', sizeof(too_long));
	too_long[KVC_NAME_MAX] = '\0';
	CHECK(!kvc_space_name_valid(too_long));
}

static void t_rules_open_shape(void)
{
	const kvc_u32 C = KVC_OPEN_CREATE, X = KVC_OPEN_EXCL, P = KVC_OPEN_PERSIST,
		      F = KVC_OPEN_FOREIGN;

	CHECK_EQ(kvc_space_open_shape(0, 0, false), 0);
	CHECK_EQ(kvc_space_open_shape(C, 0, true), 0);
	CHECK_EQ(kvc_space_open_shape(C | X | P, 0, true), 0);
	CHECK_EQ(kvc_space_open_shape(F, 1000, false), 0);
	CHECK_EQ(kvc_space_open_shape(F, 0, false), 0);		/* root's spaces */
	CHECK_EQ(kvc_space_open_shape(1U << 4, 0, false), -EINVAL);
	CHECK_EQ(kvc_space_open_shape(0x80000000U | C, 0, true), -EINVAL);
	CHECK_EQ(kvc_space_open_shape(X, 0, false), -EINVAL);	/* EXCL without CREATE */
	CHECK_EQ(kvc_space_open_shape(P, 0, false), -EINVAL);	/* PERSIST without CREATE */
	CHECK_EQ(kvc_space_open_shape(F | C, 0, true), -EINVAL);
	CHECK_EQ(kvc_space_open_shape(0, 1000, false), -EINVAL);	/* expect_uid without FOREIGN */
	CHECK_EQ(kvc_space_open_shape(C, 1000, true), -EINVAL);
	CHECK_EQ(kvc_space_open_shape(0, 0, true), -EINVAL);	/* a join with create fields */
	CHECK_EQ(kvc_space_open_shape(F, 1000, true), -EINVAL);
}

static const struct kvc_space_create good_create = {
	.block_bytes = 64 << 10,
	.quota_bytes = 64 << 20,
	.node_mask = 0x3,
	.mode = 0640,
	.numa_policy = KVC_NUMA_BIND,
};

static void t_rules_create_each_field(void)
{
	const kvc_u64 page = 4096, pool_nodes = 0x3;
	static const struct {
		const char *what;
		int field;
		kvc_u64 value;
		int err;
	} cases[] = {
		{ "zero block", 0, 0, -EINVAL },
		{ "block not page-aligned", 0, 4096 + 512, -EINVAL },
		{ "largest block", 0, KVC_MAX_BLOCK_BYTES, 0 },
		{ "block over the largest", 0, KVC_MAX_BLOCK_BYTES + 4096, -E2BIG },
		{ "quota under one block", 1, (64 << 10) - 4096, -EINVAL },
		{ "quota of one block", 1, 64 << 10, 0 },
		{ "largest quota", 1, KVC_MAX_SPACE_BYTES, 0 },
		{ "quota over the largest", 1, KVC_MAX_SPACE_BYTES + 4096, -E2BIG },
		{ "mode 0777", 3, 0777, 0 },
		{ "setuid bit", 3, 04600, -EINVAL },
		{ "sticky bit", 3, 01600, -EINVAL },
		{ "policy interleave", 4, KVC_NUMA_INTERLEAVE, 0 },
		{ "unknown policy", 4, KVC_NUMA_INTERLEAVE + 1, -EINVAL },
		{ "huge policy", 4, 0xffffffffU, -EINVAL },
		{ "node without pool pages", 2, 0x4, -EINVAL },
		{ "BIND with no node", 2, 0, -EINVAL },
	};

	for (unsigned int i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kvc_space_create c = good_create;
		int got;

		switch (cases[i].field) {
		case 0: c.block_bytes = cases[i].value; break;
		case 1: c.quota_bytes = cases[i].value; break;
		case 2: c.node_mask = cases[i].value; break;
		case 3: c.mode = (kvc_u32)cases[i].value; break;
		default: c.numa_policy = (kvc_u32)cases[i].value; break;
		}
		if (cases[i].field == 0 && cases[i].value > c.quota_bytes)
			c.quota_bytes = KVC_MAX_SPACE_BYTES;
		got = kvc_space_create_check(&c, page, pool_nodes);
		if (got != cases[i].err) {
			tap_diag("%s: got %d, expected %d", cases[i].what, got, cases[i].err);
			tap_ok = false;
		}
	}
	CHECK_EQ(kvc_space_create_check(&good_create, page, pool_nodes), 0);
	/* Preferred or interleave with no node: any node. */
	{
		struct kvc_space_create c = good_create;

		c.node_mask = 0;
		c.numa_policy = KVC_NUMA_PREFERRED;
		CHECK_EQ(kvc_space_create_check(&c, page, pool_nodes), 0);
	}
}

/* Two bad fields: the uAPI's order says which errno wins. */
static void t_rules_create_order(void)
{
	struct kvc_space_create c = good_create;

	c.block_bytes = KVC_MAX_BLOCK_BYTES + 4096;	/* E2BIG */
	c.quota_bytes = 4096;				/* EINVAL, checked later */
	CHECK_EQ(kvc_space_create_check(&c, 4096, 0x3), -E2BIG);
	c = good_create;
	c.block_bytes = 100;				/* EINVAL */
	c.quota_bytes = KVC_MAX_SPACE_BYTES * 2;	/* E2BIG, checked later */
	CHECK_EQ(kvc_space_create_check(&c, 4096, 0x3), -EINVAL);
	c = good_create;
	c.quota_bytes = KVC_MAX_SPACE_BYTES * 2;	/* E2BIG */
	c.mode = 07777;					/* EINVAL, checked later */
	CHECK_EQ(kvc_space_create_check(&c, 4096, 0x3), -E2BIG);
}

/* Mode bits against their ls(1) spelling, for every mode and class. */
static void t_rules_mode_bits(void)
{
	static const char rwx[] = "rwxrwxrwx";
	unsigned int bad = 0;

	for (kvc_u32 mode = 0; mode <= 0777; mode++) {
		char spelled[10];

		for (int bit = 0; bit < 9; bit++)
			spelled[bit] = (mode & (0400U >> bit)) ? rwx[bit] : '-';
		spelled[9] = '\0';
		for (int class = KVC_CLASS_OWNER; class <= KVC_CLASS_OTHER; class++) {
			const char *triplet = spelled + 3 * class;
			bool want = triplet[0] == 'r' && triplet[1] == 'w';

			if (kvc_mode_permits(mode, (enum kvc_mode_class)class) != want && !bad++)
				tap_diag("mode %s class %d: expected %s", spelled, class,
					 want ? "permitted" : "denied");
		}
	}
	CHECK_EQ(bad, 0);
}

static unsigned int privileged_asked;

static bool privileged_yes(const void *ctx)
{
	(void)ctx;
	privileged_asked++;
	return true;
}

static bool privileged_no(const void *ctx)
{
	(void)ctx;
	privileged_asked++;
	return false;
}

static void t_rules_open_decide(void)
{
	const kvc_u32 C = KVC_OPEN_CREATE, X = KVC_OPEN_EXCL, F = KVC_OPEN_FOREIGN;
	const struct kvc_space_open_check joinable = {
		.found = true, .owner_accepted = true, .want_block_bytes = 0,
		.block_bytes = 65536, .mode = 0600, .class = KVC_CLASS_OWNER,
		.privileged = privileged_no,
	};
	static const struct {
		const char *what;
		kvc_u32 flags;
		bool found, owner_accepted;
		kvc_u64 want_block_bytes;
		kvc_u32 mode;
		enum kvc_mode_class class;
		bool privileged;
		int err;
	} cases[] = {
		{ "absent, join", 0, false, false, 0, 0, 0, false, -ENOENT },
		{ "absent, foreign join", F, false, false, 0, 0, 0, false, -ENOENT },
		{ "absent, create", C, false, false, 0, 0, 0, false, 0 },
		{ "own, join", 0, true, true, 0, 0600, KVC_CLASS_OWNER, false, 0 },
		{ "own, create-or-join", C, true, true, 0, 0600, KVC_CLASS_OWNER, false, 0 },
		{ "own, exclusive create", C | X, true, true, 0, 0600, KVC_CLASS_OWNER, false, -EEXIST },
		{ "squatted, create-or-join", C, true, false, 0, 0666, KVC_CLASS_OTHER, false, -EEXIST },
		{ "squatted, join", 0, true, false, 0, 0666, KVC_CLASS_OTHER, false, -EACCES },
		{ "squatted, root joins", 0, true, false, 0, 0666, KVC_CLASS_OTHER, true, -EACCES },
		{ "squatted, exclusive", C | X, true, false, 0, 0666, KVC_CLASS_OTHER, false, -EEXIST },
		{ "block size differs", 0, true, true, 4096, 0600, KVC_CLASS_OWNER, false, -EINVAL },
		{ "block size same", 0, true, true, 65536, 0600, KVC_CLASS_OWNER, false, 0 },
		{ "size differs, no right", 0, true, true, 4096, 0000, KVC_CLASS_OWNER, false, -EINVAL },
		{ "group rw", F, true, true, 0, 0660, KVC_CLASS_GROUP, false, 0 },
		{ "group r only", F, true, true, 0, 0640, KVC_CLASS_GROUP, false, -EACCES },
		{ "group r only, privileged", F, true, true, 0, 0640, KVC_CLASS_GROUP, true, 0 },
		{ "owner without w", 0, true, true, 0, 0466, KVC_CLASS_OWNER, false, -EACCES },
		{ "others rw", F, true, true, 0, 0606, KVC_CLASS_OTHER, false, 0 },
	};

	for (unsigned int i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kvc_space_open_check c = joinable;
		int got;

		c.flags = cases[i].flags;
		c.found = cases[i].found;
		c.owner_accepted = cases[i].owner_accepted;
		c.want_block_bytes = cases[i].want_block_bytes;
		c.mode = cases[i].mode;
		c.class = cases[i].class;
		c.privileged = cases[i].privileged ? privileged_yes : privileged_no;
		got = kvc_space_open_decide(&c);
		if (got != cases[i].err) {
			tap_diag("%s: got %d, expected %d", cases[i].what, got, cases[i].err);
			tap_ok = false;
		}
	}
	/* The privilege is asked only when the bits deny (no audit noise). */
	privileged_asked = 0;
	CHECK_EQ(kvc_space_open_decide(&joinable), 0);
	CHECK_EQ(privileged_asked, 0);
	{
		struct kvc_space_open_check c = joinable;

		c.mode = 0400;
		CHECK_EQ(kvc_space_open_decide(&c), -EACCES);
		CHECK_EQ(privileged_asked, 1);
		c.privileged = NULL;	/* a host with no override */
		CHECK_EQ(kvc_space_open_decide(&c), -EACCES);
	}
}

static void t_rules_overflow_take(void)
{
	kvc_u64 lost = 0, total = 0;

	CHECK_EQ(kvc_overflow_take(&lost), 0);
	lost = 5;
	CHECK_EQ(kvc_overflow_take(&lost), 5);
	CHECK_EQ(lost, 0);
	lost = 0xffffffffULL;
	CHECK_EQ(kvc_overflow_take(&lost), 0xffffffffU);
	CHECK_EQ(lost, 0);
	/* Past 2^32 the remainder stays owed: nothing is forgotten. */
	lost = (1ULL << 33) + 7;
	for (int records = 0; lost && records < 4; records++)
		total += kvc_overflow_take(&lost);
	CHECK_EQ(lost, 0);
	CHECK((total == (1ULL << 33) + 7));
}

#define T(fn) { &#fn[2], fn }	/* the name without "t_" */
const struct tap_test rules_tests[] = {
	T(t_rules_name),
	T(t_rules_open_shape),
	T(t_rules_create_each_field),
	T(t_rules_create_order),
	T(t_rules_mode_bits),
	T(t_rules_open_decide),
	T(t_rules_overflow_take),
};
#undef T
const unsigned int nr_rules_tests = sizeof(rules_tests) / sizeof(rules_tests[0]);
