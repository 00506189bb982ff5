package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Episodes (issue 5): an episode leases a VM of a pool; its actions,
// screenshot, exec and files routes are the VM routes, reached through the
// episode's id.

// webMetrics are the API's latency histograms.
type webMetrics struct {
	action     *prometheus.HistogramVec // via: vm, episode
	screenshot *prometheus.HistogramVec
}

var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// initEpisodes wires the pools and metrics of opts into s.
func (s *server) initEpisodes(opts Options) {
	s.pools = opts.Pools
	s.osworld = opts.OSWorldAddress
	s.registry = opts.Metrics
	if s.registry == nil {
		s.registry = prometheus.NewRegistry()
	}
	s.met = &webMetrics{
		action: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "deskfarm_action_duration_seconds",
			Help: "POST .../actions latency, settle and screenshot included.", Buckets: latencyBuckets}, []string{"via", "outcome"}),
		screenshot: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "deskfarm_screenshot_duration_seconds",
			Help: "GET .../screenshot latency.", Buckets: latencyBuckets}, []string{"via", "outcome"}),
	}
	for _, c := range []prometheus.Collector{s.met.action, s.met.screenshot} {
		if err := s.registry.Register(c); err != nil {
			s.log.Warn("register api metrics", "op", "metrics", "err", err)
		}
	}
	// No hooks into the pool: its resets and destroys reach the desks as
	// the farm's lifecycle events (package desk).
}

// timed observes h's latency in hv.
func (s *server) timed(hv *prometheus.HistogramVec, via string, h apiHandler) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		start := time.Now()
		err := h(w, r)
		outcome := "ok"
		if err != nil {
			outcome = "error"
		}
		hv.WithLabelValues(via, outcome).Observe(time.Since(start).Seconds())
		return err
	}
}

func (s *server) metrics(w http.ResponseWriter, r *http.Request) error {
	promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	return nil
}

func (s *server) noPools() error {
	return &httpError{status: http.StatusNotImplemented, code: api.CodeNoPools, msg: "this server has no pools (serve --pools FILE or --warm IMAGE)"}
}

func (s *server) episodeResponse(r *http.Request, ep pool.Episode) api.Episode {
	return s.episodeResponseOf(r, ep, nil)
}

// episodeResponseOf is episodeResponse, knowing the trajectories kept
// (trajectoryIDs; nil to ask the store).
func (s *server) episodeResponseOf(r *http.Request, ep pool.Episode, trajectories map[string]bool) api.Episode {
	scheme, host := callerBase(r)
	var osworld string
	if s.osworld != nil && ep.State != pool.EpisodeEnded {
		osworld, _ = s.osworld(ep.VM)
	}
	out := apiEpisode(ep, fmt.Sprintf("%s://%s/vms/%s", scheme, host, ep.VM), osworld)
	if s.cluster != nil {
		// The episode's page, which any agent serves: the agent the
		// caller asked, even through a proxy.
		out.ViewerURL = fmt.Sprintf("%s://%s/episodes/%s", scheme, host, url.PathEscape(ep.ID))
		out.Node, out.URL = s.cluster.Node(), s.advertise
	}
	out.Recording, out.TrajectoryURL = s.episodeRecording(r, ep, trajectories) // trajectories.go
	return out
}

// callerBase is the scheme and host the caller reached the farm at: the
// request's, or for a request another agent proxied (cluster token
// checked), the one that agent says it was asked at (X-Forwarded-*).
func callerBase(r *http.Request) (scheme, host string) {
	scheme, host = "http", r.Host
	if r.TLS != nil {
		scheme = "https"
	}
	if !isProxied(r) {
		return scheme, host
	}
	if h := r.Header.Get("X-Forwarded-Host"); h != "" {
		host = h
	}
	if p := r.Header.Get("X-Forwarded-Proto"); p == "http" || p == "https" {
		scheme = p
	}
	return scheme, host
}

func (s *server) startEpisode(w http.ResponseWriter, r *http.Request) error {
	if s.pools == nil {
		return s.noPools()
	}
	var body api.StartEpisodeRequest
	if err := decodeJSON(w, r, &body, maxJSONBody); err != nil {
		return err
	}
	if body.Pool == "" {
		// The config's first pool: the only one, or the default config's
		// "desktop" beside its "osworld".
		pools := s.pools.Config().Pools
		if len(pools) == 0 {
			return invalidf("pool", "required: this farm has no pools (GET /v1/pools)")
		}
		body.Pool = pools[0].Name
	}
	if body.TTLS < 0 {
		return invalidf("ttl_s", "must be positive, got %g", body.TTLS)
	}
	ttl := time.Duration(body.TTLS * float64(time.Second))
	if body.Record != nil && *body.Record && s.traj == nil {
		return s.noTrajectories()
	}
	if s.cluster != nil {
		return s.startClusterEpisode(w, r, body, ttl) // cluster.go
	}
	ep, err := s.pools.Start(r.Context(), body.Pool, ttl)
	if err != nil {
		return err
	}
	noteVM(r, ep.VM)
	s.recordEpisode(r.Context(), body, ep, nil) // trajectories.go
	w.Header().Set("Location", "/v1/episodes/"+ep.ID)
	writeJSON(w, http.StatusCreated, s.episodeResponse(r, ep))
	return nil
}

// listEpisodes serves GET /v1/episodes: this host's episodes. A cluster
// agent lists its own node's only; kubectl get desktops shows them all.
func (s *server) listEpisodes(w http.ResponseWriter, r *http.Request) error {
	if s.pools == nil {
		return s.noPools()
	}
	out := api.EpisodeList{Episodes: []api.Episode{}}
	kept := s.trajectoryIDs()
	for _, ep := range s.pools.List() {
		out.Episodes = append(out.Episodes, s.episodeResponseOf(r, ep, kept))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *server) getEpisode(w http.ResponseWriter, r *http.Request) error {
	if s.pools == nil {
		return s.noPools()
	}
	ep, err := s.pools.Get(r.PathValue("id"))
	if err != nil {
		return err
	}
	noteVM(r, ep.VM)
	writeJSON(w, http.StatusOK, s.episodeResponse(r, ep))
	return nil
}

// endEpisode serves DELETE /v1/episodes/{id}: it answers once the VM is
// back in its pool (reset) or destroyed, with the ended episode.
func (s *server) endEpisode(w http.ResponseWriter, r *http.Request) error {
	if s.pools == nil {
		return s.noPools()
	}
	id := r.PathValue("id")
	if ep, err := s.pools.Get(id); err == nil {
		s.endRecording(r.Context(), ep) // trajectories.go
	}
	start := time.Now()
	ep, err := s.pools.End(r.Context(), id, pool.ReasonDeleted)
	if err != nil {
		return err
	}
	noteVM(r, ep.VM)
	if s.desks != nil && !ep.VMReplaced {
		// As a manual reset: answer once the VM's desk has applied the
		// reset, so that a next episode on it never races the release.
		wctx, cancel := context.WithTimeout(r.Context(), resetApplyWait)
		if err := s.desks.WaitReset(wctx, ep.VM, start); err != nil {
			s.log.Warn("episode end answered before the desk applied the reset", "vm", ep.VM, "episode", ep.ID, "op", "episode_end", "err", err)
		}
		cancel()
	}
	writeJSON(w, http.StatusOK, s.episodeResponse(r, ep))
	return nil
}

func (s *server) listPools(w http.ResponseWriter, r *http.Request) error {
	if s.pools == nil {
		return s.noPools()
	}
	writeJSON(w, http.StatusOK, apiPools(s.pools.Pools()))
	return nil
}

// onEpisode resolves /v1/episodes/{id} to a target: the episode's VM, the
// pool's screenshot size as the default, and the lease's context. The VM
// stays the episode's for the call (an end waits for it, and cancels it).
func (s *server) onEpisode(h targetHandler) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		if s.pools == nil {
			return s.noPools()
		}
		id := r.PathValue("id")
		ep, err := s.pools.Get(id)
		if err != nil {
			return err
		}
		vm, ctx, release, err := s.pools.Acquire(r.Context(), id)
		if err != nil {
			return err
		}
		defer release()
		noteVM(r, vm)
		err = h(w, r, target{vm: vm, episode: id, screenshotSize: ep.ScreenshotSize, ctx: ctx})
		switch {
		case err == nil:
			return nil
		case errors.Is(err, vmm.ErrDead):
			// The pool learns of the death from the farm's EventDied.
			return fmt.Errorf("episode %s (vm %s): %w; the episode is ended and the pool replaces the vm", id, vm, err)
		case ctx.Err() != nil && r.Context().Err() == nil:
			// Say why it ended: a client told only "ended" cannot tell a
			// TTL from a dead VM (the faults test's QEMU kill read so).
			why := "it was ended"
			if now, gerr := s.pools.Get(id); gerr == nil && now.EndReason != "" {
				why = pool.DescribeReason(now.EndReason)
			}
			return fmt.Errorf("episode %s (vm %s): %w during the call, because %s: %w", id, vm, pool.ErrEpisodeEnded, why, err)
		}
		return fmt.Errorf("episode %s (vm %s): %w", id, vm, err)
	}
}
