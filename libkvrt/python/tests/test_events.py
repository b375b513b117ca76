# SPDX-License-Identifier: MIT
"""Events: the descriptor with selectors, the typed iterator."""
import selectors
import unittest

import kvrt

from .util import PoolCase


class TestEvents(PoolCase):
    def test_eviction_events_through_selectors(self):
        sp = self.space(blocks=2)
        fd = sp.fileno()
        self.assertEqual(sp.fileno(), fd)
        sel = selectors.DefaultSelector()
        self.addCleanup(sel.close)
        sel.register(sp, selectors.EVENT_READ)  # a Space is a file-like object
        self.assertEqual(sel.select(timeout=0), [])
        hs = kvrt.hash_prompt(list(range(32)), 16)
        ids = sp.alloc(2)
        sp.publish(ids, hs)
        sp.release(ids)
        sp.alloc(1)  # evicts one cached block
        ready = sel.select(timeout=1)
        self.assertEqual(len(ready), 1)
        self.assertIs(ready[0][0].fileobj, sp)
        evs = list(sp.events())
        types = [e.type for e in evs]
        self.assertIn(kvrt.EventType.EVICTED, types)
        self.assertIn(kvrt.EventType.QUOTA_PRESSURE, types)
        self.assertEqual([e.seq for e in evs], list(range(1, len(evs) + 1)))
        ev = next(e for e in evs if e.type == kvrt.EventType.EVICTED)
        self.assertEqual(ev.cause, kvrt.EvictCause.QUOTA)
        self.assertEqual(ev.hash, hs[0])  # released longest ago goes first
        self.assertEqual(ev.block, int(ids[0]))
        qp = next(e for e in evs if e.type == kvrt.EventType.QUOTA_PRESSURE)
        self.assertEqual(qp.count, 1)
        self.assertEqual(sel.select(timeout=0), [])
        self.assertEqual(sp.read_events(), [])

    def test_space_destroyed(self):
        sp = self.space()
        self.pool.destroy_space(sp.name)
        evs = sp.read_events(1)
        self.assertEqual([e.type for e in evs], [kvrt.EventType.SPACE_DESTROYED])
        with self.assertRaisesRegex(ValueError, "max_events 0: pass a positive"):
            sp.read_events(0)


if __name__ == "__main__":
    unittest.main()
