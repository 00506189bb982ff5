package web

import (
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/client"
	"github.com/deskfarm/deskfarm/mcpserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCP over streamable HTTP at /mcp (issue 11): the tools of package
// mcpserver, whose client calls this API in process. The guard (Host,
// cross-site, authentication, and the control role: a viewer token may
// not use /mcp) runs once, on /mcp, as for any route; the in-process calls
// enter the API below the guard, so they need no token and no port.

// mcpSessionTimeout closes an MCP session idle this long; closing it ends
// the episodes it started, so a client that vanished does not hold VMs.
const mcpSessionTimeout = 30 * time.Minute

// maxMCPHosts bounds the MCP servers kept per Host header (each makes
// viewer links with its own host); requests beyond it are refused.
const maxMCPHosts = 32

// mcpRoute serves /mcp.
type mcpRoute struct {
	api http.Handler // the API below authentication; set once the mux is built
	log *slog.Logger
	h   *mcp.StreamableHTTPHandler

	mu      sync.Mutex
	servers map[string]*mcpserver.Server // by scheme://host
}

func newMCPRoute(log *slog.Logger) *mcpRoute {
	m := &mcpRoute{log: log, servers: map[string]*mcpserver.Server{}}
	m.h = mcp.NewStreamableHTTPHandler(m.server, &mcp.StreamableHTTPOptions{
		SessionTimeout: mcpSessionTimeout, Logger: log,
		// The guard's Host allowlist (security.go) is the farm's one rule
		// against DNS rebinding; the SDK's own check would refuse the
		// names --allow-host lets in, behind a local reverse proxy.
		DisableLocalhostProtection: true})
	return m
}

func (m *mcpRoute) serve(w http.ResponseWriter, r *http.Request) error {
	m.h.ServeHTTP(w, r)
	return nil
}

// server returns the MCP server for the request's host: its in-process
// calls carry that host, so the episodes' viewer links the API makes point
// where the MCP client reached the server.
func (m *mcpRoute) server(r *http.Request) *mcp.Server {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	base := scheme + "://" + r.Host
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.servers[base]; ok {
		return s.MCP()
	}
	if len(m.servers) >= maxMCPHosts {
		m.log.Warn("too many hosts for MCP servers", "op", "mcp", "host", r.Host)
		return nil
	}
	c, err := client.New(base, client.WithHTTPClient(&http.Client{Transport: inProcess{h: m.api, tls: r.TLS != nil}}))
	if err != nil {
		m.log.Warn("MCP client", "op", "mcp", "host", r.Host, "err", err)
		return nil
	}
	s := mcpserver.New(c, mcpserver.Options{Logger: m.log})
	m.servers[base] = s
	return s.MCP()
}

// mcpRemoteAddr is the client address of the in-process calls: the
// request log and a recorded step (record.go) tell them by it.
const mcpRemoteAddr = "mcp"

// inProcess is an http.RoundTripper that serves requests with a handler,
// buffering the answer: the API's answers to the MCP tools are bounded
// (MaxFileSize at most) and none of them streams.
type inProcess struct {
	h   http.Handler
	tls bool
}

func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.RequestURI = req.URL.RequestURI()
	r.RemoteAddr = mcpRemoteAddr // in the request log: the call came from /mcp
	if r.Body == nil {
		r.Body = http.NoBody
	}
	if t.tls {
		r.TLS = &tls.ConnectionState{}
	}
	rec := &bufferedResponse{header: http.Header{}}
	t.h.ServeHTTP(rec, r)
	if req.Body != nil {
		req.Body.Close()
	}
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return &http.Response{
		Status:        strconv.Itoa(rec.status) + " " + http.StatusText(rec.status),
		StatusCode:    rec.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        rec.header,
		Body:          io.NopCloser(&rec.body),
		ContentLength: int64(rec.body.Len()),
		Request:       req,
	}, nil
}

// bufferedResponse is the http.ResponseWriter of an in-process call.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}
