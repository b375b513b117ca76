#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""fatbin.py: what an (uncompressed) CUDA fatbin holds, for `make check`
where cuobjdump is not installed.

  fatbin.py list FATBIN          one line per image: "elf sm_80", "ptx compute_90"
  fatbin.py kernels FATBIN ARCH  the kernels of that image, one per line
                                 (ELF: its .text.NAME sections; PTX: .entry NAME)

The container: a 16-byte header (magic 0xba55ed50, version, header size,
size of what follows), then images, each a header (kind 1 PTX / 2 ELF,
header size, payload size, the SM number at byte 28, flag 0x100000 for an
arch-specific "a" target) and its payload.  Compressed images are reported
as such and not read (the Makefile builds with -no-compress).
"""
import struct
import sys


def images(data):
    magic, _ver, hsize, size = struct.unpack_from('<IHHQ', data, 0)
    if magic != 0xba55ed50:
        sys.exit('fatbin.py: not a fatbin (magic %#x)' % magic)
    off, end = hsize, hsize + size
    while off < end:
        kind, _v, ehs, psz = struct.unpack_from('<HHIQ', data, off)
        arch = struct.unpack_from('<I', data, off + 28)[0]
        flags = struct.unpack_from('<I', data, off + 40)[0]
        payload = data[off + ehs:off + ehs + psz]
        suffix = 'a' if flags & 0x100000 else ''
        if kind == 2:
            name = 'elf sm_%d%s' % (arch, suffix)
        elif kind == 1:
            name = 'ptx compute_%d%s' % (arch, suffix)
        else:
            name = 'kind%d %d' % (kind, arch)
        yield name, payload
        off += ehs + psz


def elf_sections(elf):
    if elf[:4] != b'\x7fELF':
        return None
    shoff = struct.unpack_from('<Q', elf, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', elf, 0x3a)
    hdrs = [struct.unpack_from('<IIQQQQIIQQ', elf, shoff + i * shentsize) for i in range(shnum)]
    stroff = hdrs[shstrndx][4]
    names = []
    for h in hdrs:
        s = elf[stroff + h[0]:]
        names.append(s[:s.index(b'\0')].decode())
    return names


def kernels(name, payload):
    if name.startswith('elf'):
        secs = elf_sections(payload)
        if secs is None:
            return None
        return sorted(s[len('.text.'):] for s in secs if s.startswith('.text.'))
    text = payload.decode(errors='replace')
    if '.version' not in text:
        return None
    out = []
    for line in text.splitlines():
        line = line.strip()
        for kw in ('.visible .entry ', '.entry '):
            if line.startswith(kw):
                out.append(line[len(kw):].split('(')[0].strip())
                break
    return sorted(out)


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ('list', 'kernels'):
        sys.exit(__doc__)
    data = open(sys.argv[2], 'rb').read()
    for name, payload in images(data):
        if sys.argv[1] == 'list':
            print(name)
        elif name.split()[1] == sys.argv[3]:
            ks = kernels(name, payload)
            if ks is None:
                sys.exit('fatbin.py: %s is compressed or unreadable' % name)
            print('\n'.join(ks))


if __name__ == '__main__':
    main()
