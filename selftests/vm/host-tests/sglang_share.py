# SPDX-License-Identifier: MIT
"""Two SGLang storage processes share KV pages through kvrt.sglang on the real module.

Runs in the test VM under host-run with the pinned SGLang venv's python
(/dev/kvpool is the guest's module).  SGLang is imported once, here (minutes
under TCG); each process below is a forked child that builds its own SGLang
host pool (MHATokenToKVPoolHost) and its own KvpoolStorage through SGLang's
dynamic backend factory, so each opens the kmod pool and the space itself:

  writer   (A) fills host pages with seeded K/V bytes, stores them with
           batch_set_v1 under SGLang's chained page hashes; reports; stays
           (joined) until told to go
  reader   (B) another host layout, same model geometry (so the same
           space): batch_exists / batch_get_v1 must find A's pages and fill
           its own host pages with A's bytes, from A's physical pages; the
           one-page get() too; keys never stored miss and touch nothing;
           storing the same keys again adds no copy; stays until told to go
  tenant   (C) same model and keys under another kvpool_tenant: another
           space, every key misses

With A and B both joined the run reads the module's own per-space figures
(sysfs space/ID/); after they exit the space must be gone and the pool
back to its starting use.  The checks are made here, from the children's
JSON reports; TAP out.  The SGLang host pool, fill and page helpers are
those of libkvrt/python/engines/sglang/test_storage.py; the fork runner,
Tap and pfns come from kvrt_share.py.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

T0 = time.monotonic()
HERE = os.path.dirname(os.path.abspath(__file__))
ENGINES = os.path.join(HERE, "..", "..", "..", "libkvrt", "python", "engines", "sglang")
sys.path[:0] = [HERE, os.path.abspath(ENGINES)]

import kvrt_share as ks  # noqa: E402  (Tap, Child, pfns, write_json, load, need, main)
import test_storage as su  # noqa: E402  (imports SGLang and torch: the long part)

import kvrt  # noqa: E402
from kvrt.sglang import KvpoolStorage  # noqa: E402
from sglang.srt.mem_cache.pool_host.base import host_memory_budget_scope  # noqa: E402

IMPORT_S = time.monotonic() - T0
PAGES = 8                       # pages of the prompt A stores
TENANT = "vmshare"
MODEL = "org/Tiny-Model"
HOST_TOKENS = 64                # device tokens; the host pool holds twice that
A_LAYOUT, B_LAYOUT = "layer_first", "page_head"
B_DST = list(range(8, 8 + PAGES))              # B's pages for A's prompt
B_MISS = list(range(16, 16 + PAGES))           # B's pages for the never-stored keys
B_FLAT = 24                                    # B's page for the one-page get()
WAIT_S = 900.0   # one child's set-up and run, under TCG on a loaded host
BACKEND = os.environ.get("SGLANG_SHARE_BACKEND", "kmod")  # embedded: the no-sharing control
SYSFS_SPACES = "/sys/class/misc/kvpool/space"


# SGLang's chained page hashes (get_hash_str), made in the run before any
# fork: SGLang computes them in a C++ extension that torch JIT-loads (a
# build under TCG takes many minutes; the engtest seeds a built one), once.
KEYS: Dict[str, List[str]] = {}


def prompt_keys() -> List[str]:
    """The prompt's page keys."""
    return KEYS["prompt"]


def never_stored_keys() -> List[str]:
    return KEYS["never"]


def host_pool(layout: str) -> Any:
    """test_storage's SGLang host pool, within SGLang's own budget scope: SGLang
    sizes host pools against free RAM less a 10 GiB reserve, more than the
    VM has; these pools take kilobytes."""
    with host_memory_budget_scope(64 << 20):
        return su.host_pool(layout, device_tokens=HOST_TOKENS)


def storage(host: Any, tenant: str) -> KvpoolStorage:
    """KvpoolStorage as SGLang's dynamic backend factory builds it, registered."""
    cfg = su.config(model=MODEL, kvpool_backend=BACKEND, kvpool_tenant=tenant,
                    kvpool_quota_bytes=1 << 20)
    st = su.StorageBackendFactory.create_backend("dynamic", cfg, host)
    ks.need(type(st) is KvpoolStorage, f"the factory built {type(st).__name__}")
    st.register_mem_pool_host(host)
    return st


def sha(t: Any) -> str:
    return hashlib.sha256(t.numpy().tobytes()).hexdigest()


def pool_side(st: KvpoolStorage, keys: Sequence[str]) -> Dict[str, Any]:
    """The space's blocks under ``keys`` as this process maps them: ids,
    bytes and frames; the lookup's references are released again."""
    sp = st._need_space()
    ids = sp.lookup(KvpoolStorage._hashes(keys))
    try:
        views = [sp.block_view(int(i)) for i in ids]
        out = {"ids": [int(i) for i in ids],
               "block_sha": [hashlib.sha256(v.tobytes()).hexdigest() for v in views],
               "pfns": [p for v in views for p in ks.pfns(v)]}
        del views
    finally:
        if len(ids):
            sp.release(ids)
    return out


def facts(st: KvpoolStorage) -> Dict[str, Any]:
    s = st.space_stats()
    return {"pid": os.getpid(), "space": st.space_name,
            "used": st._need_pool().info().used_bytes,
            "block_bytes": st._need_space().info().block_bytes,
            "published": s.published_blocks, "cached": s.cached_blocks,
            "inserts": s.inserts, "my_refs": s.my_refs}


def hold(path: str) -> None:
    deadline = time.monotonic() + 2 * WAIT_S
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {path} in time")
        time.sleep(0.1)


def mode_writer(a: Dict[str, Any]) -> None:
    """A: store PAGES host pages under the prompt's keys; hold until ``a["done"]``."""
    host = host_pool(A_LAYOUT)
    st = storage(host, TENANT)
    keys = prompt_keys()
    raw = [su.fill(host, p, 100 + p) for p in range(PAGES)]
    ks.need(all(su.page_bytes(host, p).equal(r) for p, r in enumerate(raw)),
            "the host pages do not hold what was written into them")
    res = st.batch_set_v1(keys, su.indices(host, range(PAGES)))
    ks.need(res == [True] * PAGES, f"batch_set_v1 stored {res}")
    ks.need(st.batch_exists(keys) == PAGES, "A's own batch_exists misses its pages")
    ks.write_json(a["out"], dict(facts(st), page_sha=[sha(r) for r in raw],
                                 **pool_side(st, keys)))
    hold(a["done"])
    st.close()


def mode_reader(a: Dict[str, Any]) -> None:
    """B: find A's pages by the same keys, load them; misses; hold until ``a["done"]``."""
    host = host_pool(B_LAYOUT)
    st = storage(host, TENANT)
    keys = prompt_keys()
    rep: Dict[str, Any] = {"before_sha": [sha(su.fill(host, p, 500 + p)) for p in B_DST]}
    rep["exists"] = st.batch_exists(keys)
    rep["got"] = st.batch_get_v1(keys, su.indices(host, B_DST))
    rep["page_sha"] = [sha(su.page_bytes(host, p)) for p in B_DST]
    # SGLang's path without interface_v1: one flat page, into another host page
    flat = st.get(keys[PAGES // 2], host.get_dummy_flat_data_page())
    if flat is not None:
        host.set_from_flat_data_page(B_FLAT * host.page_size, flat)
        rep["flat_sha"] = sha(su.page_bytes(host, B_FLAT))
    # keys never stored: misses, and the pages given for them keep their bytes
    miss = never_stored_keys()
    sentinel = [sha(su.fill(host, p, 700 + p)) for p in B_MISS]
    rep["miss_exists"] = st.batch_exists(miss)
    rep["miss_got"] = st.batch_get_v1(miss, su.indices(host, B_MISS))
    rep["miss_untouched"] = [sha(su.page_bytes(host, p)) for p in B_MISS] == sentinel
    rep["miss_get_none"] = st.get(miss[0]) is None
    # B computed the same pages: storing them again must not add a copy
    before = st.space_stats().inserts
    rep["restore"] = st.batch_set_v1(keys, su.indices(host, B_DST))
    rep["restore_inserts"] = st.space_stats().inserts - before
    rep.update(facts(st), **pool_side(st, keys))
    ks.write_json(a["out"], rep)
    hold(a["done"])
    st.close()


def mode_tenant(a: Dict[str, Any]) -> None:
    """C: the same model and keys under another tenant: must miss."""
    host = host_pool(A_LAYOUT)
    st = storage(host, TENANT + "-other")
    keys = prompt_keys()
    sentinel = [sha(su.fill(host, p, 900 + p)) for p in range(PAGES)]
    rep = {"space": st.space_name, "exists": st.batch_exists(keys),
           "got": st.batch_get_v1(keys, su.indices(host, range(PAGES)))}
    rep["untouched"] = [sha(su.page_bytes(host, p)) for p in range(PAGES)] == sentinel
    st.close()
    ks.write_json(a["out"], rep)


ks.MODES.update(sglang_writer=mode_writer, sglang_reader=mode_reader,
                sglang_tenant=mode_tenant)


def sysfs_space(name: str) -> Optional[Dict[str, int]]:
    """The module's figures for the live space ``name`` (sysfs space/ID/), or None."""
    if not os.path.isdir(SYSFS_SPACES):
        return None
    for d in sorted(os.listdir(SYSFS_SPACES)):
        p = os.path.join(SYSFS_SPACES, d)
        try:
            with open(os.path.join(p, "name")) as f:
                if f.read().strip() != name:
                    continue
            out = {}
            for k in ("clients", "published_blocks", "cached_blocks", "readers", "inserts",
                      "dedups", "backed_bytes"):
                with open(os.path.join(p, k)) as f:
                    out[k] = int(f.read().split()[0])
            return out
        except FileNotFoundError:   # a space going away meanwhile
            continue
    return None


def mode_run() -> int:
    tap = ks.Tap()
    print(f"TAP version 13\n1..9\n# import of SGLang (with torch, kvrt) took {IMPORT_S:.0f}s; "
          f"backend {BACKEND}", flush=True)
    tmp = tempfile.mkdtemp(prefix="sglang-share.")
    names = ("writer", "reader", "tenant")
    f = {k: os.path.join(tmp, k + ".json") for k in names}
    logs = {k: os.path.join(tmp, k + ".log") for k in names}
    done = {k: os.path.join(tmp, k + ".done") for k in ("writer", "reader")}
    t = time.monotonic()
    KEYS.update(prompt=su.keys(PAGES, seed=1), never=su.keys(PAGES, seed=2))
    print(f"# SGLang's page hashes (its JIT-loaded C++ extension) in "
          f"{time.monotonic() - t:.0f}s", flush=True)
    # The pool is closed again before any fork: no child inherits its fd.
    with kvrt.Pool(BACKEND) as pool:
        start_used = pool.info().used_bytes
        print(f"# {kvrt.LIBRARY}; {pool.backend_info}", flush=True)

    t = time.monotonic()
    writer = ks.Child("sglang_writer", {"out": f["writer"], "done": done["writer"]},
                      logs["writer"])
    reader: Optional[ks.Child] = None
    r: Dict[str, Any] = {}
    try:
        w = ks.first_report(tap, writer, f["writer"], f"process A (pid {writer.pid}) stored "
                            f"{PAGES} pages with batch_set_v1", WAIT_S)
        if w is None:
            return 1
        print(f"# A: {time.monotonic() - t:.0f}s; space {w['space']}", flush=True)

        t = time.monotonic()
        reader = ks.Child("sglang_reader", {"out": f["reader"], "done": done["reader"]},
                          logs["reader"])
        ok = ks.wait_file(f["reader"], reader, WAIT_S)
        r = ks.load(f["reader"]) if ok else {}
        print(f"# B: {time.monotonic() - t:.0f}s", flush=True)
        tap.check(ok and r["pid"] != w["pid"] and r["space"] == w["space"]
                  and r["exists"] == PAGES and r["got"] == [True] * PAGES,
                  f"process B (pid {reader.pid}) joins A's space and finds all {PAGES} pages "
                  "by the same keys (batch_exists, batch_get_v1)",
                  reader.finish(1) if not ok else json.dumps(
                      {k: r[k] for k in ("pid", "space", "exists", "got")})
                  + f"\nA: pid {w['pid']} space {w['space']}")
        tap.check(ok and r["page_sha"] == w["page_sha"]
                  and not set(r["before_sha"]) & set(w["page_sha"]),
                  f"B's host pages ({B_LAYOUT}) hold exactly A's K/V bytes ({A_LAYOUT}), "
                  "and held other bytes before",
                  "" if not ok else f"{sum(a != b for a, b in zip(r['page_sha'], w['page_sha']))}"
                  " pages differ")
        tap.check(ok and r.get("flat_sha") == w["page_sha"][PAGES // 2],
                  "B's one-page get() (SGLang's flat page) gives A's page too",
                  "" if not ok else f"got {r.get('flat_sha')}, A's {w['page_sha'][PAGES // 2]}")
        tap.check(ok and r["ids"] == w["ids"] and r["block_sha"] == w["block_sha"]
                  and len(r["pfns"]) >= PAGES and r["pfns"] == w["pfns"],
                  f"B reads the blocks A stored, from A's physical pages "
                  f"({len(w['pfns'])} PFNs)",
                  "" if not ok else f"A ids {w['ids']} pfns {w['pfns']}\n"
                  f"B ids {r['ids']} pfns {r['pfns']}")
        tap.check(ok and r["miss_exists"] == 0 and r["miss_got"] == [False] * PAGES
                  and r["miss_untouched"] and r["miss_get_none"],
                  "B misses keys never stored (batch_exists 0, batch_get_v1 all False, "
                  "get None) and its pages keep their bytes",
                  "" if not ok else json.dumps({k: r[k] for k in (
                      "miss_exists", "miss_got", "miss_untouched", "miss_get_none")}))

        # The module's own figures, while A and B are both joined.
        sy = sysfs_space(w["space"])
        print(f"# sysfs space {w['space']}: {sy}", flush=True)
        print(f"# pool used: +{w['used'] - start_used} bytes after A's store, "
              f"+{r.get('used', -1) - start_used} with B joined and loaded", flush=True)
        tap.check(ok and sy is not None and sy["clients"] == 2
                  and sy["published_blocks"] + sy["cached_blocks"] == PAGES
                  and sy["inserts"] == PAGES and sy["readers"] == 0
                  and r["restore"] == [True] * PAGES and r["restore_inserts"] == 0
                  and r["used"] == w["used"]
                  and w["used"] - start_used >= PAGES * w["block_bytes"]
                  and r["my_refs"] == 0 and w["my_refs"] == 0,
                  f"the module holds one copy of the {PAGES} pages for both processes "
                  "(2 clients, no reader references left, B's store of the same keys "
                  "added none, pool use unchanged by B)",
                  f"sysfs {sy}\nA {json.dumps({k: w[k] for k in ('used', 'my_refs')})}\n"
                  + ("" if not ok else json.dumps({k: r[k] for k in (
                      "used", "restore", "restore_inserts", "my_refs")})))

        t = time.monotonic()
        c_out = ks.Child("sglang_tenant", {"out": f["tenant"]}, logs["tenant"]).finish(WAIT_S)
        print(f"# C: {time.monotonic() - t:.0f}s", flush=True)
        ok = os.path.exists(f["tenant"])
        c = ks.load(f["tenant"]) if ok else {}
        tap.check(ok and c["space"] != w["space"] and c["exists"] == 0
                  and c["got"] == [False] * PAGES and c["untouched"],
                  "process C under another kvpool_tenant gets another space and misses "
                  "every key", c_out if not ok else json.dumps(c))
    finally:
        for p in done.values():
            with open(p, "w"):
                pass
        outs = [ch.finish(WAIT_S) for ch in (writer, reader) if ch is not None]
    with kvrt.Pool(BACKEND) as pool:
        end_used = pool.info().used_bytes
    gone = sysfs_space(w["space"]) if w else {"no": 1}
    tap.check(writer.returncode == 0 and reader is not None and reader.returncode == 0
              and gone is None and os.path.isdir(SYSFS_SPACES) and end_used == start_used,
              "A and B exited cleanly; the space is gone from the module and the pool is "
              "back to its starting use",
              f"pool used {start_used} at start, {end_used} at the end; sysfs {gone}\n"
              + "\n".join(outs))
    return 1 if tap.failed else 0


def main() -> int:
    return ks.main_run_only(mode_run, T0)


if __name__ == "__main__":
    sys.exit(main())
