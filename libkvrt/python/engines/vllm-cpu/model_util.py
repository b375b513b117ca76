# SPDX-License-Identifier: MIT
"""Helpers for the model tests: tiny checkpoints and vLLM's CPU engine.

Nothing is fetched: each checkpoint is a transformers model with seeded
random weights saved into a temporary folder at test time; prompts are
token ids (no tokenizer).  The engine runs in this process with its
worker beside the scheduler (VLLM_ENABLE_V1_MULTIPROCESSING=0, executor
"uni"): the embedded kvpool backend needs both in one process.
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import random
import shutil
import tempfile
from typing import Any, Dict, Iterator, List, Optional, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
# 2-core machines: no oversubscription between torch's threads and ours
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

import torch  # noqa: E402

BLOCK = 32        # tokens per vLLM block (CPU_ATTN: a multiple of 32; CPU MLA forces 16)
VOCAB = 512
MAX_LEN = 1024    # max_model_len of the tests' engines

_dirs: List[str] = []


def _save(model: Any, cfg: Any) -> str:
    d = tempfile.mkdtemp(prefix="kvrt-vllm-cpu-model-")
    _dirs.append(d)
    model.save_pretrained(d, safe_serialization=True)
    cfg.save_pretrained(d)
    return d


def _common(seed: int, tie: bool = False, init: float = 0.5) -> Dict[str, Any]:
    torch.manual_seed(seed)
    # large weights: logits far from uniform, so greedy picks are stable and
    # a perturbed KV cache changes them
    return {"vocab_size": VOCAB, "max_position_embeddings": 4096, "initializer_range": init,
            "torch_dtype": "float32", "tie_word_embeddings": tie,
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}


def llama(hidden: int = 128, layers: int = 2, heads: int = 4, kv_heads: int = 2,
          seed: int = 0) -> str:
    """A tiny Llama checkpoint (full attention only)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, head_dim=hidden // heads,
                      rms_norm_eps=1e-5, **_common(seed))
    return _save(LlamaForCausalLM(cfg).eval(), cfg)


def gemma2_sliding(window: int = 64, seed: int = 0) -> str:
    """A tiny Gemma2: layers alternate sliding-window and full attention,
    i.e. two KV cache groups in vLLM (hybrid)."""
    from transformers import Gemma2Config, Gemma2ForCausalLM
    cfg = Gemma2Config(hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                       sliding_window=window, query_pre_attn_scalar=32,
                       attn_logit_softcapping=None, final_logit_softcapping=None,
                       # tied (vLLM's Gemma2 has no lm_head of its own); smaller weights, as
                       # Gemma2 scales embeddings by sqrt(hidden): from 0.2 up the logits
                       # saturate (log-probs all 0); at 0.1 they depend on the context
                       **_common(seed, tie=True, init=0.1))
    return _save(Gemma2ForCausalLM(cfg).eval(), cfg)


def deepseek_mla(seed: int = 0) -> str:
    """A tiny DeepSeek-V2 (MLA: one latent KV of kv_lora_rank + rope dims)."""
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM
    # vLLM's CPU MLA kernel takes only kv_lora_rank + qk_rope_head_dim = 576
    cfg = DeepseekV2Config(hidden_size=128, intermediate_size=256, moe_intermediate_size=32,
                           num_hidden_layers=2, num_attention_heads=2,
                           num_key_value_heads=2, kv_lora_rank=512, q_lora_rank=None,
                           qk_rope_head_dim=64, qk_nope_head_dim=32, v_head_dim=32,
                           n_routed_experts=4, num_experts_per_tok=2,
                           first_k_dense_replace=2,  # every layer dense: no MoE kernels
                           rope_scaling=None, **_common(seed))
    return _save(DeepseekV2ForCausalLM(cfg).eval(), cfg)


def cleanup() -> None:
    for d in _dirs:
        shutil.rmtree(d, ignore_errors=True)
    _dirs.clear()


def kvpool_config(quota_bytes: int = 64 << 20, **kw: Any) -> Dict[str, Any]:
    """kv_transfer_config switching kvpool on, embedded pool."""
    extra: Dict[str, Any] = {"spec_name": "KvpoolOffloadingSpec",
                             "spec_module_path": "kvrt.vllm",
                             "kvpool_backend": "embedded",
                             "kvpool_quota_bytes": quota_bytes}
    extra.update(kw)
    return {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
            "kv_connector_extra_config": extra}


def vllm_cpu_offload_config(cpu_bytes: int = 64 << 20) -> Dict[str, Any]:
    """vLLM's own CPU offloading (its default spec), for comparison."""
    return {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
            "kv_connector_extra_config": {"cpu_bytes_to_use": cpu_bytes}}


def make_llm(model: str, kv_transfer: Optional[Dict[str, Any]] = None,
             max_model_len: int = MAX_LEN, kv_cache_bytes: int = 32 << 20,
             block_size: int = BLOCK, **kw: Any) -> Any:
    """vLLM's LLM on the CPU, eager, float32, no prefix caching of its own."""
    from vllm import LLM
    from vllm.config import KVTransferConfig
    args: Dict[str, Any] = dict(
        model=model, skip_tokenizer_init=True, enforce_eager=True, dtype="float32",
        max_model_len=max_model_len, max_num_seqs=4, seed=0, block_size=block_size,
        enable_prefix_caching=False, distributed_executor_backend="uni",
        kv_cache_memory_bytes=kv_cache_bytes, disable_log_stats=True)
    if kv_transfer is not None:
        args["kv_transfer_config"] = KVTransferConfig(**kv_transfer)
    args.update(kw)
    return LLM(**args)


def has_connector(llm: Any) -> bool:
    return llm.llm_engine.vllm_config.kv_transfer_config is not None


@contextlib.contextmanager
def hide_connector() -> Iterator[None]:
    """vLLM keeps the worker's connector in a process global (one engine per
    process): while an engine without a connector runs beside one with it,
    hide the global, or the plain engine's worker would drive the connector."""
    from vllm.distributed.kv_transfer import kv_transfer_state as st
    saved = st._KV_CONNECTOR_AGENT
    st._KV_CONNECTOR_AGENT = None
    try:
        yield
    finally:
        st._KV_CONNECTOR_AGENT = saved


def close_llm(llm: Any) -> None:
    """Shut the engine down; the kvpool connector closes its space."""
    from vllm.distributed.kv_transfer import ensure_kv_transfer_shutdown
    if has_connector(llm):
        llm.llm_engine.engine_core.shutdown()
        ensure_kv_transfer_shutdown()
    else:
        with hide_connector():
            llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()


def engine_core(llm: Any) -> Any:
    """The EngineCore in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0)."""
    return llm.llm_engine.engine_core.engine_core


def kvpool_manager(llm: Any) -> Any:
    """The scheduler-side OffloadingManager (KvpoolOffloadingManager)."""
    return engine_core(llm).scheduler.connector.connector_scheduler.manager


def kvpool_worker(llm: Any) -> Any:
    """The worker-side OffloadingWorker this process's connector made."""
    from vllm.distributed.kv_transfer import get_kv_transfer_group
    return get_kv_transfer_group().connector_worker.worker


class LoadCounter:
    """Counts the blocks the kvpool worker copies from the space into vLLM's
    KV cache (submit_load) and to it (submit_store): kvpool's side of a hit."""

    def __init__(self, worker: Any) -> None:
        self.loaded = 0
        self.stored = 0
        load, store = worker.submit_load, worker.submit_store

        def submit_load(job_id: int, src_spec: Any, dst_spec: Any, *a: Any, **k: Any) -> bool:
            self.loaded += len(src_spec.block_ids)
            return load(job_id, src_spec, dst_spec, *a, **k)

        def submit_store(job_id: int, src_spec: Any, dst_spec: Any) -> bool:
            self.stored += len(dst_spec.block_ids)
            return store(job_id, src_spec, dst_spec)

        worker.submit_load = submit_load
        worker.submit_store = submit_store


def prompt(n: int, seed: int) -> List[int]:
    rnd = random.Random(seed)
    return [rnd.randrange(3, VOCAB) for _ in range(n)]


def generate(llm: Any, prompts: Sequence[Sequence[int]], max_tokens: int = 8) -> List[Dict]:
    """Greedy decoding of token-id prompts, one request after another (so a
    prompt can hit what the previous one stored): tokens, their log-probs
    and the prompt tokens vLLM did not compute (num_cached_tokens)."""
    from vllm import SamplingParams, TokensPrompt
    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, logprobs=0,
                        detokenize=False, ignore_eos=True)
    res = []
    ctx = contextlib.nullcontext() if has_connector(llm) else hide_connector()
    for p in prompts:
        with ctx:
            out = llm.generate([TokensPrompt(prompt_token_ids=list(p))], sp,
                               use_tqdm=False)[0]
        c = out.outputs[0]
        lps = [float(d[t].logprob) for t, d in zip(c.token_ids, c.logprobs)]
        res.append({"tokens": list(c.token_ids), "logprobs": lps,
                    "cached": int(out.num_cached_tokens or 0)})
    return res


def dump(obj: Any) -> str:
    return json.dumps(obj)
