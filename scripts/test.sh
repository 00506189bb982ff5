#!/usr/bin/env bash
# test.sh is `make test` after the host set-up: the build, vet and unit
# tests, the images, the E2E tests against real libvirtd and QEMU, the soak
# and the leftover check, with the real Kubernetes control plane
# (scripts/kube/build.sh) built in the background.
#
# The order is CI's budget (90 min on 2 cores, nothing cached): the control
# plane's first build is about 31 core-minutes of compiling, and only the
# packages whose tests start it (those importing internal/kubetest) need
# it. So it builds from the start, under nice, beside everything that does
# not need it: the build, vet, unit tests, images and the other packages'
# E2E tests, which leave a core idle for much of their time (a TCG guest
# waiting on its screen, a poll's sleep). The cluster packages' E2E tests
# run once it is built, beside the other packages' (they keep their own
# state dirs and mostly wait). Each phase prints its duration, so a slow
# run says where its time went (docs/benchmarks.md, "make test on a fresh
# machine").
#
# Tests named *HostFaultsE2E (a libvirtd restart) run alone after both
# streams, as they would break the other stream's calls.
#
# Every phase runs even if an earlier E2E phase failed, so one run shows
# every failure; the exit status is the first failure's.
set -uo pipefail
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH GOFLAGS=${GOFLAGS:--mod=mod}

BIN=bin/deskfarm
GO_TEST_TIMEOUT=${GO_TEST_TIMEOUT:-75m}
SOAK_PARALLEL=${SOAK_PARALLEL:-2}

# The cluster stream (below) counts from the run's start too.
export TEST_T0=${TEST_T0:-$(date +%s)}
t0=$TEST_T0
rc=0
# phase NAME CMD...: runs CMD, prints how long it took and from when.
phase() {
	local name=$1 s=$(date +%s)
	shift
	printf 'test: %s: started at +%dm%02ds\n' "$name" $(((s - t0) / 60)) $(((s - t0) % 60))
	"$@"
	local r=$? e=$(date +%s)
	printf 'test: %s: %s in %dm%02ds (at +%dm%02ds)\n' "$name" "$([ $r = 0 ] && echo done || echo "FAILED (exit $r)")" \
		$(((e - s) / 60)) $(((e - s) % 60)) $(((e - t0) / 60)) $(((e - t0) % 60))
	[ $rc != 0 ] || rc=$r
	return $r
}

# e2e RUN SKIP PKG...: the tests of PKGs matching RUN and not SKIP, one
# package at a time.
e2e() {
	local run=$1 skip=$2
	shift 2
	DESKFARM_REQUIRE_VM=1 go test -count=1 -timeout "$GO_TEST_TIMEOUT" -p 1 -run "$run" -skip "$skip" "$@"
}
# Tests named *HostFaultsE2E disturb what every farm on the host shares
# (TestHostFaultsE2E restarts libvirtd): they run alone, after the rest.
hostFaults='HostFaultsE2E$'

# waitkube waits for the build's status file: the cluster tests' job is
# not the build's parent, so it cannot wait for it.
waitkube() {
	until [ -s bin/kube-build.rc ]; do
		if ! kill -0 "${KUBE_PID:-$$}" 2>/dev/null; then
			echo "test: kube: the control plane's build ended without a status" >&2
			return 1
		fi
		sleep 2
	done
	local k
	k=$(cat bin/kube-build.rc)
	if [ $k != 0 ]; then
		cat bin/kube-build.log >&2
		echo "test: kube: scripts/kube/build.sh failed" >&2
		return $k
	fi
	echo "test: kube: control plane binaries in $(cat bin/kube-build.out)"
}

# scripts/test.sh cluster-e2e PKG...: the cluster stream (see below).
if [ "${1:-}" = cluster-e2e ]; then
	shift
	phase kube-wait waitkube && phase e2e-cluster e2e E2E "$hostFaults" "$@"
	exit
fi

mkdir -p bin
# The background jobs run in sessions of their own (setsid), so an
# interrupted or failed run kills their compilers and tests with them.
jobs_=()
trap 'for j in "${jobs_[@]}"; do kill -- -"$j" 2>/dev/null; done' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
echo "test: kube: building or finding the control plane in the background (log bin/kube-build.log)"
rm -f bin/kube-build.rc
setsid bash -c 'scripts/kube/build.sh >bin/kube-build.out 2>bin/kube-build.log; echo $? >bin/kube-build.rc' &
kube=$!
jobs_+=($kube)

phase build go build -o $BIN ./cmd/deskfarm || exit
phase vet make --no-print-directory vet || exit
phase unit make --no-print-directory unit || exit
phase images $BIN image build tiny desktop osworld || exit

# The packages whose tests run a control plane, from their imports, and
# kubetest's own.
mapfile -t all < <(go list ./...)
mapfile -t kubepkgs < <(go list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... |
	awk -v k=github.com/deskfarm/deskfarm/internal/kubetest '$1 == k || / github.com\/deskfarm\/deskfarm\/internal\/kubetest( |$)/ { print $1 }')
mapfile -t rest < <(printf '%s\n' "${all[@]}" | grep -vxF -f <(printf '%s\n' "${kubepkgs[@]}"))

# The cluster packages' E2E tests run beside the others once the control
# plane is built: they keep their own state dirs (not testenv.StateDir,
# whose lock the others take in turn), and they mostly wait (tiny VMs,
# leases, outages): the host was 50-88% idle through them (vmstat,
# 2026-12-02). Their output comes whole when both are done.
echo "test: E2E: ${#rest[@]} packages, and beside them, once the control plane is built: ${kubepkgs[*]#github.com/deskfarm/deskfarm/} (output in bin/e2e-cluster.log)"
KUBE_PID=$kube setsid "$self" cluster-e2e "${kubepkgs[@]}" >bin/e2e-cluster.log 2>&1 &
cluster=$!
jobs_+=($cluster)
phase e2e e2e E2E "$hostFaults" "${rest[@]}"
wait $cluster
c=$?
cat bin/e2e-cluster.log
[ $rc != 0 ] || rc=$c
mapfile -t faultpkgs < <(grep -rlE --include='*_test.go' '^func Test[A-Za-z0-9_]*HostFaultsE2E\(' . | xargs -r -n1 dirname | sort -u)
if [ ${#faultpkgs[@]} -gt 0 ]; then
	phase e2e-host-faults e2e "$hostFaults" '' "${faultpkgs[@]}"
fi
phase soak go run ./bench/soak -duration 2m -parallel "$SOAK_PARALLEL"
phase leftovers scripts/check-leftovers.sh
e=$(date +%s)
printf 'test: all: %s in %dm%02ds\n' "$([ $rc = 0 ] && echo passed || echo FAILED)" $(((e - t0) / 60)) $(((e - t0) % 60))
exit $rc
