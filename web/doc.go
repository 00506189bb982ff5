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
// turns the server's own types (vmm.VM, pool.Episode, actions.Result) into
// them, so clients need not link the server.
//
// Requests from loopback addresses need no token; every other request must
// carry "Authorization: Bearer TOKEN" (see Options). A reverse proxy or tunnel
// on the same host makes its clients look like loopback: put the token on
// such setups by passing an empty TrustedNets.
package web
