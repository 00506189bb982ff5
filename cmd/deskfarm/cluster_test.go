package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
)

// Cluster mode's flags: each bad one is refused naming what it accepts,
// the single-host pool flags are refused, and good ones reach the farm
// config with their defaults from the environment.
func TestServeClusterFlags(t *testing.T) {
	saved := newFarm
	t.Cleanup(func() { newFarm = saved })
	var got farmConfig
	newFarm = func(ctx context.Context, cfg farmConfig) (vmm.Farm, func() error, error) {
		got = cfg
		return nil, nil, errors.New("stop here")
	}
	dir := t.TempDir()
	kc, tokFile, empty := filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "cluster-token"), filepath.Join(dir, "empty")
	for _, f := range []struct{ path, data string }{{kc, "apiVersion: v1\n"}, {tokFile, "clu-secret\n"}, {empty, ""}} {
		if err := os.WriteFile(f.path, []byte(f.data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("DESKFARM_NODE_NAME", "")
	t.Setenv("DESKFARM_CLUSTER_TOKEN", "")
	ok := []string{"--kubeconfig", kc, "--node", "n1", "--advertise", "http://10.0.0.5:8080", "--cluster-token-file", tokFile}
	with := func(args ...string) []string { return append(append([]string{"serve"}, ok...), args...) }
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--node", "n1"}, "--node is for cluster mode: add --kubeconfig FILE, or --cluster"},
		{[]string{"serve", "--advertise", "http://x:1"}, "--advertise is for cluster mode"},
		{[]string{"serve", "--kubeconfig", filepath.Join(dir, "none")}, "--kubeconfig:"},
		{with("--pools", "p.yaml"), "--pools: in cluster mode the pools are the cluster's DesktopPools"},
		{with("--pool", "desktop.max=2"), "--pool: in cluster mode"},
		{with("--warm", "tiny"), "--warm: in cluster mode"},
		{[]string{"serve", "--cluster", "--node", "n1", "--cluster-token-file", tokFile}, "needs --advertise URL"},
		{with("--advertise", "ftp://x"), `--advertise "ftp://x": want a base URL`},
		{with("--advertise", "http://x:1/agent"), "with no path"},
		{with("--node", "Node_1"), `--node "Node_1": want a DNS label`},
		{with("--node", "n1.example.com"), `--node "n1.example.com": want a DNS label`},
		{with("--namespace", "a.b"), `--namespace "a.b": want a namespace name`},
		{with("--node-lease", "100ms"), "--node-lease 100ms: want a duration from 1s to 10m0s"},
		{with("--node-lease", "soon"), `invalid argument "soon" for "--node-lease"`},
		{with("--cluster-token-file", empty), "is empty: it must hold the cluster token"},
		{[]string{"serve", "--kubeconfig", kc, "--node", "n1", "--advertise", "http://x:1"}, "give --cluster-token-file FILE or set $DESKFARM_CLUSTER_TOKEN"},
		{with("--token", "clu-secret"), "the cluster token is the same as --token"},
	} {
		if _, err := run(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %q: %v; want an error saying %q", c.args[1:], err, c.want)
		}
	}

	if _, err := run(t, with("--namespace", "farm", "--node-lease", "4s")...); err == nil || err.Error() != "start farm: stop here" {
		t.Fatalf("serve in cluster mode: %v", err)
	}
	want := &clusterConfig{Kubeconfig: kc, Node: "n1", Advertise: "http://10.0.0.5:8080", Namespace: "farm",
		NodeLease: 4 * time.Second, Token: "clu-secret"}
	if !reflect.DeepEqual(got.Cluster, want) {
		t.Errorf("cluster config\n got %+v\nwant %+v", got.Cluster, want)
	}
	if hosts := allowedHosts(got); !reflect.DeepEqual(hosts, []string{"10.0.0.5:8080", "127.0.0.1"}) {
		t.Errorf("allowed hosts in cluster mode: %q; want the advertised host", hosts)
	}

	// In a pod: the in-cluster config, the node from the downward API,
	// the token from the Secret's env.
	t.Setenv("DESKFARM_NODE_NAME", "worker-3")
	t.Setenv("DESKFARM_CLUSTER_TOKEN", "env-secret")
	if _, err := run(t, "serve", "--cluster", "--advertise", "https://agent.example/"); err == nil || err.Error() != "start farm: stop here" {
		t.Fatalf("serve --cluster: %v", err)
	}
	want = &clusterConfig{Node: "worker-3", Advertise: "https://agent.example", Namespace: "deskfarm",
		NodeLease: defaultNodeLease, Token: "env-secret"}
	if !reflect.DeepEqual(got.Cluster, want) {
		t.Errorf("cluster config in a pod\n got %+v\nwant %+v", got.Cluster, want)
	}
	if hosts := allowedHosts(got); !reflect.DeepEqual(hosts, []string{"agent.example", "127.0.0.1"}) {
		t.Errorf("allowed hosts: %q", hosts)
	}
	if name := advertiseName(got.Cluster.Advertise); name != "agent.example" {
		t.Errorf("OSWorld ports advertised at %q, want agent.example", name)
	}

	// Without the cluster flags, nothing of it.
	if _, err := run(t, "serve"); err == nil || got.Cluster != nil {
		t.Errorf("serve without cluster flags: %v, cluster %+v", err, got.Cluster)
	}
}
