package web

import (
	"context"
	"net/http"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/vmm"
)

// Named snapshots and forks (issue 17): POST/GET .../snapshots, POST
// .../snapshots/{name}/revert and DELETE .../snapshots/{name} on a VM or an
// episode, and POST /v1/episodes/{id}/fork.

// snapshotFarm is what the snapshot routes need from the VM layer
// (*vmm.Manager and vmmtest.Farm have it); a farm without it answers them
// 501.
type snapshotFarm interface {
	SaveSnapshot(ctx context.Context, id, name string) (vmm.Snapshot, error)
	Snapshots(ctx context.Context, id string) ([]vmm.Snapshot, error)
	RevertSnapshot(ctx context.Context, id, name string) (vmm.ResetResult, error)
	DeleteSnapshot(ctx context.Context, id, name string) error
	// SnapshotLimits are the bounds a save is checked against.
	SnapshotLimits() (maxCount int, maxBytes int64)
}

func (s *server) snapshotter() (snapshotFarm, error) {
	if sf, ok := s.farm.(snapshotFarm); ok {
		return sf, nil
	}
	return nil, &httpError{status: http.StatusNotImplemented, code: api.CodeNoSnapshots, msg: "this farm keeps no named snapshots"}
}

// saveSnapshot serves POST .../snapshots: the VM keeps running and its
// viewers stay connected.
func (s *server) saveSnapshot(w http.ResponseWriter, r *http.Request, t target) error {
	sf, err := s.snapshotter()
	if err != nil {
		return err
	}
	var body api.SnapshotRequest
	if err := decodeJSON(w, r, &body, maxJSONBody); err != nil {
		return err
	}
	t.step.snapshot(api.SnapshotSave, body.Name)
	snap, err := sf.SaveSnapshot(t.ctx, t.vm, body.Name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, apiSnapshot(snap))
	return nil
}

// listSnapshots serves GET .../snapshots, oldest first, with the limits.
func (s *server) listSnapshots(w http.ResponseWriter, r *http.Request, t target) error {
	sf, err := s.snapshotter()
	if err != nil {
		return err
	}
	snaps, err := sf.Snapshots(t.ctx, t.vm)
	if err != nil {
		return err
	}
	out := api.SnapshotList{Snapshots: make([]api.Snapshot, 0, len(snaps))}
	out.MaxCount, out.MaxBytes = sf.SnapshotLimits()
	for _, sn := range snaps {
		out.Snapshots = append(out.Snapshots, apiSnapshot(sn))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// revertSnapshot serves POST .../snapshots/{name}/revert: in place, as a
// reset (the desk releases held input and hands control back), answered
// once the desk has applied it.
func (s *server) revertSnapshot(w http.ResponseWriter, r *http.Request, t target) error {
	sf, err := s.snapshotter()
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	t.step.snapshot(api.SnapshotRevert, name)
	start := time.Now()
	res, err := sf.RevertSnapshot(t.ctx, t.vm, name)
	if err != nil {
		return err
	}
	s.waitReset(r, t.vm, start, "snapshot_revert")
	writeJSON(w, http.StatusOK, api.RevertResponse{ID: t.vm, Snapshot: name, RevertMS: res.Duration.Milliseconds()})
	return nil
}

// deleteSnapshot serves DELETE .../snapshots/{name}.
func (s *server) deleteSnapshot(w http.ResponseWriter, r *http.Request, t target) error {
	sf, err := s.snapshotter()
	if err != nil {
		return err
	}
	t.step.snapshot(api.SnapshotDelete, r.PathValue("name"))
	if err := sf.DeleteSnapshot(t.ctx, t.vm, r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// forkEpisode serves POST /v1/episodes/{id}/fork: Count new episodes of
// the episode's pool, each recorded as its pool says.
func (s *server) forkEpisode(w http.ResponseWriter, r *http.Request) error {
	if s.pools == nil {
		return s.noPools()
	}
	var body api.ForkRequest
	if err := decodeJSON(w, r, &body, maxJSONBody); err != nil {
		return err
	}
	if body.Count < 1 || body.Count > api.MaxFork {
		return invalidf("count", "must be in [1, %d], got %d", api.MaxFork, body.Count)
	}
	if body.TTLS < 0 {
		return invalidf("ttl_s", "must be positive, got %g", body.TTLS)
	}
	id := r.PathValue("id")
	if src, err := s.pools.Get(id); err == nil && s.cluster != nil {
		plan, across, err := s.crossNodeFork(src.Pool, body) // forks.go
		if err != nil {
			return err
		}
		if across {
			out, err := s.forkAcross(r, id, body, plan)
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusCreated, out)
			return nil
		}
	}
	start := time.Now()
	eps, err := s.pools.Fork(r.Context(), id, body.Count, time.Duration(body.TTLS*float64(time.Second)))
	if err != nil {
		return err
	}
	out := api.ForkResponse{Source: id, Episodes: make([]api.Episode, 0, len(eps)), ForkMS: time.Since(start).Milliseconds()}
	for _, ep := range eps {
		s.recordEpisode(r.Context(), api.StartEpisodeRequest{Pool: ep.Pool}, ep, nil) // trajectories.go
		out.Episodes = append(out.Episodes, s.episodeResponse(r, ep))
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}
