// SPDX-License-Identifier: MIT
/*
 * gpu_register.c: host memory registered with the driver
 * (cuMemHostRegister), so that copies and kernels reach it: a pool space
 * (kvrt_gpu_register_space, extended as the space's blocks are backed) or
 * any page-aligned range (kvrt_gpu_register_host).  A range is registered
 * in pieces of at most GPU_REG_PIECE_MAX, cut on block boundaries
 * (gpu_register.h).  The list is kvrt_gpu.lock's.
 */
#include <errno.h>
#include <stdlib.h>

#include "gpu_internal.h"
#include "gpu_register.h"

static void reg_free(struct kvrt_gpu *g, struct gpu_reg *r)
{
	uint64_t off = 0;
	uint32_t i;

	for (i = 0; i < r->num_pieces; i++) {
		g->cu.MemHostUnregister(r->addr + off);
		off += r->piece_bytes[i];
	}
	free(r->piece_bytes);
	free(r);
}

/* With the context pushed. */
void gpu_reg_free_all(struct kvrt_gpu *g)
{
	struct gpu_reg *r;

	while ((r = g->regs)) {
		g->regs = r->next;
		reg_free(g, r);
	}
}

/* Register [r->addr + r->bytes, r->addr + bytes) in block-aligned pieces. */
static int reg_extend(struct kvrt_gpu *g, struct gpu_reg *r, uint64_t bytes, uint64_t unit)
{
	uint32_t n = gpu_reg_pieces(bytes - r->bytes, unit, GPU_REG_PIECE_MAX, NULL), i;
	uint64_t *sizes;
	int ret = 0;

	if (!n)
		return 0;
	if (r->num_pieces + n > r->cap_pieces) {
		sizes = realloc(r->piece_bytes, (r->num_pieces + n) * sizeof(*sizes));
		if (!sizes)
			return -ENOMEM;
		r->piece_bytes = sizes;
		r->cap_pieces = r->num_pieces + n;
	}
	gpu_reg_pieces(bytes - r->bytes, unit, GPU_REG_PIECE_MAX, r->piece_bytes + r->num_pieces);
	for (i = 0; i < n; i++) {
		uint64_t len = r->piece_bytes[r->num_pieces];

		ret = gpu_check(g, g->cu.MemHostRegister(r->addr + r->bytes, len,
							 KVRT_CU_MEMHOSTREGISTER_PORTABLE |
							 KVRT_CU_MEMHOSTREGISTER_DEVICEMAP),
				"cuMemHostRegister");
		if (ret)
			break;
		r->bytes += len;
		r->num_pieces++;
	}
	return ret;
}

static struct gpu_reg *reg_find(struct kvrt_gpu *g, const void *addr,
				const struct kvrt_space *space)
{
	struct gpu_reg *r;

	for (r = g->regs; r; r = r->next)
		if ((space && r->space == space) || (!space && r->addr == addr && !r->space))
			return r;
	return NULL;
}

static int reg_add(struct kvrt_gpu *g, struct kvrt_space *space, void *addr, uint64_t bytes,
		   uint64_t unit)
{
	struct gpu_reg *r;
	bool fresh = false;
	int ret;

	pthread_mutex_lock(&g->lock);
	r = reg_find(g, addr, space);
	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r) {
			pthread_mutex_unlock(&g->lock);
			return -ENOMEM;
		}
		r->space = space;
		r->addr = addr;
		fresh = true;
	}
	ret = gpu_enter(g);
	if (!ret) {
		if (bytes > r->bytes)
			ret = reg_extend(g, r, bytes, unit);
		gpu_leave(g);
	}
	/* A fresh entry keeps what was registered before a failure, so that
	 * unregister (or close) undoes it; a space's entry stays even with no
	 * pages yet, so that copies can extend it as blocks are backed. */
	if (fresh) {
		if (r->num_pieces || (space && !ret)) {
			r->next = g->regs;
			g->regs = r;
		} else {
			free(r->piece_bytes);
			free(r);
		}
	}
	pthread_mutex_unlock(&g->lock);
	return ret;
}

static int reg_del(struct kvrt_gpu *g, const void *addr, const struct kvrt_space *space)
{
	struct gpu_reg **pp, *r;
	int ret;

	pthread_mutex_lock(&g->lock);
	for (pp = &g->regs; (r = *pp); pp = &r->next)
		if ((space && r->space == space) || (!space && r->addr == addr && !r->space))
			break;
	if (!r) {
		pthread_mutex_unlock(&g->lock);
		return -ENOENT;
	}
	*pp = r->next;
	ret = gpu_enter(g);
	if (!ret) {
		reg_free(g, r);
		gpu_leave(g);
	} else {
		r->next = g->regs;
		g->regs = r;
	}
	pthread_mutex_unlock(&g->lock);
	return ret;
}

int kvrt_gpu_register_space(struct kvrt_gpu *g, struct kvrt_space *space)
{
	struct kvrt_space_info si;
	int ret;

	if (!g || !space)
		return -EINVAL;
	ret = kvrt_space_info(space, &si);
	if (ret)
		return ret;
	/*
	 * Only backed blocks have pages; the rest would fault.  What is backed
	 * is what the copy check (kv/bounds.c) lets a copy touch: one helper.
	 */
	return reg_add(g, space, kvrt_space_base(space), kvrt_space_backed(space, true),
		       si.block_bytes);
}

int kvrt_gpu_unregister_space(struct kvrt_gpu *g, struct kvrt_space *space)
{
	if (!g || !space)
		return -EINVAL;
	return reg_del(g, NULL, space);
}

int kvrt_gpu_register_host(struct kvrt_gpu *g, void *addr, size_t bytes)
{
	uint64_t page;

	if (!g || !addr || !bytes)
		return -EINVAL;
	page = g->k->page_size ? g->k->page_size : 4096;
	if ((uintptr_t)addr % page || bytes % page)
		return -EINVAL;
	return reg_add(g, NULL, addr, bytes, page);
}

int kvrt_gpu_unregister_host(struct kvrt_gpu *g, void *addr)
{
	if (!g || !addr)
		return -EINVAL;
	return reg_del(g, addr, NULL);
}

/*
 * Blocks of a registered space that were backed after its registration
 * are registered before a copy touches them (what kvrt_gpu_register_space
 * does when called again): the copy kernel reaching unregistered memory
 * would fault and end the context.  end: one past the last byte the runs
 * touch on this side.  -EFAULT: a block the space has no pages for.
 */
int gpu_reg_cover(struct kvrt_gpu *g, const void *base, uint64_t end)
{
	struct kvrt_space *space = NULL;
	struct gpu_reg *r;
	uint64_t have = 0;
	int ret;

	pthread_mutex_lock(&g->lock);
	for (r = g->regs; r; r = r->next)
		if (r->space && r->addr == (const char *)base) {
			space = r->space;
			have = r->bytes;
		}
	pthread_mutex_unlock(&g->lock);
	if (!space || end <= (uint64_t)(uintptr_t)base + have)
		return 0;
	ret = kvrt_gpu_register_space(g, space);
	if (ret)
		return ret;
	pthread_mutex_lock(&g->lock);
	r = reg_find(g, NULL, space);
	have = r ? r->bytes : 0;
	pthread_mutex_unlock(&g->lock);
	return end <= (uint64_t)(uintptr_t)base + have ? 0 : -EFAULT;
}
