// Package client is a Go client of deskfarm's HTTP API (/v1). It is what
// the deskfarm CLI uses, and what Go programs driving a farm can use: it
// imports only package api and the standard library, so it links none of
// the server.
//
// Every method takes a context first; canceling it cancels the request,
// and the server then stops what it started (a canceled create removes its
// half-made VM). A non-2xx answer is returned as an *api.Error with the
// server's code, message, field and the HTTP status.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/deskfarm/deskfarm/api"
)

// Errors of a cluster's agents (serve --kubeconfig), for errors.Is: every
// error answer is an *api.Error, and these match one of their code.
var (
	// ErrNodeLost: the episode's node stopped renewing its Lease; the
	// episode is gone with it (410 node_lost). Start another.
	ErrNodeLost error = &api.Error{ErrorBody: api.ErrorBody{Code: api.CodeNodeLost}}
	// ErrClusterUnavailable: the apiserver did not answer a claim (503
	// cluster_unavailable); running episodes go on. Retry later.
	ErrClusterUnavailable error = &api.Error{ErrorBody: api.ErrorBody{Code: api.CodeClusterUnavailable}}
	// ErrNodeUnreachable: the agent asked could not reach the episode's
	// owner (502 node_unreachable); the message names the node.
	ErrNodeUnreachable error = &api.Error{ErrorBody: api.ErrorBody{Code: api.CodeNodeUnreachable}}
)

// DefaultServer is the API a client talks to when it is given none.
const DefaultServer = "http://127.0.0.1:8080"

// Environment variables the CLI (and FromEnv) read.
const (
	EnvServer    = "DESKFARM_SERVER"     // the server's base URL
	EnvToken     = "DESKFARM_TOKEN"      // the API token
	EnvTokenFile = "DESKFARM_TOKEN_FILE" // a file holding the API token (default DefaultTokenFile)
)

// DefaultTokenFile is where `deskfarm serve` keeps its control token under
// its default --state-dir, readable by root only. It mirrors the server's
// default here so that this package links none of the server.
const DefaultTokenFile = "/var/lib/deskfarm/token"

// Client talks to one deskfarm server. It is safe for concurrent use.
type Client struct {
	base  string // scheme://host[:port][/prefix], no trailing slash
	token string // sent as a bearer token when set
	hc    *http.Client
}

// Option configures New.
type Option func(*Client)

// WithToken sends token as "Authorization: Bearer TOKEN".
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient uses hc instead of a default http.Client.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// New returns a client of the server at base, e.g. "http://127.0.0.1:8080".
func New(base string, opts ...Option) (*Client, error) {
	trimmed := strings.TrimRight(base, "/")
	u, err := url.Parse(trimmed)
	if err != nil {
		return nil, fmt.Errorf("server URL %q: want http://HOST:PORT: %w", base, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server URL %q: want http://HOST:PORT", base)
	}
	// No overall timeout: a create lasts a boot and an exec up to an hour.
	// Callers bound calls with their context.
	c := &Client{base: trimmed, hc: &http.Client{}}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// FromEnv returns a client of $DESKFARM_SERVER (else DefaultServer) with
// the token TokenFor finds.
func FromEnv(opts ...Option) (*Client, error) {
	server := os.Getenv(EnvServer)
	if server == "" {
		server = DefaultServer
	}
	return New(server, append([]Option{WithToken(TokenFor(server, os.Getenv, DefaultTokenFile))}, opts...)...)
}

// TokenFor returns the token a client of server sends: $DESKFARM_TOKEN
// when set; else, for a server on this host's loopback, the token in
// $DESKFARM_TOKEN_FILE, or in defaultFile when that is unset, if the file
// is readable; else none. A token file is this host's farm's, so it never
// goes to another host. getenv is os.Getenv or a test's stand-in.
//
// defaultFile is DefaultTokenFile for a real process and "" (no file) for
// a test's: a farm that `make run` started on the host must not hand its
// token to a test's own server.
func TokenFor(server string, getenv func(string) string, defaultFile string) string {
	if t := getenv(EnvToken); t != "" {
		return t
	}
	u, err := url.Parse(server)
	if err != nil || !loopbackHost(u.Hostname()) {
		return ""
	}
	path := getenv(EnvTokenFile)
	if path == "" {
		path = defaultFile
	}
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		// Not there (no farm with that state dir) or not ours to read
		// (another user's farm): go without, as loopback clients may.
		return ""
	}
	return strings.TrimSpace(string(b))
}

// loopbackHost reports whether a URL's host name is this host's loopback.
func loopbackHost(name string) bool {
	if strings.EqualFold(name, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(name)
	return err == nil && ip.Unmap().IsLoopback()
}

// Server returns the base URL the client talks to.
func (c *Client) Server() string { return c.base }

// request is one API call.
type request struct {
	method string
	path   string // under base, already escaped
	query  url.Values
	body   io.Reader
	size   int64  // body length; -1 for unknown
	ctype  string // body Content-Type
}

// send makes a call and returns the response when its status is 2xx; the
// caller closes its body. Other statuses become an *api.Error.
func (c *Client) send(ctx context.Context, rq request) (*http.Response, error) {
	u := c.base + rq.path
	if len(rq.query) > 0 {
		u += "?" + rq.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, rq.method, u, rq.body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", rq.method, rq.path, err)
	}
	if rq.body != nil {
		req.ContentLength = rq.size
		if rq.size == 0 {
			req.Body = http.NoBody
		}
		req.Header.Set("Content-Type", rq.ctype)
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		// err is a *url.Error: it names the method and URL.
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w (is `deskfarm serve` running there? set --server or $%s)", err, EnvServer)
		}
		return nil, err
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, readError(resp)
}

// readError turns an error response into an *api.Error, also when a proxy
// in between answered with something other than the API's JSON (then the
// code is "http_STATUS" and the message the body's text).
func readError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &api.Error{Status: resp.StatusCode}
	var er api.ErrorResponse
	if json.Unmarshal(body, &er) == nil && er.Error.Code != "" {
		e.ErrorBody = er.Error
		return e
	}
	e.Code = "http_" + strconv.Itoa(resp.StatusCode)
	e.Message = strings.TrimSpace(string(body))
	if e.Message == "" {
		e.Message = resp.Status
	}
	return e
}

// call sends in as JSON (unless nil) and decodes the response into out
// (unless nil).
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	rq := request{method: method, path: path}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: encode body: %w", method, path, err)
		}
		rq.body, rq.size, rq.ctype = bytes.NewReader(b), int64(len(b)), "application/json"
	}
	resp, err := c.send(ctx, rq)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode response: %w", method, path, err)
	}
	return nil
}

// Target is what the per-VM routes act on: a VM, or an episode's VM (its
// routes apply the episode's defaults, such as the pool's screenshot size).
type Target struct {
	kind string // "vms" or "episodes"
	id   string
}

// VM targets a VM by id.
func VM(id string) Target { return Target{"vms", id} }

// Episode targets an episode's VM by the episode's id.
func Episode(id string) Target { return Target{"episodes", id} }

func (t Target) String() string {
	if t.kind == "episodes" {
		return "episode " + t.id
	}
	return "vm " + t.id
}

func (t Target) path(rest ...string) string {
	p := "/v1/" + t.kind + "/" + url.PathEscape(t.id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// CreateVM creates a VM and returns it once it is ready (a boot can take a
// minute).
func (c *Client) CreateVM(ctx context.Context, opts api.CreateOptions) (api.VM, error) {
	var vm api.VM
	err := c.call(ctx, http.MethodPost, "/v1/vms", opts, &vm)
	return vm, err
}

// ListVMs lists the farm's VMs.
func (c *Client) ListVMs(ctx context.Context) ([]api.VM, error) {
	var list api.VMList
	err := c.call(ctx, http.MethodGet, "/v1/vms", nil, &list)
	return list.VMs, err
}

// GetVM describes one VM.
func (c *Client) GetVM(ctx context.Context, id string) (api.VM, error) {
	var vm api.VM
	err := c.call(ctx, http.MethodGet, VM(id).path(), nil, &vm)
	return vm, err
}

// DestroyVM destroys a VM.
func (c *Client) DestroyVM(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, VM(id).path(), nil, nil)
}

// ResetVM returns a VM to its ready snapshot.
func (c *Client) ResetVM(ctx context.Context, id string) (api.ResetResponse, error) {
	return c.Reset(ctx, VM(id))
}

// Reset returns the target's VM to its ready snapshot in place; an
// episode goes on. Through an episode it works on any agent of a cluster.
func (c *Client) Reset(ctx context.Context, t Target) (api.ResetResponse, error) {
	var res api.ResetResponse
	err := c.call(ctx, http.MethodPost, t.path("reset"), nil, &res)
	return res, err
}

// Exec runs a program in the target's guest. A non-zero exit code is not
// an error: it is in the response.
func (c *Client) Exec(ctx context.Context, t Target, req api.ExecRequest) (api.ExecResponse, error) {
	var res api.ExecResponse
	err := c.call(ctx, http.MethodPost, t.path("exec"), req, &res)
	return res, err
}

// ReadFile copies a guest file to w and returns the bytes copied.
func (c *Client) ReadFile(ctx context.Context, t Target, path string, w io.Writer) (int64, error) {
	resp, err := c.send(ctx, request{method: http.MethodGet, path: t.path("files"), query: url.Values{"path": {path}}})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("read %s from %s: %w", path, t, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return n, fmt.Errorf("read %s from %s: got %d of %d bytes", path, t, n, resp.ContentLength)
	}
	return n, nil
}

// WriteFile uploads size bytes from r to a guest file with the given mode
// (e.g. 0o644). size -1 sends a body of unknown length; the server still
// enforces api.MaxFileSize.
func (c *Client) WriteFile(ctx context.Context, t Target, path string, r io.Reader, size int64, mode uint32) error {
	if size > api.MaxFileSize {
		return fmt.Errorf("write %s to %s: %d bytes exceed the limit of %d", path, t, size, api.MaxFileSize)
	}
	q := url.Values{"path": {path}, "mode": {fmt.Sprintf("%04o", mode)}}
	resp, err := c.send(ctx, request{method: http.MethodPut, path: t.path("files"), query: q,
		body: r, size: size, ctype: "application/octet-stream"})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Act plays actions on the target's screen and returns what the agent
// sees: a Claude tool_result plus the neutral fields.
func (c *Client) Act(ctx context.Context, t Target, req api.ActionsRequest) (api.ActionsResponse, error) {
	return c.ActRaw(ctx, t, req)
}

// ActRaw is Act with a body the caller built, e.g. JSON typed by a user.
func (c *Client) ActRaw(ctx context.Context, t Target, body any) (api.ActionsResponse, error) {
	var out api.ActionsResponse
	err := c.call(ctx, http.MethodPost, t.path("actions"), body, &out)
	return out, err
}

// Screenshot copies an encoded image of the target's screen to w and
// returns its media type.
func (c *Client) Screenshot(ctx context.Context, t Target, opts api.ScreenshotOptions, w io.Writer) (string, error) {
	q := url.Values{}
	if opts.Format != "" {
		q.Set("format", opts.Format)
	}
	if opts.Quality != 0 {
		q.Set("quality", strconv.Itoa(opts.Quality))
	}
	if opts.Width != 0 || opts.Height != 0 {
		q.Set("width", strconv.Itoa(opts.Width))
		q.Set("height", strconv.Itoa(opts.Height))
	} else if opts.Size != "" {
		q.Set("size", opts.Size)
	}
	if opts.Fresh {
		q.Set("fresh", "true")
	}
	resp, err := c.send(ctx, request{method: http.MethodGet, path: t.path("screenshot"), query: q})
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return "", fmt.Errorf("screenshot of %s: %w", t, err)
	}
	return resp.Header.Get("Content-Type"), nil
}

// StartEpisode leases a VM of a pool.
func (c *Client) StartEpisode(ctx context.Context, req api.StartEpisodeRequest) (api.Episode, error) {
	var ep api.Episode
	err := c.call(ctx, http.MethodPost, "/v1/episodes", req, &ep)
	return ep, err
}

// ListEpisodes lists the live episodes: on a cluster's agent, those of
// its own node.
func (c *Client) ListEpisodes(ctx context.Context) ([]api.Episode, error) {
	var list api.EpisodeList
	err := c.call(ctx, http.MethodGet, "/v1/episodes", nil, &list)
	return list.Episodes, err
}

// GetEpisode describes one episode.
func (c *Client) GetEpisode(ctx context.Context, id string) (api.Episode, error) {
	var ep api.Episode
	err := c.call(ctx, http.MethodGet, Episode(id).path(), nil, &ep)
	return ep, err
}

// EndEpisode ends an episode: it answers once the VM is reset and back in
// its pool, or destroyed (then VMReplaced is set).
func (c *Client) EndEpisode(ctx context.Context, id string) (api.Episode, error) {
	var ep api.Episode
	err := c.call(ctx, http.MethodDelete, Episode(id).path(), nil, &ep)
	return ep, err
}

// Pools lists the farm's pools and their sizes.
func (c *Client) Pools(ctx context.Context) ([]api.Pool, error) {
	var list api.PoolList
	err := c.call(ctx, http.MethodGet, "/v1/pools", nil, &list)
	return list.Pools, err
}

// Health asks the server's health: an error while it does not answer or
// cannot reach libvirtd (503 hypervisor_unavailable); a cluster agent's
// answer carries its view of the apiserver.
func (c *Client) Health(ctx context.Context) (api.HealthResponse, error) {
	var h api.HealthResponse
	err := c.call(ctx, http.MethodGet, "/healthz", nil, &h)
	return h, err
}

// ListTrajectories lists the farm's recorded trajectories, newest first,
// with what they take on disk and the budget.
func (c *Client) ListTrajectories(ctx context.Context) (api.TrajectoryList, error) {
	var list api.TrajectoryList
	err := c.call(ctx, http.MethodGet, "/v1/trajectories", nil, &list)
	return list, err
}

// GetTrajectory describes one trajectory, with every step.
func (c *Client) GetTrajectory(ctx context.Context, id string) (api.Trajectory, error) {
	var tr api.Trajectory
	err := c.call(ctx, http.MethodGet, "/v1/trajectories/"+url.PathEscape(id), nil, &tr)
	return tr, err
}

// ExportTrajectory streams a trajectory as an archive: format is
// api.ExportTar or api.ExportZip ("" is the server's default, tar). It
// holds OSWorld's result layout (traj.jsonl, a PNG per step,
// recording.mp4) and deskfarm/, the trajectory as stored. The caller
// closes the stream.
func (c *Client) ExportTrajectory(ctx context.Context, id, format string) (io.ReadCloser, error) {
	return c.export(ctx, "/v1/trajectories/"+url.PathEscape(id)+"/export", format)
}

// ExportEpisodeTrajectory is ExportTrajectory by the episode's id through
// the episode's route, which an episode's holder may call on any agent of
// a cluster.
func (c *Client) ExportEpisodeTrajectory(ctx context.Context, episode, format string) (io.ReadCloser, error) {
	return c.export(ctx, Episode(episode).path("trajectory"), format)
}

func (c *Client) export(ctx context.Context, path, format string) (io.ReadCloser, error) {
	q := url.Values{}
	if format != "" {
		q.Set("format", format)
	}
	resp, err := c.send(ctx, request{method: http.MethodGet, path: path, query: q})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// SetTrajectoryResult records a trajectory's score (OSWorld's result.txt).
func (c *Client) SetTrajectoryResult(ctx context.Context, id string, result float64) error {
	return c.call(ctx, http.MethodPut, "/v1/trajectories/"+url.PathEscape(id)+"/result", api.TrajectoryResultRequest{Result: result}, nil)
}

// DeleteTrajectory removes a finished trajectory from the farm's disk.
func (c *Client) DeleteTrajectory(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, "/v1/trajectories/"+url.PathEscape(id), nil, nil)
}

// StartRecording starts recording a VM's trajectory outside an episode
// (an episode records with StartEpisodeRequest.Record).
func (c *Client) StartRecording(ctx context.Context, vm string, opts api.RecordOptions) (api.TrajectoryInfo, error) {
	var info api.TrajectoryInfo
	err := c.call(ctx, http.MethodPost, VM(vm).path("recording"), api.StartRecordingRequest{RecordOptions: opts}, &info)
	return info, err
}

// StopRecording stops a VM's recording and returns the trajectory it
// made.
func (c *Client) StopRecording(ctx context.Context, vm string) (api.TrajectoryInfo, error) {
	var info api.TrajectoryInfo
	err := c.call(ctx, http.MethodDelete, VM(vm).path("recording"), nil, &info)
	return info, err
}
