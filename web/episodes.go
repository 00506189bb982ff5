package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Episodes (issue 5): an episode leases a VM of a pool; its actions,
// screenshot, exec and files routes are the VM routes, reached through the
// episode's id.

// StartEpisodeRequest is the body of POST /v1/episodes.
type StartEpisodeRequest struct {
	// Pool names the pool; may be omitted when the farm has exactly one.
	Pool string `json:"pool"`
	// TTLS is the lease in seconds; 0 or absent means the pool's default_ttl_s.
	TTLS float64 `json:"ttl_s,omitempty"`
}

// EpisodeResponse is an episode as the API shows it.
type EpisodeResponse struct {
	pool.Episode
	// ViewerURL is the VM's live view in a browser.
	ViewerURL string `json:"viewer_url"`
}

// EpisodeList is the body of GET /v1/episodes.
type EpisodeList struct {
	Episodes []EpisodeResponse `json:"episodes"`
}

// PoolList is the body of GET /v1/pools.
type PoolList struct {
	Pools []pool.PoolStatus `json:"pools"`
}

// Episode and pool error codes.
const (
	CodeUnknownPool     = "unknown_pool"      // 404, pool.ErrUnknownPool
	CodeEpisodeNotFound = "episode_not_found" // 404, pool.ErrEpisodeNotFound
	CodeEpisodeEnded    = "episode_ended"     // 410, pool.ErrEpisodeEnded
	CodePoolFull        = "pool_full"         // 429, pool.ErrPoolFull: the pool holds its max VMs
	CodeHostFull        = "host_full"         // 507, pool.ErrHostFull: host memory less the reserve is taken
	CodeNoPools         = "no_pools"          // 501, the server has no pools
)

func init() {
	sentinels = append([]sentinel{
		{pool.ErrUnknownPool, http.StatusNotFound, CodeUnknownPool},
		{pool.ErrEpisodeNotFound, http.StatusNotFound, CodeEpisodeNotFound},
		{pool.ErrEpisodeEnded, http.StatusGone, CodeEpisodeEnded},
		{pool.ErrPoolFull, http.StatusTooManyRequests, CodePoolFull},
		{pool.ErrHostFull, http.StatusInsufficientStorage, CodeHostFull},
	}, sentinels...)
}

// webMetrics are the API's latency histograms.
type webMetrics struct {
	action     *prometheus.HistogramVec // via: vm, episode
	screenshot *prometheus.HistogramVec
}

var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// initEpisodes wires the pools and metrics of opts into s.
func (s *server) initEpisodes(opts Options) {
	s.pools = opts.Pools
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
	return &httpError{status: http.StatusNotImplemented, code: CodeNoPools, msg: "this server has no pools (serve --pools FILE or --warm IMAGE)"}
}

func (s *server) episodeResponse(r *http.Request, ep pool.Episode) EpisodeResponse {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return EpisodeResponse{Episode: ep, ViewerURL: fmt.Sprintf("%s://%s/vms/%s", scheme, r.Host, ep.VM)}
}

func (s *server) startEpisode(w http.ResponseWriter, r *http.Request) error {
	if s.pools == nil {
		return s.noPools()
	}
	var body StartEpisodeRequest
	if err := decodeJSON(w, r, &body, maxJSONBody); err != nil {
		return err
	}
	if body.Pool == "" {
		pools := s.pools.Config().Pools
		if len(pools) != 1 {
			return invalidf("pool", "required: this farm has %d pools (GET /v1/pools)", len(pools))
		}
		body.Pool = pools[0].Name
	}
	if body.TTLS < 0 {
		return invalidf("ttl_s", "must be positive, got %g", body.TTLS)
	}
	ep, err := s.pools.Start(r.Context(), body.Pool, time.Duration(body.TTLS*float64(time.Second)))
	if err != nil {
		return err
	}
	noteVM(r, ep.VM)
	w.Header().Set("Location", "/v1/episodes/"+ep.ID)
	writeJSON(w, http.StatusCreated, s.episodeResponse(r, ep))
	return nil
}

func (s *server) listEpisodes(w http.ResponseWriter, r *http.Request) error {
	if s.pools == nil {
		return s.noPools()
	}
	out := EpisodeList{Episodes: []EpisodeResponse{}}
	for _, ep := range s.pools.List() {
		out.Episodes = append(out.Episodes, s.episodeResponse(r, ep))
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
	ep, err := s.pools.End(r.Context(), r.PathValue("id"), pool.ReasonDeleted)
	if err != nil {
		return err
	}
	noteVM(r, ep.VM)
	writeJSON(w, http.StatusOK, s.episodeResponse(r, ep))
	return nil
}

func (s *server) listPools(w http.ResponseWriter, r *http.Request) error {
	if s.pools == nil {
		return s.noPools()
	}
	writeJSON(w, http.StatusOK, PoolList{Pools: s.pools.Pools()})
	return nil
}

// onEpisode runs a VM handler on an episode's VM: {id} is resolved to the
// VM, which stays the episode's for the call (an end waits for it, and
// cancels it). A dead VM ends the episode and the pool replaces the VM.
// screenshotDefault says whether to apply the pool's screenshot_size when
// the request names none.
func (s *server) onEpisode(h apiHandler, screenshotDefault bool) apiHandler {
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
		r2 := r.WithContext(ctx)
		r2.SetPathValue("id", vm)
		if screenshotDefault {
			if err := defaultScreenshotSize(w, r2, ep.ScreenshotSize); err != nil {
				return err
			}
		}
		err = h(w, r2)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, vmm.ErrDead):
			// The pool hears of the death from vmm's events: it ends the
			// episode and replaces the vm.
			return fmt.Errorf("episode %s (vm %s): %w; the episode is ended and the pool replaces the vm", id, vm, err)
		case ctx.Err() != nil && r.Context().Err() == nil:
			return fmt.Errorf("episode %s (vm %s): %w during the call: %w", id, vm, pool.ErrEpisodeEnded, err)
		}
		return fmt.Errorf("episode %s (vm %s): %w", id, vm, err)
	}
}

// defaultScreenshotSize makes the pool's screenshot size the default of an
// episode's actions body (field screenshot_size) or screenshot query
// (size), so the agent sees what the pool declares without repeating it.
func defaultScreenshotSize(w http.ResponseWriter, r *http.Request, size string) error {
	if size == "" {
		return nil
	}
	if r.Method == http.MethodGet {
		q := r.URL.Query()
		if q.Get("size") == "" && q.Get("width") == "" && q.Get("height") == "" {
			q.Set("size", size)
			r.URL.RawQuery = q.Encode()
		}
		return nil
	}
	if r.ContentLength > maxActionsBody {
		return tooLargeBody(r.ContentLength, maxActionsBody)
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxActionsBody))
	if err != nil {
		return jsonError(err, maxActionsBody)
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(b, &fields) == nil && fields != nil {
		if _, ok := fields["screenshot_size"]; !ok {
			fields["screenshot_size"], _ = json.Marshal(size)
			if nb, err := json.Marshal(fields); err == nil {
				b = nb
			}
		}
	}
	// Anything that is not an object goes through unchanged: the handler
	// names the problem.
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.ContentLength = int64(len(b))
	return nil
}
