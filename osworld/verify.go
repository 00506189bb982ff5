package osworld

// /execute_with_verification: /execute, then a poll until the desktop shows
// what the request says the command should have brought about.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Limits of /execute_with_verification.
const (
	// DefaultVerifyWait and DefaultVerifyInterval are max_wait_time's and
	// check_interval's defaults in OSWorld's server (10 and 1 s).
	DefaultVerifyWait     = 10 * time.Second
	DefaultVerifyInterval = time.Second
	// MaxVerifyWait caps max_wait_time: OSWorld's server takes any number,
	// but its longest wait anywhere is open_file's 1800 s, and its client
	// gives up at max_wait_time+10 s anyway.
	MaxVerifyWait = 1800 * time.Second
	// verifyCommandTimeout bounds one command_success run (timeout=5 in
	// OSWorld's server).
	verifyCommandTimeout = 5 * time.Second
	// verifyWindowsTimeout bounds one window listing.
	verifyWindowsTimeout = 30 * time.Second
)

// verification is the "verification" object: what must hold for the command
// to count as done. Both nil means nothing to verify.
type verification struct {
	// WindowExists: a top-level window whose title contains it,
	// case-insensitively.
	WindowExists *string
	// CommandSuccess: a shell command that exits 0 as the desktop user.
	CommandSuccess *string
}

func (v verification) empty() bool { return v.WindowExists == nil && v.CommandSuccess == nil }

// verifyRequest is the part of an /execute_with_verification body beyond
// /execute's fields.
type verifyRequest struct {
	Verify verification
	// MaxWait is how long to poll; MaxWaitSeconds is the number as sent,
	// which a failed verification echoes as wait_time.
	MaxWait        time.Duration
	MaxWaitSeconds float64
	// Interval is the pause between checks.
	Interval time.Duration
}

// parseVerifyRequest reads verification, max_wait_time and check_interval.
// OSWorld's server reads them unchecked and fails (a 500) or passes at once
// on bad values, after the command already ran; here a bad value is a 400
// naming the field, before anything runs. An unknown verification key, which
// OSWorld's loop would ignore and so pass at once, is an error too: a
// misspelt check must not pass silently.
func parseVerifyRequest(body []byte) (verifyRequest, error) {
	var b struct {
		Verification  json.RawMessage `json:"verification"`
		MaxWaitTime   *float64        `json:"max_wait_time"`
		CheckInterval *float64        `json:"check_interval"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return verifyRequest{}, fmt.Errorf("%w: body: %w", ErrBadRequest, err)
	}
	v := verifyRequest{MaxWait: DefaultVerifyWait, MaxWaitSeconds: DefaultVerifyWait.Seconds(), Interval: DefaultVerifyInterval}
	if b.MaxWaitTime != nil {
		s := *b.MaxWaitTime
		if s < 0 || s > MaxVerifyWait.Seconds() {
			return verifyRequest{}, fmt.Errorf("%w: max_wait_time: %v s is outside 0 to %v s", ErrBadRequest, s, MaxVerifyWait.Seconds())
		}
		v.MaxWait, v.MaxWaitSeconds = seconds(s), s
	}
	if b.CheckInterval != nil {
		s := *b.CheckInterval
		if s < 0 || s > MaxVerifyWait.Seconds() {
			return verifyRequest{}, fmt.Errorf("%w: check_interval: %v s is outside 0 to %v s", ErrBadRequest, s, MaxVerifyWait.Seconds())
		}
		v.Interval = seconds(s)
	}
	if len(b.Verification) == 0 || string(b.Verification) == "null" {
		return v, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b.Verification, &fields); err != nil {
		return verifyRequest{}, fmt.Errorf("%w: verification: want an object with window_exists and/or command_success", ErrBadRequest)
	}
	for k, raw := range fields {
		var dst **string
		switch k {
		case "window_exists":
			dst = &v.Verify.WindowExists
		case "command_success":
			dst = &v.Verify.CommandSuccess
		default:
			return verifyRequest{}, fmt.Errorf("%w: verification.%s: unknown check (want window_exists or command_success)", ErrBadRequest, k)
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil || s == "" {
			return verifyRequest{}, fmt.Errorf("%w: verification.%s: want a non-empty string", ErrBadRequest, k)
		}
		*dst = &s
	}
	return v, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// clock is the time a poll sees; tests use a fake one.
type clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// poll runs check until it passes, as OSWorld's loop does: a check starts
// only while less than maxWait has passed since the first (so maxWait 0
// checks nothing and fails), and interval separates the end of one check
// from the start of the next. It returns whether a check passed and when,
// counted from the start; ctx ending (the client went away) stops it with
// ctx's error.
func poll(ctx context.Context, clk clock, maxWait, interval time.Duration, check func(context.Context) bool) (bool, time.Duration, error) {
	start := clk.Now()
	for clk.Now().Sub(start) < maxWait {
		ok := check(ctx)
		if err := ctx.Err(); err != nil {
			return false, clk.Now().Sub(start), err
		}
		if ok {
			return true, clk.Now().Sub(start), nil
		}
		select {
		case <-ctx.Done():
			return false, clk.Now().Sub(start), ctx.Err()
		case <-clk.After(interval):
		}
	}
	return false, maxWait, nil
}

// verifyResult is /execute_with_verification's body once a verification
// ran: /execute's plus the outcome.
type verifyResult struct {
	execResult
	Verification string  `json:"verification"`
	WaitTime     float64 `json:"wait_time"`
}

// check runs v's checks once; it passes when every check given passes. Like
// OSWorld's loop it runs all of them each round, and a check that cannot
// run counts as not passed.
func (h *Handler) check(ctx context.Context, v verification) bool {
	ok := true
	if v.WindowExists != nil {
		// OSWorld's server looks for the name, lower-cased, in the whole
		// lower-cased output of `wmctrl -l`: ids, desktops and the host
		// column match too, and so does a name that spans two lines.
		want := strings.ToLower(*v.WindowExists)
		found := false
		res, err := h.g.Run(ctx, Cmd{Argv: []string{"/bin/sh", "-c", windowsScript}, Timeout: verifyWindowsTimeout})
		if err == nil && res.ExitCode == 0 {
			found = strings.Contains(strings.ToLower(windowListing(string(res.Stdout))), want)
		}
		ok = ok && found
	}
	if v.CommandSuccess != nil {
		res, err := h.g.Run(ctx, Cmd{Argv: []string{"/bin/sh", "-c", *v.CommandSuccess}, Timeout: verifyCommandTimeout})
		ok = ok && err == nil && res.ExitCode == 0
	}
	return ok
}

// executeWithVerification is /execute_with_verification and
// /setup/execute_with_verification: the command runs as /execute's does;
// without a verification the answer is /execute's; with one, the checks
// are polled and the answer is 200 with verification "passed" and the
// seconds waited, or 500 with status "verification_failed" and wait_time
// max_wait_time, as OSWorld's server answers.
func (h *Handler) executeWithVerification(w http.ResponseWriter, r *http.Request) {
	const op = "execute_with_verification"
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		h.fail(w, r, op, http.StatusBadRequest, err)
		return
	}
	c, err := parseCommand(body, DefaultHome)
	if err != nil {
		// As /execute: OSWorld's server raises inside its try.
		h.fail(w, r, op, http.StatusInternalServerError, err)
		return
	}
	vr, err := parseVerifyRequest(body)
	if err != nil {
		h.fail(w, r, op, http.StatusBadRequest, err)
		return
	}
	res, err := h.runCommand(r.Context(), c)
	if err != nil {
		h.fail(w, r, op, http.StatusInternalServerError, err)
		return
	}
	if vr.Verify.empty() {
		writeJSON(w, http.StatusOK, res)
		return
	}
	passed, waited, err := poll(r.Context(), h.clock, vr.MaxWait, vr.Interval, func(ctx context.Context) bool { return h.check(ctx, vr.Verify) })
	if err != nil {
		h.log.Info("osworld verification abandoned: client gone", "vm", h.opts.VM, "op", op, "waited", waited.Round(time.Millisecond))
		return
	}
	if !passed {
		h.log.Info("osworld verification failed", "vm", h.opts.VM, "op", op, "max_wait", vr.MaxWait)
		res.Status = "verification_failed"
		writeJSON(w, http.StatusInternalServerError, verifyResult{res, "failed", vr.MaxWaitSeconds})
		return
	}
	h.log.Info("osworld verification passed", "vm", h.opts.VM, "op", op, "waited", waited.Round(time.Millisecond))
	writeJSON(w, http.StatusOK, verifyResult{res, "passed", waited.Seconds()})
}
