// Package web owns deskfarm's HTTP interface: the JSON API under /v1 that
// creates, lists, resets and removes VMs, runs programs in them and moves
// files in and out. The websocket streams (screen, input) and the viewer page
// will live here too.
//
// Every error response has one shape,
//
//	{"error": {"code": "not_found", "message": "...", "field": "memory_mib"}}
//
// where code is stable per sentinel error of vmm, pool and actions (the
// Code constants of package api; the mapping is the sentinels table in
// errors.go) and field, when present, names the JSON field or query
// parameter at fault. The field comes from a typed error in the chain (an
// InvalidField method), never from the error's text.
//
// The request and response bodies are the types of package api; convert.go
// turns the server's own types (vmm.VM, pool.Episode, player.Result) into
// them, so clients need not link the server.
//
// Before any route, security.go checks that the Host is one of the farm's
// names (421 otherwise: DNS rebinding), that a state change or websocket
// does not come from a page of another origin (403) and carries a body of
// its route's type (415). Then requests from trusted networks (loopback,
// unless Options.TrustedNets says otherwise) need no token; every other
// request carries the control token or the viewer token, as "Authorization:
// Bearer TOKEN", as ?token= once (a browser; it is then kept in a cookie
// named for the port) or as that cookie. The viewer token watches only: a
// mutating route, a guest file read or typing through a takeover answers
// 403 viewer_token. A reverse proxy or tunnel on the same host makes its
// clients look like loopback: pass an empty TrustedNets on such setups
// (deskfarm serve --trust-loopback=false). docs/security.md has the threat
// model.
package web
