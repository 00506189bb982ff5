#!/usr/bin/env bash
# build.sh builds the real Kubernetes control plane the cluster tests run
# against — kube-apiserver, kubectl and etcd — from the Go module proxy
# alone (Debian ships no kube-apiserver, and its etcd 3.4 is older than
# Kubernetes 1.37 supports), and caches them by version and by this
# directory's hash under /var/cache/deskfarm/kube/. Only the first run builds;
# later runs print the cached directory and exit.
#
# Recipe and numbers: ../shared/research/kubernetes-local.md. The
# apiserver build is the slow part: 12 min with -p 1 on a loaded 2-core
# machine, about 5-6 min idle.
#
# Usage: scripts/kube/build.sh   (prints the directory holding the binaries)
set -euo pipefail

K8S_VERSION=v1.37.2
STAGING_VERSION=v0.37.2
ETCD_VERSION=v3.7.3

here=$(cd "$(dirname "$0")" && pwd)
hash=$(cat "$here"/build.sh "$here"/go.mod.in | sha256sum | cut -c1-12)
cache=${DESKFARM_KUBE_CACHE:-/var/cache/deskfarm/kube}
out=$cache/$K8S_VERSION-etcd-$ETCD_VERSION-$hash
say() { printf 'kube: %s\n' "$*" >&2; }

if [ -x "$out/kube-apiserver" ] && [ -x "$out/kubectl" ] && [ -x "$out/etcd" ]; then
	echo "$out"
	exit 0
fi
export PATH=/usr/local/go/bin:$PATH
export GOFLAGS=-buildvcs=false GOTOOLCHAIN=local GOPROXY=${GOPROXY:-https://proxy.golang.org}
work=$cache/build-$hash
rm -rf "$work" "$out.tmp"
mkdir -p "$work/k8s/stub/sample-cli-plugin" "$work/k8s/stub/sample-controller" "$work/etcd" "$out.tmp"
trap 'rm -rf "$work" "$out.tmp"' EXIT

# kube-apiserver and kubectl: k8s.io/kubernetes with each staging module
# replaced by its published version; the two sample modules are not
# published and neither binary imports them, so empty stubs stand in.
echo 'module k8s.io/sample-cli-plugin' >"$work/k8s/stub/sample-cli-plugin/go.mod"
echo 'module k8s.io/sample-controller' >"$work/k8s/stub/sample-controller/go.mod"
sed -e "s/@K8S@/$K8S_VERSION/g" -e "s/@STAGING@/$STAGING_VERSION/g" "$here/go.mod.in" >"$work/k8s/go.mod"
t0=$(date +%s)
say "resolving k8s.io/kubernetes $K8S_VERSION"
(cd "$work/k8s" && go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" "k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION")
# Without the version stamp /version says v0.0.0-master and kubectl
# refuses to parse it.
minor=$(echo "$K8S_VERSION" | cut -d. -f2)
P=k8s.io/component-base/version
C=k8s.io/client-go/pkg/version
ldf="-s -w -X $P.gitVersion=$K8S_VERSION -X $P.gitMajor=1 -X $P.gitMinor=$minor -X $P.gitTreeState=clean -X $P.buildDate=2026-01-01T00:00:00Z -X $C.gitVersion=$K8S_VERSION -X $C.gitMajor=1 -X $C.gitMinor=$minor"
for cmd in kube-apiserver kubectl; do
	say "building $cmd $K8S_VERSION (the apiserver takes minutes)"
	(cd "$work/k8s" && nice -n 10 go build -trimpath -ldflags "$ldf" -o "$out.tmp/$cmd" "k8s.io/kubernetes/cmd/$cmd")
	say "built $cmd after $(($(date +%s) - t0))s"
done

# etcd: go install refuses the server module (it has replace directives),
# so a throwaway module requires it.
printf 'module example.com/etcdbuild\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$work/etcd/go.mod"
(cd "$work/etcd" && go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION" &&
	nice -n 10 go build -trimpath -ldflags "-s -w" -o "$out.tmp/etcd" go.etcd.io/etcd/server/v3)
say "built etcd $ETCD_VERSION after $(($(date +%s) - t0))s"

"$out.tmp/kubectl" version --client >/dev/null
"$out.tmp/etcd" --version >/dev/null
rm -rf "$out"
mv "$out.tmp" "$out"
say "cached in $out"
echo "$out"
