// SPDX-License-Identifier: GPL-2.0
/*
 * Spaces: trust domains with a block geometry, a quota, a NUMA policy and
 * file-like permissions.  A space's range is backed lazily by pool chunks
 * (backing.c); block i lives at offset i * block_bytes of the range and of
 * its mapping (blocks.c).
 */
#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/fs.h>
#include <linux/highmem.h>
#include <linux/mount.h>
#include <linux/pagemap.h>
#include <linux/rhashtable.h>
#include <linux/pseudo_fs.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/topology.h>
#include <linux/uaccess.h>
#include <linux/wait_bit.h>

#include "compat.h"
#include "kvpool_internal.h"

/* kvp_spaces, kvp_nr_spaces, ids and each nr_clients: see DOC: locking */
DEFINE_MUTEX(kvp_spaces_lock);
LIST_HEAD(kvp_spaces);
unsigned int kvp_nr_spaces;
struct kvc_space_stats kvp_dead_stats;
/* The space id counter: ids are its low 32 bits; debugfs wrap_ids moves it. */
static u64 kvp_space_serial;
/*
 * Each space's scrub key (kvp_space.serial): counted up once per space and
 * set by nothing else, so no two spaces of the module's life share one and
 * a chunk is zeroed whenever it reaches a space other than its last
 * (kvp_space_place()).  Not the id counter, which a test hook moves.
 */
static u64 kvp_scrub_key;

/*
 * Live names -> spaces (kvp_spaces_lock), so that opening by name costs the
 * same with 10 spaces or 100,000.  Keys are the whole zero-padded name
 * array; rhashtable seeds its hash at random and rehashes long chains, so
 * tenants cannot pick names that collide.
 */
static struct rhashtable kvp_space_names;
static const struct rhashtable_params kvp_space_names_params = {
	.key_len = KVPOOL_NAME_MAX,
	.key_offset = offsetof(struct kvp_space, name),
	.head_offset = offsetof(struct kvp_space, name_node),
	.automatic_shrinking = true,
};

/*
 * Each space's mappings live in an address_space of their own: the
 * i_mapping of an inode on this internal filesystem, as DRM does for a
 * device.  Every fd that joins points f_mapping at it, so a zap of the
 * space's range (reclaim) walks the space's mappings alone, under an
 * i_mmap_rwsem that no other space's mmap, munmap or fork takes.  The
 * device inode's own mapping, which every fd starts with, maps nothing.
 *
 * The filesystem has no owner: the mount's reference on its owner would
 * pin the module for as long as it is mounted, which is from load to
 * unload.  kvp_spaces_exit() puts every inode and unmounts before the
 * module goes, and init_pseudo() leaves only libfs's operations behind.
 */
#define KVPOOL_FS_MAGIC 0x6b76706c	/* "kvpl" */

static struct vfsmount *kvp_mnt;

static int kvp_fs_init_fs_context(struct fs_context *fc)
{
	return init_pseudo(fc, KVPOOL_FS_MAGIC) ? 0 : -ENOMEM;
}

static struct file_system_type kvp_fs_type = {
	.name = "kvpool",
	.init_fs_context = kvp_fs_init_fs_context,
	.kill_sb = kill_anon_super,
};

int kvp_spaces_init(void)
{
	int ret = rhashtable_init(&kvp_space_names, &kvp_space_names_params);

	if (ret)
		return ret;
	kvp_mnt = kern_mount(&kvp_fs_type);
	if (IS_ERR(kvp_mnt)) {
		rhashtable_destroy(&kvp_space_names);
		return PTR_ERR(kvp_mnt);
	}
	return 0;
}

/*
 * 32-bit ids count up and, after 2^32 of them, wrap: from then on a new
 * id skips 0 and every id still in use, so that two live spaces (sysfs
 * space/ID) or two open fds of a space (block owners) never share one.
 */
static bool kvp_space_id_in_use(u32 id)
{
	struct kvp_space *space;

	lockdep_assert_held(&kvp_spaces_lock);
	list_for_each_entry(space, &kvp_spaces, link)
		if (space->id == id)
			return true;
	return false;
}

static u32 kvp_space_next_id(void)
{
	for (;;) {
		u32 id = lower_32_bits(++kvp_space_serial);

		if (id && (kvp_space_serial <= U32_MAX || !kvp_space_id_in_use(id)))
			return id;
	}
}

static bool kvp_owner_in_use(struct kvp_space *space, u32 owner)
{
	struct kvp_client *c;

	lockdep_assert_held(&space->lock);
	list_for_each_entry(c, &space->clients, link)
		if (c->owner == owner)
			return true;
	return false;
}

static u32 kvp_space_next_owner(struct kvp_space *space)
{
	for (;;) {
		u32 owner = space->next_owner++;

		if (!space->next_owner)
			space->owners_wrapped = true;
		if (owner != KVC_OWNER_NONE &&
		    (!space->owners_wrapped || !kvp_owner_in_use(space, owner)))
			return owner;
	}
}

const char *kvp_policy_name(u32 policy)
{
	switch (policy) {
	case KVPOOL_NUMA_PREFERRED:
		return "preferred";
	case KVPOOL_NUMA_BIND:
		return "bind";
	case KVPOOL_NUMA_INTERLEAVE:
		return "interleave";
	}
	return "unknown";
}

u64 kvp_pool_node_mask(void)
{
	u64 mask = 0;
	int nid;

	for_each_node_mask(nid, kvp_pool.pool_nodes)
		mask |= 1ULL << nid;
	return mask;
}

/* The uAPI's constants are kvrules' (kmod/core/kvrules.h), which checks them. */
static_assert(KVC_NAME_MAX == KVPOOL_NAME_MAX && KVC_MAX_SPACE_BYTES == KVPOOL_MAX_SPACE_BYTES &&
	      KVC_MAX_BLOCK_BYTES == KVPOOL_MAX_BLOCK_BYTES);
static_assert(KVC_OPEN_CREATE == KVPOOL_SPACE_CREATE && KVC_OPEN_EXCL == KVPOOL_SPACE_EXCL);
static_assert(KVC_OPEN_PERSIST == KVPOOL_SPACE_PERSIST);
static_assert(KVC_OPEN_FOREIGN == KVPOOL_SPACE_FOREIGN && KVC_OPEN_FLAGS == KVPOOL_SPACE_FLAGS);

/* Validate a create request before anything is allocated. */
static int kvp_space_args_valid(const struct kvpool_space_open *args)
{
	const struct kvc_space_create create = {
		.block_bytes = args->block_bytes,
		.quota_bytes = args->quota_bytes,
		.node_mask = args->node_mask,
		.mode = args->mode,
		.numa_policy = args->numa_policy,
	};

	return kvc_space_create_check(&create, PAGE_SIZE, kvp_pool_node_mask());
}

/*
 * in_group_p() for @cred rather than current's.  set_groups() keeps
 * group_info sorted; groups_search() does this, but is not exported.
 */
static bool kvp_cred_in_group(const struct cred *cred, kgid_t gid)
{
	const struct group_info *gi = cred->group_info;
	unsigned int left = 0, right;

	if (gid_eq(cred->fsgid, gid))
		return true;
	if (!gi)
		return false;
	right = gi->ngroups;
	while (left < right) {
		unsigned int mid = left + (right - left) / 2;

		if (gid_gt(gid, gi->gid[mid]))
			left = mid + 1;
		else if (gid_lt(gid, gi->gid[mid]))
			right = mid;
		else
			return true;
	}
	return false;
}

/*
 * The mode triplet for the fd's opener.  As for any file, the rights are
 * fixed at open (file->f_cred): a process that changes its ids later, or
 * gets the fd over a unix socket, acts as the opener.
 */
static enum kvc_mode_class kvp_space_class(const struct kvp_space *space, const struct file *file)
{
	const struct cred *cred = file->f_cred;

	if (uid_eq(cred->fsuid, space->uid))
		return KVC_CLASS_OWNER;
	if (kvp_cred_in_group(cred, space->gid))
		return KVC_CLASS_GROUP;
	return KVC_CLASS_OTHER;
}

/* Asked only when the mode bits deny, so that no audit record says otherwise. */
static bool kvp_opener_privileged(const void *file)
{
	return file_ns_capable(file, &init_user_ns, CAP_SYS_ADMIN);
}

/*
 * Names are host-wide, so anyone may take one first: a join lands only in
 * a space owned by the opener's fsuid, or by the uid it names with
 * KVPOOL_SPACE_FOREIGN (in the opener's user namespace).  No capability
 * overrides this; root is squattable too.
 */
static bool kvp_space_owner_accepted(const struct kvp_space *space,
				     const struct kvpool_space_open *args,
				     const struct cred *cred)
{
	kuid_t accepted = cred->fsuid;

	if (args->flags & KVPOOL_SPACE_FOREIGN)
		accepted = make_kuid(cred->user_ns, args->expect_uid);
	return uid_valid(accepted) && uid_eq(space->uid, accepted);
}

/* Unlinked (destroyed) spaces linger until their last fd but have no name. */
static struct kvp_space *kvp_space_find(const char *name)
{
	char key[KVPOOL_NAME_MAX];

	lockdep_assert_held(&kvp_spaces_lock);
	/* Bytes past the NUL come from the caller: the key is the padded name. */
	strscpy_pad(key, name, sizeof(key));
	return rhashtable_lookup_fast(&kvp_space_names, key, kvp_space_names_params);
}

/* Take the name away: the space lingers for its fds but cannot be found. */
static void kvp_space_unname(struct kvp_space *space)
{
	lockdep_assert_held(&kvp_spaces_lock);
	if (space->unlinked)
		return;
	space->unlinked = true;
	rhashtable_remove_fast(&kvp_space_names, &space->name_node, kvp_space_names_params);
}

/*
 * debugfs `wrap_ids` (root): move a counter to where 2^32 ids would have
 * taken it, so that tests reach the wrap.  serial: the space id counter,
 * forward only (-EINVAL backwards: ids below it may be live, and before
 * the wrap nothing checks for that); owner: a space's owner counter,
 * marked as having wrapped.
 */
int kvp_space_set_serial(u64 serial)
{
	int ret = 0;

	mutex_lock(&kvp_spaces_lock);
	if (serial < kvp_space_serial)
		ret = -EINVAL;
	else
		kvp_space_serial = serial;
	mutex_unlock(&kvp_spaces_lock);
	return ret;
}

int kvp_space_set_next_owner(const char *name, u32 next)
{
	struct kvp_space *space;

	mutex_lock(&kvp_spaces_lock);
	space = kvp_space_find(name);
	if (space) {
		mutex_lock(&space->lock);
		space->next_owner = next;
		space->owners_wrapped = true;
		mutex_unlock(&space->lock);
	}
	mutex_unlock(&kvp_spaces_lock);
	return space ? 0 : -ENOENT;
}

static const struct kvc_space_ops kvp_space_ops = {
	.grow = kvp_space_grow,
	.refill = kvp_space_refill,
	.evicted = kvp_space_evicted,
};

/*
 * The opener's fsuid/fsgid (@cred: file->f_cred) own the space; its tenant
 * is the fsuid too, or the owner of the opener's user namespace
 * (kvp_tenant_get()).
 */
static struct kvp_space *kvp_space_create(const struct kvpool_space_open *args,
					  const struct cred *cred)
{
	struct kvp_space *space;
	int ret;

	lockdep_assert_held(&kvp_spaces_lock);
	space = kzalloc(sizeof(*space), GFP_KERNEL_ACCOUNT);
	if (!space)
		return ERR_PTR(-ENOMEM);
	ret = kvc_space_init(&space->core, args->block_bytes,
			     div64_u64(args->quota_bytes, args->block_bytes),
			     &kvp_space_ops, space);
	if (ret)
		goto out_free_space;
	space->tenant = kvp_tenant_get(cred);
	if (IS_ERR(space->tenant)) {
		ret = PTR_ERR(space->tenant);
		goto out_free_space;
	}
	/* Charged to the creator's memory cgroup, as the space is. */
	space->inode = alloc_anon_inode(kvp_mnt->mnt_sb);
	if (IS_ERR(space->inode)) {
		ret = PTR_ERR(space->inode);
		goto out_put_tenant;
	}
	mutex_init(&space->lock);
	INIT_LIST_HEAD(&space->chunks);
	INIT_LIST_HEAD(&space->clients);
	xa_init_flags(&space->pages, XA_FLAGS_ACCOUNT);
	xa_init_flags(&space->residency, XA_FLAGS_ACCOUNT);
	xa_init_flags(&space->interest, XA_FLAGS_ACCOUNT);
	strscpy_pad(space->name, args->name, sizeof(space->name));
	ret = rhashtable_insert_fast(&kvp_space_names, &space->name_node, kvp_space_names_params);
	if (ret)
		goto out_put_inode;
	space->id = kvp_space_next_id();
	space->serial = ++kvp_scrub_key;
	space->uid = cred->fsuid;
	space->gid = cred->fsgid;
	space->mode = args->mode;
	space->numa_policy = args->numa_policy;
	space->node_mask = args->node_mask;
	space->persistent = !!(args->flags & KVPOOL_SPACE_PERSIST);
	space->next_owner = 1;
	list_add_tail(&space->link, &kvp_spaces);
	kvp_nr_spaces++;
	/* Without its sysfs directory the space still works; admins lose a view. */
	if (kvp_space_kobj_add(space))
		pr_warn_ratelimited("kvpool: no sysfs directory for space %u\n", space->id);
	return space;

out_put_inode:
	iput(space->inode);
out_put_tenant:
	kvp_tenant_put(space->tenant);
out_free_space:
	kfree(space);
	return ERR_PTR(ret);
}

/*
 * A space with no users left goes: under kvp_spaces_lock it loses its name
 * and is marked dying, which is all the global lock waits for; the caller
 * then calls kvp_space_destroy_now() without it.  The space stays listed
 * (it holds its id, and the debugfs check finds its chunks on its list)
 * until its chunks are back in the pool.
 */
static void kvp_space_unlist(struct kvp_space *space)
{
	lockdep_assert_held(&kvp_spaces_lock);
	kvp_space_unname(space);
	WRITE_ONCE(space->dying, true);
}

/*
 * Called after kvp_space_unlist(), without kvp_spaces_lock: nothing maps
 * or references the space.  Its last fd is closed, and every mapping held
 * a reference on its fd, so the inode's i_mmap tree is empty when it goes.
 */
static void kvp_space_destroy_now(struct kvp_space *space)
{
	/* No sysfs reader walks the chunk list from here. */
	kvp_space_kobj_del(space);
	/* A shrinker scan that picked the space is done with it. */
	wait_var_event(&space->reclaim_refs, !atomic_read(&space->reclaim_refs));
	kvp_space_return_chunks(space);

	mutex_lock(&kvp_spaces_lock);
	list_del(&space->link);
	kvp_nr_spaces--;
	/* Pool-wide counters must not go down when a space goes. */
	kvp_stats_add(&kvp_dead_stats, &space->core.stats);
	mutex_unlock(&kvp_spaces_lock);

	iput(space->inode);
	kvp_residency_destroy(space);
	xa_destroy(&space->pages);
	/* Every fd dropped its interests at close: nothing is left here. */
	WARN_ON_ONCE(!xa_empty(&space->interest));
	xa_destroy(&space->interest);
	kvc_space_fini(&space->core);
	kvp_tenant_put(space->tenant);
	mutex_destroy(&space->lock);
	kfree(space);
}

/* The owner as the opener's user namespace sees it, as expect_uid is read. */
static void kvp_space_fill_open(const struct kvp_space *space, struct kvpool_space_open *args,
				const struct cred *cred)
{
	struct user_namespace *ns = cred->user_ns;

	args->space_id = space->id;
	args->uid = from_kuid_munged(ns, space->uid);
	args->gid = from_kgid_munged(ns, space->gid);
	args->block_bytes = space->core.block_bytes;
	args->nr_blocks = space->core.nr_blocks;
	args->map_bytes = space->core.nr_blocks * space->core.block_bytes;
	/* API 4: a join reports the create fields the space has, quota in whole blocks. */
	args->quota_bytes = args->map_bytes;
	args->mode = space->mode;
	args->numa_policy = space->numa_policy;
	args->node_mask = space->node_mask;
}

void kvp_client_init(struct kvp_client *client, struct file *file)
{
	client->file = file;
	client->refs.limit = READ_ONCE(kvp_tun.refs_per_fd_max);
	INIT_LIST_HEAD(&client->link);
	xa_init_flags(&client->interest, XA_FLAGS_ACCOUNT);
	kvp_events_init(&client->events);
}

/* A space goes when nothing holds it: no fd, no pin, and not persistent unless unlinked. */
static bool kvp_space_unused(const struct kvp_space *space)
{
	lockdep_assert_held(&kvp_spaces_lock);
	return !space->nr_clients && !space->nr_pins && !space->dying &&
	       (!space->persistent || space->unlinked);
}

/*
 * A pin keeps a space listed while its holder waits for the space's lock
 * without kvp_spaces_lock: no global path waits on one space's lock.
 */
static void kvp_space_pin(struct kvp_space *space)
{
	lockdep_assert_held(&kvp_spaces_lock);
	space->nr_pins++;
}

/* Drop a pin; true when the space is unlisted and the caller must destroy it. */
static bool kvp_space_unpin_locked(struct kvp_space *space)
{
	lockdep_assert_held(&kvp_spaces_lock);
	space->nr_pins--;
	if (!kvp_space_unused(space))
		return false;
	kvp_space_unlist(space);
	return true;
}

static void kvp_space_unpin(struct kvp_space *space)
{
	bool dead;

	mutex_lock(&kvp_spaces_lock);
	dead = kvp_space_unpin_locked(space);
	mutex_unlock(&kvp_spaces_lock);
	if (dead)
		kvp_space_destroy_now(space);
}

/* Find or create the space under kvp_spaces_lock, and pin it. */
static struct kvp_space *kvp_space_open_pinned(struct kvpool_space_open *args,
					       const struct file *file)
{
	struct kvc_space_open_check check = { .flags = args->flags };
	struct kvp_space *space;
	int ret;

	lockdep_assert_held(&kvp_spaces_lock);
	space = kvp_space_find(args->name);
	if (space) {
		check.found = true;
		check.owner_accepted = kvp_space_owner_accepted(space, args, file->f_cred);
		check.want_block_bytes = args->block_bytes;
		check.block_bytes = space->core.block_bytes;
		check.mode = space->mode;
		check.class = kvp_space_class(space, file);
		check.privileged = kvp_opener_privileged;
		check.ctx = file;
	}
	ret = kvc_space_open_decide(&check);
	if (ret)
		return ERR_PTR(ret);
	if (space) {
		args->created = 0;
	} else {
		space = kvp_space_create(args, file->f_cred);
		if (IS_ERR(space))
			return space;
		args->created = 1;
	}
	kvp_space_pin(space);
	return space;
}

int kvp_space_open(struct kvp_client *client, struct kvpool_space_open *args)
{
	struct kvp_space *space;
	bool dead;
	int ret;

	if (!kvc_space_name_valid(args->name))
		return -EINVAL;
	/*
	 * API 4: create fields are checked whether the call will create or
	 * join, so a create-or-join never accepts bad ones by joining.
	 */
	if (args->flags & KVPOOL_SPACE_CREATE) {
		ret = kvp_space_args_valid(args);
		if (ret)
			return ret;
	}

	mutex_lock(&kvp_spaces_lock);
	if (client->space || client->joining) {
		mutex_unlock(&kvp_spaces_lock);
		return -EBUSY;
	}
	space = kvp_space_open_pinned(args, client->file);
	if (IS_ERR(space)) {
		mutex_unlock(&kvp_spaces_lock);
		return PTR_ERR(space);
	}
	client->joining = true;
	mutex_unlock(&kvp_spaces_lock);

	/* The space's lock is taken without the global one (see DOC: locking). */
	ret = mutex_lock_killable(&space->lock);
	if (!ret) {
		client->owner = kvp_space_next_owner(space);
		list_add_tail(&client->link, &space->clients);
		mutex_unlock(&space->lock);
	}

	mutex_lock(&kvp_spaces_lock);
	client->joining = false;
	if (!ret) {
		/* The pin becomes the fd's hold on the space. */
		space->nr_clients++;
		kvp_space_fill_open(space, args, client->file->f_cred);
		/*
		 * The fd's mappings go into the space's address_space.  Set
		 * once, before the space is published: no mapping of this fd
		 * exists yet (mmap needs the space), and an mmap that finds the
		 * space finds this f_mapping for its whole course
		 * (kvp_space_get_unmapped_area()).
		 */
		WRITE_ONCE(client->file->f_mapping, space->inode->i_mapping);
		/*
		 * Published last; pairs with the acquire in kvp_client_space(),
		 * so whoever sees the space also sees client->owner and
		 * f_mapping.
		 */
		smp_store_release(&client->space, space);
	}
	dead = kvp_space_unpin_locked(space);
	mutex_unlock(&kvp_spaces_lock);
	if (dead)
		kvp_space_destroy_now(space);
	return ret;
}

void kvp_client_release(struct kvp_client *client)
{
	struct kvp_space *space = client->space;
	u64 freed;

	if (!space) {
		kvp_events_fini(&client->events);
		return;
	}
	/* Invariant 4: owned blocks, references and records go with the fd. */
	mutex_lock(&space->lock);
	freed = kvc_release_owner(&space->core, client->owner);
	kvc_release_refs(&space->core, &client->refs);
	kvp_residency_drop_client(space, client);
	list_del_init(&client->link);
	kvp_interest_drop_client(space, client);
	mutex_unlock(&space->lock);
	atomic64_add(freed, &kvp_pool.frees);
	kvp_events_fini(&client->events);

	mutex_lock(&kvp_spaces_lock);
	space->nr_clients--;
	if (kvp_space_unused(space))
		kvp_space_unlist(space);
	else
		space = NULL;
	mutex_unlock(&kvp_spaces_lock);
	if (space)
		kvp_space_destroy_now(space);
}

struct kvp_space *kvp_client_space(struct kvp_client *client)
{
	/* Pairs with the release in kvp_space_open(). */
	return smp_load_acquire(&client->space);
}

/*
 * Unlink a space: the name is free at once, joined fds are told and keep
 * working, and the space goes with its last fd (now, when there is none).
 * @file is the fd asking: its opener must own the space or have
 * CAP_SYS_ADMIN.  NULL: root's write to sysfs destroy_space.
 */
int kvp_space_destroy(const char *name, const struct file *file)
{
	struct kvp_space *space;
	struct kvp_client *c;

	if (!kvc_space_name_valid(name))
		return -EINVAL;
	mutex_lock(&kvp_spaces_lock);
	space = kvp_space_find(name);
	if (!space) {
		mutex_unlock(&kvp_spaces_lock);
		return -ENOENT;
	}
	if (file && !uid_eq(file->f_cred->fsuid, space->uid) &&
	    !file_ns_capable(file, &init_user_ns, CAP_SYS_ADMIN)) {
		mutex_unlock(&kvp_spaces_lock);
		return -EPERM;
	}
	kvp_space_unname(space);
	kvp_space_pin(space);
	mutex_unlock(&kvp_spaces_lock);

	/* Done already; telling the fds waits for the space alone. */
	mutex_lock(&space->lock);
	list_for_each_entry(c, &space->clients, link)
		kvp_event_emit(&c->events, KVPOOL_EVENT_SPACE_DESTROYED, 0, 0, 0, NULL);
	mutex_unlock(&space->lock);
	kvp_space_unpin(space);
	return 0;
}

static int kvp_space_drop_cached_one(struct kvp_space *space)
{
	int ret = mutex_lock_killable(&space->lock);

	if (ret)
		return ret;
	kvc_evict(&space->core, space->core.nr_cached, KVC_EVICT_ADMIN);
	mutex_unlock(&space->lock);
	return 0;
}

/*
 * The first space after @space (NULL: the first of all) that is not being
 * torn down; a pinned space stays listed, so the walk resumes from it.
 */
static struct kvp_space *kvp_space_next_live(struct kvp_space *space)
{
	lockdep_assert_held(&kvp_spaces_lock);
	space = list_prepare_entry(space, &kvp_spaces, link);
	list_for_each_entry_continue(space, &kvp_spaces, link)
		if (!space->dying)
			return space;
	return NULL;
}

/*
 * Evict every cached block of the named space, or of all with "*" (unlinked
 * ones too).  Each space is pinned and worked on without kvp_spaces_lock;
 * the walk resumes from it, since a pinned space stays listed.
 */
int kvp_space_drop_cached(const char *name)
{
	struct kvp_space *space, *next;
	bool dead;
	int ret = 0;

	if (strcmp(name, "*")) {
		if (!kvc_space_name_valid(name))
			return -EINVAL;
		mutex_lock(&kvp_spaces_lock);
		space = kvp_space_find(name);
		if (space)
			kvp_space_pin(space);
		mutex_unlock(&kvp_spaces_lock);
		if (!space)
			return -ENOENT;
		ret = kvp_space_drop_cached_one(space);
		kvp_space_unpin(space);
		return ret;
	}

	mutex_lock(&kvp_spaces_lock);
	space = kvp_space_next_live(NULL);
	if (space)
		kvp_space_pin(space);
	while (space) {
		mutex_unlock(&kvp_spaces_lock);
		if (!ret)
			ret = kvp_space_drop_cached_one(space);
		mutex_lock(&kvp_spaces_lock);
		next = ret ? NULL : kvp_space_next_live(space);
		if (next)
			kvp_space_pin(next);
		dead = kvp_space_unpin_locked(space);
		if (dead) {
			mutex_unlock(&kvp_spaces_lock);
			kvp_space_destroy_now(space);
			mutex_lock(&kvp_spaces_lock);
		}
		space = next;
	}
	mutex_unlock(&kvp_spaces_lock);
	return ret;
}

/* Module unload: no fd is open, so only persistent or unlinked-idle spaces remain. */
void kvp_spaces_exit(void)
{
	struct kvp_space *space;

	mutex_lock(&kvp_spaces_lock);
	while ((space = list_first_entry_or_null(&kvp_spaces, struct kvp_space, link))) {
		kvp_space_unlist(space);
		mutex_unlock(&kvp_spaces_lock);
		kvp_space_destroy_now(space);
		mutex_lock(&kvp_spaces_lock);
	}
	mutex_unlock(&kvp_spaces_lock);
	/* Every space's inode is put: nothing is left on the filesystem. */
	kern_unmount(kvp_mnt);
	rhashtable_destroy(&kvp_space_names);
}
