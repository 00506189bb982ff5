package main_test

// Forks across a cluster (issue 17 item 7): two real node agents on one
// real apiserver, real tiny VMs. A fork of more desktops than the source's
// node has room for places the rest on the other node, sending the fork
// template there once.

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
)

// forkPool: at most 5 desktops of 256 MiB per node, one kept warm.
const forkPool = `apiVersion: deskfarm.dev/v1alpha1
kind: DesktopPool
metadata:
  name: tiny
spec:
  image: tiny
  network: none
  memoryMiB: 256
  warmPerNode: 1
  maxPerNode: 5
  defaultTTLSeconds: 600
  maxTTLSeconds: 3600
`

// TestClusterForkE2E: the source episode runs on node a, which has room
// for 4 more desktops; a fork of 8 makes 4 on a and 4 on b from one copy
// of the template sent to b. Every fork sees the source's file and its
// RAM-only /dev/shm value, through either agent; the source goes on; a
// fork the cluster cannot hold is refused whole with how many would fit,
// leaving nothing behind.
func TestClusterForkE2E(t *testing.T) {
	cf := startClusterOf(t, []string{"dfk1", "dfk2"}, []byte(forkPool))
	a, b := cf.agent("a"), cf.agent("b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	src := a.start(t)
	if src.Node != "a" {
		t.Fatalf("source episode on %s, want a (the agent's own node first)", src.Node)
	}
	// a's pool boots a warm desktop in the source's place: with it a has
	// room for 4 more (max 5), b for 5.
	cf.waitFree(t, map[string]int{"a": 1, "b": 1}, 3*time.Minute)
	st := client.Episode(src.ID)
	if err := a.c.WriteFile(ctx, st, "/tmp/src", strings.NewReader("source"), 6, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.Exec(ctx, st, api.ExecRequest{Argv: []string{"sh", "-c", "echo ram > /dev/shm/value"}}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	res, err := a.c.ForkWith(ctx, src.ID, api.ForkRequest{Count: 8})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("fork of 8 across a (room 4) and b: %v", err)
	}
	perNode := map[string]int{}
	for _, e := range res.Episodes {
		perNode[e.Node]++
	}
	if len(res.Episodes) != 8 || perNode["a"] != 4 || perNode["b"] != 4 {
		t.Fatalf("fork of 8: %d episodes, per node %v; want 4 on a and 4 on b", len(res.Episodes), perNode)
	}
	// The state travelled once to b, whatever b's share.
	if len(res.Transfers) != 1 || res.Transfers[0].Node != "b" || res.Transfers[0].Count != 4 ||
		res.TemplateBytes <= 0 || res.Transfers[0].Bytes != res.TemplateBytes {
		t.Fatalf("transfers %+v (template %d bytes): want one to b of the template's size", res.Transfers, res.TemplateBytes)
	}
	t.Logf("fork of 8 across 2 agents (4+4, tiny image, 256 MiB): %s (server %d ms); template %d bytes sent once to b in %d ms",
		took.Round(time.Millisecond), res.ForkMS, res.TemplateBytes, res.Transfers[0].MS)

	// b's publisher shows its forks as leased Desktops, as a claim's:
	// then any agent finds them.
	deadline := time.Now().Add(time.Minute)
	for {
		leased := 0
		for _, d := range cf.desktops(t) {
			for _, e := range res.Episodes {
				if d.Status.Episode == e.ID && d.Status.State == "leased" && d.Spec.Node == e.Node {
					leased++
				}
			}
		}
		if leased == 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the 8 forks are leased Desktops after a minute", leased)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The source goes on: what it writes now is its own.
	if err := a.c.WriteFile(ctx, st, "/tmp/later", strings.NewReader("later"), 5, 0o644); err != nil {
		t.Fatalf("source after the fork: %v", err)
	}
	for i, e := range res.Episodes {
		// Every fork through both agents: b's forks through a are proxied,
		// a's through b.
		via := []*clusterAgent{a, b}[i%2]
		tg := client.Episode(e.ID)
		var got bytes.Buffer
		if _, err := via.c.ReadFile(ctx, tg, "/tmp/src", &got); err != nil || got.String() != "source" {
			t.Errorf("fork %s on %s through %s: /tmp/src %q, %v", e.ID, e.Node, via.node, got.String(), err)
		}
		out, err := via.c.Exec(ctx, tg, api.ExecRequest{Argv: []string{"sh", "-c", "cat /dev/shm/value; ls /tmp"}})
		if err != nil || !strings.HasPrefix(out.Stdout, "ram\n") || strings.Contains(out.Stdout, "later") {
			t.Errorf("fork %s on %s through %s: %q, %v; want the RAM value and no later file", e.ID, e.Node, via.node, out.Stdout, err)
		}
	}

	// 10 desktops fit; 9 are held: a fork of 2 is refused whole.
	before := len(cf.desktops(t))
	_, err = b.c.ForkWith(ctx, src.ID, api.ForkRequest{Count: 2})
	if !api.IsCode(err, api.CodePoolFull) || !strings.Contains(err.Error(), "1 would") {
		t.Fatalf("fork of 2 with room for 1 in the cluster: %v (code %q), want %s saying 1 would fit", err, errCode(err), api.CodePoolFull)
	}
	if n := len(cf.desktops(t)); n != before {
		t.Errorf("a refused fork changed the desktops: %d, was %d", n, before)
	}
	for _, e := range res.Episodes {
		if _, err := b.c.EndEpisode(ctx, e.ID); err != nil {
			t.Errorf("end fork %s through b: %v", e.ID, err)
		}
	}
	if _, err := a.c.EndEpisode(ctx, src.ID); err != nil {
		t.Error(err)
	}
	for _, ag := range cf.agents {
		if left, _ := filepath.Glob(ag.state + "/forks/*"); len(left) > 0 {
			t.Errorf("node %s keeps fork templates: %v", ag.node, left)
		}
	}
}
