#!/bin/bash
# SPDX-License-Identifier: MIT
#
# cluster.sh start DIR | stop DIR: a Redis Cluster of three masters on
# loopback for the tools' tests (kvrt-demo's --tier redis), with the two
# tenants Documentation/libkvrt.rst describes (alice: ~tenA:*, bob:
# ~tenB:*; passwords alice-pw, bob-pw), each with exactly the ACL it
# gives: the tier's commands and nothing else.  start prints the seeds
# ("127.0.0.1:P,127.0.0.1:P"); the servers' pids, logs and configs stay in
# DIR, and stop kills them.  Ports below the ephemeral range, node and bus
# (port + 10000) alike.  libkvrt's own test (tests/test_tier_redis.c)
# starts its cluster itself, in C.
set -u
cmd=${1:-}
DIR=${2:-}
[ -n "$cmd" ] && [ -n "$DIR" ] || { echo "usage: cluster.sh start|stop DIR" >&2; exit 2; }
# As Documentation/libkvrt.rst's line and tests/test_tier_redis.c's TIER_ACL.
ACL='resetchannels -@all +cluster|slots +exists +get +set +asking'

stop() {
	local p
	for p in "$DIR"/redis-*.pid; do
		[ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null
		rm -f "$p"
	done
}

start() {
	local base attempt i ports=() addrs=() ok
	command -v redis-server > /dev/null && command -v redis-cli > /dev/null || {
		echo "cluster.sh: redis-server and redis-cli are needed (apt-get install redis-server redis-tools)" >&2
		exit 1
	}
	mkdir -p "$DIR"
	for attempt in 0 1 2; do
		base=$((10000 + (($$ * 7 + attempt * 1999) % 4000) * 3))
		ports=($base $((base + 1)) $((base + 2)))
		addrs=()
		for i in 0 1 2; do
			redis-server --port "${ports[$i]}" --bind 127.0.0.1 --cluster-enabled yes \
				--cluster-config-file "nodes-${ports[$i]}.conf" --cluster-node-timeout 3000 \
				--dir "$DIR" --save "" --appendonly no --protected-mode no \
				--logfile "$DIR/redis-${ports[$i]}.log" --daemonize yes \
				--pidfile "$DIR/redis-${ports[$i]}.pid" > /dev/null
			addrs+=("127.0.0.1:${ports[$i]}")
		done
		ok=1
		for i in 0 1 2; do
			for _ in $(seq 100); do
				redis-cli -p "${ports[$i]}" PING 2>/dev/null | grep -q PONG && break
				sleep 0.05
			done
		done
		if redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes \
			> "$DIR/create.log" 2>&1; then
			for i in 0 1 2; do
				for _ in $(seq 200); do
					redis-cli -p "${ports[$i]}" CLUSTER INFO | grep -q cluster_state:ok && break
					sleep 0.05
				done
				# shellcheck disable=SC2086
				redis-cli -p "${ports[$i]}" ACL SETUSER alice reset on '>alice-pw' '~tenA:*' $ACL > /dev/null &&
				redis-cli -p "${ports[$i]}" ACL SETUSER bob reset on '>bob-pw' '~tenB:*' $ACL > /dev/null ||
					ok=
			done
		else
			ok=
		fi
		[ -n "$ok" ] && { echo "${addrs[0]},${addrs[1]}"; return 0; }
		stop
		rm -f "$DIR"/nodes-*.conf
	done
	echo "cluster.sh: no cluster after 3 attempts; logs in $DIR" >&2
	exit 1
}

case $cmd in
start) start ;;
stop) stop ;;
*) echo "usage: cluster.sh start|stop DIR" >&2; exit 2 ;;
esac
