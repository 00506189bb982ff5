package web

// Recorded steps (issue 16): while a VM is being recorded (its
// trajectory.Recorder), each call of a step route (actions, exec, files;
// the route table's step column) is one step of its trajectory. Two
// wrappers share a stepNote through the request's context:
//   - stepped, outermost, keeps the raw request body and the bytes and
//     status of the answer, error answers included, and ends the step once
//     the answer is flushed to the client;
//   - begins, once the target is resolved, begins the step on the VM's
//     recorder (its picture before), and hands the note to the handler in
//     the target.
//
// The handler notes what only it knows: the vocabulary, the neutral
// actions played and their settle (noteRunner wraps the player.Runner a
// vocabulary plays on), the image the agent got, the exec or file. Cua's
// commands are steps too, each its own (cua.go).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"image"
	"io"
	"net/http"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/player"
	"github.com/deskfarm/deskfarm/trajectory"
)

// Kept bytes: a step keeps its request and answer up to these sizes (a
// toolset turn answers a screenshot per block); beyond, the step says so
// and keeps none.
const (
	maxStepRequest  = maxActionsBody
	maxStepResponse = 64 << 20
)

// stepNote is what one recorded call did, filled by the wrappers and the
// handler. A nil *stepNote (the VM is not recorded) ignores every note.
type stepNote struct {
	kind    string
	pending *trajectory.Pending
	start   time.Time
	// call accumulates the step; the wrappers set its request, answer and
	// status.
	call trajectory.Call
	// img is the last image a run captured, the one the agent got (its
	// base64); after the bytes of one it got otherwise (Cua's screenshot).
	img   *player.Image
	after []byte
	// keepRequest and keepResponse keep the bodies (actions calls only).
	keepRequest, keepResponse bool
}

type stepKey struct{}

// noteFrom returns the note of a request on a step route, nil otherwise.
func noteFrom(ctx context.Context) *stepNote {
	n, _ := ctx.Value(stepKey{}).(*stepNote)
	return n
}

// played notes a run of actions and its result (noteRunner, and the
// guest runs of pyautogui code).
func (n *stepNote) played(acts []actions.Action, res player.Result, err error) {
	if n == nil {
		return
	}
	if err != nil && res.Executed < len(acts) {
		acts = acts[:res.Executed]
	}
	n.call.Actions = append(n.call.Actions, acts...)
	n.call.Settle += res.Settle
	if res.Image != nil {
		n.img = res.Image
	}
}

// size notes the agent's coordinate space.
func (n *stepNote) size(p image.Point) {
	if n != nil {
		n.call.ScreenshotSize = p
	}
}

// tool notes the vocabulary and what the model said of the call.
func (n *stepNote) tool(tool, modelResponse string) {
	if n == nil {
		return
	}
	if tool == "" {
		tool = api.ToolNeutral
	}
	if n.call.Tool == "" { // an MCP call keeps "mcp"
		n.call.Tool = tool
	}
	n.call.ModelResponse = modelResponse
}

// exec notes an exec step.
func (n *stepNote) exec(e api.StepExec) {
	if n != nil {
		n.call.Exec = &e
	}
}

// snapshot notes a snapshot step.
func (n *stepNote) snapshot(op, name string) {
	if n != nil {
		n.call.Snapshot = &api.StepSnapshot{Op: op, Name: name}
	}
}

// file notes a file step: its guest path and contents, hashed.
func (n *stepNote) file(path string, data []byte) {
	if n == nil {
		return
	}
	sum := sha256.Sum256(data)
	n.call.File = &api.StepFile{Path: path, Bytes: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
	n.call.FileData = data
}

// noteRunner is the player.Runner a recorded call's vocabulary plays on:
// the desk's, noting each run.
type noteRunner struct {
	r player.Runner
	n *stepNote
}

func (nr noteRunner) Run(ctx context.Context, acts []actions.Action, opts player.RunOptions) (player.Result, error) {
	res, err := nr.r.Run(ctx, acts, opts)
	nr.n.played(acts, res, err)
	return res, err
}

// runner wraps r when the call is recorded.
func (n *stepNote) runner(r player.Runner) player.Runner {
	if n == nil {
		return r
	}
	return noteRunner{r: r, n: n}
}

// stepped records the calls of a step route of kind (api.Kind*) on a
// recorded VM: see the file's comment.
func (s *server) stepped(kind string, h apiHandler) apiHandler {
	if s.traj == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		// An actions call keeps its request and answer exactly; exec and
		// file steps keep what ran and sizes and hashes, never the guest's
		// data (a viewer reads trajectories, not what is inside a VM).
		keep := kind == api.KindActions
		n := &stepNote{kind: kind, keepRequest: keep, keepResponse: keep}
		if r.RemoteAddr == mcpRemoteAddr {
			n.call.Tool = "mcp"
		}
		r = r.WithContext(context.WithValue(r.Context(), stepKey{}, n))
		var req bytes.Buffer
		if n.keepRequest && r.Body != nil && r.Body != http.NoBody {
			r.Body = teeBody{ReadCloser: r.Body, w: &limitedBuffer{b: &req, limit: maxStepRequest}}
		}
		cw := &captureWriter{ResponseWriter: w, keep: n.keepResponse, limit: maxStepResponse}
		err := h(cw, r)
		if n.pending == nil {
			return err
		}
		c := &n.call
		c.Duration = time.Since(n.start)
		if err != nil {
			// What wrap would send, sent here so that the step keeps it.
			status, body, _ := errorAnswer(r, err)
			writeError(cw, r, err)
			err = nil
			c.Status, c.IsError, c.Error = status, true, &body
		} else {
			c.Status = cw.status
		}
		if n.keepRequest && req.Len() <= maxStepRequest {
			c.Request = req.Bytes()
		}
		if cw.keep && !cw.over && json.Valid(cw.body.Bytes()) {
			c.Response = cw.body.Bytes()
			c.IsError = c.IsError || toolResultError(c.Response)
		}
		if c.Error == nil {
			c.AfterImage = n.afterImage()
		}
		// The client has its answer before the step is handed over.
		http.NewResponseController(cw.ResponseWriter).Flush() //nolint:errcheck // an in-process writer has nothing to flush
		n.pending.End(*c)
		return err
	}
}

// afterImage is the encoded image the agent got, nil if none.
func (n *stepNote) afterImage() []byte {
	if n.after != nil {
		return n.after
	}
	if n.img == nil {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(n.img.Data)
	if err != nil {
		return nil // never: the player encoded it
	}
	return b
}

// begins begins the step of a call on a recorded VM, once its target is
// resolved, and hands the handler the note.
func (s *server) begins(h targetHandler) targetHandler {
	if s.traj == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request, t target) error {
		if n := noteFrom(r.Context()); n != nil {
			if p := s.traj.Recorder(t.vm).Begin(); p != nil { // nil when not recorded
				n.call.Kind, n.start, n.pending = n.kind, time.Now(), p
				t.step = n
			}
		}
		return h(w, r, t)
	}
}

// toolResultError reports whether an answer is a tool result with
// is_error (an actions answer with errors_as_results, or a toolset turn
// whose block failed).
func toolResultError(b []byte) bool {
	var v struct {
		IsError     bool `json:"is_error"`
		ToolResults []struct {
			IsError bool `json:"is_error"`
		} `json:"tool_results"`
	}
	if json.Unmarshal(b, &v) != nil {
		return false
	}
	for _, tr := range v.ToolResults {
		v.IsError = v.IsError || tr.IsError
	}
	return v.IsError
}

// teeBody copies what a handler reads of the request body.
type teeBody struct {
	io.ReadCloser
	w io.Writer
}

func (t teeBody) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	if n > 0 {
		t.w.Write(p[:n]) //nolint:errcheck // a limitedBuffer never fails
	}
	return n, err
}

// limitedBuffer keeps the first limit+1 bytes written to it (so that a
// caller sees it overflowed).
type limitedBuffer struct {
	b     *bytes.Buffer
	limit int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.limit + 1 - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// captureWriter passes an answer through and keeps its status and, up to
// limit, its bytes (or only their hash).
type captureWriter struct {
	http.ResponseWriter
	status int
	keep   bool
	limit  int
	body   bytes.Buffer
	over   bool
}

func (c *captureWriter) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
	c.ResponseWriter.WriteHeader(status)
}

func (c *captureWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if c.keep && !c.over {
		if c.body.Len()+len(p) > c.limit {
			c.over = true
			c.body.Reset()
		} else {
			c.body.Write(p)
		}
	}
	return c.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (c *captureWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
