#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# fake-tree.sh DIR: a fake kvpool sysfs tree in DIR/sys/kvpool and debugfs
# tree in DIR/dbg/kvpool, in the formats of kmod/sysfs.c, kmod/sysfs_space.c
# and kmod/debugfs.c (Documentation/ABI/testing/sysfs-class-misc-kvpool),
# with figures that tests/run.sh knows by heart.  Files get the modes the
# module gives them: 0644 tunables, 0200 actions, 0444 the rest; debugfs 0400.
#
# Spaces: 1 llama70b.tp0 (uid 0, persistent, 2 clients), 2 qwen7b (uid 1000),
# 5 dup (destroyed, still in use: unlinked=1) and 6 dup (its successor).

set -eu

D=${1:?usage: fake-tree.sh DIR}
S=$D/sys/kvpool
G=$D/dbg/kvpool
rm -rf "$D/sys" "$D/dbg"
mkdir -p "$S/space" "$S/node0" "$S/node1" "$G"

put() {	# dir file value
	printf '%s\n' "$3" >"$1/$2"
}

for kv in pool_bytes=268435456 free_bytes=201326592 held_bytes=0 chunk_bytes=2097152 \
	max_batch=65536 max_space_bytes=1099511627776 spaces=4 allocs=1000 frees=900 \
	alloc_failures=2 zeroed_chunks=5 reclaimed_bytes=4194304 prefix_hits=300 \
	prefix_misses=100 prefix_inserts=50 prefix_dedups=7 cached_bytes=8388608 \
	published_bytes=4194304 shrinker_enabled=1 min_cached_bytes=0 event_queue_max=65536 \
	refs_per_fd_max=16777216 spaces_per_uid_max=1024 uid_limit_default_bytes=0; do
	put "$S" "${kv%%=*}" "${kv#*=}"
done
put "$S" evictions "quota=1 pool=2 tenant=3 reclaim=4 admin=5"
printf 'uid=0 limit_bytes=0 used_bytes=33554432 spaces=3\nuid=1000 limit_bytes=1073741824 used_bytes=16777216 spaces=1\n' >"$S/uid_limit"
: >"$S/destroy_space"
: >"$S/drop_cached"
for n in 0 1; do
	put "$S/node$n" reserved_bytes 134217728
	put "$S/node$n" free_bytes 100663296
	put "$S/node$n" in_spaces_bytes 33554432
	put "$S/node$n" held_bytes 0
done

space() {	# id name uid persistent clients block quota backed free owned pub cached holes hits misses rate inserts dedups evictions
	local d=$S/space/$1
	mkdir -p "$d"
	put "$d" name "$2"
	put "$d" uid "$3"
	put "$d" persistent "$4"
	put "$d" clients "$5"
	put "$d" block_bytes "$6"
	put "$d" quota_bytes "$7"
	put "$d" backed_bytes "$8"
	put "$d" free_blocks "$9"
	put "$d" owned_blocks "${10}"
	put "$d" published_blocks "${11}"
	put "$d" cached_blocks "${12}"
	put "$d" hole_blocks "${13}"
	put "$d" hits "${14}"
	put "$d" misses "${15}"
	put "$d" hit_rate "${16}"
	put "$d" inserts "${17}"
	put "$d" dedups "${18}"
	put "$d" evictions "${19}"
}
space 1 llama70b.tp0 0 1 2 2097152 67108864 33554432 4 6 2 4 0 200 50 800 30 5 \
	"quota=1 pool=0 tenant=0 reclaim=2 admin=3"
space 2 qwen7b 1000 0 1 1048576 33554432 16777216 10 4 0 1 1 100 50 666 20 2 \
	"quota=0 pool=2 tenant=3 reclaim=2 admin=2"
space 5 dup 0 0 1 4096 1048576 2097152 256 0 0 0 0 0 0 0 0 0 \
	"quota=0 pool=0 tenant=0 reclaim=0 admin=0"
space 6 dup 0 1 0 4096 1048576 0 0 0 0 0 0 0 0 0 0 0 \
	"quota=0 pool=0 tenant=0 reclaim=0 admin=0"

chmod 0444 "$S"/* "$S"/node*/* "$S"/space/*/* 2>/dev/null || true
chmod 0755 "$S/space" "$S"/node* "$S"/space/*
chmod 0644 "$S"/{pool_bytes,shrinker_enabled,min_cached_bytes,event_queue_max,refs_per_fd_max,spaces_per_uid_max,uid_limit,uid_limit_default_bytes}
chmod 0200 "$S"/{destroy_space,drop_cached}

cat >"$G/nodes" <<'EOF'
node0 reserved=134217728 free=100663296 in_spaces=33554432 held=0 chunks=64
node1 reserved=134217728 free=100663296 in_spaces=33554432 held=0 chunks=64
EOF
cat >"$G/spaces" <<'EOF'
space 1 name=llama70b.tp0 uid=0 gid=100 mode=0660 clients=2 block_bytes=2097152 nr_blocks=32 backed_blocks=16 backed_bytes=33554432 free=4 owned=6 published=2 cached=4 holes=0 readers=3 persistent=1 unlinked=0 policy=interleave node_mask=0x3 node0_bytes=16777216 node1_bytes=16777216
space 2 name=qwen7b uid=1000 gid=1000 mode=0600 clients=1 block_bytes=1048576 nr_blocks=32 backed_blocks=16 backed_bytes=16777216 free=10 owned=4 published=0 cached=1 holes=1 readers=0 persistent=0 unlinked=0 policy=preferred node_mask=0x0 node0_bytes=16777216 node1_bytes=0
space 5 name=dup uid=0 gid=0 mode=0600 clients=1 block_bytes=4096 nr_blocks=256 backed_blocks=256 backed_bytes=1048576 free=256 owned=0 published=0 cached=0 holes=0 readers=0 persistent=1 unlinked=1 policy=bind node_mask=0x1 node0_bytes=2097152 node1_bytes=0
space 6 name=dup uid=0 gid=0 mode=0600 clients=0 block_bytes=4096 nr_blocks=256 backed_blocks=0 backed_bytes=0 free=0 owned=0 published=0 cached=0 holes=0 readers=0 persistent=1 unlinked=0 policy=preferred node_mask=0x0 node0_bytes=0 node1_bytes=0
EOF
h() {	# a 64-hex-digit hash from a seed byte
	printf '%064d' 0 | sed "s/^../$1/"
}
{
	echo "space 1 name=llama70b.tp0"
	echo "  block=3 state=published readers=2 prio=50 hash=$(h a1)"
	echo "  block=4 state=published readers=1 prio=90 hash=$(h a2)"
	echo "  block=7 state=cached readers=0 prio=50 hash=$(h a3)"
	echo "  block=8 state=cached readers=0 prio=10 hash=$(h a4)"
	echo "  block=9 state=cached readers=0 prio=50 hash=$(h a5)"
	echo "  block=12 state=cached readers=0 prio=50 hash=$(h a6)"
	echo "space 2 name=qwen7b"
	echo "  block=0 state=cached readers=0 prio=50 hash=$(h b1)"
	echo "space 5 name=dup"
	echo "space 6 name=dup"
} >"$G/hashes"
cat >"$G/lru" <<'EOF'
space 1 name=llama70b.tp0
  block=8 prio=10
  block=7 prio=50
  block=12 prio=50
  block=9 prio=50
space 2 name=qwen7b
  block=0 prio=50
space 5 name=dup
space 6 name=dup
EOF
cat >"$G/residency" <<'EOF'
space 1 name=llama70b.tp0
space 2 name=qwen7b
space 5 name=dup
space 6 name=dup
EOF
cp "$S/uid_limit" "$G/tenants"
echo ok >"$G/check"
chmod 0400 "$G"/*
chmod 0755 "$D/sys" "$D/dbg" "$S" "$G"
