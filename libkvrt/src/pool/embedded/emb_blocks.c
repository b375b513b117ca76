// SPDX-License-Identifier: MIT
/*
 * emb_blocks.c: the per-block side state the embedded prefix cache and
 * residency keep beside kvcore (es->bx: records and watchers per block),
 * apart from emb_space.c so that residency and the prefix cache need not
 * call into the space code, nor it into them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pool/embedded/embedded.h"

/* bx[] covers ids below n. */
int emb_bx_cover(struct emb_space *es, uint64_t n)
{
	struct emb_blk *bx;
	uint64_t cap;

	if (n <= es->nbx)
		return 0;
	cap = es->nbx * 2 > n ? es->nbx * 2 : n;
	if (cap < 64)
		cap = 64;
	if (cap > es->core.nr_blocks)
		cap = es->core.nr_blocks;
	bx = realloc(es->bx, cap * sizeof(*bx));
	if (!bx)
		return -ENOMEM;
	memset(bx + es->nbx, 0, (cap - es->nbx) * sizeof(*bx));
	es->bx = bx;
	es->nbx = cap;
	return 0;
}

/* The block became free or was evicted: its records and watchers go. */
void emb_blk_forget(struct emb_space *es, uint32_t id)
{
	if (id < es->nbx) {
		es->bx[id].nrec = 0;
		es->bx[id].nwatch = 0;
	}
}
