// SPDX-License-Identifier: GPL-2.0
/*
 * kvpool: /dev/kvpool, a host-wide pool of pinned pages handed out as
 * KV-cache blocks.  This file holds the module glue and the ioctl
 * dispatcher.  Every ioctl validates flags, reserved fields and counts
 * before anything is allocated: here, except PUBLISH, LOOKUP and
 * SPACE_STATS (prefix.c) and RESIDENCY (residency.c), which check their own
 * arguments where they are used.
 */
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "kvpool_internal.h"

static unsigned int pool_mb_per_node = 64;
module_param(pool_mb_per_node, uint, 0444);
MODULE_PARM_DESC(pool_mb_per_node, "MiB of pinned pages reserved on each NUMA node at load");

#ifdef CONFIG_FAULT_INJECTION
/*
 * For selftests/kvpool/fault_inject.c on fault-injection kernels: fail the
 * Nth fault point counted from the start of kvp_init, as fail-nth does
 * from the start of a syscall.  The module loader's own points before
 * kvp_init are the kernel's code, and sweeping them cost most of the
 * sweep's time.  0 (the default): nothing.
 */
static unsigned int fail_nth_at_init;
module_param(fail_nth_at_init, uint, 0);
MODULE_PARM_DESC(fail_nth_at_init, "test only: fail the Nth fault point of the module's init");
#endif

static long kvp_ioctl_info(void __user *uarg)
{
	struct kvpool_info info;
	u64 held;
	int nid;

	if (copy_from_user(&info, uarg, sizeof(info)))
		return -EFAULT;
	/* flags, reserved and (API 4) every out field: all of it is 0. */
	if (!kvp_zero(&info, sizeof(info)))
		return -EINVAL;
	info.api_version = KVPOOL_API_VERSION;
	info.features = KVPOOL_FEATURES;
	info.page_size = PAGE_SIZE;
	info.chunk_size = KVP_CHUNK_BYTES;
	info.nr_nodes = kvp_pool.nr_nodes;
	info.max_batch = KVPOOL_MAX_BATCH;
	for_each_node_mask(nid, kvp_pool.pool_nodes)
		info.node_mask |= 1ULL << nid;
	kvp_pool_totals(&info.pool_bytes, &info.free_bytes, &held);
	if (copy_to_user(uarg, &info, sizeof(info)))
		return -EFAULT;
	return 0;
}

static long kvp_ioctl_space_open(struct kvp_client *client, void __user *uarg)
{
	struct kvpool_space_open args;
	long ret;

	if (copy_from_user(&args, uarg, sizeof(args)))
		return -EFAULT;
	ret = kvc_space_open_shape(args.flags, args.expect_uid,
				   args.mode || args.quota_bytes || args.node_mask ||
				   args.numa_policy);
	if (ret)
		return ret;
	if (!kvp_zero(args.reserved, sizeof(args.reserved)))
		return -EINVAL;
	/* API 4: out fields are not inputs. */
	if (args.space_id || args.uid || args.gid || args.nr_blocks || args.map_bytes ||
	    args.created)
		return -EINVAL;
	ret = kvp_space_open(client, &args);
	if (ret)
		return ret;
	/* The fd has joined; a failed copy-out leaves it joined, as dup'd fds would. */
	if (copy_to_user(uarg, &args, sizeof(args)))
		return -EFAULT;
	return 0;
}

static long kvp_blocks_args(void __user *uarg, struct kvpool_blocks *args)
{
	if (copy_from_user(args, uarg, sizeof(*args)))
		return -EFAULT;
	if (args->flags || !kvp_zero(args->reserved, sizeof(args->reserved)) || !args->count)
		return -EINVAL;
	if (args->count > KVPOOL_MAX_BATCH)
		return -E2BIG;
	return 0;
}

static long kvp_ioctl_blocks(struct kvp_client *client, unsigned int cmd, void __user *uarg)
{
	struct kvpool_blocks args;
	long ret = kvp_blocks_args(uarg, &args);

	if (ret)
		return ret;
	if (cmd == KVPOOL_IOC_ALLOC)
		return kvp_ioctl_alloc(client, &args);
	if (cmd == KVPOOL_IOC_RELEASE)
		return kvp_ioctl_release(client, &args);
	return kvp_ioctl_free(client, &args);
}

static long kvp_ioctl_space_destroy(struct file *file, void __user *uarg)
{
	struct kvpool_space_destroy args;

	if (copy_from_user(&args, uarg, sizeof(args)))
		return -EFAULT;
	if (args.flags || args.pad || !kvp_zero(args.reserved, sizeof(args.reserved)))
		return -EINVAL;
	return kvp_space_destroy(args.name, file);
}

static long kvp_ioctl_space_info_user(struct kvp_client *client, void __user *uarg)
{
	struct kvpool_space_info info;
	long ret;

	if (copy_from_user(&info, uarg, sizeof(info)))
		return -EFAULT;
	/* flags, reserved and (API 4) every out field: all of it is 0. */
	if (!kvp_zero(&info, sizeof(info)))
		return -EINVAL;
	ret = kvp_ioctl_space_info(client, &info);
	if (ret)
		return ret;
	if (copy_to_user(uarg, &info, sizeof(info)))
		return -EFAULT;
	return 0;
}

/* Commands that change state: they need an fd opened for writing. */
static bool kvp_ioctl_mutates(unsigned int cmd)
{
	switch (cmd) {
	case KVPOOL_IOC_SPACE_OPEN:
	case KVPOOL_IOC_ALLOC:
	case KVPOOL_IOC_FREE:
	case KVPOOL_IOC_RELEASE:
	case KVPOOL_IOC_PUBLISH:
	case KVPOOL_IOC_LOOKUP:
	case KVPOOL_IOC_SPACE_DESTROY:
	case KVPOOL_IOC_RESIDENCY:
		return true;
	}
	return false;
}

static long kvp_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct kvp_client *client = file->private_data;
	void __user *uarg = (void __user *)arg;

	/*
	 * As for any file, the rights come from how it was opened: FMODE_WRITE
	 * here, the opener's credentials (file->f_cred) in space.c.
	 */
	if (kvp_ioctl_mutates(cmd) && !(file->f_mode & FMODE_WRITE))
		return -EBADF;
	switch (cmd) {
	case KVPOOL_IOC_INFO:
		return kvp_ioctl_info(uarg);
	case KVPOOL_IOC_SPACE_OPEN:
		return kvp_ioctl_space_open(client, uarg);
	case KVPOOL_IOC_ALLOC:
	case KVPOOL_IOC_FREE:
	case KVPOOL_IOC_RELEASE:
		return kvp_ioctl_blocks(client, cmd, uarg);
	case KVPOOL_IOC_SPACE_INFO:
		return kvp_ioctl_space_info_user(client, uarg);
	case KVPOOL_IOC_PUBLISH:
		return kvp_ioctl_publish(client, uarg);
	case KVPOOL_IOC_LOOKUP:
		return kvp_ioctl_lookup(client, uarg);
	case KVPOOL_IOC_SPACE_DESTROY:
		return kvp_ioctl_space_destroy(file, uarg);
	case KVPOOL_IOC_RESIDENCY:
		return kvp_ioctl_residency(client, uarg);
	case KVPOOL_IOC_SPACE_STATS:
		return kvp_ioctl_space_stats(client, uarg);
	}
	return -ENOTTY;
}

static int kvp_open(struct inode *inode, struct file *file)
{
	/* Everything an fd makes the module allocate is charged to its opener. */
	struct kvp_client *client = kzalloc(sizeof(*client), GFP_KERNEL_ACCOUNT);

	if (!client)
		return -ENOMEM;
	kvp_client_init(client, file);
	file->private_data = client;
	return 0;
}

static ssize_t kvp_read(struct file *file, char __user *buf, size_t len, loff_t *ppos)
{
	return kvp_events_read(file->private_data, buf, len, file->f_flags & O_NONBLOCK);
}

static __poll_t kvp_poll(struct file *file, poll_table *wait)
{
	return kvp_events_poll(file->private_data, file, wait);
}

static int kvp_release(struct inode *inode, struct file *file)
{
	struct kvp_client *client = file->private_data;

	kvp_client_release(client);
	kfree(client);
	return 0;
}

static int kvp_mmap(struct file *file, struct vm_area_struct *vma)
{
	return kvp_space_mmap(file->private_data, vma);
}

static unsigned long kvp_get_unmapped_area(struct file *file, unsigned long addr,
					   unsigned long len, unsigned long pgoff,
					   unsigned long flags)
{
	return kvp_space_get_unmapped_area(file->private_data, file, addr, len, pgoff, flags);
}

static const struct file_operations kvp_fops = {
	.owner = THIS_MODULE,
	.open = kvp_open,
	.release = kvp_release,
	.unlocked_ioctl = kvp_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = kvp_mmap,
	.get_unmapped_area = kvp_get_unmapped_area,
	.read = kvp_read,
	.poll = kvp_poll,
	.llseek = noop_llseek,
};

static struct miscdevice kvp_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "kvpool",
	.fops = &kvp_fops,
	.mode = 0660,
};

static int __init kvp_init(void)
{
	int ret;

#ifdef CONFIG_FAULT_INJECTION
	if (fail_nth_at_init)
		WRITE_ONCE(current->fail_nth, fail_nth_at_init);
#endif
	ret = kvp_spaces_init();
	if (ret)
		return ret;
	ret = kvp_pool_init((unsigned long)pool_mb_per_node << 20);
	if (ret)
		goto out_spaces_fini;
	kvp_misc.groups = kvp_dev_groups;
	ret = misc_register(&kvp_misc);
	if (ret)
		goto out_pool_exit;
	ret = kvp_sysfs_nodes_init(kvp_misc.this_device);
	if (ret)
		goto out_misc_deregister;
	ret = kvp_sysfs_spaces_init(kvp_misc.this_device);
	if (ret)
		goto out_nodes_exit;
	ret = kvp_reclaim_init();
	if (ret)
		goto out_spaces_exit;
	kvp_debugfs_init();
	pr_info("kvpool: %u MiB reserved on each of %u nodes\n", pool_mb_per_node,
		kvp_pool.nr_nodes);
	return 0;

out_spaces_exit:
	kvp_sysfs_spaces_exit();
out_nodes_exit:
	kvp_sysfs_nodes_exit();
out_misc_deregister:
	misc_deregister(&kvp_misc);
out_pool_exit:
	kvp_pool_exit();
out_spaces_fini:
	kvp_spaces_exit();
	return ret;
}

static void __exit kvp_exit(void)
{
	kvp_debugfs_exit();
	kvp_reclaim_exit();
	/* No fd is open any more: persistent spaces go now. */
	kvp_spaces_exit();
	kvp_sysfs_spaces_exit();
	kvp_sysfs_nodes_exit();
	misc_deregister(&kvp_misc);
	kvp_pool_exit();
	kvp_tenants_exit();
}

module_init(kvp_init);
module_exit(kvp_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Host-wide pinned KV-cache block pool");
