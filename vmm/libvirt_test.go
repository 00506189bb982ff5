package vmm

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
)

// A libvirt call outstanding when ctx ends returns ctx's error at once; the
// call itself finishes when libvirt answers (here: when released).
func TestCallCtxReturnsOnCancel(t *testing.T) {
	release := make(chan struct{})
	finished := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := callCtx(ctx, nil, func(*libvirt.Libvirt) (int, error) {
		defer close(finished)
		<-release
		return 1, nil
	})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("err %v after %s", err, time.Since(start))
	}
	close(release)
	<-finished // the background call ends, no goroutine is left behind
}

// While libvirtd is away callers wait for the redial on their ctx, not on a
// lock held across sleeps, and another caller is not held up meanwhile.
func TestClientWaitsOnContext(t *testing.T) {
	c := &libvirtConn{socket: "/nonexistent", log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		up: make(chan struct{}), done: make(chan struct{})}
	errs := make(chan error, 2)
	for _, d := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond} {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			_, err := c.client(ctx)
			errs <- err
		}()
	}
	start := time.Now()
	for range 2 {
		if err := <-errs; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("client without a connection: %v", err)
		}
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("two callers with 50 and 100 ms budgets took %s", d)
	}
	close(c.done)
	if _, err := c.client(context.Background()); !errors.Is(err, errClosed) {
		t.Fatalf("client after close: %v", err)
	}
	runtime.Gosched()
}

func TestAgentTimeoutFromContext(t *testing.T) {
	if got := agentTimeout(context.Background()); got != int32(agentCallTimeout/time.Second) {
		t.Fatalf("no deadline: %d s", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	if got := agentTimeout(ctx); got != 3 {
		t.Fatalf("2.5 s left: %d s, want 3 (rounded up)", got)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel2()
	time.Sleep(2 * time.Millisecond)
	if got := agentTimeout(ctx2); got != 1 {
		t.Fatalf("deadline passed: %d s, want 1", got)
	}
}

// A command libvirtd would answer by dropping the connection is refused
// before it is sent.
func TestRPCStringLimit(t *testing.T) {
	if err := checkRPCString("agent command", maxRPCString); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	err := checkRPCString("agent command", maxRPCString+1)
	if !errors.Is(err, ErrMessageTooLarge) || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
}
