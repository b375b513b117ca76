#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""An independent reference for tier/tier_mac.c, from the standard library
alone: HMAC-SHA256 (hmac, hashlib) and Poly1305 written from its definition
(RFC 8439, section 2.5), not from OpenSSL.  Prints the known answers that
test_tier_key.c compares the library's tags and names with."""
import hashlib
import hmac

TAG_LABEL = b"kvrt tier tag v1\0"
NAME_LABEL = b"kvrt tier name v2\0"


def poly1305(key: bytes, msg: bytes) -> bytes:
    r = int.from_bytes(key[:16], "little") & 0x0FFFFFFC0FFFFFFC0FFFFFFC0FFFFFFF
    s = int.from_bytes(key[16:32], "little")
    p = (1 << 130) - 5
    acc = 0
    for i in range(0, len(msg), 16):
        block = msg[i:i + 16] + b"\x01"
        acc = (acc + int.from_bytes(block, "little")) * r % p
    return ((acc + s) % (1 << 128)).to_bytes(16, "little")


def tag(key: bytes, identity: bytes, h: bytes, nonce: bytes, data: bytes) -> bytes:
    once = hmac.new(key, TAG_LABEL + identity + h + nonce, hashlib.sha256).digest()
    return poly1305(once, data)


def blind_name(key: bytes, identity: bytes, h: bytes) -> bytes:
    return hmac.new(key, NAME_LABEL + identity + h, hashlib.sha256).digest()


def main() -> None:
    key = bytes(range(32))
    identity = bytes(0x40 + i for i in range(32))
    h = bytes(0x80 + i for i in range(32))
    nonce = bytes(0xC0 + i for i in range(16))
    # 4099 bytes: full 16-byte blocks and a short last one.
    data = bytes((i * 7 + 3) & 0xFF for i in range(4099))
    print("tag", tag(key, identity, h, nonce, data).hex())
    print("tag_empty", tag(key, identity, h, nonce, b"").hex())
    print("blind_name", blind_name(key, identity, h).hex())
    print("derived", hmac.new(b"kvrt test label", b"user\0secret", hashlib.sha256).hexdigest())


if __name__ == "__main__":
    main()
