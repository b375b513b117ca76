# SPDX-License-Identifier: MIT
"""Helpers for the vLLM tests: a real Scheduler with the kvpool spec, on CPU.

Nothing is fetched: the model is a config.json written into a temporary
folder, the tokenizer is skipped.  The worker side is kvrt.vllm's worker
over host tensors; its job completions go back to the scheduler the way
vLLM's worker connector reports them (OffloadingWorkerMetadata).
"""
from __future__ import annotations

import itertools
import json
import os
import tempfile
from typing import Any, Dict, List, Optional, Tuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")

import torch  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.config import (CacheConfig, DeviceConfig, KVTransferConfig, ModelConfig,  # noqa: E402
                         SchedulerConfig, VllmConfig)
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (  # noqa: E402
    OffloadingConnectorMetadata)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (  # noqa: E402
    OffloadingConnector)
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig,  # noqa: E402
                                        KVCacheGroupSpec, KVCacheTensor)
from vllm.v1.kv_offload.base import CanonicalKVCaches, CanonicalKVCacheRef, CanonicalKVCacheTensor  # noqa: E402,E501
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

BLOCK = 16  # tokens per block
LAYERS = 2
KV_HEADS = 2
HEAD_DIM = 16
DTYPE = torch.float16
PAGE = 2 * BLOCK * KV_HEADS * HEAD_DIM * 2  # K and V, f16: bytes per layer and block

_model_dirs: Dict[Tuple[int, int], str] = {}


def model_dir(layers: int = LAYERS, kv_heads: int = KV_HEADS) -> str:
    """A folder with a tiny Llama config.json (no weights, no tokenizer)."""
    key = (layers, kv_heads)
    if key not in _model_dirs:
        d = tempfile.mkdtemp(prefix="kvrt-vllm-model-")
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
               "hidden_size": kv_heads * HEAD_DIM * 2, "intermediate_size": 128,
               "num_attention_heads": kv_heads * 2, "num_key_value_heads": kv_heads,
               "head_dim": HEAD_DIM, "num_hidden_layers": layers, "vocab_size": 1024,
               "max_position_embeddings": 4096, "torch_dtype": "float16",
               "rms_norm_eps": 1e-5, "rope_theta": 10000.0}
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        _model_dirs[key] = d
    return _model_dirs[key]


def kvpool_extra(**kw: Any) -> Dict[str, Any]:
    """kv_connector_extra_config switching kvpool on (embedded pool)."""
    extra: Dict[str, Any] = {"spec_name": "KvpoolOffloadingSpec",
                             "spec_module_path": "kvrt.vllm",
                             "kvpool_backend": "embedded",
                             "kvpool_quota_blocks": 64}
    extra.update(kw)
    return extra


def make_vllm_config(extra: Dict[str, Any], layers: int = LAYERS,
                     kv_heads: int = KV_HEADS) -> VllmConfig:
    d = model_dir(layers, kv_heads)
    model = ModelConfig(model=d, tokenizer=d, skip_tokenizer_init=True, dtype="float16",
                        seed=0, max_model_len=4096)
    sched = SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=4096, max_model_len=4096,
                            enable_chunked_prefill=True, is_encoder_decoder=False)
    cache = CacheConfig(block_size=BLOCK, cache_dtype="auto", enable_prefix_caching=True)
    kvt = KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both",
                           kv_connector_extra_config=extra)
    return VllmConfig(model_config=model, scheduler_config=sched, cache_config=cache,
                      kv_transfer_config=kvt, device_config=DeviceConfig("cpu"))


def kv_cache_config(num_blocks: int, layers: int = LAYERS,
                    kv_heads: int = KV_HEADS) -> KVCacheConfig:
    names = [f"model.layers.{i}.self_attn.attn" for i in range(layers)]
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=kv_heads, head_size=HEAD_DIM,
                             dtype=DTYPE)
    page = spec.page_size_bytes
    tensors = [KVCacheTensor(size=num_blocks * page * layers, layers=names,
                             layer_stride=page * num_blocks, block_stride=page)]
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=tensors,
                         kv_cache_groups=[KVCacheGroupSpec(names, spec)])


def make_worker_connector(extra: Dict[str, Any], num_blocks: int = 128, seed: int = 0,
                          layers: int = LAYERS,
                          kv_heads: int = KV_HEADS) -> Tuple[OffloadingConnector, torch.Tensor]:
    """vLLM's worker-side OffloadingConnector over host KV tensors of random
    bits, registered as vLLM's worker registers its KV caches."""
    vc = make_vllm_config(extra, layers, kv_heads)
    kcc = kv_cache_config(num_blocks, layers, kv_heads)
    wconn = OffloadingConnector(vc, KVConnectorRole.WORKER, kcc)
    # vLLM's layer-outermost cache: one allocation, a layer after another
    g = torch.Generator().manual_seed(seed)
    backing = torch.randint(-32768, 32768, (layers, num_blocks, 2, BLOCK, kv_heads,
                                             HEAD_DIM), generator=g, dtype=torch.int16)
    wconn.register_kv_caches({n: backing[i].view(DTYPE) for i, n in
                              enumerate(kcc.kv_cache_groups[0].layer_names)})
    return wconn, backing


def make_scheduler(extra: Dict[str, Any], num_blocks: int = 128, layers: int = LAYERS,
                   kv_heads: int = KV_HEADS, seed: int = 0,
                   with_worker: bool = True) -> Scheduler:
    """vLLM's Scheduler with OffloadingConnector and this extra config.

    In vLLM's order: the worker (its connector and KV caches) first, then
    the scheduler, in one process (vLLM's uniproc executor); the worker
    connector and its tensors are ``sched.worker_connector``, ``sched.backing``
    (None without ``with_worker``: a scheduler whose workers are elsewhere).
    """
    wconn, backing = (make_worker_connector(extra, num_blocks, seed, layers, kv_heads)
                      if with_worker else (None, None))
    vc = make_vllm_config(extra, layers, kv_heads)
    vc.cache_config.num_gpu_blocks = num_blocks
    try:
        sched = Scheduler(vllm_config=vc,
                          kv_cache_config=kv_cache_config(num_blocks, layers, kv_heads),
                          structured_output_manager=StructuredOutputManager(vc),
                          block_size=BLOCK, log_stats=True)
    except BaseException:
        if wconn is not None:
            wconn.shutdown()
        raise
    sched.worker_connector = wconn  # type: ignore[attr-defined]
    sched.backing = backing  # type: ignore[attr-defined]
    return sched


def shutdown_scheduler(sched: Scheduler) -> None:
    """The scheduler's connector, then its worker's (vLLM's order at exit)."""
    if sched.connector is not None:
        sched.connector.shutdown()
    wconn = getattr(sched, "worker_connector", None)
    if wconn is not None:
        wconn.shutdown()


_ids = itertools.count()
init_none_hash(sha256)
_hasher = get_request_block_hasher(BLOCK, sha256)


def make_request(tokens: List[int], max_tokens: int = 1) -> Request:
    return Request(request_id=f"r{next(_ids)}", prompt_token_ids=list(tokens),
                   sampling_params=SamplingParams(max_tokens=max_tokens),
                   pooling_params=None, block_hasher=_hasher)


def host_kv_caches(num_blocks: int, layers: int = LAYERS, kv_heads: int = KV_HEADS,
                   seed: Optional[int] = None) -> Tuple[CanonicalKVCaches, List[torch.Tensor]]:
    """One host tensor per layer, (num_blocks, page) bytes, as vLLM's worker
    connector hands them to the spec (CanonicalKVCaches)."""
    page = 2 * BLOCK * kv_heads * HEAD_DIM * 2
    g = torch.Generator().manual_seed(seed) if seed is not None else None
    # One allocation, layers apart, like vLLM's layer-outermost KV cache.
    backing = torch.zeros((layers, num_blocks, page), dtype=torch.int8)
    if g is not None:
        backing.copy_(torch.randint(-128, 128, backing.shape, generator=g, dtype=torch.int8))
    tensors = [backing[i] for i in range(layers)]
    caches = CanonicalKVCaches(
        tensors=[CanonicalKVCacheTensor(tensor=t, page_size_bytes=page) for t in tensors],
        group_data_refs=[[CanonicalKVCacheRef(tensor_idx=i, page_size_bytes=page)
                          for i in range(layers)]])
    return caches, tensors


class Engine:
    """vLLM's Scheduler and vLLM's worker-side OffloadingConnector, over host
    tensors: the model does not run, the connector's transfers do."""

    def __init__(self, extra: Dict[str, Any], num_blocks: int = 128, seed: int = 0,
                 layers: int = LAYERS, kv_heads: int = KV_HEADS) -> None:
        self.sched = make_scheduler(extra, num_blocks, layers, kv_heads, seed)
        conn = self.sched.connector
        assert conn is not None
        self.connector = conn
        self.manager = conn.connector_scheduler.manager
        self.spec = self.manager.spec  # the KvpoolOffloadingSpec that made it
        self.wconn = self.sched.worker_connector  # type: ignore[attr-defined]
        self.backing = backing = self.sched.backing  # type: ignore[attr-defined]
        self.worker = self.wconn.connector_worker.worker
        self.tensors = [backing[i] for i in range(layers)]  # int16 bits: NaN-free compare
        self.loaded_blocks: List[Tuple[int, int]] = []  # (pool id, vLLM block)
        self.stored_blocks: List[Tuple[int, int]] = []
        self.scheduled: Dict[str, int] = {}  # request id -> tokens computed here
        # What the scheduler itself reported (its stats): connector queries and hits.
        self.connector_queries = 0
        self.connector_hits = 0

    def external_tokens(self, req: Request) -> int:
        """Prompt tokens this engine did not compute: loaded from kvpool."""
        return req.num_prompt_tokens - self.scheduled.get(req.request_id, 0)

    def step(self) -> Any:
        """One scheduler step; the worker connector runs its transfers."""
        out = self.sched.schedule()
        for rid, n in out.num_scheduled_tokens.items():
            self.scheduled[rid] = self.scheduled.get(rid, 0) + n
        meta = out.kv_connector_metadata
        assert isinstance(meta, OffloadingConnectorMetadata)
        for job in meta.load_jobs.values():
            self.loaded_blocks += list(zip(job.src_spec.block_ids.tolist(),
                                           job.dst_spec.block_ids.tolist()))
        for job in meta.store_jobs.values():
            self.stored_blocks += list(zip(job.dst_spec.block_ids.tolist(),
                                           job.src_spec.block_ids.tolist()))
        w = self.wconn
        w.bind_connector_metadata(meta)
        w.start_load_kv(None)  # type: ignore[arg-type]
        w.wait_for_save()
        sending, recving = w.get_finished(set(out.finished_req_ids))
        wmeta = w.build_connector_worker_meta()
        w.clear_connector_metadata()
        req_ids = list(out.num_scheduled_tokens)
        mro = ModelRunnerOutput(req_ids=req_ids,
                                req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                sampled_token_ids=[[1] for _ in req_ids],
                                kv_connector_output=KVConnectorOutput(
                                    finished_sending=sending or None,
                                    finished_recving=recving or None,
                                    kv_connector_worker_meta=wmeta))
        for eco in self.sched.update_from_output(out, mro).values():
            cs = eco.scheduler_stats.connector_prefix_cache_stats if eco.scheduler_stats else None
            if cs is not None:
                self.connector_queries += cs.queries
                self.connector_hits += cs.hits
        return out

    def run(self, req: Request, max_steps: int = 20) -> Request:
        """Add ``req``; step until it is done and no transfer is left."""
        self.sched.add_request(req)
        for _ in range(max_steps):
            self.step()
            if (not self.sched.has_unfinished_requests()
                    and not self.manager.held_blocks()["pending"]
                    and not self.manager.held_blocks()["loads"]):
                return req
        raise AssertionError(f"request {req.request_id} not done in {max_steps} steps")

    def shutdown(self) -> None:
        shutdown_scheduler(self.sched)
