// Package clusterbench measures deskfarm's cluster path (issue 15) on one
// machine: a real kube-apiserver and etcd (internal/kubetest), three
// in-process node agents (pool.Manager + cluster.Agent + web front door
// each, on its own loopback port), and desktops simulated by the in-memory
// vmm farm with a measured reset delay. The benchmark is its _test.go:
//
//	go test -run '^$' -bench . -benchtime 1x ./bench/cluster
//
// Its results are recorded in docs/benchmarks.md ("Cluster (issue 15)").
package clusterbench
