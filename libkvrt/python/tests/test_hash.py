# SPDX-License-Identifier: MIT
"""Hashing against a Python reimplementation of kvrt.h's documented formula."""
import hashlib
import struct
import unittest

import numpy as np

import kvrt


def ref_block(parent, tokens, extra=b""):
    """SHA-256(parent || le32(n) || le32(tokens) || le64(len(extra)) || extra)."""
    m = hashlib.sha256()
    m.update(parent if parent is not None else bytes(32))
    m.update(struct.pack("<I", len(tokens)))
    m.update(struct.pack(f"<{len(tokens)}I", *[t & 0xFFFFFFFF for t in tokens]))
    m.update(struct.pack("<Q", len(extra)))
    m.update(extra)
    return m.digest()


class TestHash(unittest.TestCase):
    def test_block(self):
        self.assertEqual(kvrt.hash_block([]), ref_block(None, []))
        self.assertEqual(kvrt.hash_block([1, 2, 3]), ref_block(None, [1, 2, 3]))
        p = bytes(range(32))
        self.assertEqual(kvrt.hash_block([5, 0xFFFFFFFF], parent=p, extra=b"lora:7"),
                         ref_block(p, [5, 0xFFFFFFFF], b"lora:7"))
        # int32 -1 hashes as its uint32 bit pattern
        self.assertEqual(kvrt.hash_block(np.array([-1], dtype=np.int32)),
                         ref_block(None, [0xFFFFFFFF]))
        self.assertEqual(kvrt.hash_block([-1]), kvrt.hash_block([0xFFFFFFFF]))
        # the empty-input digest is SHA-256 of 32 zeros, le32(0), le64(0)
        self.assertEqual(kvrt.hash_block([]).hex(),
                         hashlib.sha256(bytes(32 + 4 + 8)).hexdigest())

    def test_prompt_chains(self):
        rng = np.random.default_rng(1)
        toks = rng.integers(0, 1 << 32, size=100, dtype=np.uint64).astype(np.uint32)
        got = kvrt.hash_prompt(toks, 16)
        self.assertEqual(len(got), 6)  # only full blocks
        parent = None
        for j, h in enumerate(got):
            want = ref_block(parent, [int(t) for t in toks[16 * j:16 * j + 16]])
            self.assertEqual(h, want)
            parent = h
        self.assertEqual(len(kvrt.hash_prompt(toks, 16, max_hashes=2)), 2)
        # continuing from the last hash
        cont = kvrt.hash_prompt(toks[64:], 16, root=got[3])
        self.assertEqual(cont, got[4:])
        arr = kvrt.hash_prompt_array(toks, 16)
        self.assertEqual(arr.shape, (6, 32))
        self.assertEqual(bytes(arr[5]), got[5])
        self.assertEqual(kvrt.hash_prompt([1, 2, 3], 16), [])

    def test_prompt_extra(self):
        toks = list(range(48))
        extra = [b"a", b"", b"img:xyz"]
        got = kvrt.hash_prompt(toks, 16, extra=extra)
        parent = None
        for j in range(3):
            want = ref_block(parent, toks[16 * j:16 * j + 16], extra[j])
            self.assertEqual(got[j], want)
            parent = want
        with self.assertRaisesRegex(ValueError, "one bytes per hashed block"):
            kvrt.hash_prompt(toks, 16, extra=[b"a"])

    def test_info(self):
        info = kvrt.hash_info()
        self.assertIn("OpenSSL", info.libcrypto)
        self.assertIsInstance(info.cpu_sha_ni, bool)


if __name__ == "__main__":
    unittest.main()
