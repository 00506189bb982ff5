package web

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/cluster"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/internal/fielderr"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/trajectory"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/prometheus/client_golang/prometheus"
)

// resetApplyWait bounds how long a reset's answer waits for the desk to
// apply the reset event (normally well under a millisecond).
const resetApplyWait = 2 * time.Second

// Body limits.
const (
	// maxJSONBody bounds request bodies other than exec and file uploads.
	maxJSONBody = 1 << 20
	// maxExecBody leaves room for vmm.MaxFileSize of stdin in base64.
	maxExecBody = vmm.MaxFileSize/3*4 + maxJSONBody
)

// DefaultTrustedNets are the client networks that need no token: loopback.
var DefaultTrustedNets = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("::1/128"),
}

// Options configures NewServer.
type Options struct {
	// Token is the API token. Requests from outside TrustedNets must carry
	// "Authorization: Bearer <Token>"; with no Token they are refused. A
	// request that presents a token must present the right one, from
	// anywhere.
	Token string
	// TrustedNets are client networks whose requests need no token. Nil
	// means DefaultTrustedNets; an empty non-nil slice trusts no address.
	TrustedNets []netip.Prefix
	// ViewerToken is a token that can watch but not act (see security.go);
	// empty means there is none.
	ViewerToken string
	// AllowedHosts are the Host names, besides loopback ones, that reach the
	// farm: "NAME" on any port, "NAME:PORT" on that port only.
	AllowedHosts []string
	// Logger gets one line per request; nil means slog.Default().
	Logger *slog.Logger
	// Desks gives the live displays for actions, screenshots, viewers and
	// control; nil answers those endpoints with 501. The pool follows the
	// farm's lifecycle events by itself: web never cleans desks up.
	Desks *desk.Pool
	// MaxViewersPerVM and MaxViewers cap the open viewer connections
	// (frame streams and activity feeds) of one VM and of the farm; zero
	// means DefaultMaxViewersPerVM and DefaultMaxViewers.
	MaxViewersPerVM, MaxViewers int
	// NoVNCDir is the noVNC package directory served at /novnc/ for taking
	// over a VM; empty means $DESKFARM_NOVNC_DIR, else DefaultNoVNCDir.
	NoVNCDir string
	// Pools serves /v1/episodes and /v1/pools; nil answers them with 501.
	Pools *pool.Manager
	// OSWorldAddress gives a VM's OSWorld address for episode records
	// (api.Episode.OSWorldAddress); nil or false leaves it out.
	OSWorldAddress func(vm string) (string, bool)
	// Metrics is served at /metrics, with the API's latency histograms
	// added; nil means a registry of the API's metrics only.
	Metrics *prometheus.Registry
	// Cluster makes the server a cluster agent's front door (cluster.go):
	// POST /v1/episodes claims through it, an episode route of an episode
	// not in Pools is proxied to its owner, and POST /v1/cluster/bind
	// serves other agents' claims. Nil is a single host, as before. It
	// needs Pools.
	Cluster cluster.Front
	// ClusterToken authenticates agents to each other (header
	// X-Deskfarm-Cluster-Token); with Cluster, it must be set.
	ClusterToken string
	// Trajectories records VMs and episodes and keeps their trajectories
	// (trajectories.go, record.go); nil answers the trajectory routes with
	// 501 and records nothing.
	Trajectories *trajectory.Manager
	// AdvertiseURL is this agent's base URL as the other agents reach it
	// (serve --advertise), shown in its episodes' records (api.Episode.URL).
	AdvertiseURL string
}

type server struct {
	farm    vmm.Farm
	log     *slog.Logger
	token   string
	trusted []netip.Prefix
	desks   *desk.Pool
	// Browser viewers (viewer.go, stream.go, proxy.go, control.go).
	novnc   string
	viewers *viewerLimits
	// Pools and metrics (episodes.go).
	pools    *pool.Manager
	osworld  func(vm string) (string, bool)
	registry *prometheus.Registry
	met      *webMetrics

	// viewerToken and hosts are the access settings (security.go).
	viewerToken string
	hosts       []hostRule
	// traj records steps and keeps trajectories (trajectories.go); nil
	// for none.
	traj *trajectory.Manager
	// mcp serves /mcp (mcp.go).
	mcp *mcpRoute
	// live feeds the dashboard (live.go).
	live *liveHub
	// The cluster agent's front door (cluster.go); cluster nil on a
	// single host.
	cluster        cluster.Front
	clusterToken   string
	advertise      string
	proxyTransport *http.Transport
	forkTransport  *http.Transport // forks.go
}

// apiHandler is a handler that returns its error for the wrapper to send.
type apiHandler func(w http.ResponseWriter, r *http.Request) error

// NewServer returns the handler for the /v1 API and /healthz, backed by farm.
// It sets no timeouts: creating a VM takes as long as a boot and exec up to
// MaxExecTimeout, and both stop when the client goes away.
func NewServer(farm vmm.Farm, opts Options) http.Handler {
	s := newServer(farm, opts)
	return s.handler(s.routes()) // routes.go
}

// newServer is NewServer short of the handler, for tests of the table.
func newServer(farm vmm.Farm, opts Options) *server {
	s := &server{farm: farm, log: opts.Logger, token: opts.Token, trusted: opts.TrustedNets, desks: opts.Desks,
		viewerToken: opts.ViewerToken, hosts: parseHosts(opts.AllowedHosts),
		cluster: opts.Cluster, clusterToken: opts.ClusterToken, advertise: opts.AdvertiseURL, traj: opts.Trajectories}
	if s.cluster != nil {
		s.proxyTransport = newProxyTransport()
		// A fork share's node admits it before the template is sent.
		s.forkTransport = newProxyTransport()
		s.forkTransport.ExpectContinueTimeout = forkContinueTimeout
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.novnc = noVNCDir(opts.NoVNCDir)
	s.viewers = newViewerLimits(opts.MaxViewersPerVM, opts.MaxViewers)
	if s.trusted == nil {
		s.trusted = DefaultTrustedNets
	}
	s.initEpisodes(opts)
	s.mcp = newMCPRoute(s.log) // mcp.go
	s.live = newLiveHub(s)
	return s
}

// wrap turns an apiHandler into an http.Handler that sends its error.
func (s *server) wrap(op string, h apiHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if info := infoFrom(r); info != nil {
			info.op = op
		}
		if err := h(w, r); err != nil {
			writeError(w, r, err)
		}
	})
}

// health answers 200 while the farm reaches libvirtd, and 503
// hypervisor_unavailable, saying since when and why, while it does not: a
// farm whose libvirtd died can neither make nor reset VMs, and a readiness
// probe (deploy/kubernetes) or an operator should see it. A cluster
// agent adds its view of the apiserver (api.ClusterHealth), which does not
// fail the probe.
func (s *server) health(w http.ResponseWriter, r *http.Request) error {
	if err := s.farm.Health(); err != nil {
		return err
	}
	out := api.HealthResponse{Status: "ok"}
	if s.cluster != nil {
		out.Cluster = clusterHealth(s.cluster.Health())
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// clusterHealth is h as GET /healthz tells it.
func clusterHealth(h cluster.Health) *api.ClusterHealth {
	out := &api.ClusterHealth{Node: h.Node, APIServer: api.APIServerUnknown, LeaseSeconds: h.LeaseDuration.Seconds()}
	switch {
	case h.Reachable:
		out.APIServer = api.APIServerOK
	case h.Err != nil:
		out.APIServer, out.Error = api.APIServerUnreachable, h.Err.Error()
	}
	if !h.Since.IsZero() {
		out.Since = h.Since.UTC().Format(time.RFC3339Nano)
	}
	if !h.LastRenewal.IsZero() {
		out.LeaseRenewed = h.LastRenewal.UTC().Format(time.RFC3339Nano)
	}
	return out
}

func (s *server) create(w http.ResponseWriter, r *http.Request) error {
	var opts api.CreateOptions
	if err := decodeJSON(w, r, &opts, maxJSONBody); err != nil {
		return err
	}
	vm, err := s.farm.Create(r.Context(), vmmCreateOptions(opts))
	if err != nil {
		return err
	}
	noteVM(r, vm.ID)
	w.Header().Set("Location", "/v1/vms/"+vm.ID)
	writeJSON(w, http.StatusCreated, apiVM(vm))
	return nil
}

func (s *server) list(w http.ResponseWriter, r *http.Request) error {
	vms, err := s.farm.List(r.Context())
	if err != nil {
		return err
	}
	out := api.VMList{VMs: make([]api.VM, 0, len(vms))}
	for _, vm := range vms {
		out.VMs = append(out.VMs, apiVM(vm))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *server) get(w http.ResponseWriter, r *http.Request) error {
	vm, err := s.farm.Get(r.Context(), vmID(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, apiVM(vm))
	return nil
}

// destroy and reset leave the VM's desk to its lifecycle events
// (EventDestroyed closes it, EventReset releases input and control; see
// package desk).
func (s *server) destroy(w http.ResponseWriter, r *http.Request) error {
	if err := s.farm.Destroy(r.Context(), vmID(r)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// reset serves POST /v1/vms/{id}/reset and the episode's
// /v1/episodes/{id}/reset: the VM back to its ready snapshot in place (the
// episode goes on; OSWorld's revert). Through an episode, any agent of a
// cluster reaches it.
func (s *server) reset(w http.ResponseWriter, r *http.Request, t target) error {
	id := t.vm
	start := time.Now()
	res, err := s.farm.Reset(t.ctx, id)
	if err != nil {
		return err
	}
	s.waitReset(r, id, start, "reset")
	writeJSON(w, http.StatusOK, api.ResetResponse{
		ID:           id,
		ResetSeconds: res.Duration.Seconds(),
		ResetMS:      res.Duration.Milliseconds(),
	})
	return nil
}

// waitReset returns once vm's desk has applied a reset (or a revert) begun
// at start, so that the client's next call (taking control, holding a key)
// never races it.
func (s *server) waitReset(r *http.Request, vm string, start time.Time, op string) {
	if s.desks == nil {
		return
	}
	wctx, cancel := context.WithTimeout(r.Context(), resetApplyWait)
	defer cancel()
	if err := s.desks.WaitReset(wctx, vm, start); err != nil {
		s.log.Warn("answered before the desk applied the reset", "vm", vm, "op", op, "err", err)
	}
}

func (s *server) exec(w http.ResponseWriter, r *http.Request, t target) error {
	id := t.vm
	var body api.ExecRequest
	if err := decodeJSON(w, r, &body, maxExecBody); err != nil {
		return err
	}
	req, err := execRequest(body)
	if err != nil {
		return err
	}
	res, err := s.farm.Exec(t.ctx, id, req)
	if err != nil {
		return err
	}
	t.step.exec(api.StepExec{Argv: req.Argv, ExitCode: res.ExitCode, StdoutBytes: len(res.Stdout), StderrBytes: len(res.Stderr)})
	out := api.ExecResponse{ExitCode: res.ExitCode, Signal: res.Signal, Truncated: res.Truncated}
	out.Stdout, out.StdoutB64 = textOrBase64(res.Stdout)
	out.Stderr, out.StderrB64 = textOrBase64(res.Stderr)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// execRequest validates an exec body and turns it into a vmm.ExecRequest.
func execRequest(b api.ExecRequest) (vmm.ExecRequest, error) {
	var req vmm.ExecRequest
	if len(b.Argv) == 0 || b.Argv[0] == "" {
		return req, invalidf("argv", "must name a program: argv is empty")
	}
	for i, a := range b.Argv {
		if strings.ContainsRune(a, 0) {
			return req, invalidf("argv", "argv[%d] contains a NUL byte", i)
		}
	}
	for i, e := range b.Env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" || strings.ContainsRune(e, 0) {
			return req, invalidf("env", "env[%d] %q is not KEY=VALUE", i, e)
		}
	}
	switch {
	case b.Stdin != "" && b.StdinB64 != "":
		return req, invalidf("stdin_b64", "give stdin or stdin_b64, not both")
	case b.StdinB64 != "":
		stdin, err := base64.StdEncoding.DecodeString(b.StdinB64)
		if err != nil {
			return req, invalidf("stdin_b64", "not standard base64: %v", err)
		}
		req.Stdin = stdin
	case b.Stdin != "":
		req.Stdin = []byte(b.Stdin)
	}
	if len(req.Stdin) > vmm.MaxFileSize {
		field := "stdin"
		if b.StdinB64 != "" {
			field = "stdin_b64"
		}
		return req, fielderr.New(field, fmt.Sprintf("%d bytes of stdin exceed the limit of %d", len(req.Stdin), vmm.MaxFileSize), vmm.ErrTooLarge)
	}
	if b.TimeoutS < 0 || b.TimeoutS > api.MaxExecTimeout {
		return req, invalidf("timeout_s", "must be in (0, %d] seconds, got %g", api.MaxExecTimeout, b.TimeoutS)
	}
	req.Argv = b.Argv
	req.Env = b.Env
	req.Timeout = time.Duration(b.TimeoutS * float64(time.Second))
	return req, nil
}

// textOrBase64 returns b as text when it is valid UTF-8 and as base64 otherwise.
func textOrBase64(b []byte) (text, b64 string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return "", base64.StdEncoding.EncodeToString(b)
}

func (s *server) readFile(w http.ResponseWriter, r *http.Request, t target) error {
	id := t.vm
	path, err := guestPath(r)
	if err != nil {
		return err
	}
	data, err := s.farm.ReadFile(t.ctx, id, path)
	if err != nil {
		return err
	}
	if len(data) > vmm.MaxFileSize {
		return fmt.Errorf("read %s from vm %s: %d bytes: %w", path, id, len(data), vmm.ErrTooLarge)
	}
	t.step.file(path, data)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(data) //nolint:errcheck // the client went away; nothing to tell it
	}
	return nil
}

func (s *server) writeFile(w http.ResponseWriter, r *http.Request, t target) error {
	id := t.vm
	path, err := guestPath(r)
	if err != nil {
		return err
	}
	mode := uint64(0o644)
	if m := r.URL.Query().Get("mode"); m != "" {
		mode, err = strconv.ParseUint(m, 8, 32)
		if err != nil || mode > 0o7777 {
			return invalidf("mode", "%q is not an octal file mode like 0644", m)
		}
	}
	if r.ContentLength > vmm.MaxFileSize {
		return tooLargeBody(r.ContentLength, vmm.MaxFileSize)
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, vmm.MaxFileSize))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return tooLargeBody(-1, vmm.MaxFileSize)
		}
		return fmt.Errorf("read upload for %s on vm %s: %w", path, id, err)
	}
	t.step.file(path, data)
	if err := s.farm.WriteFile(t.ctx, id, path, data, uint32(mode)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// guestPath returns the "path" query parameter, which must be absolute.
func guestPath(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	switch {
	case p == "":
		return "", invalidf("path", "required: ?path=/absolute/path/in/guest")
	case !strings.HasPrefix(p, "/"):
		return "", invalidf("path", "%q is not absolute", p)
	case strings.ContainsRune(p, 0):
		return "", invalidf("path", "contains a NUL byte")
	}
	return p, nil
}

// target is what a VM handler acts on: a VM plus, on an episode's route,
// the episode's defaults and lease. onVM resolves /v1/vms/{id}, onEpisode
// /v1/episodes/{id}; the handler never looks at the path.
type target struct {
	vm      string
	episode string // "" on a /v1/vms route
	// screenshotSize is the default when the request names none; "" is the
	// route's own default (auto for actions, native for screenshots).
	screenshotSize string
	// ctx is the call's context: the request's, or on an episode the
	// lease's, which an end of the episode cancels.
	ctx context.Context
	// step notes what a call on a recorded VM did (record.go); nil when
	// the VM is not recorded.
	step *stepNote
}

// targetHandler is a VM handler.
type targetHandler func(w http.ResponseWriter, r *http.Request, t target) error

// onVM resolves /v1/vms/{id}.
func (s *server) onVM(h targetHandler) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		return h(w, r, target{vm: vmID(r), ctx: r.Context()})
	}
}

// mutates guards a handler that changes a VM (actions, exec, file
// writes): a pool VM that no episode leases refuses with 409 not_leased, so
// nothing dirties a warm VM behind the pool's back; and a VM changed is
// marked touched, so the pool resets it before leasing it again.
func (s *server) mutates(h targetHandler) targetHandler {
	return func(w http.ResponseWriter, r *http.Request, t target) error {
		if err := s.mayChange(t.vm, t.episode); err != nil {
			return err
		}
		return h(w, r, t)
	}
}

// mayChange is mutates' check: it refuses an unleased pool VM on a
// /v1/vms route and marks the VM touched.
func (s *server) mayChange(vm, episode string) error {
	if s.pools == nil {
		return nil
	}
	if episode == "" {
		if err := s.pools.RequireLease(vm); err != nil {
			return err
		}
	}
	s.pools.Touch(vm)
	return nil
}

// vmID returns the {id} path value and notes it for the request log.
func vmID(r *http.Request) string {
	id := r.PathValue("id")
	noteVM(r, id)
	return id
}

func tooLargeBody(n, limit int64) error {
	msg := fmt.Sprintf("request body exceeds the limit of %d bytes", limit)
	if n >= 0 {
		msg = fmt.Sprintf("request body of %d bytes exceeds the limit of %d", n, limit)
	}
	return &httpError{status: http.StatusRequestEntityTooLarge, code: api.CodeTooLarge, msg: msg}
}

// decodeJSON reads one JSON object of at most limit bytes into v, refusing
// unknown fields and trailing data.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	if r.ContentLength > limit {
		return tooLargeBody(r.ContentLength, limit)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, limit)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return tooLargeBody(-1, limit)
		}
		return badJSON("unexpected data after the JSON object")
	}
	return nil
}

// jsonError turns a decoding error into one that names the problem.
func jsonError(err error, limit int64) error {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return tooLargeBody(-1, limit)
	}
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return badJSON(fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se))
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		if te.Field == "" {
			return badJSON(fmt.Sprintf("expected a JSON object, got %s", te.Value))
		}
		return invalidf(te.Field, "must be of type %s, got %s", jsonType(te.Type), te.Value)
	}
	switch {
	case errors.Is(err, io.EOF):
		return badJSON("empty body: expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badJSON("truncated JSON: the body ends inside the object")
	}
	// encoding/json has no type for this one; its text is stable since Go 1.10.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if n, uerr := strconv.Unquote(name); uerr == nil {
			name = n
		}
		return invalidf(name, "unknown field")
	}
	return badJSON(err.Error())
}

// jsonType names a Go type in JSON's terms.
func jsonType(t reflect.Type) string {
	if t == nil {
		return "value"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	}
	return t.String()
}

func badJSON(msg string) error {
	return &httpError{status: http.StatusBadRequest, code: api.CodeBadJSON, msg: msg}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) //nolint:errcheck // the client went away; nothing to tell it
}

// writeError sends err as an ErrorResponse and notes it for the request log.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, body, send := errorAnswer(r, err)
	if info := infoFrom(r); info != nil {
		info.err = err
		info.code = body.Code
	}
	if send {
		writeJSON(w, status, api.ErrorResponse{Error: body})
	}
}

// errorAnswer is the status and body writeError answers err with; send is
// false when there is nobody to answer (the client went away).
func errorAnswer(r *http.Request, err error) (status int, body api.ErrorBody, send bool) {
	status, body = classify(err)
	if status == statusClientClosed && r.Context().Err() == nil {
		// Canceled, but not by this client: the farm is going away.
		status, body.Code = http.StatusInternalServerError, api.CodeInternal
	}
	return status, body, status != statusClientClosed
}
