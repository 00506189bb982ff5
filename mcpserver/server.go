// Package mcpserver serves a deskfarm farm as Model Context Protocol tools
// (issue 11), with the official Go SDK (github.com/modelcontextprotocol/go-sdk).
// It owns the MCP vocabulary: the tool names, their argument schemas, and
// how an API answer becomes MCP content. It talks to the farm only through
// package client, so `deskfarm mcp` (stdio, in the CLI) links none of the
// server, and the API server's /mcp route serves the same tools over an
// in-process client.
//
// Tools: start_episode and end_episode lease and return a VM of a pool;
// computer plays one Claude computer_20251124 action and answers with the
// screenshot as image content; screenshot, exec, read_file and write_file
// do what their names say. Every VM tool acts on the episode this MCP
// session started last, unless its episode or vm argument names another.
// Failures come back as tool results with isError set and a text that
// names the argument at fault, so the model can correct itself.
//
// Episodes a session started are ended when the session closes (stdio EOF,
// an HTTP session's DELETE), so an agent that forgets end_episode does not
// hold a VM until its lease runs out.
package mcpserver

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/client"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Name and Version are what the server tells MCP clients it is.
const (
	Name    = "deskfarm"
	Version = "0.1.0"
)

// endTimeout bounds the end of a closed session's episodes: a reset takes
// well under a second, a replacement boot is the pool's business.
const endTimeout = 2 * time.Minute

// Options configures New.
type Options struct {
	// Pool is the pool start_episode uses when it is given none; "" lets
	// the server choose (it does when the farm has one pool).
	Pool string
	// KeepEpisodes leaves a session's episodes running when the session
	// closes; they then end when their lease does.
	KeepEpisodes bool
	// Logger gets one line per episode started or ended; nil means
	// slog.Default().
	Logger *slog.Logger
}

// Server is deskfarm's MCP server over one farm. One Server serves any
// number of MCP sessions; each has its own default episode.
type Server struct {
	c    *client.Client
	opts Options
	log  *slog.Logger
	mcp  *mcp.Server

	mu       sync.Mutex
	sessions map[*mcp.ServerSession]*session
	ending   sync.WaitGroup // ends of closed sessions' episodes
}

// session is what one MCP session holds.
type session struct {
	// episodes it started and has not ended, oldest first; the last is
	// the default target.
	episodes []string
}

// New returns the MCP server of the farm c talks to.
func New(c *client.Client, opts Options) *Server {
	s := &Server{c: c, opts: opts, log: opts.Logger, sessions: map[*mcp.ServerSession]*session{}}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: Name, Title: "deskfarm desktop VMs", Version: Version},
		&mcp.ServerOptions{Instructions: instructions})
	s.addTools()
	return s
}

// instructions is what an MCP client may put in the model's context.
const instructions = `deskfarm runs Linux desktop VMs. Call start_episode first: it leases a fresh VM and
makes it the target of the other tools. computer plays one mouse or keyboard action and returns a
screenshot; its coordinates are in that screenshot's pixels. exec runs a program, read_file and
write_file move files. Call end_episode when done: the VM is reset for the next user.`

// MCP returns the SDK server, to Run over a transport or to serve over
// HTTP with mcp.NewStreamableHTTPHandler.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Run serves one session over t (e.g. &mcp.StdioTransport{}) until it
// ends, then ends the episodes it started.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	err := s.mcp.Run(ctx, t)
	return errors.Join(err, s.Close(context.WithoutCancel(ctx)))
}

// Close ends the episodes every session still holds (unless KeepEpisodes)
// and waits for the ends already under way.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	var eps []string
	for ss, st := range s.sessions {
		eps = append(eps, st.episodes...)
		delete(s.sessions, ss)
	}
	s.mu.Unlock()
	var errs []error
	if !s.opts.KeepEpisodes {
		for _, id := range eps {
			errs = append(errs, s.endEpisode(ctx, id, "mcp server closed"))
		}
	}
	s.ending.Wait()
	return errors.Join(errs...)
}

// noteEpisode records that ss started episode id and makes it the
// session's default. The first episode of a session starts the watch that
// ends its episodes when it closes.
func (s *Server) noteEpisode(ss *mcp.ServerSession, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.sessions[ss]
	if !ok {
		st = &session{}
		s.sessions[ss] = st
		if ss != nil {
			s.ending.Add(1)
			go s.watch(ss)
		}
	}
	st.episodes = append(st.episodes, id)
}

// forgetEpisode drops an ended episode from whichever session held it.
func (s *Server) forgetEpisode(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.sessions {
		st.episodes = slices.DeleteFunc(st.episodes, func(e string) bool { return e == id })
	}
}

// current returns the session's default episode, or "".
func (s *Server) current(ss *mcp.ServerSession) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.sessions[ss]; ok && len(st.episodes) > 0 {
		return st.episodes[len(st.episodes)-1]
	}
	return ""
}

// watch ends ss's episodes once the session closes.
func (s *Server) watch(ss *mcp.ServerSession) {
	defer s.ending.Done()
	ss.Wait() //nolint:errcheck // how it closed does not matter here
	s.mu.Lock()
	st := s.sessions[ss]
	delete(s.sessions, ss)
	s.mu.Unlock()
	if st == nil || s.opts.KeepEpisodes {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
	defer cancel()
	for _, id := range st.episodes {
		s.endEpisode(ctx, id, "mcp session closed") //nolint:errcheck // logged
	}
}

// endEpisode ends an episode a session left behind, and logs how it went.
func (s *Server) endEpisode(ctx context.Context, id, why string) error {
	ep, err := s.c.EndEpisode(ctx, id)
	if err != nil {
		s.log.Warn("end episode", "op", "mcp_end_episode", "episode", id, "why", why, "err", err)
		return err
	}
	s.log.Info("episode ended", "op", "mcp_end_episode", "episode", id, "vm", ep.VM, "why", why)
	return nil
}
