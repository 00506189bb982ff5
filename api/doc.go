// Package api holds the wire types of deskfarm's HTTP API (/v1): the JSON
// bodies of requests and responses, the error body and its stable codes.
//
// It owns the wire format and nothing else. It imports only the standard
// library, so that the CLI, the Go client (package client) and users can
// speak the API without linking the server (vmm, pool, desk, vnc, web,
// prometheus). The server converts its own types to these in package web.
//
// Field names and order match what the server has always sent; a change
// here is a change of the API.
package api
