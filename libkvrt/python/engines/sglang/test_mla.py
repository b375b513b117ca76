# SPDX-License-Identifier: MIT
"""kvrt.sglang.KvpoolStorage with SGLang's MLA host pool (MLATokenToKVPoolHost), on the CPU.

The pool is SGLang's own, built from an MLABufferInfo over CPU tensors (the
device pool's per-layer latent buffers) with pin_memory=False.  Pages are
checked through views of its kv_buffer written here from SGLang's documented
MLA shapes, independent of the backend's stride arithmetic.
"""
import unittest

import torch

import kvrt
from sglang.srt.mem_cache.device_pool_info import MLABufferInfo
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost
from test_storage import PAGE, Case, config, host_pool, indices, keys

MLA_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_unified")


def mla_pool(layout="layer_first", layers=2, lora=16, rope=8, dtype=torch.bfloat16,
             page=PAGE, device_tokens=32, cls=MLATokenToKVPoolHost):
    """SGLang's MLA host pool on CPU tensors (device stand-in: CPU latent rows)."""
    row = lora + rope
    bufs = tuple(torch.zeros(device_tokens + page, 1, row, dtype=dtype)
                 for _ in range(layers))
    info = MLABufferInfo(
        buffers=bufs, data_ptrs=torch.tensor([b.data_ptr() for b in bufs], dtype=torch.uint64),
        layer_indices=tuple(range(layers)), device_layer_num=layers, page_size=page,
        kv_lora_rank=lora, qk_rope_head_dim=rope, kv_cache_dim=row, dtype=dtype,
        device=torch.device("cpu"))
    return cls(info, host_to_device_ratio=2.0, host_size=0, page_size=page, layout=layout,
               pin_memory=False, device="cpu", device_capacity_tokens=device_tokens,
               start_layer=0, end_layer=layers - 1, target_layer_num=layers)


def latent(host, page):
    """Page ``page`` of an MLA host pool as (layers, tokens, row), a view."""
    b, ps = host.kv_buffer, host.page_size
    t0 = page * ps
    if host.layout == "layer_first":          # [layer][token][1][row]
        return b[:, t0:t0 + ps, 0]
    if host.layout == "page_first":           # [token][layer][1][row]
        return b[t0:t0 + ps, :, 0].permute(1, 0, 2)
    if host.layout == "page_first_direct":    # [page][layer][slot][1][row]
        return b[page, :, :, 0]
    if host.layout == "page_unified":         # [page][layer][slot][row]
        return b[page]
    raise AssertionError(host.layout)


def latent_bytes(host, page):
    return latent(host, page).contiguous().flatten().view(torch.uint8).clone()


def fill_latent(host, page, seed):
    view = latent(host, page)
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (view.numel() * view.element_size(),), dtype=torch.uint8,
                        generator=g)
    view.copy_(raw.view(host.dtype).reshape(view.shape))
    return raw


def mla_config(tp_rank=0, tp_size=2, **extra):
    cfg = config(tp_rank=tp_rank, tp_size=tp_size, **extra)
    cfg.is_mla_model = True
    return cfg


class MLACase(Case):
    def mla(self, host, tp_rank=0, tp_size=2, **extra):
        extra.setdefault("kvpool_tenant", self.tenant)
        extra.setdefault("kvpool_quota_bytes", 1 << 20)
        return self.storage(host, cfg=mla_config(tp_rank, tp_size, **extra))


class TestTwoRanks(MLACase):
    def test_rank0_writes_rank1_reads(self):
        for layout in MLA_LAYOUTS:
            with self.subTest(layout=layout):
                self.tenant += "-" + layout
                h0, h1 = mla_pool(layout), mla_pool(layout)
                r0, r1 = self.mla(h0, tp_rank=0), self.mla(h1, tp_rank=1)
                self.assertEqual(r0.space_name, r1.space_name)
                self.assertTrue(r0.is_writer)
                self.assertFalse(r1.is_writer)
                ks = keys(3, seed=11)
                # rank 1 holds other bytes under the same keys: it must not store them
                for p in range(3):
                    fill_latent(h1, p, 900 + p)
                before = r1.space_stats().inserts
                self.assertEqual(r1.batch_set_v1(ks, indices(h1, range(3))), [True] * 3)
                self.assertEqual(r1.space_stats().inserts, before)
                self.assertEqual(r1.batch_exists(ks), 0)
                # rank 0 stores; rank 1 finds and loads its pages byte for byte
                want = [fill_latent(h0, p, 100 + p) for p in range(3)]
                self.assertEqual(r0.batch_set_v1(ks, indices(h0, range(3))), [True] * 3)
                self.assertEqual(r0.space_stats().inserts, before + 3)
                self.assertEqual(r1.batch_exists(ks), 3)
                self.assertEqual(r1.batch_get_v1(ks, indices(h1, [5, 6, 7])), [True] * 3)
                for p, w in zip((5, 6, 7), want):
                    self.assertTrue(torch.equal(latent_bytes(h1, p), w), (layout, p))
                # the rank-1 pages next to them are untouched
                self.assertFalse(torch.equal(latent_bytes(h1, 4), want[0]))

    def test_a_non_writer_still_checks_its_arguments(self):
        h1 = mla_pool()
        r1 = self.mla(h1, tp_rank=1)
        with self.assertRaises(ValueError):
            r1.batch_set_v1(keys(2), indices(h1, [0]))
        with self.assertRaises(ValueError):
            r1.batch_set_v1(["zz"], indices(h1, [0]))

    def test_single_page_forms_on_both_ranks(self):
        h0, h1 = mla_pool("page_first"), mla_pool("page_first")
        r0, r1 = self.mla(h0, tp_rank=0), self.mla(h1, tp_rank=1)
        k = keys(1, seed=12)[0]
        before = r0.space_stats().inserts
        self.assertTrue(r1.set(k, h1.get_data_page(0, flat=True).clone()))
        self.assertEqual(r0.space_stats().inserts, before)
        want = fill_latent(h0, 2, 12)
        self.assertTrue(r0.set(k, h0.get_data_page(2 * PAGE, flat=True).clone()))
        page = r1.get(k)
        self.assertIsNotNone(page)
        h1.set_from_flat_data_page(3 * PAGE, page)
        self.assertTrue(torch.equal(latent_bytes(h1, 3), want))

    def test_the_space_has_no_tp_rank_or_size(self):
        names = {self.mla(mla_pool(), tp_rank=r, tp_size=s).space_name
                 for r, s in ((0, 1), (0, 2), (1, 2), (3, 4))}
        self.assertEqual(len(names), 1)

    def test_writer_follows_sglang(self):
        for rank, size in ((0, 1), (0, 2), (1, 2), (3, 4)):
            st = self.mla(mla_pool(), tp_rank=rank, tp_size=size)
            self.assertEqual(st.is_writer, mla_config(rank, size).is_storage_writer)
            self.assertEqual(st.is_writer, rank == 0)
        # MHA: every rank writes its own heads
        self.assertTrue(self.storage(host_pool(), cfg=config(tp_rank=1, tp_size=2,
                                                             kvpool_tenant=self.tenant)
                                     ).is_writer)


class TestMLAGeometry(MLACase):
    def test_mha_and_mla_of_one_model_never_share(self):
        # same model path, tenant and page size; even the bytes per page agree
        # (MHA 2 x 1 head x 12 = MLA row 24), only the attention kind differs
        mha = self.storage(host_pool(heads=1, head_dim=12))
        mla = self.mla(mla_pool(lora=16, rope=8), tp_size=1)
        self.assertEqual(mha.mem_pool_host.get_size_per_token(),
                         mla.mem_pool_host.get_size_per_token())
        self.assertNotEqual(mha.space_name, mla.space_name)
        ks = keys(1, seed=13)
        mla.batch_set_v1(ks, indices(mla.mem_pool_host, [0]))
        self.assertEqual(mha.batch_exists(ks), 0)
        mha.batch_set_v1(keys(1, seed=14), indices(mha.mem_pool_host, [0]))
        self.assertEqual(mla.batch_exists(keys(1, seed=14)), 0)

    def test_mla_geometries_never_meet(self):
        base = self.mla(mla_pool())
        others = [self.mla(mla_pool(lora=32)), self.mla(mla_pool(rope=16)),
                  self.mla(mla_pool(lora=8, rope=16)),  # same row, other split
                  self.mla(mla_pool(layers=3)), self.mla(mla_pool(dtype=torch.float16)),
                  self.mla(mla_pool(page=8))]
        names = {base.space_name} | {o.space_name for o in others}
        self.assertEqual(len(names), 1 + len(others))

    def test_latent_row_mismatch_in_an_existing_space(self):
        # DeepSeek's row (512 + 64) against a narrower one under the same name.
        # Blocks are page-rounded: the check sees rows that change the block size.
        host = mla_pool(lora=512, rope=64)
        st = self.mla(host)
        name = st.space_name
        st.close()
        keeper = self.storage(host_pool(), kvpool_tenant=self.tenant + "k")._pool
        try:
            keeper.destroy_space(name)
        except kvrt.NotFoundError:
            pass
        narrow = mla_pool(lora=256, rope=64).get_size_per_token() * PAGE
        block = -(-narrow // 4096) * 4096
        holder = keeper.create_space(name, block_bytes=block, quota_bytes=4 * block)
        self.addCleanup(holder.close)
        with self.assertRaises(ValueError) as cm:
            self.mla(host)
        msg = str(cm.exception)
        self.assertIn(f"holds {block}-byte blocks", msg)
        self.assertIn("576-element latent rows) need 12288", msg)
        self.assertIn("kvpool_tenant", msg)
        self.assertEqual(holder.info().block_bytes, block)

    def test_config_and_pool_must_agree(self):
        st = self.opened(config(kvpool_tenant=self.tenant))  # is_mla_model False
        msg = self.refusal(st, mla_pool())
        self.assertIn("is_mla_model is False", msg)
        st2 = self.opened(mla_config(kvpool_tenant=self.tenant))
        msg = self.refusal(st2, host_pool())
        self.assertIn("is MHA", msg)

    def test_mla_host_pool_with_bytes_outside_kv_buffer(self):
        # sized as a pool with indexer rows (DSA) beside the latent rows
        class IndexedHost(MLATokenToKVPoolHost):
            def get_size_per_token(self):
                return super().get_size_per_token() + 4 * self.layer_num

        st = self.opened(mla_config(kvpool_tenant=self.tenant))
        msg = self.refusal(st, mla_pool(cls=IndexedHost))
        self.assertIn("IndexedHost: 104 bytes per token, kv_buffer holds 96", msg)
        self.assertIn("MLATokenToKVPoolHost's latent rows alone", msg)

    def test_allocator_only_pool_is_refused(self):
        host = mla_pool()
        host.kv_buffer = None  # as SGLang's dummy (allocator-only) MLA pool has it
        st = self.opened(mla_config(kvpool_tenant=self.tenant))
        msg = self.refusal(st, host)
        self.assertIn("no kv_buffer", msg)

    def test_odd_latent_row_bytes(self):
        st = self.opened(mla_config(kvpool_tenant=self.tenant))
        msg = self.refusal(st, mla_pool(lora=16, rope=7))
        self.assertIn("not a multiple of 4", msg)


if __name__ == "__main__":
    unittest.main()
