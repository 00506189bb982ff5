#!/usr/bin/env bash
# check-leftovers.sh fails if a test run left deskfarm domains, VM directories
# or sockets behind: a farm cleans up after itself. It checks the state dirs
# of the tests (/var/lib/deskfarm-test), the fault tests
# (/var/lib/deskfarm-test-faults), the benchmarks (/var/lib/deskfarm-bench)
# and the soak (/var/lib/deskfarm-soak); never a user's /var/lib/deskfarm.
# It also checks that kubetest's control planes and netns are gone.
set -euo pipefail
dirs=(/var/lib/deskfarm-test /var/lib/deskfarm-test-faults /var/lib/deskfarm-test-rebuild/state /var/lib/deskfarm-bench /var/lib/deskfarm-soak
	/var/lib/deskfarm-replay-e2e /var/lib/deskfarm-bench-trajectory /var/lib/deskfarm-bench-density)
bad=0
doms=$(for d in $(virsh -c qemu:///system list --all --name | grep '^deskfarm-' || true); do
	xml=$(virsh -c qemu:///system dumpxml "$d" 2>/dev/null || true)
	for s in "${dirs[@]}"; do
		if grep -q "$s/" <<<"$xml"; then echo "$d ($s)"; break; fi
	done
done)
if [ -n "$doms" ]; then
	echo "leftover libvirt domains: $doms" >&2
	bad=1
fi
for s in "${dirs[@]}"; do
	d=$s/vms
	if [ -d "$d" ] && [ -n "$(ls -A "$d")" ]; then
		echo "leftover VM directories in $d: $(ls -A "$d")" >&2
		bad=1
	fi
done
# The disk-full tests of video and trajectory mount small tmpfs under
# /var/lib/deskfarm-*: each must be gone.
mnts=$(awk '$2 ~ "^/var/lib/deskfarm" {print $2}' /proc/mounts)
if [ -n "$mnts" ]; then
	echo "leftover mounts: $mnts" >&2
	bad=1
fi
# internal/kubetest: control planes' data dirs and processes, and the
# network namespaces of simulated node agents (the dfk-br0 bridge stays).
kube=$(ls -d /var/lib/deskfarm-test-kube-* 2>/dev/null || true)
if [ -n "$kube" ]; then
	echo "leftover kubetest data dirs: $kube" >&2
	bad=1
fi
procs=$(pgrep -a -f 'deskfarm-test-kube-' || true)
if [ -n "$procs" ]; then
	echo "leftover kubetest processes: $procs" >&2
	bad=1
fi
netns=$(ip netns list 2>/dev/null | grep -o '^dfk-[^ ]*' || true)
if [ -n "$netns" ]; then
	echo "leftover kubetest network namespaces: $netns" >&2
	bad=1
fi
[ $bad = 0 ] && echo "leftovers: none (no deskfarm domains, overlays, sockets, kubetest control planes or netns)"
exit $bad
