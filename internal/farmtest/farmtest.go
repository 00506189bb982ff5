// Package farmtest serves the real HTTP API (web.NewServer) over vmm's
// in-memory farm (vmm/vmmtest), for round-trip tests of package client and
// the CLI.
package farmtest

import (
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
	"github.com/deskfarm/deskfarm/web"
)

// NewFarm returns a vmmtest.Farm as the CLI tests expect it: ids v01, v02,
// ...; the images "desktop" and "tiny"; boots reported as 34.2 s, resets as
// 0.31 s; and Exec understanding four programs: cat (stdin to stdout), env,
// fail (writes its args to stderr and exits 7) and timeout (times out).
func NewFarm() *vmmtest.Farm {
	f := vmmtest.New()
	f.IDFormat = "v%02d"
	f.Images = []string{"desktop", "tiny"}
	f.BootSeconds = 34.2
	f.ResetTime = 310 * time.Millisecond
	f.ExecFn = func(req vmm.ExecRequest) (vmm.ExecResult, error) {
		switch req.Argv[0] {
		case "cat":
			return vmm.ExecResult{Stdout: req.Stdin}, nil
		case "env":
			return vmm.ExecResult{Stdout: []byte(strings.Join(req.Env, "\n"))}, nil
		case "fail":
			return vmm.ExecResult{ExitCode: 7, Stderr: []byte(strings.Join(req.Argv[1:], " "))}, nil
		case "timeout":
			return vmm.ExecResult{}, fmt.Errorf("exec: after %s: %w", req.Timeout, vmm.ErrTimeout)
		}
		return vmm.ExecResult{ExitCode: 127}, nil
	}
	return f
}

// Serve starts an httptest server of the API over a new farm (NewFarm); it
// stops when the test ends. opts.Logger defaults to a discarding one.
func Serve(t testing.TB, opts web.Options) (*httptest.Server, *vmmtest.Farm) {
	t.Helper()
	farm := NewFarm()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv := httptest.NewServer(web.NewServer(farm, opts))
	t.Cleanup(srv.Close)
	t.Cleanup(farm.Close)
	return srv, farm
}
