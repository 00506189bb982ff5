package main

// serve's cluster mode (issue 15): with --kubeconfig or --cluster, serve is
// one node's agent of a cluster. It runs its host's VMs as on a single
// host, takes its pools from the cluster's DesktopPools instead of
// --pools, and answers for every episode of the cluster (package web's
// Options.Cluster). The agent itself is package cluster's; startAgent
// (clusteragent.go) builds it.

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/deskfarm/deskfarm/cluster"
)

// clusterConfig is serve's cluster flags, validated (resolveCluster).
type clusterConfig struct {
	// Kubeconfig is the apiserver's kubeconfig file (--kubeconfig); empty
	// with --cluster: the pod's in-cluster config.
	Kubeconfig string
	// Node is this agent's node name (--node, else $DESKFARM_NODE_NAME,
	// else the host name).
	Node string
	// Advertise is the base URL other agents and clients reach this
	// agent at (--advertise).
	Advertise string
	// Namespace holds the cluster's objects (--namespace).
	Namespace string
	// NodeLease is the node Lease's duration (--node-lease).
	NodeLease time.Duration
	// Token is the cluster token agents authenticate to each other with
	// (--cluster-token-file, else $DESKFARM_CLUSTER_TOKEN).
	Token string
}

// Cluster flag defaults.
const (
	defaultNodeLease = 15 * time.Second
	minNodeLease     = time.Second
	maxNodeLease     = 10 * time.Minute
)

// clusterFlags are the flags addClusterFlags declares, as parsed.
type clusterFlags struct {
	kubeconfig, node, advertise, namespace, tokenFile string
	inCluster                                         bool
	nodeLease                                         time.Duration
}

func addClusterFlags(cmd *cobra.Command, f *clusterFlags) {
	fs := cmd.Flags()
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "join a Kubernetes cluster as this node's agent, with this kubeconfig file")
	fs.BoolVar(&f.inCluster, "cluster", false, "join the Kubernetes cluster this pod runs in (in-cluster config), when no --kubeconfig is given")
	fs.StringVar(&f.node, "node", "", "cluster mode: this agent's node name (default $DESKFARM_NODE_NAME, else the host name)")
	fs.StringVar(&f.advertise, "advertise", "", "cluster mode (required): the base URL other agents reach this one at, e.g. http://10.0.0.5:8080")
	fs.StringVar(&f.namespace, "namespace", cluster.DefaultNamespace, "cluster mode: the namespace of the cluster's objects")
	fs.DurationVar(&f.nodeLease, "node-lease", defaultNodeLease, "cluster mode: the node Lease's duration; a node silent this long is lost")
	fs.StringVar(&f.tokenFile, "cluster-token-file", "", "cluster mode: file holding the token agents authenticate to each other with (default $DESKFARM_CLUSTER_TOKEN)")
	cmd.MarkFlagFilename("kubeconfig")
	cmd.MarkFlagFilename("cluster-token-file")
}

// clusterOnly are the flags that mean something in cluster mode only.
var clusterOnly = []string{"node", "advertise", "namespace", "node-lease", "cluster-token-file"}

// singleHostOnly are the flags cluster mode refuses: its pools come from
// the cluster's DesktopPools.
var singleHostOnly = []string{"pools", "pool", "warm"}

// dnsLabel is Kubernetes' name rule for labels (RFC 1123).
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// resolveCluster turns the parsed flags into a clusterConfig, nil when
// serve runs on a single host. getenv and hostname are os's, but for tests.
func resolveCluster(cmd *cobra.Command, f clusterFlags, getenv func(string) string, hostname func() (string, error)) (*clusterConfig, error) {
	changed := cmd.Flags().Changed
	if f.kubeconfig == "" && !f.inCluster {
		for _, name := range clusterOnly {
			if changed(name) {
				return nil, fmt.Errorf("--%s is for cluster mode: add --kubeconfig FILE, or --cluster in a pod", name)
			}
		}
		return nil, nil
	}
	for _, name := range singleHostOnly {
		if changed(name) {
			return nil, fmt.Errorf("--%s: in cluster mode the pools are the cluster's DesktopPools "+
				"(kubectl apply -f deploy/kubernetes/examples/pool-tiny.yaml), not serve flags", name)
		}
	}
	c := &clusterConfig{Kubeconfig: f.kubeconfig, Node: f.node, Namespace: f.namespace, NodeLease: f.nodeLease}
	if c.Kubeconfig != "" {
		if _, err := os.Stat(c.Kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
	}
	if c.Node == "" {
		c.Node = getenv("DESKFARM_NODE_NAME")
	}
	if c.Node == "" {
		h, err := hostname()
		if err != nil {
			return nil, fmt.Errorf("--node not given, $DESKFARM_NODE_NAME unset, and no host name: %w", err)
		}
		c.Node = strings.ToLower(h)
	}
	// A label, not a subdomain: Desktop objects are named NODE.VM.
	if len(c.Node) > 63 || !dnsLabel.MatchString(c.Node) {
		return nil, fmt.Errorf("--node %q: want a DNS label: lower-case letters, digits and '-', "+
			"starting and ending with a letter or digit, at most 63 characters (a node name with dots: "+
			"give its first label)", c.Node)
	}
	if len(c.Namespace) > 63 || !dnsLabel.MatchString(c.Namespace) {
		return nil, fmt.Errorf("--namespace %q: want a namespace name: lower-case letters, digits and '-', "+
			"starting and ending with a letter or digit, at most 63 characters", c.Namespace)
	}
	if c.NodeLease < minNodeLease || c.NodeLease > maxNodeLease {
		return nil, fmt.Errorf("--node-lease %s: want a duration from %s to %s, e.g. 15s", c.NodeLease, minNodeLease, maxNodeLease)
	}
	adv, err := advertiseURL(f.advertise)
	if err != nil {
		return nil, err
	}
	c.Advertise = adv
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--cluster-token-file: %w", err)
		}
		c.Token = strings.TrimSpace(string(b))
		if c.Token == "" {
			return nil, fmt.Errorf("--cluster-token-file %s is empty: it must hold the cluster token", f.tokenFile)
		}
	} else {
		c.Token = strings.TrimSpace(getenv("DESKFARM_CLUSTER_TOKEN"))
	}
	if c.Token == "" {
		return nil, fmt.Errorf("cluster mode needs the cluster token, the same on every agent: " +
			"give --cluster-token-file FILE or set $DESKFARM_CLUSTER_TOKEN")
	}
	return c, nil
}

// advertiseURL validates --advertise: an http(s) base URL with a host and
// no path, query or credentials. It returns it without a trailing slash.
func advertiseURL(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("cluster mode needs --advertise URL: the base URL other agents reach this one at, e.g. http://10.0.0.5:8080")
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("--advertise %q: want a base URL, http://HOST[:PORT] or https://HOST[:PORT], with no path", s)
	}
	return strings.TrimSuffix(s, "/"), nil
}

// advertiseName is the advertised URL's host name (or address).
func advertiseName(adv string) string {
	u, err := url.Parse(adv)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// advertiseHost is the --allow-host entry for the advertised URL: its
// Host as clients send it (NAME:PORT, or NAME on the scheme's port).
func advertiseHost(adv string) string {
	u, err := url.Parse(adv)
	if err != nil {
		return ""
	}
	if u.Port() == "" {
		return u.Hostname()
	}
	return net.JoinHostPort(u.Hostname(), u.Port())
}
