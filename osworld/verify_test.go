package osworld

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseVerifyRequest(t *testing.T) {
	v, err := parseVerifyRequest([]byte(`{"command": ["true"]}`))
	if err != nil || !v.Verify.empty() || v.MaxWait != 10*time.Second || v.MaxWaitSeconds != 10 || v.Interval != time.Second {
		t.Fatalf("defaults: %+v %v", v, err)
	}
	// The body SetupController._execute_with_verification_setup sends.
	v, err = parseVerifyRequest([]byte(`{"command": ["gimp"], "shell": false, "verification": {"window_exists": "GNU Image", "command_success": "pgrep gimp"}, "max_wait_time": 20, "check_interval": 0.5}`))
	if err != nil || *v.Verify.WindowExists != "GNU Image" || *v.Verify.CommandSuccess != "pgrep gimp" || v.MaxWait != 20*time.Second || v.Interval != 500*time.Millisecond {
		t.Fatalf("full: %+v %v", v, err)
	}
	if v, err := parseVerifyRequest([]byte(`{"verification": {}}`)); err != nil || !v.Verify.empty() {
		t.Fatalf("empty verification: %+v %v", v, err)
	}
	for body, field := range map[string]string{
		`{"max_wait_time": -1}`:                           "max_wait_time",
		`{"max_wait_time": 1801}`:                         "max_wait_time: 1801 s is outside 0 to 1800 s",
		`{"max_wait_time": "10"}`:                         "max_wait_time",
		`{"check_interval": -0.5}`:                        "check_interval",
		`{"verification": "window_exists"}`:               "verification: want an object",
		`{"verification": {"window_exist": "x"}}`:         "verification.window_exist: unknown check",
		`{"verification": {"window_exists": ""}}`:         "verification.window_exists: want a non-empty string",
		`{"verification": {"command_success": ["true"]}}`: "verification.command_success",
	} {
		_, err := parseVerifyRequest([]byte(body))
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want a bad request naming %q", body, err, field)
		}
	}
}

// fakeClock moves only when the poll waits (After) or a check takes time.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.advance(d)
	ch := make(chan time.Time, 1)
	ch <- c.Now()
	return ch
}

func TestPoll(t *testing.T) {
	ctx := context.Background()
	// Passes on the third check: two intervals and three 300 ms checks
	// later.
	clk := &fakeClock{}
	n := 0
	ok, waited, err := poll(ctx, clk, 10*time.Second, time.Second, func(context.Context) bool {
		clk.advance(300 * time.Millisecond)
		n++
		return n == 3
	})
	if !ok || err != nil || n != 3 || waited != 2900*time.Millisecond {
		t.Fatalf("pass on third: ok %v n %d waited %v err %v", ok, n, waited, err)
	}
	// Never passes: checks start at 0, 1.5, 3, 4.5 s; none at 6 s, which
	// is not under max_wait_time. The wait reported is max_wait_time.
	clk, n = &fakeClock{}, 0
	ok, waited, err = poll(ctx, clk, 6*time.Second, time.Second, func(context.Context) bool {
		clk.advance(500 * time.Millisecond)
		n++
		return false
	})
	if ok || err != nil || n != 4 || waited != 6*time.Second {
		t.Fatalf("never: ok %v n %d waited %v err %v", ok, n, waited, err)
	}
	// max_wait_time 0 checks nothing, as OSWorld's while loop.
	clk, n = &fakeClock{}, 0
	if ok, _, _ := poll(ctx, clk, 0, time.Second, func(context.Context) bool { n++; return true }); ok || n != 0 {
		t.Fatalf("zero wait: ok %v n %d", ok, n)
	}
	// The client going away stops the poll with no more checks.
	cctx, cancel := context.WithCancel(ctx)
	clk, n = &fakeClock{}, 0
	_, _, err = poll(cctx, clk, time.Hour, time.Second, func(context.Context) bool {
		n++
		if n == 2 {
			cancel()
		}
		return false
	})
	if !errors.Is(err, context.Canceled) || n != 2 {
		t.Fatalf("cancelled: n %d err %v", n, err)
	}
}

func TestExecuteWithVerification(t *testing.T) {
	g := newFakeGuest()
	var mu sync.Mutex
	windowsAfter, checks := 3, 0
	g.on("launch-app", func(Cmd) (Result, error) { return Result{Stdout: []byte("started\n")}, nil })
	g.on("windows", func(Cmd) (Result, error) {
		mu.Lock()
		defer mu.Unlock()
		checks++
		if checks < windowsAfter {
			return Result{Stdout: []byte("wmctrl\n0x01e00003  0 deskfarm Desktop\n")}, nil
		}
		return Result{Stdout: []byte("wmctrl\n0x01e00003  0 deskfarm Desktop\n0x02400006  0 deskfarm Untitled - GNU Image Manipulation Program\n")}, nil
	})
	var verifyCmds []string
	g.on("sh", func(c Cmd) (Result, error) {
		mu.Lock()
		defer mu.Unlock()
		verifyCmds = append(verifyCmds, c.Argv[2])
		if c.Timeout != 5*time.Second {
			t.Errorf("command_success timeout %v, want OSWorld's 5 s", c.Timeout)
		}
		if c.Argv[2] == "pgrep gimp" {
			return Result{}, nil
		}
		return Result{ExitCode: 1}, nil
	})
	h := NewHandler(g, Options{})
	h.clock = &fakeClock{}

	// No verification: /execute's answer.
	rec := postJSON(t, h, "/execute_with_verification", `{"command": ["launch-app"]}`)
	if v := decode[map[string]any](t, rec); rec.Code != 200 || v["output"] != "started\n" || v["verification"] != nil {
		t.Fatalf("no verification: %d %v", rec.Code, v)
	}
	// The window shows up on the third check; the title matches
	// case-insensitively.
	rec = postJSON(t, h, "/setup/execute_with_verification", `{"command": ["launch-app"], "verification": {"window_exists": "gnu image", "command_success": "pgrep gimp"}}`)
	v := decode[map[string]any](t, rec)
	if rec.Code != 200 || v["status"] != "success" || v["verification"] != "passed" || v["wait_time"] != 2.0 || v["returncode"] != 0.0 || v["output"] != "started\n" {
		t.Fatalf("passed: %d %v", rec.Code, v)
	}
	if len(verifyCmds) != 3 {
		t.Errorf("command_success ran %d times, want once per round (3)", len(verifyCmds))
	}
	// As OSWorld's server, the name is looked for in all of wmctrl -l's
	// output: the host column and a window id match too, and no title
	// contains either.
	for _, name := range []string{"DESKFARM desk", "0x02400006"} {
		rec = postJSON(t, h, "/execute_with_verification", `{"command": ["launch-app"], "verification": {"window_exists": "`+name+`"}}`)
		if v := decode[map[string]any](t, rec); rec.Code != 200 || v["verification"] != "passed" {
			t.Errorf("window_exists %q: %d %v", name, rec.Code, v)
		}
	}
	// A check that never passes: 500, verification_failed, wait_time as
	// sent.
	rec = postJSON(t, h, "/execute_with_verification", `{"command": ["launch-app"], "verification": {"command_success": "test -e /nope"}, "max_wait_time": 2.5}`)
	v = decode[map[string]any](t, rec)
	if rec.Code != 500 || v["status"] != "verification_failed" || v["verification"] != "failed" || v["wait_time"] != 2.5 || v["output"] != "started\n" {
		t.Fatalf("failed: %d %v", rec.Code, v)
	}
	// A bad field is a 400 naming it, and the command does not run.
	g.runs = nil
	rec = postJSON(t, h, "/execute_with_verification", `{"command": ["launch-app"], "verification": {"window": "x"}}`)
	if v := decode[map[string]string](t, rec); rec.Code != 400 || v["status"] != "error" || !strings.Contains(v["message"], "verification.window") || len(g.runs) != 0 {
		t.Fatalf("bad field: %d %v, runs %q", rec.Code, v, g.runs)
	}
	// A command that cannot run is /execute's 500.
	rec = postJSON(t, h, "/execute_with_verification", `{"command": ["no-such-program"], "verification": {"window_exists": "x"}}`)
	if v := decode[map[string]string](t, rec); rec.Code != 500 || v["status"] != "error" {
		t.Fatalf("not run: %d %v", rec.Code, v)
	}
}
