package mcpserver

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Stdio returns the transport `deskfarm mcp` serves on: newline-delimited
// JSON-RPC read from in and written to out, as mcp.IOTransport, except
// that the end of in ends the session only once every call read before it
// has been answered.
//
// A client that pipes its requests and closes its end ("I have nothing
// more to ask", not "I stopped reading") otherwise gets none or only some
// of its answers: go-sdk v1.8.0's connection treats a read EOF as shutdown
// and then refuses to write the responses its handlers still produce
// (modelcontextprotocol/go-sdk#1061, open). Neither in nor out is closed.
func Stdio(in io.Reader, out io.Writer) mcp.Transport {
	return &stdio{t: &mcp.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{out}}}
}

type stdio struct{ t *mcp.IOTransport }

func (s *stdio) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := s.t.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return newDrainConn(c), nil
}

func newDrainConn(c mcp.Connection) *drainConn {
	return &drainConn{Connection: c, owed: map[jsonrpc.ID]bool{}, awaiting: map[jsonrpc.ID]bool{},
		changed: make(chan struct{}), closed: make(chan struct{})}
}

// drainConn holds back the EOF of its connection's reads until nothing
// read is left unanswered. It gives up holding when the server is waiting
// on an answer from the peer (one of its own calls), which can no longer
// arrive, or when the connection is closed.
//
// Wrapping hides ioConn's unexported session hook, with which go-sdk
// refuses JSON-RPC batches from clients of protocol 2025-06-18 and later;
// batches are still answered, one response array each.
type drainConn struct {
	mcp.Connection

	mu       sync.Mutex
	owed     map[jsonrpc.ID]bool // calls read and not yet answered
	awaiting map[jsonrpc.ID]bool // calls written to the peer and not yet answered
	changed  chan struct{}       // closed, and replaced, on every change of the two
	closed   chan struct{}
	once     sync.Once
}

func (c *drainConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err == nil {
		switch m := msg.(type) {
		case *jsonrpc.Request:
			if m.IsCall() {
				c.update(func() { c.owed[m.ID] = true })
			}
		case *jsonrpc.Response:
			c.update(func() { delete(c.awaiting, m.ID) })
		}
		return msg, nil
	}
	if !errors.Is(err, io.EOF) {
		return nil, err
	}
	for {
		c.mu.Lock()
		done, changed := len(c.owed) == 0 || len(c.awaiting) > 0, c.changed
		c.mu.Unlock()
		if done {
			return nil, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, err
		case <-c.closed:
			return nil, err
		}
	}
}

func (c *drainConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := c.Connection.Write(ctx, msg)
	switch m := msg.(type) {
	case *jsonrpc.Response:
		// Answered, or lost with a broken out: owed no longer either way.
		c.update(func() { delete(c.owed, m.ID) })
	case *jsonrpc.Request:
		if m.IsCall() && err == nil {
			c.update(func() { c.awaiting[m.ID] = true })
		}
	}
	return err
}

func (c *drainConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Connection.Close()
}

// update applies f under the lock and wakes a held Read.
func (c *drainConn) update(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f()
	close(c.changed)
	c.changed = make(chan struct{})
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
