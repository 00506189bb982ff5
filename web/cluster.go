package web

// The front door of a cluster agent (issue 15; Options.Cluster). Any agent
// serves every episode: POST /v1/episodes claims a desktop anywhere in the
// cluster (cluster.Front.Claim), and a route of an episode that this
// agent's pool does not hold is served by the episode's owner, proxied
// (ReverseProxy: bodies stream, websockets pass through). Which rows act on
// an episode, and so may be proxied, is declared on the rows (route.owned,
// routes.go). Frames, VNC and files stay on the owner's node: this agent
// only relays the caller's own connection.
//
// Rights. The caller's credentials travel with the proxied request (the
// token this agent checked, as an Authorization header: ?token= and the
// cookie are this agent's, not the owner's), so the owner decides what the
// caller may do, as it would for a direct call: a viewer token through
// this agent still only watches. The request also carries the cluster
// token (X-Deskfarm-Cluster-Token): it tells the owner that an agent ran
// the Host and cross-site checks already, and nothing more; the owner
// ignores its trusted networks for such a request (the caller is not at
// the proxying agent's address). A request carrying it is never proxied
// again, so caches that disagree cannot make a loop.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/cluster"
	"github.com/deskfarm/deskfarm/trajectory"
)

// ClusterTokenHeader carries the cluster token on agent-to-agent calls:
// the bind route and proxied episode routes.
const ClusterTokenHeader = "X-Deskfarm-Cluster-Token"

// Proxy timeouts. A dead owner is found by its Lease (ownerCheck), or by
// the dial; a live one may take as long as an exec to answer.
const (
	proxyDialTimeout = 5 * time.Second
	// proxyHeaderTimeout bounds the wait for an owner's answer: the
	// longest call (an exec of api.MaxExecTimeout) and a margin.
	proxyHeaderTimeout = api.MaxExecTimeout*time.Second + time.Minute
	// ownerCheck is how often a proxied call asks the agent's cache
	// whether the owner's node is still alive; a lost node cancels it.
	ownerCheck = time.Second
)

// newProxyTransport is the transport to owner agents.
func newProxyTransport() *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: proxyDialTimeout, KeepAlive: 15 * time.Second}).DialContext,
		TLSHandshakeTimeout:   proxyDialTimeout,
		ResponseHeaderTimeout: proxyHeaderTimeout,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
	}
}

// proxiedKey marks a request that came from another agent with a valid
// cluster token (the guard sets it).
type proxiedKey struct{}

// isProxied reports whether the guard found a valid cluster token on r.
func isProxied(r *http.Request) bool {
	ok, _ := r.Context().Value(proxiedKey{}).(bool)
	return ok
}

// hasClusterToken reports whether r carries this agent's cluster token,
// compared by digest in constant time. A single host accepts none.
func (s *server) hasClusterToken(r *http.Request) bool {
	got := r.Header.Get(ClusterTokenHeader)
	if s.cluster == nil || s.clusterToken == "" || got == "" {
		return false
	}
	return tokenEqual(sha256.Sum256([]byte(got)), s.clusterToken)
}

// callerKey holds the access the guard found, for the proxy to forward.
type callerKey struct{}

// owned serves a row that acts on episode {id} (route.owned): here when
// this agent's pool holds the episode, else at its owner, proxied.
func (s *server) owned(h apiHandler) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		id := r.PathValue("id")
		if s.cluster == nil || s.pools == nil || isProxied(r) {
			return h(w, r)
		}
		if _, err := s.pools.Get(id); err == nil {
			return h(w, r)
		}
		pl, err := s.cluster.Locate(id)
		if err != nil {
			return fmt.Errorf("episode %s: %w", id, err)
		}
		if pl.Local {
			return h(w, r) // the cache lags the pool: the pool answers
		}
		return s.proxy(w, r, pl)
	}
}

// proxy relays r to the owner of pl's episode and its answer back.
func (s *server) proxy(w http.ResponseWriter, r *http.Request, pl cluster.Placement) error {
	target, err := url.Parse(pl.URL)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		return &httpError{status: http.StatusBadGateway, code: api.CodeNodeUnreachable,
			msg: fmt.Sprintf("episode %s: its node %s publishes no usable agent URL (%q)", pl.Episode, pl.Node, pl.URL)}
	}
	if info := infoFrom(r); info != nil {
		info.vm, info.node = pl.VM, pl.Node
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	go s.watchOwner(ctx, cancel, pl)

	var failed error
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target) // the owner's own name as Host: its answers' links point at it
			pr.SetXForwarded()
			s.forwardCredentials(r, pr.Out)
		},
		Transport:     s.proxyTransport,
		FlushInterval: -1, // streams (screenshots, SSE) pass as they come
		ErrorHandler:  func(_ http.ResponseWriter, _ *http.Request, err error) { failed = err },
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	rp.ServeHTTP(w, r.WithContext(ctx))
	if failed == nil {
		return nil
	}
	if cause := context.Cause(ctx); errors.Is(cause, cluster.ErrNodeLost) {
		return fmt.Errorf("episode %s: %w", pl.Episode, cause)
	}
	if r.Context().Err() != nil {
		return r.Context().Err() // the caller went away
	}
	// Ask again: the owner may have been lost since the call began.
	if _, err := s.cluster.Locate(pl.Episode); errors.Is(err, cluster.ErrNodeLost) {
		return fmt.Errorf("episode %s: %w", pl.Episode, err)
	}
	return &httpError{status: http.StatusBadGateway, code: api.CodeNodeUnreachable,
		msg: fmt.Sprintf("episode %s: its node %s (agent %s) did not answer: %v", pl.Episode, pl.Node, pl.URL, failed)}
}

// watchOwner cancels a proxied call when the owner's node is lost.
func (s *server) watchOwner(ctx context.Context, cancel context.CancelCauseFunc, pl cluster.Placement) {
	t := time.NewTicker(ownerCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := s.cluster.Locate(pl.Episode); errors.Is(err, cluster.ErrNodeLost) {
				cancel(fmt.Errorf("node %s: %w", pl.Node, err))
				return
			}
		}
	}
}

// forwardCredentials sets out's credentials to the caller's: the token the
// guard checked, whatever carried it. A caller that needed none (a trusted
// network, or /mcp's in-process calls, which /mcp's guard let in with
// control rights) is sent with this agent's control token: the same right,
// since a cluster's agents share their tokens.
func (s *server) forwardCredentials(in *http.Request, out *http.Request) {
	tok := ""
	if a, ok := in.Context().Value(callerKey{}).(access); ok && a.token != "" {
		tok = a.token
	} else if !ok || a.role == roleControl {
		tok = s.token
	}
	out.Header.Del("Authorization")
	out.Header.Del("Cookie") // this agent's cookies; the token goes as a header
	if tok != "" {
		out.Header.Set("Authorization", "Bearer "+tok)
	}
	out.Header.Set(ClusterTokenHeader, s.clusterToken)
}

// startClusterEpisode serves POST /v1/episodes on a cluster agent: claim
// a desktop anywhere (this node first) and answer with the owner's record
// of the episode, plus its node and URL.
func (s *server) startClusterEpisode(w http.ResponseWriter, r *http.Request, body api.StartEpisodeRequest, ttl time.Duration) error {
	pl, ep, err := s.cluster.Claim(r.Context(), body.Pool, ttl)
	if err != nil {
		return err
	}
	noteVM(r, ep.VM)
	if info := infoFrom(r); info != nil {
		info.node = pl.Node
	}
	// An episode bound on another node is recorded there: its owner is
	// asked as a client would (POST /v1/episodes/{id}/recording).
	s.recordEpisode(r.Context(), body, ep, func(ctx context.Context, meta trajectory.Meta) error {
		if pl.Local {
			_, err := s.record(ctx, meta)
			return err
		}
		return s.ownerStartRecording(r, pl, meta.Options)
	}) // trajectories.go
	out := s.episodeResponse(r, ep)
	if !pl.Local {
		// The owner's record has what only it knows: its viewer link and
		// OSWorld address. Without it the claim still stands.
		if rec, err := s.ownerRecord(r, pl); err == nil {
			out = rec
		} else {
			s.log.Warn("episode record from its owner", "episode", ep.ID, "node", pl.Node, "op", "episode_start", "err", err)
			out.OSWorldAddress = ""
		}
	}
	out.Node, out.URL = pl.Node, pl.URL
	w.Header().Set("Location", "/v1/episodes/"+ep.ID)
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// ownerRecord gets GET /v1/episodes/{id} from the episode's owner.
func (s *server) ownerRecord(r *http.Request, pl cluster.Placement) (api.Episode, error) {
	var out api.Episode
	return out, s.ownerCall(r, pl, http.MethodGet, "", nil, http.StatusOK, &out)
}

// ownerStartRecording asks the episode's owner to record it.
func (s *server) ownerStartRecording(r *http.Request, pl cluster.Placement, opts api.RecordOptions) error {
	b, err := json.Marshal(api.StartRecordingRequest{RecordOptions: opts})
	if err != nil {
		return err
	}
	return s.ownerCall(r, pl, http.MethodPost, "/recording", b, http.StatusCreated, nil)
}

// ownerCall sends method /v1/episodes/{id}+sub to the episode's owner with
// the caller's credentials, and decodes an answer of status want into out.
func (s *server) ownerCall(r *http.Request, pl cluster.Placement, method, sub string, body []byte, want int, out any) error {
	req, err := http.NewRequestWithContext(r.Context(), method,
		strings.TrimSuffix(pl.URL, "/")+"/v1/episodes/"+url.PathEscape(pl.Episode)+sub, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	s.forwardCredentials(r, req)
	// As a proxied call's: the owner's links name this agent.
	scheme, host := callerBase(r)
	req.Header.Set("X-Forwarded-Host", host)
	req.Header.Set("X-Forwarded-Proto", scheme)
	resp, err := s.proxyTransport.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %s", method, req.URL, resp.Status)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// clusterBind serves POST /v1/cluster/bind (access cluster): the claimer
// of one of this node's desktops asks it to lease the VM.
func (s *server) clusterBind(w http.ResponseWriter, r *http.Request) error {
	var req cluster.BindRequest
	if err := decodeJSON(w, r, &req, maxJSONBody); err != nil {
		return err
	}
	ep, err := s.cluster.Bind(r.Context(), req)
	if err != nil {
		return err
	}
	noteVM(r, ep.VM)
	writeJSON(w, http.StatusOK, s.episodeResponse(r, ep))
	return nil
}
