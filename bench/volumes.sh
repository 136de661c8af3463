#!/usr/bin/env bash
# volumes.sh runs the volume manager's mount + unmount benchmark
# (csi/volumes, BenchmarkMountUnmount100Volumes) twice: on TMPDIR's
# filesystem, and, as root with mkfs.ext4 and a free loop device, on an
# ext4 with a journal made for the run in a file under TMPDIR (mkfs.ext4's
# default, what a node's kubelet or Nomad data directory usually is). Each
# run prints its filesystem, whether it has a journal, and the load average.
# Usage: bench/volumes.sh [rounds]   (from the repository's root; 5 rounds)
set -euo pipefail

rounds=${1:-5}
tmp=${TMPDIR:-/tmp}
bin=$(mktemp -d "$tmp/bench-volumes.XXXXXX")
mnt=""
cleanup() {
	if [ -n "$mnt" ]; then
		umount "$mnt" 2>/dev/null || true
		rmdir "$mnt"
	fi
	rm -rf "$bin"
}
trap cleanup EXIT

go test -c -o "$bin/volumes.test" ./csi/volumes/

# describe says what filesystem dir is on: its type and, for ext4, whether
# it has a journal (the kernel lists one jbd2 entry per journaled device).
describe() {
	local type source dev
	type=$(stat -f -c %T "$1")
	source=$(findmnt -n -o SOURCE -T "$1" || echo "?")
	# The kernel's name of the device (dm-0 for /dev/mapper/x): jbd2 uses it.
	dev=$(lsblk -n -o KNAME "$source" 2>/dev/null | head -1 || true)
	dev=${dev:-$(basename "$source")}
	if [ "$type" = "ext2/ext3" ]; then
		if compgen -G "/proc/fs/jbd2/$dev-*" >/dev/null; then
			type="ext4 with a journal"
		else
			type="ext4 without a journal"
		fi
	fi
	echo "$type on $source"
}

# summary prints one line per round of the benchmark's output: plugvisor's
# pairs/s, p50, p99 and CPU per pair, then each baseline's pairs/s and p99
# (bare-csi's CPU per pair too: the plugin's part and four gRPC calls).
summary() {
	awk '/^BenchmarkMountUnmount100Volumes/ {
		delete m
		for (i = 3; i < NF; i += 2) m[$(i + 1)] = $i
		printf "%-18s plugvisor %6.0f pairs/s p50 %5.1f ms p99 %5.1f ms %5.0f us CPU/pair | kernel %6.0f pairs/s p99 %5.1f ms | kernel+mkdir %6.0f pairs/s p99 %5.1f ms | kernel+sync %6.0f pairs/s | bare-csi %6.0f pairs/s p99 %5.1f ms %5.0f us CPU/pair | load %s\n",
			substr($1, 33), m["pairs/s"], m["p50-ms"], m["p99-ms"], m["cpu-us/pair"],
			m["kernel-pairs/s"], m["kernel-p99-ms"], m["kernel+mkdir-pairs/s"], m["kernel+mkdir-p99-ms"],
			m["kernel+sync-pairs/s"], m["bare-csi-pairs/s"], m["bare-csi-p99-ms"], m["bare-csi-cpu-us/pair"], m["load1"]
	}'
}

run() {
	echo "bench-volumes: $rounds rounds in $1: $(describe "$1"), load average $(cut -d' ' -f1-3 /proc/loadavg)"
	(cd csi/volumes && TMPDIR="$1" "$bin/volumes.test" -test.run '^$' \
		-test.bench '^BenchmarkMountUnmount100Volumes$' -test.benchtime 1000x -test.count "$rounds") | tee "$bin/out.txt"
	echo "bench-volumes: in short, on $(describe "$1"):"
	summary <"$bin/out.txt"
}

run "$tmp"

if [ "$(id -u)" != 0 ] || ! command -v mkfs.ext4 >/dev/null || ! losetup -f >/dev/null 2>&1; then
	echo "bench-volumes: not root, or no mkfs.ext4 or free loop device: no run on an ext4 with a journal"
	exit 0
fi
truncate -s 2G "$bin/ext4.img"
mkfs.ext4 -q -F "$bin/ext4.img"
mnt=$(mktemp -d "$tmp/bench-volumes-ext4.XXXXXX")
mount -o loop "$bin/ext4.img" "$mnt"
run "$mnt"
