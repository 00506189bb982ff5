package main

// The soak's traffic: one episode's life (lease, random requests from the
// agent vocabularies and the routes' bad inputs, end), what each request
// may answer, and the markers that tell a late answer from a lost one.
// main.go runs these and does the accounting.

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
)

// episode leases a VM, sends n random requests and ends the episode.
func episode(ctx context.Context, c *client.Client, base string, o options, r *rand.Rand, fig *figures, n int) {
	var ep api.Episode
	var asked time.Time
	for {
		asked = time.Now()
		sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		var err error
		ep, err = c.StartEpisode(sctx, api.StartEpisodeRequest{Pool: o.pool, TTLS: 600})
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		if api.IsCode(err, api.CodePoolFull) || api.IsCode(err, api.CodeHostFull) {
			time.Sleep(time.Second)
			continue
		}
		fig.mu.Lock()
		fig.startErrs++
		fig.mu.Unlock()
		fig.unexpectedf(o.verbose, "start episode: %v", err)
		time.Sleep(2 * time.Second)
		return
	}
	fig.mu.Lock()
	fig.episodes++
	fig.mu.Unlock()

	// A lease starts from the ready state (issue 9: a dirty warm VM is
	// reset before it is leased again): no marker that another episode's
	// "exec on another VM" wrote and saw answered before this lease was
	// asked for is in the guest. (A marker whose write answered later may
	// have landed legitimately, on this lease.)
	res, err := c.Exec(ctx, client.Episode(ep.ID), api.ExecRequest{Argv: []string{"sh", "-c", "cat " + dirtyMarker + " 2>/dev/null; true"}, TimeoutS: 30})
	var stale []string
	for _, tok := range strings.Fields(res.Stdout) {
		if at, ok := markers.answered(tok); ok && at.Before(asked) {
			stale = append(stale, tok)
		}
	}
	if err != nil {
		fig.unexpectedf(o.verbose, "marker check on episode %s (VM %s): %v", ep.ID, ep.VM, err)
	}
	if len(stale) > 0 || !ep.CleanStart {
		fig.mu.Lock()
		fig.dirty++
		fig.mu.Unlock()
		fig.unexpectedf(o.verbose, "episode %s (VM %s) started dirty: clean_start %v, markers written before the lease %v", ep.ID, ep.VM, ep.CleanStart, stale)
	}

	lost := false
	mine := 0 // this episode's unexpected answers
	for range n {
		o1 := ops[r.IntN(len(ops))]
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := o1.run(rctx, c, base, ep, r)
		cancel()
		code := errCode(err)
		fig.mu.Lock()
		fig.requests++
		if o1.invalid {
			fig.invalid++
		}
		if err != nil {
			fig.byCode[code]++
		}
		fig.mu.Unlock()
		switch {
		case code == api.CodeEpisodeNotFound || code == api.CodeEpisodeEnded:
			lost = true
			mine++
			fig.unexpectedf(o.verbose, "%s on episode %s (VM %s): the lease is gone: %v", o1.name, ep.ID, ep.VM, err)
		case !o1.accepts(err):
			mine++
			fig.unexpectedf(o.verbose, "%s on episode %s (VM %s): %v", o1.name, ep.ID, ep.VM, err)
		}
		if lost || ctx.Err() != nil {
			break
		}
	}
	// A check mid-life: the farm still lists the lease as ours.
	if !lost {
		if got, err := c.GetEpisode(ctx, ep.ID); err != nil || got.State != api.EpisodeActive || got.VM != ep.VM {
			lost = true
			fig.unexpectedf(o.verbose, "episode %s before its end: state %q VM %q (want active on %s): %v", ep.ID, got.State, got.VM, ep.VM, err)
		}
	}
	ectx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	end, err := c.EndEpisode(ectx, ep.ID)
	fig.mu.Lock()
	defer fig.mu.Unlock()
	switch {
	case err != nil:
		lost = true
		if len(fig.samples) < 8 {
			fig.samples = append(fig.samples, fmt.Sprintf("end episode %s: %v", ep.ID, err))
		}
		fig.unexpected++
	case end.VMReplaced:
		fig.replaced++
	case mine == 0 && !lost:
		fig.clean++
	}
	if lost {
		fig.lost++
	}
}

func errCode(err error) string {
	if err == nil {
		return ""
	}
	if e, ok := errors.AsType[*api.Error](err); ok {
		return e.Code
	}
	return "transport"
}

// op is one kind of request an episode sends.
type op struct {
	name    string
	invalid bool
	// codes the op accepts as its answer besides success; nil: only success.
	codes []string
	// mustFail: success is unexpected.
	mustFail bool
	run      func(ctx context.Context, c *client.Client, base string, ep api.Episode, r *rand.Rand) error
}

func (o op) accepts(err error) bool {
	if err == nil {
		return !o.mustFail
	}
	return slices.Contains(o.codes, errCode(err))
}

// dirtyMarker is the file "exec on another VM" appends a token to; no
// lease may start with a token whose write was answered before it.
const dirtyMarker = "/tmp/soak-dirty"

// markers records when each marker write was answered.
var markers = markerLog{at: map[string]time.Time{}}

type markerLog struct {
	mu sync.Mutex
	n  int
	at map[string]time.Time
}

func (m *markerLog) next() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	return fmt.Sprintf("m%d", m.n)
}

func (m *markerLog) done(tok string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.at[tok] = time.Now()
}

func (m *markerLog) answered(tok string) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.at[tok]
	return t, ok
}

// Screen coordinates in the agent's space: the pool's screenshot size
// "auto" of a 1280x800 guest is 1280x800 (WXGA).
const screenW, screenH = 1280, 800

func act(action string) func(context.Context, *client.Client, string, api.Episode, *rand.Rand) error {
	return func(ctx context.Context, c *client.Client, _ string, ep api.Episode, _ *rand.Rand) error {
		_, err := c.Act(ctx, client.Episode(ep.ID), api.ActionsRequest{Action: json.RawMessage(action), RunOptions: api.RunOptions{Screenshot: api.ScreenshotNever}})
		return err
	}
}

var ops = []op{
	{name: "click", run: func(ctx context.Context, c *client.Client, b string, ep api.Episode, r *rand.Rand) error {
		return act(fmt.Sprintf(`{"kind":"click","x":%d,"y":%d}`, r.IntN(screenW), r.IntN(screenH)))(ctx, c, b, ep, r)
	}},
	{name: "move+screenshot", run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, r *rand.Rand) error {
		_, err := c.Act(ctx, client.Episode(ep.ID), api.ActionsRequest{Action: json.RawMessage(fmt.Sprintf(`{"kind":"move","x":%d,"y":%d}`, r.IntN(screenW), r.IntN(screenH)))})
		return err
	}},
	{name: "type", run: act(`{"kind":"type","text":"soak test 123\n"}`)},
	{name: "key chord", run: act(`{"kind":"key","keys":["ctrl+a"]}`)},
	{name: "scroll", run: act(`{"kind":"scroll","x":640,"y":400,"direction":"down","amount":3}`)},
	{name: "action list", run: act(`{"kind":"wait","duration_ms":50}`)},
	{name: "claude click", run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, r *rand.Rand) error {
		in := fmt.Sprintf(`{"action":"left_click","coordinate":[%d,%d]}`, r.IntN(screenW), r.IntN(screenH))
		_, err := c.Act(ctx, client.Episode(ep.ID), api.ActionsRequest{Tool: "computer_20251124", Input: json.RawMessage(in)})
		return err
	}},
	{name: "claude screenshot", run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, _ *rand.Rand) error {
		_, err := c.Act(ctx, client.Episode(ep.ID), api.ActionsRequest{Tool: "computer_20250124", Input: json.RawMessage(`{"action":"screenshot"}`)})
		return err
	}},
	{name: "screenshot route", run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, _ *rand.Rand) error {
		_, err := c.Screenshot(ctx, client.Episode(ep.ID), api.ScreenshotOptions{Format: api.FormatJPEG}, io.Discard)
		return err
	}},
	{name: "exec echo", run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, r *rand.Rand) error {
		want := fmt.Sprint(r.Uint32())
		res, err := c.Exec(ctx, client.Episode(ep.ID), api.ExecRequest{Argv: []string{"echo", want}, TimeoutS: 30})
		if err == nil && (res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != want) {
			return fmt.Errorf("exec echo %s: exit %d, stdout %q", want, res.ExitCode, res.Stdout)
		}
		return err
	}},
	{name: "file write+read", run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, r *rand.Rand) error {
		b := make([]byte, 1+r.IntN(64<<10))
		crand.Read(b)
		path := fmt.Sprintf("/tmp/soak-%d", r.IntN(4))
		if err := c.WriteFile(ctx, client.Episode(ep.ID), path, bytes.NewReader(b), int64(len(b)), 0o600); err != nil {
			return err
		}
		var got bytes.Buffer
		if _, err := c.ReadFile(ctx, client.Episode(ep.ID), path, &got); err != nil {
			return err
		}
		if !bytes.Equal(got.Bytes(), b) {
			return fmt.Errorf("read back %s: %d bytes differ from the %d written", path, got.Len(), len(b))
		}
		return nil
	}},

	// Invalid on purpose: each must be refused with its code, and leave
	// the episode usable.
	{name: "exec on another VM", invalid: true, codes: []string{api.CodeNotLeased},
		// Another worker's leased VM takes it (a client may drive any
		// lease); a warm VM must refuse it with not_leased, and if it did
		// not, the next lease of that VM finds the marker.
		run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, r *rand.Rand) error {
			vms, err := c.ListVMs(ctx)
			if err != nil {
				return err
			}
			vms = slices.DeleteFunc(vms, func(v api.VM) bool { return v.ID == ep.VM })
			if len(vms) == 0 {
				return nil
			}
			v := vms[r.IntN(len(vms))]
			tok := markers.next()
			_, err = c.Exec(ctx, client.VM(v.ID), api.ExecRequest{Argv: []string{"sh", "-c", "echo " + tok + " >> " + dirtyMarker}, TimeoutS: 30})
			if err == nil {
				markers.done(tok)
			}
			if api.IsCode(err, api.CodeNotRunning) || api.IsCode(err, api.CodeNotFound) {
				return nil // booting, or ended and replaced in between
			}
			return err
		}},
	{name: "malformed JSON", invalid: true, mustFail: true, codes: []string{api.CodeBadJSON, api.CodeInvalidRequest},
		run: func(ctx context.Context, _ *client.Client, base string, ep api.Episode, r *rand.Rand) error {
			bodies := []string{`{"action":`, `[1,2`, `{"kind":"click","x":"ten"}`, "\x00\xff", `{"tool":"computer_20251124","input":{"action":`}
			return rawPost(ctx, base+"/v1/episodes/"+ep.ID+"/actions", bodies[r.IntN(len(bodies))])
		}},
	{name: "out-of-bounds click", invalid: true, mustFail: true, codes: []string{api.CodeOutOfBounds, api.CodeInvalidRequest},
		run: func(ctx context.Context, c *client.Client, b string, ep api.Episode, r *rand.Rand) error {
			return act(fmt.Sprintf(`{"kind":"click","x":%d,"y":%d}`, screenW+r.IntN(5000), r.IntN(screenH)))(ctx, c, b, ep, r)
		}},
	{name: "claude out-of-bounds", invalid: true, mustFail: true, codes: []string{api.CodeOutOfBounds, api.CodeInvalidRequest},
		run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, r *rand.Rand) error {
			_, err := c.Act(ctx, client.Episode(ep.ID), api.ActionsRequest{Tool: "computer_20251124", Input: json.RawMessage(`{"action":"left_click","coordinate":[99999,-5]}`)})
			return err
		}},
	{name: "unknown key", invalid: true, mustFail: true, codes: []string{api.CodeUnknownKey, api.CodeInvalidRequest},
		run: act(`{"kind":"key","keys":["NoSuchKey"]}`)},
	{name: "unknown kind", invalid: true, mustFail: true, codes: []string{api.CodeUnsupportedAction, api.CodeInvalidRequest},
		run: act(`{"kind":"teleport","x":1,"y":1}`)},
	{name: "unknown tool", invalid: true, mustFail: true, codes: []string{api.CodeUnsupportedAction, api.CodeInvalidRequest},
		run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, _ *rand.Rand) error {
			_, err := c.Act(ctx, client.Episode(ep.ID), api.ActionsRequest{Tool: "computer_19990101", Input: json.RawMessage(`{"action":"screenshot"}`)})
			return err
		}},
	{name: "exec timeout", invalid: true, mustFail: true, codes: []string{api.CodeTimeout},
		run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, _ *rand.Rand) error {
			_, err := c.Exec(ctx, client.Episode(ep.ID), api.ExecRequest{Argv: []string{"sleep", "30"}, TimeoutS: 1})
			return err
		}},
	{name: "exec missing program", invalid: true, codes: []string{api.CodeAgentError},
		run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, _ *rand.Rand) error {
			res, err := c.Exec(ctx, client.Episode(ep.ID), api.ExecRequest{Argv: []string{"/no/such/program"}, TimeoutS: 10})
			if err == nil && res.ExitCode == 0 {
				return errors.New("exec of a missing program exited 0")
			}
			return err
		}},
	{name: "exec without argv", invalid: true, mustFail: true, codes: []string{api.CodeInvalidRequest},
		run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, _ *rand.Rand) error {
			_, err := c.Exec(ctx, client.Episode(ep.ID), api.ExecRequest{})
			return err
		}},
	{name: "read missing file", invalid: true, mustFail: true, codes: []string{api.CodeAgentError, api.CodeNotFound},
		run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, _ *rand.Rand) error {
			_, err := c.ReadFile(ctx, client.Episode(ep.ID), "/no/such/file", io.Discard)
			return err
		}},
}

// rawPost sends body as JSON without encoding it: the client refuses to
// send what is not JSON.
func rawPost(ctx context.Context, url, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if t := os.Getenv(client.EnvToken); t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	var er api.ErrorResponse
	if json.Unmarshal(b, &er) == nil && er.Error.Code != "" {
		return &api.Error{Status: resp.StatusCode, ErrorBody: er.Error}
	}
	return &api.Error{Status: resp.StatusCode, ErrorBody: api.ErrorBody{Code: fmt.Sprintf("http_%d", resp.StatusCode), Message: string(b)}}
}
