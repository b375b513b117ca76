# SPDX-License-Identifier: MIT
"""Two vLLM engine processes share a prefix through kvrt.vllm on the real module.

Runs in the test VM under host-run with the pinned vLLM venv's python
(/dev/kvpool is the guest's module).  vLLM is imported once, here (about
6 minutes under TCG); each engine is a forked child that opens its own pool
and space after the fork, so each has its own /dev/kvpool fd and mappings:

  writer   vLLM's Scheduler + kvrt.vllm's worker over seeded host KV
           tensors; runs a prompt through prefill, so the connector stores
           (publishes) its full blocks; reports; stays until told to go
  reader   started after the writer's store: its own Scheduler, same model
           config (so the same space name), a prompt with the same prefix
           and another tail; the scheduler must report the kvpool hit, the
           load must fill its own tensors with the writer's bytes, from the
           writer's physical pages, with one copy in the pool.  Then a
           control engine under another kvpool_tenant must miss
  foreign  another uid, same model config: the spec refuses the space with
           a clear error; with its own kvpool_tenant it gets a space

The checks are made here, from the children's JSON reports; TAP out.
Helpers (Tap, pfns, write_json, the fork runner) come from kvrt_share.py.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from typing import Any, Dict, List

T0 = time.monotonic()
HERE = os.path.dirname(os.path.abspath(__file__))
ENGINES = os.path.join(HERE, "..", "..", "..", "libkvrt", "python", "engines", "vllm")
sys.path[:0] = [HERE, os.path.abspath(ENGINES)]

import kvrt_share as ks  # noqa: E402  (Tap, Child, pfns, write_json, load, need, main)
import vllm_util as vu  # noqa: E402  (imports vLLM and torch: the long part)

import kvrt  # noqa: E402

IMPORT_S = time.monotonic() - T0
PREFIX_BLOCKS = 16
TENANT = "vmshare"
FOREIGN_UID = ks.FOREIGN_UID
WAIT_S = 1200.0   # one engine's set-up and run, under TCG on a loaded host
BACKEND = os.environ.get("VLLM_SHARE_BACKEND", "kmod")  # embedded: the no-sharing control


def extra(tenant: str = TENANT) -> Dict[str, Any]:
    return vu.kvpool_extra(kvpool_backend=BACKEND, kvpool_tenant=tenant,
                           kvpool_quota_blocks=64)


def prefix() -> List[int]:
    return [(i * 7919) % 1000 + 1 for i in range(PREFIX_BLOCKS * vu.BLOCK)]


def block_sha(tensors: List[Any], block: int) -> str:
    """sha256 of one vLLM block across every layer's tensor."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(t[block].contiguous().numpy().tobytes())
    return h.hexdigest()


def pool_side(e: vu.Engine, ids: List[int]) -> Dict[str, Any]:
    """The pool blocks ``ids`` as this process maps them: bytes and frames."""
    sp = e.manager.space
    views = [sp.block_view(i) for i in ids]
    out = {"pool_sha": [hashlib.sha256(v.tobytes()).hexdigest() for v in views],
           "pfns": [p for v in views for p in ks.pfns(v)]}
    del views
    return out


def space_facts(e: vu.Engine) -> Dict[str, Any]:
    sp = e.manager.space
    st = sp.stats()
    return {"space": e.spec.space_name, "used": sp._pool.info().used_bytes,
            "backed_bytes": sp.info().backed_bytes, "block_bytes": sp.info().block_bytes,
            "published": st.published_blocks, "cached": st.cached_blocks, "hits": st.hits}


def mode_writer(a: Dict[str, Any]) -> None:
    """Store the prompt's prefix through vLLM's connector; hold until ``a["done"]``."""
    t = time.monotonic()
    e = vu.Engine(extra(), seed=1)
    req = vu.make_request(prefix() + [5, 6, 7])
    e.run(req)
    ids = [pid for pid, _ in e.stored_blocks]
    ks.need(len(ids) == PREFIX_BLOCKS, f"writer stored {len(ids)} blocks, "
            f"not {PREFIX_BLOCKS}")
    rep = dict(space_facts(e), pid=os.getpid(), ids=ids,
               tensor_sha={str(pid): block_sha(e.tensors, src) for pid, src in e.stored_blocks},
               loaded=len(e.loaded_blocks), connector_hits=e.connector_hits,
               seconds=time.monotonic() - t, **pool_side(e, ids))
    ks.write_json(a["out"], rep)
    deadline = time.monotonic() + 2 * WAIT_S
    while not os.path.exists(a["done"]):
        if time.monotonic() > deadline:
            raise TimeoutError(f"writer: no {a['done']} in time")
        time.sleep(0.1)
    e.shutdown()


def mode_reader(a: Dict[str, Any]) -> None:
    """Same model config, same prefix, another tail: load; then a control tenant."""
    t = time.monotonic()
    e = vu.Engine(extra(), seed=2)
    own = [block_sha(e.tensors, b) for b in range(PREFIX_BLOCKS)]
    req = vu.make_request(prefix() + [9, 9, 9, 9, 9])
    e.run(req)
    loaded = e.loaded_blocks
    ids = [pid for pid, _ in loaded]
    rep = dict(space_facts(e), ids=ids, external=e.external_tokens(req),
               connector_hits=e.connector_hits, connector_queries=e.connector_queries,
               stored=len(e.stored_blocks),
               tensor_sha={str(pid): block_sha(e.tensors, dst) for pid, dst in loaded},
               own_sha_before=own)
    rep.update(pool_side(e, ids) if ids else {"pool_sha": [], "pfns": []})
    e.shutdown()
    rep["seconds"] = time.monotonic() - t
    # Control: same everything but the tenant, so another space name: a miss.
    c = vu.Engine(extra(TENANT + "-other"), seed=3)
    creq = vu.make_request(prefix() + [9, 9, 9, 9, 9])
    c.run(creq)
    rep["control"] = {"space": c.spec.space_name, "external": c.external_tokens(creq),
                      "connector_hits": c.connector_hits, "loaded": len(c.loaded_blocks)}
    c.shutdown()
    ks.write_json(a["out"], rep)


def mode_foreign(a: Dict[str, Any]) -> None:
    """As FOREIGN_UID, the same model config: the spec must refuse the space."""
    os.setgroups([])
    os.setresgid(FOREIGN_UID, FOREIGN_UID, FOREIGN_UID)
    os.setresuid(FOREIGN_UID, FOREIGN_UID, FOREIGN_UID)
    rep: Dict[str, Any] = {"uid": os.geteuid()}
    try:
        vu.Engine(extra(), seed=4).shutdown()
        rep["same"] = "joined"
    except kvrt.KvrtError as err:
        rep["same"] = type(err).__name__
        rep["same_msg"] = str(err)
    # The positive control: its own tenant, its own space (the device is open to it).
    e = vu.Engine(extra(TENANT + "-u1000"), seed=4)
    rep["own_space"] = e.spec.space_name
    e.shutdown()
    ks.write_json(a["out"], rep)


ks.MODES.update(vllm_writer=mode_writer, vllm_reader=mode_reader, vllm_foreign=mode_foreign)


def mode_run() -> int:
    tap = ks.Tap()
    print(f"TAP version 13\n1..8\n# import of vLLM (with torch, kvrt) took {IMPORT_S:.0f}s; "
          f"backend {BACKEND}", flush=True)
    tmp = tempfile.mkdtemp(prefix="vllm-share.")
    os.chmod(tmp, 0o1777)   # the foreign child writes its report as FOREIGN_UID
    f = {k: os.path.join(tmp, k + ".json") for k in ("writer", "reader", "foreign")}
    logs = {k: os.path.join(tmp, k + ".log") for k in f}
    done = os.path.join(tmp, "done")
    # One model folder for all children: its path is part of the space name.
    mdir = vu.model_dir()
    os.chmod(mdir, 0o755)
    os.chmod(os.path.join(mdir, "config.json"), 0o644)
    # Parse the model config here once: that imports transformers' Llama
    # config lazily, from the venv under /root, which the foreign uid cannot read.
    t = time.monotonic()
    vu.make_vllm_config(extra())
    import kvrt.vllm.manager  # noqa: F401  (loaded by the spec on first use)
    import kvrt.vllm.worker  # noqa: F401
    with kvrt.Pool(BACKEND) as pool:
        start_used = pool.info().used_bytes
        print(f"# {kvrt.LIBRARY}; {pool.backend_info}", flush=True)
    print(f"# model config parsed in {time.monotonic() - t:.0f}s (vLLM's model "
          "inspection, unless its model-info cache knows the model)", flush=True)

    t = time.monotonic()
    writer = ks.Child("vllm_writer", {"out": f["writer"], "done": done}, logs["writer"])
    try:
        w = ks.first_report(tap, writer, f["writer"], f"writer engine (pid {writer.pid}) "
                            f"stored {PREFIX_BLOCKS} blocks through the connector", WAIT_S)
        if w is None:
            return 1
        print(f"# writer: engine up and prefill stored in {w['seconds']:.0f}s; "
              f"space {w['space']}", flush=True)
        t = time.monotonic()
        r_out = ks.Child("vllm_reader", {"out": f["reader"]}, logs["reader"]).finish(WAIT_S)
        ok = os.path.exists(f["reader"])
        r = ks.load(f["reader"]) if ok else {}
        print(f"# reader: {time.monotonic() - t:.0f}s", flush=True)
        want = PREFIX_BLOCKS * vu.BLOCK
        tap.check(ok and r["space"] == w["space"] and r["external"] == want
                  and r["connector_hits"] == want and sorted(r["ids"]) == sorted(w["ids"]),
                  f"reader engine: same space, the scheduler reports {want} tokens "
                  f"({PREFIX_BLOCKS} blocks) hit in kvpool and loads the writer's blocks",
                  r_out if not ok else json.dumps({k: r[k] for k in (
                      "space", "external", "connector_hits", "connector_queries", "ids")})
                  + f"\nwriter space {w['space']} ids {w['ids']}")
        same = ok and bool(r["ids"]) and all(
            r["tensor_sha"][p] == w["tensor_sha"][p] for p in r["tensor_sha"]) \
            and len(r["tensor_sha"]) == PREFIX_BLOCKS \
            and not set(r["own_sha_before"]) & set(w["tensor_sha"].values())
        tap.check(same, "the load filled the reader's own KV tensors with exactly the "
                  "writer's bytes (and they held other bytes before)",
                  "" if not ok else str(sum(r["tensor_sha"].get(p) != s for p, s in
                                            w["tensor_sha"].items())) + " blocks differ")
        wpf = dict(zip(w["ids"], zip(w["pool_sha"], w["pfns"])))
        rpf = dict(zip(r.get("ids", []), zip(r.get("pool_sha", []), r.get("pfns", []))))
        tap.check(ok and bool(rpf) and rpf == {k: wpf.get(k) for k in rpf},
                  f"the pool blocks the reader read are the writer's physical pages "
                  f"({len(rpf)} PFNs, one page per block)",
                  "" if not ok else f"writer {sorted(wpf.items())}\nreader {sorted(rpf.items())}")
        grew = w["used"] - start_used
        print(f"# pool used: +{grew} bytes after the writer's store, "
              f"+{r.get('used', -1) - start_used} with the reader's engine loaded too",
              flush=True)
        tap.check(ok and grew >= PREFIX_BLOCKS * w["block_bytes"] and r["used"] == w["used"]
                  and r["backed_bytes"] == w["backed_bytes"] and r["stored"] == 0
                  and r["cached"] + r["published"] == w["cached"] + w["published"]
                  == PREFIX_BLOCKS,
                  "pool accounting holds one copy of the prefix for both engines",
                  json.dumps({k: v for k, v in r.items() if k in (
                      "used", "backed_bytes", "stored", "cached", "published")})
                  + "\n" + json.dumps({k: v for k, v in w.items() if k in (
                      "used", "backed_bytes", "cached", "published")}))
        c = r.get("control", {})
        tap.check(ok and c.get("space") != w["space"] and c.get("external") == 0
                  and c.get("connector_hits") == 0 and c.get("loaded") == 0,
                  "control: the same prompt under another kvpool_tenant (another space "
                  "name) misses", json.dumps(c))

        dev_mode = os.stat(ks.DEVICE).st_mode & 0o7777 if BACKEND == "kmod" else None
        if dev_mode is not None:
            os.chmod(ks.DEVICE, 0o666)
        t = time.monotonic()
        try:
            f_out = ks.Child("vllm_foreign", {"out": f["foreign"]},
                             logs["foreign"]).finish(WAIT_S)
        finally:
            if dev_mode is not None:
                os.chmod(ks.DEVICE, dev_mode)
        print(f"# foreign: {time.monotonic() - t:.0f}s", flush=True)
        ok = os.path.exists(f["foreign"])
        fo = ks.load(f["foreign"]) if ok else {}
        tap.check(ok and fo["uid"] == FOREIGN_UID and fo["same"] in ("ExistsError",
                                                                      "AccessError")
                  and w["space"] in fo.get("same_msg", "")
                  and "kvpool_tenant" in fo.get("same_msg", "")
                  and fo["own_space"] != w["space"],
                  f"uid {FOREIGN_UID} with the same model config is refused the space with "
                  "a clear error, and gets a space of its own under another tenant",
                  f_out if not ok else json.dumps(fo))
        if ok:
            print(f"# foreign: {fo.get('same_msg')}", flush=True)
    finally:
        with open(done, "w"):
            pass
        w_out = writer.finish(WAIT_S)
    with kvrt.Pool(BACKEND) as pool:
        end_used = pool.info().used_bytes
    tap.check(writer.returncode == 0 and end_used == start_used,
              "writer engine shut down cleanly and the pool is back to its starting use",
              f"pool used {start_used} at start, {end_used} at the end\n{w_out}")
    return 1 if tap.failed else 0


def main() -> int:
    return ks.main_run_only(mode_run, T0)


if __name__ == "__main__":
    sys.exit(main())
