// SPDX-License-Identifier: GPL-2.0
/*
 * Tenants: pool bytes per owner uid across all of its spaces, and the
 * limits admins set per uid in sysfs, so one tenant cannot take the whole
 * pool.  A tenant lives while it has a space or an explicit limit.
 *
 * The uid charged is not always the space's owner: ids inside a user
 * namespace belong to the uid that owns it (kvp_tenant_uid()).
 */
#include <linux/cred.h>
#include <linux/slab.h>
#include <linux/sysfs.h>
#include <linux/user_namespace.h>

#include "kvpool_internal.h"

struct kvp_tenant {
	struct list_head link;	/* kvp_tenants */
	kuid_t uid;
	u64 used;		/* bytes of chunks backing its spaces, held ones too */
	u64 held;		/* of used: let go by its spaces, still mapped or pinned */
	u64 limit;		/* explicit limit, 0: the default applies */
	unsigned int nr_spaces;
};

static DEFINE_SPINLOCK(kvp_tenants_lock);
static LIST_HEAD(kvp_tenants);

static struct kvp_tenant *kvp_tenant_find(kuid_t uid)
{
	struct kvp_tenant *t;

	lockdep_assert_held(&kvp_tenants_lock);
	list_for_each_entry(t, &kvp_tenants, link)
		if (uid_eq(t->uid, uid))
			return t;
	return NULL;
}

static u64 kvp_tenant_limit(const struct kvp_tenant *t)
{
	return t->limit ? t->limit : READ_ONCE(kvp_tun.uid_limit_default);
}

/* uid's tenant, else *fresh entered for it (*fresh becomes NULL), else NULL. */
static struct kvp_tenant *kvp_tenant_find_or_add(kuid_t uid, struct kvp_tenant **fresh)
{
	struct kvp_tenant *t = kvp_tenant_find(uid);

	if (!t && *fresh) {
		t = *fresh;
		*fresh = NULL;
		t->uid = uid;
		list_add_tail(&t->link, &kvp_tenants);
	}
	return t;
}

/*
 * The uid that an opener with @cred (file->f_cred) is charged as.  A
 * user namespace's ids are its owner's: an unprivileged uid with a
 * subordinate range (65,536 ids from adduser's /etc/subuid) can act as any
 * of them in a namespace it creates, and per-kuid accounting would give
 * it that many times spaces_per_uid_max and its byte limit.  So the
 * tenant is the owner of the outermost namespace, between the opener's
 * and the initial one, that root does not own; the fsuid where there is
 * none.  Namespaces that root made (a container runtime handing each
 * container its own range) are the admin's delegation: their ids stay
 * tenants of their own, as uids of the host are (Documentation/kvpool.rst,
 * Threat model).  Owners and parents never change, so no lock is needed.
 */
static kuid_t kvp_tenant_uid(const struct cred *cred)
{
	const struct user_namespace *ns;
	kuid_t uid = cred->fsuid;

	for (ns = cred->user_ns; ns != &init_user_ns; ns = ns->parent)
		if (!uid_eq(ns->owner, GLOBAL_ROOT_UID))
			uid = ns->owner;
	return uid;
}

/*
 * The tenant of a new space created by an opener with @cred; the space
 * holds it until it is destroyed.  ERR_PTR(-EDQUOT) when the tenant has
 * spaces_per_uid_max spaces already (persistent and destroyed-but-open
 * ones count), or -ENOMEM.
 */
struct kvp_tenant *kvp_tenant_get(const struct cred *cred)
{
	struct kvp_tenant *t, *fresh = kzalloc(sizeof(*fresh), GFP_KERNEL_ACCOUNT);
	u32 max = READ_ONCE(kvp_tun.spaces_per_uid_max);
	kuid_t uid = kvp_tenant_uid(cred);

	spin_lock(&kvp_tenants_lock);
	t = kvp_tenant_find_or_add(uid, &fresh);
	if (!t)
		t = ERR_PTR(-ENOMEM);
	else if (max && t->nr_spaces >= max)
		t = ERR_PTR(-EDQUOT);
	else
		t->nr_spaces++;
	spin_unlock(&kvp_tenants_lock);
	kfree(fresh);
	return t;
}

static void kvp_tenant_maybe_free(struct kvp_tenant *t)
{
	lockdep_assert_held(&kvp_tenants_lock);
	if (!t->nr_spaces && !t->limit && !t->held) {
		list_del(&t->link);
		kfree(t);
	}
}

void kvp_tenant_put(struct kvp_tenant *t)
{
	spin_lock(&kvp_tenants_lock);
	/* Its last space gave every chunk back, though some may still be held. */
	WARN_ON_ONCE(t->nr_spaces == 1 && t->used != t->held);
	t->nr_spaces--;
	kvp_tenant_maybe_free(t);
	spin_unlock(&kvp_tenants_lock);
}

/* Charge bytes of backing, or -EDQUOT past the tenant's limit. */
int kvp_tenant_charge(struct kvp_tenant *t, u64 bytes)
{
	int ret = 0;
	u64 limit;

	spin_lock(&kvp_tenants_lock);
	limit = kvp_tenant_limit(t);
	if (limit && t->used + bytes > limit)
		ret = -EDQUOT;
	else
		t->used += bytes;
	spin_unlock(&kvp_tenants_lock);
	return ret;
}

/*
 * A chunk leaves one of t's spaces: t stays charged (and alive) until the
 * chunk is really back in the pool, so that a page kept by a mapping or a
 * pin cannot escape the limit.  Called under the chunk's node lock.
 */
void kvp_tenant_hold(struct kvp_tenant *t, u64 bytes)
{
	spin_lock(&kvp_tenants_lock);
	t->held += bytes;
	spin_unlock(&kvp_tenants_lock);
}

/* The held chunk is back in the pool: uncharge it. */
void kvp_tenant_unhold(struct kvp_tenant *t, u64 bytes)
{
	spin_lock(&kvp_tenants_lock);
	t->held -= bytes;
	t->used -= bytes;
	kvp_tenant_maybe_free(t);
	spin_unlock(&kvp_tenants_lock);
}

/* Module unload: no space and no held chunk is left; limits go. */
void kvp_tenants_exit(void)
{
	struct kvp_tenant *t, *next;

	spin_lock(&kvp_tenants_lock);
	list_for_each_entry_safe(t, next, &kvp_tenants, link) {
		WARN_ON_ONCE(t->nr_spaces || t->used);
		list_del(&t->link);
		kfree(t);
	}
	spin_unlock(&kvp_tenants_lock);
}

/* Bytes charged for chunks in t's spaces now: used less held, read together. */
u64 kvp_tenant_in_spaces(const struct kvp_tenant *t)
{
	u64 bytes;

	spin_lock(&kvp_tenants_lock);
	bytes = t->used - t->held;
	spin_unlock(&kvp_tenants_lock);
	return bytes;
}

/* An explicit limit for uid (0 removes it); lowering it never takes pages away. */
int kvp_tenant_set_limit(kuid_t uid, u64 bytes)
{
	struct kvp_tenant *t, *fresh = bytes ? kzalloc(sizeof(*fresh), GFP_KERNEL) : NULL;

	if (bytes && !fresh)
		return -ENOMEM;
	spin_lock(&kvp_tenants_lock);
	t = kvp_tenant_find_or_add(uid, &fresh);
	if (t) {
		t->limit = bytes;
		kvp_tenant_maybe_free(t);
	}
	spin_unlock(&kvp_tenants_lock);
	kfree(fresh);
	return 0;
}

/* One line per tenant into a sysfs page: uid_limit and debugfs tenants. */
ssize_t kvp_tenants_emit(char *buf)
{
	struct kvp_tenant *t;
	ssize_t len = 0;

	spin_lock(&kvp_tenants_lock);
	list_for_each_entry(t, &kvp_tenants, link)
		len += sysfs_emit_at(buf, len,
				     "uid=%u limit_bytes=%llu used_bytes=%llu spaces=%u\n",
				     from_kuid(&init_user_ns, t->uid), kvp_tenant_limit(t),
				     t->used, t->nr_spaces);
	spin_unlock(&kvp_tenants_lock);
	return len;
}
