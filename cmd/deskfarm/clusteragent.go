package main

// The one place serve builds package cluster's agent (cluster.go has the
// flags): kept apart so that a change of cluster.Options touches this file
// only.

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/deskfarm/deskfarm/cluster"
	"github.com/deskfarm/deskfarm/pool"
)

// Agent-to-agent calls (the bind route) are short: a warm VM's lease.
const (
	agentDialTimeout = 5 * time.Second
	agentCallTimeout = 30 * time.Second
)

// startAgent joins the cluster as node c.Node with pools as its farm
// (*pool.Manager is a cluster.Local). The agent runs until ctx ends.
func startAgent(ctx context.Context, c *clusterConfig, pools *pool.Manager, log *slog.Logger) (cluster.Front, error) {
	rc, err := cluster.RESTConfig(c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: agentCallTimeout, Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: agentDialTimeout, KeepAlive: 15 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}}
	a, err := cluster.New(ctx, cluster.Options{
		Config:        rc,
		Namespace:     c.Namespace,
		Node:          c.Node,
		AdvertiseURL:  c.Advertise,
		ClusterToken:  c.Token,
		LeaseDuration: c.NodeLease,
		Local:         pools,
		Log:           log,
		HTTPClient:    hc,
	})
	if err != nil {
		return nil, err
	}
	go func() {
		if err := a.Run(); err != nil && ctx.Err() == nil {
			log.Error("cluster agent stopped", "op", "cluster", "node", c.Node, "err", err)
		}
	}()
	return a, nil
}
