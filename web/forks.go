package web

// Forks across a cluster (issue 17 item 7). POST /v1/episodes/{id}/fork on
// the episode's node places on other nodes what its own pool has no room
// for (or, with "spread", an even share on every node with room). The
// source's node makes the fork template once (vmm's ExportFork: the
// overlay, whose transfer snapshot holds RAM and devices), makes its own
// share from it, and streams it once to each other node of the plan:
// POST {node}/v1/cluster/fork, with the cluster token as the bind route
// has it. That node admits its share before it reads a byte (the request
// waits on 100-continue), stores the template under a size bound and
// checks its SHA-256 (vmm's ImportFork), and makes and leases its share
// from the one copy; its publisher then shows the new desktops as leased,
// so any agent reaches the new episodes. Admission is whole: a plan that
// does not fit is refused before the source pauses, with how many would
// fit; a share that fails ends every episode the fork made on any node.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/cluster"
	"github.com/deskfarm/deskfarm/internal/fielderr"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/vmm"
)

// forkContinueTimeout is how long a fork share's sender waits for the
// node's 100 Continue (its admission) before it sends the template anyway.
const forkContinueTimeout = 30 * time.Second

// clusterForker is what a fork across nodes needs of the cluster agent
// (*cluster.Agent has it).
type clusterForker interface {
	ForkRooms(poolName string) ([]cluster.NodeRoom, error)
}

// forkTemplates is what it needs of the VM layer (*vmm.Manager has it).
type forkTemplates interface {
	ExportFork(ctx context.Context, id string) (*vmm.ForkTemplate, error)
	ImportFork(ctx context.Context, info vmm.ForkTemplateInfo, body io.Reader) (*vmm.ForkTemplate, error)
}

// forkShare is one node's part of a fork plan.
type forkShare struct {
	room  cluster.NodeRoom // Node "" and URL "": this node
	count int
}

// planFork shares n forks between this node (room local) and the others
// (rooms): this node first, then the others most room first; with spread,
// round robin over all of them. It returns how many fit when not all do.
func planFork(n, local int, rooms []cluster.NodeRoom, spread bool) ([]forkShare, int) {
	all := append([]forkShare{{room: cluster.NodeRoom{Room: local}}}, make([]forkShare, len(rooms))...)
	fits := max(local, 0)
	for i, r := range rooms {
		all[i+1].room = r
		fits += r.Room
	}
	if fits < n {
		return nil, fits
	}
	left := n
	if spread {
		for left > 0 {
			for i := range all {
				if left > 0 && all[i].count < all[i].room.Room {
					all[i].count++
					left--
				}
			}
		}
	} else {
		for i := range all {
			take := min(left, max(all[i].room.Room, 0))
			all[i].count, left = take, left-take
		}
	}
	var out []forkShare
	for _, s := range all {
		if s.count > 0 {
			out = append(out, s)
		}
	}
	return out, n
}

// crossNodeFork reports whether a fork of body from the episode of pool
// poolName goes beyond this node, and the plan if so.
func (s *server) crossNodeFork(poolName string, body api.ForkRequest) ([]forkShare, bool, error) {
	fr, ok := s.cluster.(clusterForker)
	if s.cluster == nil || !ok {
		return nil, false, nil
	}
	if _, ok := s.farm.(forkTemplates); !ok {
		return nil, false, nil
	}
	local, err := s.pools.ForkRoom(poolName)
	if err != nil {
		return nil, false, err
	}
	if local >= body.Count && !body.Spread {
		return nil, false, nil
	}
	rooms, err := fr.ForkRooms(poolName)
	if err != nil {
		return nil, false, err
	}
	plan, fits := planFork(body.Count, local, rooms, body.Spread)
	if plan == nil {
		return nil, false, fielderr.Newf("count", pool.ErrPoolFull,
			"a fork of %d does not fit in the cluster: %d would (%d on this node, %d on %d other live nodes)",
			body.Count, fits, local, fits-local, len(rooms))
	}
	return plan, len(plan) > 1 || plan[0].room.URL != "", nil
}

// forkAcross runs plan for the fork of episode id: see the file's doc.
func (s *server) forkAcross(r *http.Request, id string, body api.ForkRequest, plan []forkShare) (api.ForkResponse, error) {
	start := time.Now()
	out := api.ForkResponse{Source: id}
	ep, err := s.pools.Get(id)
	if err != nil {
		return out, err
	}
	vm, callCtx, release, err := s.pools.Acquire(r.Context(), id)
	if err != nil {
		return out, err
	}
	defer release() // the source cannot end under its fork
	ttl := time.Duration(body.TTLS * float64(time.Second))
	t, err := s.farm.(forkTemplates).ExportFork(callCtx, vm)
	if err != nil {
		return out, fmt.Errorf("fork episode %s: %w", id, err)
	}
	defer t.Remove()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		errs  []error
		local []pool.Episode
		eps   []api.Episode
	)
	for _, sh := range plan {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if sh.room.URL == "" {
				got, err := s.pools.ForkFrom(callCtx, ep.Pool, t, sh.count, ttl)
				mu.Lock()
				defer mu.Unlock()
				errs, local = append(errs, err), got
				return
			}
			got, tr, err := s.sendFork(callCtx, r, sh, ep.Pool, ttl, t)
			mu.Lock()
			defer mu.Unlock()
			errs, eps = append(errs, err), append(eps, got...)
			if err == nil {
				out.Transfers = append(out.Transfers, tr)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		// Whole or nothing: what the other shares made ends.
		for _, e := range local {
			s.pools.End(context.WithoutCancel(r.Context()), e.ID, pool.ReasonDeleted)
		}
		for _, e := range eps {
			if err := s.endRemote(r, e); err != nil {
				s.log.Warn("end a fork's episode on its node after a failed fork", "episode", e.ID, "node", e.Node, "op", "fork", "err", err)
			}
		}
		return out, fmt.Errorf("fork episode %s across nodes: %w", id, err)
	}
	for _, e := range local {
		s.recordEpisode(r.Context(), api.StartEpisodeRequest{Pool: e.Pool}, e, nil) // trajectories.go
		a := s.episodeResponse(r, e)
		a.Node, a.URL = s.cluster.Node(), s.advertise
		out.Episodes = append(out.Episodes, a)
	}
	out.Episodes = append(out.Episodes, eps...)
	out.ForkMS, out.TemplateBytes = time.Since(start).Milliseconds(), t.Info.Size
	s.log.Info("episode forked across nodes", "episode", id, "vm", vm, "op", "fork", "count", body.Count,
		"nodes", len(plan), "template_bytes", t.Info.Size, "duration", time.Since(start).Round(time.Millisecond))
	return out, nil
}

// sendFork streams t once to sh's node and asks it for sh.count episodes.
func (s *server) sendFork(ctx context.Context, in *http.Request, sh forkShare, poolName string, ttl time.Duration, t *vmm.ForkTemplate) ([]api.Episode, api.ForkTransfer, error) {
	tr := api.ForkTransfer{Node: sh.room.Node, Count: sh.count}
	info, err := json.Marshal(t.Info)
	if err != nil {
		return nil, tr, err
	}
	f, err := t.Open()
	if err != nil {
		return nil, tr, err
	}
	defer f.Close()
	q := url.Values{"pool": {poolName}, "count": {strconv.Itoa(sh.count)}, "ttl_s": {strconv.FormatFloat(ttl.Seconds(), 'f', -1, 64)}}
	cr := &countingReader{r: f}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(sh.room.URL, "/")+cluster.ForkPath+"?"+q.Encode(), cr)
	if err != nil {
		return nil, tr, err
	}
	req.ContentLength = t.Info.Size
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Expect", "100-continue")
	req.Header.Set(cluster.ForkInfoHeader, string(info))
	s.forwardCredentials(in, req)
	start := time.Now()
	resp, err := s.forkTransport.RoundTrip(req)
	tr.MS, tr.Bytes = time.Since(start).Milliseconds(), cr.n.Load()
	if err != nil {
		return nil, tr, &httpError{status: http.StatusBadGateway, code: api.CodeNodeUnreachable,
			msg: fmt.Sprintf("fork share of %d on node %s (agent %s): %v", sh.count, sh.room.Node, sh.room.URL, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return nil, tr, remoteError(resp, fmt.Sprintf("fork share of %d on node %s", sh.count, sh.room.Node))
	}
	var got api.ForkResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJSONBody)).Decode(&got); err != nil {
		return nil, tr, fmt.Errorf("fork share on node %s: answer: %w", sh.room.Node, err)
	}
	return got.Episodes, tr, nil
}

// remoteError carries another node's error answer on, with its status and
// code: a refusal there is this fork's refusal.
func remoteError(resp *http.Response, what string) error {
	var body api.ErrorResponse
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxJSONBody))
	e := &body.Error
	if json.Unmarshal(b, &body) != nil || e.Code == "" {
		return &httpError{status: http.StatusBadGateway, code: api.CodeNodeUnreachable,
			msg: fmt.Sprintf("%s: %s: %s", what, resp.Status, strings.TrimSpace(string(b)))}
	}
	return &httpError{status: resp.StatusCode, code: e.Code, field: e.Field, msg: what + ": " + e.Message}
}

// endRemote ends episode e on its node, with the caller's credentials.
func (s *server) endRemote(in *http.Request, e api.Episode) error {
	req, err := http.NewRequestWithContext(context.WithoutCancel(in.Context()), http.MethodDelete,
		strings.TrimSuffix(e.URL, "/")+"/v1/episodes/"+url.PathEscape(e.ID), nil)
	if err != nil {
		return err
	}
	s.forwardCredentials(in, req)
	resp, err := s.proxyTransport.RoundTrip(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("DELETE %s: %s", req.URL, resp.Status)
	}
	return nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// clusterFork serves POST /v1/cluster/fork (access cluster): another
// node's share of a fork. The share is admitted before the template is
// read, so a refusal costs no transfer.
func (s *server) clusterFork(w http.ResponseWriter, r *http.Request) error {
	ft, ok := s.farm.(forkTemplates)
	if s.pools == nil || !ok {
		return s.noPools()
	}
	q := r.URL.Query()
	poolName := q.Get("pool")
	n, err := strconv.Atoi(q.Get("count"))
	if err != nil || n < 1 || n > api.MaxFork {
		return invalidf("count", "must be in [1, %d], got %q", api.MaxFork, q.Get("count"))
	}
	ttlS, err := strconv.ParseFloat(cmpOr(q.Get("ttl_s"), "0"), 64)
	if err != nil || ttlS < 0 {
		return invalidf("ttl_s", "must be a positive number, got %q", q.Get("ttl_s"))
	}
	var info vmm.ForkTemplateInfo
	if err := json.Unmarshal([]byte(r.Header.Get(cluster.ForkInfoHeader)), &info); err != nil {
		return invalidf(cluster.ForkInfoHeader, "want the template's JSON description: %v", err)
	}
	if r.ContentLength != info.Size {
		return invalidf("size", "template of %d bytes announced, body of %d", info.Size, r.ContentLength)
	}
	room, err := s.pools.ForkRoom(poolName)
	if err != nil {
		return err
	}
	if room < n {
		return fielderr.Newf("count", pool.ErrPoolFull, "node %s has room for %d of pool %s, %d asked", s.cluster.Node(), room, poolName, n)
	}
	t, err := ft.ImportFork(r.Context(), info, http.MaxBytesReader(w, r.Body, vmm.MaxForkTemplateBytes))
	if err != nil {
		return err
	}
	defer t.Remove()
	eps, err := s.pools.ForkFrom(r.Context(), poolName, t, n, time.Duration(ttlS*float64(time.Second)))
	if err != nil {
		return err
	}
	out := api.ForkResponse{Source: info.Source, Episodes: make([]api.Episode, 0, len(eps))}
	for _, ep := range eps {
		s.recordEpisode(r.Context(), api.StartEpisodeRequest{Pool: ep.Pool}, ep, nil) // trajectories.go
		a := s.episodeResponse(r, ep)
		a.Node, a.URL = s.cluster.Node(), s.advertise
		out.Episodes = append(out.Episodes, a)
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
