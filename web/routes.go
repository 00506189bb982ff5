package web

// The route table (issue 14, item 5). Each row names its handler and its
// policy: who may call it (access), the body it takes (body) and whether it
// changes what is inside a VM (mutates). The guard (security.go) reads the
// policy of the row the mux matched; it never looks at the URL to decide.
// A row on a VM that an episode also has is written once and served at
// both /v1/vms/{id}/... and /v1/episodes/{id}/... (expand). A row with an
// undeclared access or body cannot be served: handler panics at start, as
// http.ServeMux does on a conflicting pattern.

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deskfarm/deskfarm/api"
)

// accessLevel is who may call a route. The zero value is undeclared.
type accessLevel int

const (
	accessUndeclared accessLevel = iota
	// accessPublic needs no token (/healthz).
	accessPublic
	// accessWatch is for a viewer token or better: it shows what is on
	// screen and what the farm holds, nothing more.
	accessWatch
	// accessControl needs the control token (or a trusted network): it
	// acts on a VM, reads what is inside one, or changes the farm.
	accessControl
	// accessCluster needs the cluster token (X-Deskfarm-Cluster-Token),
	// whatever else the request carries: it is for other agents of the
	// cluster (cluster.go), never for clients.
	accessCluster
)

func (a accessLevel) String() string {
	switch a {
	case accessPublic:
		return "public"
	case accessWatch:
		return "watch"
	case accessControl:
		return "control"
	case accessCluster:
		return "cluster"
	}
	return "undeclared"
}

// bodyKind is the body a route takes. The zero value is undeclared.
type bodyKind int

const (
	bodyUndeclared bodyKind = iota
	// bodyNone: the route reads no body. One sent anyway must still be
	// JSON, the type no web page can send cross-site without a preflight.
	bodyNone
	// bodyJSON: one JSON object (application/json).
	bodyJSON
	// bodyOctet: raw bytes (application/octet-stream), the file uploads.
	bodyOctet
)

// mediaType is the Content-Type a body of kind b must declare.
func (b bodyKind) mediaType() string {
	if b == bodyOctet {
		return "application/octet-stream"
	}
	return "application/json"
}

// policy is what the guard needs to know about a route.
type policy struct {
	access accessLevel
	body   bodyKind
	// mutates marks a route that changes what is inside a VM (its screen,
	// disk or processes): on an unleased pool VM it answers 409 not_leased,
	// and it marks the VM touched so that the pool resets it before the
	// next lease (mutates in server.go). It applies to rows with vm set.
	mutates bool
	// controlWhen, on a watch route, names requests that need control
	// after all: a takeover connection that presents a control_token.
	controlWhen func(*http.Request) bool
}

// needs is the access request r needs on a route of policy p.
func (p policy) needs(r *http.Request) accessLevel {
	if p.access == accessWatch && p.controlWhen != nil && p.controlWhen(r) {
		return accessControl
	}
	return p.access
}

// scope is which paths a VM row (route.vm) is served at.
type scope int

const (
	// vmOnly: /v1/vms/{id} + path.
	vmOnly scope = iota
	// vmAndEpisode: /v1/vms/{id} + path and /v1/episodes/{id} + path, the
	// episode's resolved to its VM, its defaults and its lease.
	vmAndEpisode
)

// route is one row of the table.
type route struct {
	method string
	// path is the mux pattern's path; on a VM row (vm set), the part after
	// /v1/vms/{id} (or /v1/episodes/{id}).
	path string
	op   string // the slog "op" value
	policy
	// h serves a route of its own; vm serves a route on one VM's target,
	// at the paths scope names.
	h     apiHandler
	vm    targetHandler
	scope scope
	// timed, when set, observes the route's latency, labelled with "vm"
	// or "episode".
	timed *prometheus.HistogramVec
	// step, on a VM row, makes each call on a recorded VM a step of its
	// trajectory, of this kind (api.Kind*; record.go).
	step string
	// owned marks a row that acts on the episode {id}: on a cluster
	// agent, an episode that its pool does not hold is served by the
	// episode's owner, proxied (cluster.go). Every episode variant of a
	// vmAndEpisode row is owned.
	owned bool
}

// routes is the table.
func (s *server) routes() []route {
	watch := policy{access: accessWatch, body: bodyNone}
	control := policy{access: accessControl, body: bodyNone}
	controlJSON := policy{access: accessControl, body: bodyJSON}
	// A VM route that changes the guest.
	acts := func(p policy) policy { p.mutates = true; return p }
	mcpr := s.mcp
	rows := []route{
		{method: "GET", path: "/healthz", op: "health", policy: policy{access: accessPublic, body: bodyNone}, h: s.health},
		{method: "POST", path: "/v1/vms", op: "create", policy: controlJSON, h: s.create},
		{method: "GET", path: "/v1/vms", op: "list", policy: watch, h: s.list},
		{method: "GET", path: "/v1/vms/{id}", op: "get", policy: watch, h: s.get},
		{method: "DELETE", path: "/v1/vms/{id}", op: "destroy", policy: control, h: s.destroy},
		{method: "POST", path: "/reset", op: "reset", policy: control, vm: s.reset, scope: vmAndEpisode},
		// The VM routes that an episode also has.
		{method: "POST", path: "/exec", op: "exec", policy: acts(controlJSON), vm: s.exec, scope: vmAndEpisode,
			step: api.KindExec},
		// A guest's files are more than its screen: keys, logs, answers.
		{method: "GET", path: "/files", op: "read_file", policy: control, vm: s.readFile, scope: vmAndEpisode,
			step: api.KindFileRead},
		{method: "PUT", path: "/files", op: "write_file", policy: acts(policy{access: accessControl, body: bodyOctet}),
			vm: s.writeFile, scope: vmAndEpisode, step: api.KindFileWrite},
		{method: "POST", path: "/actions", op: "actions", policy: acts(controlJSON), vm: s.act, scope: vmAndEpisode,
			timed: s.met.action, step: api.KindActions},
		{method: "GET", path: "/screenshot", op: "screenshot", policy: watch, vm: s.screenshot, scope: vmAndEpisode,
			timed: s.met.screenshot},
		// Cua's computer-server protocol (cua.go): GET /status and /ws,
		// POST /cmd. Its websocket is a GET, and it drives the VM.
		{method: "GET", path: "/cua/{path...}", op: "cua", policy: acts(control), vm: s.cua, scope: vmAndEpisode},
		{method: "POST", path: "/cua/{path...}", op: "cua", policy: acts(controlJSON), vm: s.cua, scope: vmAndEpisode},
		// Named snapshots (snapshots.go): a save, a revert and a delete
		// change what the VM holds or runs, and are steps of its
		// trajectory (a replay repeats them); a list reads what is inside.
		{method: "POST", path: "/snapshots", op: "snapshot_save", policy: acts(controlJSON), vm: s.saveSnapshot, scope: vmAndEpisode,
			step: api.KindSnapshot},
		{method: "GET", path: "/snapshots", op: "snapshot_list", policy: control, vm: s.listSnapshots, scope: vmAndEpisode},
		{method: "POST", path: "/snapshots/{name}/revert", op: "snapshot_revert", policy: acts(control), vm: s.revertSnapshot,
			scope: vmAndEpisode, step: api.KindSnapshot},
		{method: "DELETE", path: "/snapshots/{name}", op: "snapshot_delete", policy: acts(control), vm: s.deleteSnapshot,
			scope: vmAndEpisode, step: api.KindSnapshot},
		// Episodes lease pool VMs (episodes.go).
		{method: "POST", path: "/v1/episodes", op: "episode_start", policy: controlJSON, h: s.startEpisode},
		{method: "GET", path: "/v1/episodes", op: "episode_list", policy: watch, h: s.listEpisodes},
		{method: "GET", path: "/v1/episodes/{id}", op: "episode_get", policy: watch, h: s.getEpisode, owned: true},
		{method: "DELETE", path: "/v1/episodes/{id}", op: "episode_end", policy: control, h: s.endEpisode, owned: true},
		{method: "POST", path: "/v1/episodes/{id}/fork", op: "episode_fork", policy: controlJSON, h: s.forkEpisode, owned: true},
		{method: "GET", path: "/v1/pools", op: "pools", policy: watch, h: s.listPools},
		// Recording and trajectories (trajectories.go). Recording reads
		// the screen and keeps it on the farm's disk: control. A
		// trajectory shows what was on screen (watch); its export holds
		// the whole record and its kept guest files are what was inside
		// the VM (control).
		{method: "POST", path: "/recording", op: "recording_start", policy: controlJSON, vm: s.startRecording, scope: vmAndEpisode},
		{method: "DELETE", path: "/recording", op: "recording_stop", policy: control, vm: s.stopRecording, scope: vmAndEpisode},
		{method: "GET", path: "/v1/trajectories", op: "trajectory_list", policy: watch, h: s.listTrajectories},
		{method: "GET", path: "/v1/trajectories/{id}", op: "trajectory_get", policy: watch, h: s.getTrajectory},
		// The guest's files a recording kept (files/...) need control.
		{method: "GET", path: "/v1/trajectories/{id}/files/{name...}", op: "trajectory_file", h: s.trajectoryFile,
			policy: policy{access: accessWatch, body: bodyNone, controlWhen: keptFileRequest}},
		{method: "GET", path: "/v1/trajectories/{id}/export", op: "trajectory_export", policy: control, h: s.exportTrajectory},
		{method: "PUT", path: "/v1/trajectories/{id}/result", op: "trajectory_result", policy: controlJSON, h: s.setTrajectoryResult},
		{method: "DELETE", path: "/v1/trajectories/{id}", op: "trajectory_delete", policy: control, h: s.deleteTrajectory},
		{method: "GET", path: "/v1/episodes/{id}/trajectory", op: "trajectory_export", policy: control, h: s.episodeTrajectory,
			owned: true},
		// MCP over streamable HTTP: POST messages, GET a stream, DELETE the
		// session. Every MCP session acts (mcp.go), its event stream too.
		{method: "POST", path: "/mcp", op: "mcp", policy: controlJSON, h: mcpr.serve},
		{method: "GET", path: "/mcp", op: "mcp", policy: control, h: mcpr.serve},
		{method: "DELETE", path: "/mcp", op: "mcp", policy: control, h: mcpr.serve},
		{method: "GET", path: "/metrics", op: "metrics", policy: watch, h: s.metrics},
		// Browser viewers.
		{method: "GET", path: "/{$}", op: "dashboard", policy: watch, h: s.dashboard},
		// The dashboard's feed (live.go); it holds a viewer slot.
		{method: "GET", path: "/v1/live", op: "live", policy: watch, h: s.capped(s.farmLive)},
		{method: "GET", path: "/wall", op: "wall", policy: watch, h: s.wall},
		{method: "GET", path: "/vms/{id}", op: "live_view", policy: watch, h: s.liveView},
		{method: "GET", path: "/episodes/{id}", op: "episode_view", policy: watch, h: s.episodeView, owned: true},
		// Trajectory pages (viewer.go): shells that draw from GET
		// /v1/trajectories, which a watcher may read too.
		{method: "GET", path: "/trajectories", op: "trajectories_view", policy: watch, h: s.trajectoriesView},
		{method: "GET", path: "/trajectories/{id}", op: "trajectory_view", policy: watch, h: s.trajectoryView},
		{method: "GET", path: "/assets/{path...}", op: "assets", policy: watch, h: s.assets},
		{method: "GET", path: "/novnc/{path...}", op: "novnc", policy: watch, h: s.noVNC},
		// Long-lived viewer connections hold a slot of the caps while open.
		{method: "GET", path: "/stream", op: "stream", policy: watch, vm: s.cappedVM(s.stream), scope: vmAndEpisode},
		// An episode's end ends its viewer connections.
		{method: "GET", path: "/activity", op: "activity", policy: watch, vm: s.cappedVM(s.activityStream), scope: vmAndEpisode},
		// Without a control_token the takeover connection only watches.
		{method: "GET", path: "/vnc", op: "vnc_proxy", vm: s.cappedVM(s.vncProxy), scope: vmAndEpisode,
			policy: policy{access: accessWatch, body: bodyNone, controlWhen: hasControlToken}},
		{method: "POST", path: "/control", op: "take_control", policy: acts(control), vm: s.takeControl, scope: vmAndEpisode},
		{method: "GET", path: "/control", op: "control_status", policy: watch, vm: s.controlStatus, scope: vmAndEpisode},
		{method: "DELETE", path: "/control", op: "release_control", policy: control, vm: s.releaseControl, scope: vmAndEpisode},
	}
	if s.cluster != nil {
		// Another agent's claim of a desktop of this node (cluster.go);
		// a single host has no such route (404).
		rows = append(rows, route{method: "POST", path: "/v1/cluster/bind", op: "cluster_bind",
			policy: policy{access: accessCluster, body: bodyJSON}, h: s.clusterBind},
			// Another node's share of a fork: the template (forks.go).
			route{method: "POST", path: "/v1/cluster/fork", op: "cluster_fork",
				policy: policy{access: accessCluster, body: bodyOctet}, h: s.clusterFork})
	}
	return rows
}

// hasControlToken reports whether a takeover request presents a control
// token, and so would type.
func hasControlToken(r *http.Request) bool { return r.URL.Query().Get("control_token") != "" }

// expand turns the table into one row per served pattern: a VM row
// becomes a /v1/vms row and, for vmAndEpisode, an /v1/episodes row, each
// an apiHandler with its target resolved, guarded by mutates and timed.
// It panics on a row whose policy is undeclared.
func (s *server) expand(rows []route) []route {
	var out []route
	for _, rt := range rows {
		if err := rt.check(); err != nil {
			panic(err)
		}
		if rt.vm == nil {
			out = append(out, rt)
			continue
		}
		h := rt.vm
		if rt.mutates {
			h = s.mutates(h)
		}
		if rt.step != "" {
			h = s.begins(h) // record.go
		}
		variants := []variant{{"vm", "/v1/vms/{id}", s.onVM}}
		if rt.scope == vmAndEpisode {
			variants = append(variants, variant{"episode", "/v1/episodes/{id}", s.onEpisode})
		}
		for _, v := range variants {
			r := rt
			r.path, r.vm, r.h = v.prefix+rt.path, nil, v.on(h)
			if rt.timed != nil {
				r.h = s.timed(rt.timed, v.via, r.h)
			}
			if rt.step != "" {
				r.h = s.stepped(rt.step, r.h)
			}
			r.owned = v.via == "episode"
			out = append(out, r)
		}
	}
	return out
}

// variant is one of the paths a VM row is served at: its timing label,
// its prefix and the resolver of its target.
type variant struct {
	via, prefix string
	on          func(targetHandler) apiHandler
}

// check reports a row that cannot be served.
func (rt route) check() error {
	what := rt.method + " " + rt.path
	switch {
	case rt.access == accessUndeclared:
		return fmt.Errorf("route %s: no access declared (public, watch, control or cluster)", what)
	case rt.owned && !strings.Contains(rt.path, "{id}"):
		return fmt.Errorf("route %s: owned applies to a row of an episode {id}", what)
	case rt.body == bodyUndeclared:
		return fmt.Errorf("route %s: no body kind declared (none, json or octet)", what)
	case (rt.h == nil) == (rt.vm == nil):
		return fmt.Errorf("route %s: wants exactly one of h and vm", what)
	case rt.mutates && rt.vm == nil:
		return fmt.Errorf("route %s: mutates applies to a VM row (vm), which resolves the VM", what)
	case rt.step != "" && rt.vm == nil:
		return fmt.Errorf("route %s: step applies to a VM row (vm), which names the VM recorded", what)
	case rt.timed != nil && rt.vm == nil:
		return fmt.Errorf("route %s: timed applies to a VM row (vm), which labels it vm or episode", what)
	case rt.controlWhen != nil && rt.access != accessWatch:
		return fmt.Errorf("route %s: controlWhen applies to a watch route", what)
	case (rt.method == "GET" || rt.method == "HEAD") && rt.body != bodyNone:
		return fmt.Errorf("route %s: a %s takes no body", what, rt.method)
	}
	return nil
}

// routeHandler is a served row: the guard finds it with mux.Handler and
// reads its policy.
type routeHandler struct {
	policy
	op string
	http.Handler
}

// handler builds the mux for the table rows and wraps it in the guard and
// the request log.
func (s *server) handler(rows []route) http.Handler {
	mux := http.NewServeMux()
	allowed := map[string][]string{}
	for _, rt := range s.expand(rows) {
		h := rt.h
		if rt.owned && s.cluster != nil {
			h = s.owned(h) // cluster.go
		}
		mux.Handle(rt.method+" "+rt.path, &routeHandler{policy: rt.policy, op: rt.op, Handler: s.wrap(rt.op, h)})
		allowed[rt.path] = append(allowed[rt.path], rt.method)
	}
	// A method-less pattern is less specific than the method ones, so it
	// catches only the methods a path does not serve. It and the catch-all
	// run nothing but an error answer, and have no row.
	for path, methods := range allowed {
		if slices.Contains(methods, "GET") {
			methods = append(methods, "HEAD")
		}
		allow := strings.Join(methods, ", ")
		mux.Handle(path, s.wrap("", func(w http.ResponseWriter, r *http.Request) error {
			w.Header().Set("Allow", allow)
			return &httpError{status: http.StatusMethodNotAllowed, code: api.CodeMethodNotAllowed,
				msg: fmt.Sprintf("%s %s: method not allowed (allowed: %s)", r.Method, r.URL.Path, allow)}
		}))
	}
	mux.Handle("/", s.wrap("", func(w http.ResponseWriter, r *http.Request) error {
		return &httpError{status: http.StatusNotFound, code: api.CodeNotFound,
			msg: fmt.Sprintf("%s %s: no such endpoint", r.Method, r.URL.Path)}
	}))
	s.mcp.api = s.logRequests(mux)
	return s.logRequests(s.guard(mux))
}
