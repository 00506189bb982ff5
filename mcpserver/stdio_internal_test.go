package mcpserver

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// script is a Connection that reads msgs, then EOF, and takes any write.
type script struct {
	mcp.Connection // nil: only Read, Write and Close are called
	msgs           []jsonrpc.Message
}

func (s *script) Read(context.Context) (jsonrpc.Message, error) {
	if len(s.msgs) == 0 {
		return nil, io.EOF
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}
func (s *script) Write(context.Context, jsonrpc.Message) error { return nil }
func (s *script) Close() error                                 { return nil }

func call(t *testing.T, id int64, method string) *jsonrpc.Request {
	t.Helper()
	jid, err := jsonrpc.MakeID(float64(id))
	if err != nil {
		t.Fatal(err)
	}
	return &jsonrpc.Request{ID: jid, Method: method}
}

// readEOF reads from c in the background and reports when EOF comes.
func readEOF(c *drainConn) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := c.Read(context.Background())
		ch <- err
	}()
	return ch
}

// The end of input waits for the answer to every call read before it,
// but not for a call of the server's own that the peer can no longer
// answer.
func TestDrainConnHoldsEOF(t *testing.T) {
	ctx := context.Background()
	req := call(t, 1, "tools/call")
	c := newDrainConn(&script{msgs: []jsonrpc.Message{req}})
	if m, err := c.Read(ctx); err != nil || m != req {
		t.Fatalf("read: %v %v", m, err)
	}
	eof := readEOF(c)
	select {
	case err := <-eof:
		t.Fatalf("EOF (%v) before the call was answered", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := c.Write(ctx, &jsonrpc.Response{ID: req.ID}); err != nil {
		t.Fatal(err)
	}
	if err := <-eof; err != io.EOF {
		t.Fatalf("after the answer: %v, want EOF", err)
	}

	// A server call to the peer (sampling, roots) after the end of input
	// can never be answered: EOF then, or the session would hang.
	req = call(t, 2, "tools/call")
	c = newDrainConn(&script{msgs: []jsonrpc.Message{req}})
	c.Read(ctx)
	eof = readEOF(c)
	if err := c.Write(ctx, call(t, 100, "roots/list")); err != nil {
		t.Fatal(err)
	}
	if err := <-eof; err != io.EOF {
		t.Fatalf("with the server awaiting the peer: %v, want EOF", err)
	}
}
