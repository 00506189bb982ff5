package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ComputerTool is the Claude tool version whose input the computer tool
// takes and forwards to the actions route.
const ComputerTool = "computer_20251124"

// computerActions are ComputerTool's actions (package vocab of the
// server checks them again; this list is the schema's enum).
var computerActions = []string{
	"screenshot", "left_click", "right_click", "middle_click", "double_click", "triple_click",
	"mouse_move", "left_click_drag", "left_mouse_down", "left_mouse_up", "scroll",
	"key", "type", "hold_key", "wait", "cursor_position", "zoom",
}

// MaxReadText bounds what read_file puts in a tool result: a model's
// context is no place for megabytes.
const MaxReadText = 256 << 10

// Target names the VM a tool acts on.
type Target struct {
	Episode string `json:"episode,omitempty" jsonschema:"episode id to act on; default: the episode start_episode last started in this session"`
	VM      string `json:"vm,omitempty" jsonschema:"VM id to act on instead of an episode"`
}

// ComputerArgs are the computer tool's arguments: a Claude computer-use
// input plus the target.
type ComputerArgs struct {
	Action          string  `json:"action" jsonschema:"the action to perform"`
	Coordinate      []int   `json:"coordinate,omitempty" jsonschema:"[x, y] in screenshot pixels: where to click, move, scroll or end a drag"`
	StartCoordinate []int   `json:"start_coordinate,omitempty" jsonschema:"[x, y] where left_click_drag starts"`
	Text            string  `json:"text,omitempty" jsonschema:"text to type; for key and hold_key an xdotool key combination such as ctrl+s or Return; for clicks and scroll the modifier keys to hold"`
	ScrollDirection string  `json:"scroll_direction,omitempty" jsonschema:"up, down, left or right"`
	ScrollAmount    int     `json:"scroll_amount,omitempty" jsonschema:"number of wheel clicks to scroll"`
	Duration        float64 `json:"duration,omitempty" jsonschema:"seconds to wait or to hold a key"`
	Region          []int   `json:"region,omitempty" jsonschema:"[x0, y0, x1, y1] of the screenshot to zoom into"`
	Target
}

// ExecArgs are the exec tool's arguments.
type ExecArgs struct {
	Argv     []string `json:"argv" jsonschema:"the program and its arguments, e.g. [\"sh\", \"-c\", \"ls ~\"]"`
	Stdin    string   `json:"stdin,omitempty" jsonschema:"standard input"`
	TimeoutS float64  `json:"timeout_s,omitempty" jsonschema:"seconds before the program is killed (default 60)"`
	Target
}

// ReadFileArgs are the read_file tool's arguments.
type ReadFileArgs struct {
	Path string `json:"path" jsonschema:"absolute path in the VM"`
	Target
}

// WriteFileArgs are the write_file tool's arguments.
type WriteFileArgs struct {
	Path       string `json:"path" jsonschema:"absolute path in the VM"`
	Content    string `json:"content,omitempty" jsonschema:"the file's content as text"`
	ContentB64 string `json:"content_b64,omitempty" jsonschema:"the file's content in standard base64, for bytes that are not text"`
	Mode       string `json:"mode,omitempty" jsonschema:"octal file mode, default 0644"`
	Target
}

// StartEpisodeArgs are the start_episode tool's arguments.
type StartEpisodeArgs struct {
	Pool string  `json:"pool,omitempty" jsonschema:"pool to lease a VM from; may be left out when the farm has one"`
	TTLS float64 `json:"ttl_s,omitempty" jsonschema:"lease in seconds (default: the pool's)"`
	// Record is a pointer so that leaving it out keeps the pool's default.
	Record *bool `json:"record,omitempty" jsonschema:"keep the episode's trajectory (every step, its screenshots, a video) on the farm after it ends; default: the pool's record setting"`
}

// EndEpisodeArgs are the end_episode tool's arguments.
type EndEpisodeArgs struct {
	Episode string `json:"episode,omitempty" jsonschema:"episode id to end; default: the episode start_episode last started in this session"`
}

// ScreenshotArgs are the screenshot tool's arguments.
type ScreenshotArgs struct {
	Target
}

func (s *Server) addTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "start_episode",
		Description: "Lease a fresh desktop VM from a pool. It becomes the VM the other tools act on. Answers with the episode id, the VM id and a link to watch it live."},
		s.startEpisode)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "end_episode",
		Description: "End an episode: its VM is reset and returned to its pool."},
		s.endEpisodeTool)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "computer", InputSchema: computerSchema(),
		Description: "Use the VM's mouse and keyboard, as Claude's computer tool (" + ComputerTool + ") does, and see the screen. " +
			"Answers with a screenshot taken once the screen settled; coordinates are pixels of that screenshot."},
		s.computer)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "screenshot",
		Description: "Take a screenshot of the VM's screen, in the coordinate space of the computer tool."},
		s.screenshot)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "exec",
		Description: "Run a program in the VM (as the guest agent's user, not in the desktop session) and return its exit code, stdout and stderr."},
		s.exec)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "read_file", Description: "Read a file of the VM."}, s.readFile)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "write_file", Description: "Write a file in the VM, replacing it if it exists."}, s.writeFile)
	s.addSnapshotTools() // snapshots.go
}

// computerSchema is ComputerArgs' inferred schema with the actions and
// scroll directions as enums, so a client can show them and the SDK
// refuses a misspelt one before it reaches the farm.
func computerSchema() *jsonschema.Schema {
	sch, err := jsonschema.For[ComputerArgs](nil)
	if err != nil {
		panic(fmt.Sprintf("computer tool schema: %v", err))
	}
	sch.Properties["action"].Enum = toAny(computerActions)
	sch.Properties["scroll_direction"].Enum = toAny([]string{"up", "down", "left", "right"})
	for _, f := range []string{"coordinate", "start_coordinate"} {
		two := 2
		sch.Properties[f].MinItems, sch.Properties[f].MaxItems = &two, &two
	}
	four := 4
	sch.Properties["region"].MinItems, sch.Properties["region"].MaxItems = &four, &four
	return sch
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// ArgError is a tool argument the server refused before calling the farm.
type ArgError struct {
	Field string // the argument's name, as the tool's schema spells it
	Msg   string
}

func (e *ArgError) Error() string { return e.Field + ": " + e.Msg }

// target resolves what a VM tool acts on.
func (s *Server) target(ss *mcp.ServerSession, t Target) (client.Target, error) {
	switch {
	case t.VM != "" && t.Episode != "":
		return client.Target{}, &ArgError{"vm", "give episode or vm, not both"}
	case t.VM != "":
		return client.VM(t.VM), nil
	case t.Episode != "":
		return client.Episode(t.Episode), nil
	}
	if id := s.current(ss); id != "" {
		return client.Episode(id), nil
	}
	return client.Target{}, &ArgError{"episode", "no episode in this session: call start_episode first, or name an episode or vm"}
}

// apiFailure says what a failed API call means to the model: the server's
// message and code, the argument at fault when the server named one.
func apiFailure(what string, err error) error {
	if e, ok := errors.AsType[*api.Error](err); ok {
		msg := e.Message
		if e.Field != "" && !strings.Contains(msg, e.Field) {
			msg = e.Field + ": " + msg
		}
		return fmt.Errorf("%s failed: %s (%s)", what, msg, e.Code)
	}
	return fmt.Errorf("%s failed: %w", what, err)
}

func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

func (s *Server) startEpisode(ctx context.Context, req *mcp.CallToolRequest, in StartEpisodeArgs) (*mcp.CallToolResult, any, error) {
	if in.TTLS < 0 {
		return nil, nil, &ArgError{"ttl_s", fmt.Sprintf("must be positive, got %g", in.TTLS)}
	}
	if in.Pool == "" {
		in.Pool = s.opts.Pool
	}
	ep, err := s.c.StartEpisode(ctx, api.StartEpisodeRequest{Pool: in.Pool, TTLS: in.TTLS, Record: in.Record})
	if err != nil {
		return nil, nil, apiFailure("start_episode", err)
	}
	s.noteEpisode(req.Session, ep.ID)
	s.log.Info("episode started", "op", "mcp_start_episode", "episode", ep.ID, "vm", ep.VM, "pool", ep.Pool)
	text := fmt.Sprintf("Episode %s started on VM %s (pool %s); the lease ends at %s.\nLive view: %s\n"+
		"The other tools now act on this episode.", ep.ID, ep.VM, ep.Pool, ep.ExpiresAt.UTC().Format(time.RFC3339), ep.ViewerURL)
	if ep.Recording {
		page := ep.TrajectoryURL
		if strings.HasPrefix(page, "/") {
			page = s.c.Server() + page
		}
		text += fmt.Sprintf("\nRecording: the trajectory (id %s) is kept after the episode; its page: %s", ep.ID, page)
	}
	return textResult(text), ep, nil
}

func (s *Server) endEpisodeTool(ctx context.Context, req *mcp.CallToolRequest, in EndEpisodeArgs) (*mcp.CallToolResult, any, error) {
	id := in.Episode
	if id == "" {
		if id = s.current(req.Session); id == "" {
			return nil, nil, &ArgError{"episode", "no episode in this session to end: name one"}
		}
	}
	ep, err := s.c.EndEpisode(ctx, id)
	if err != nil {
		return nil, nil, apiFailure("end_episode", err)
	}
	s.forgetEpisode(id)
	s.log.Info("episode ended", "op", "mcp_end_episode", "episode", id, "vm", ep.VM)
	text := fmt.Sprintf("Episode %s ended; VM %s was reset in %.2f s.", id, ep.VM, ep.ResetSeconds)
	if ep.VMReplaced {
		text = fmt.Sprintf("Episode %s ended; VM %s could not be reset and was replaced.", id, ep.VM)
	}
	return textResult(text), ep, nil
}

// claudeInput is the part of ComputerArgs the actions route gets.
type claudeInput struct {
	Action          string  `json:"action"`
	Coordinate      []int   `json:"coordinate,omitempty"`
	StartCoordinate []int   `json:"start_coordinate,omitempty"`
	Text            string  `json:"text,omitempty"`
	ScrollDirection string  `json:"scroll_direction,omitempty"`
	ScrollAmount    int     `json:"scroll_amount,omitempty"`
	Duration        float64 `json:"duration,omitempty"`
	Region          []int   `json:"region,omitempty"`
}

func (s *Server) computer(ctx context.Context, req *mcp.CallToolRequest, in ComputerArgs) (*mcp.CallToolResult, any, error) {
	t, err := s.target(req.Session, in.Target)
	if err != nil {
		return nil, nil, err
	}
	return s.act(ctx, t, "computer "+in.Action, claudeInput{Action: in.Action, Coordinate: in.Coordinate,
		StartCoordinate: in.StartCoordinate, Text: in.Text, ScrollDirection: in.ScrollDirection,
		ScrollAmount: in.ScrollAmount, Duration: in.Duration, Region: in.Region})
}

func (s *Server) screenshot(ctx context.Context, req *mcp.CallToolRequest, in ScreenshotArgs) (*mcp.CallToolResult, any, error) {
	t, err := s.target(req.Session, in.Target)
	if err != nil {
		return nil, nil, err
	}
	return s.act(ctx, t, "screenshot", claudeInput{Action: "screenshot"})
}

// act plays one Claude input on t and answers with its image and a text
// saying what happened.
func (s *Server) act(ctx context.Context, t client.Target, what string, in claudeInput) (*mcp.CallToolResult, any, error) {
	raw, err := json.Marshal(in)
	if err != nil {
		return nil, nil, err
	}
	res, err := s.c.Act(ctx, t, api.ActionsRequest{Tool: ComputerTool, Input: raw})
	if err != nil {
		return nil, nil, apiFailure(what, err)
	}
	var text []string
	if res.Text != "" {
		text = append(text, res.Text)
	}
	out := &mcp.CallToolResult{}
	if res.Image != nil {
		b, err := base64.StdEncoding.DecodeString(res.Image.Data)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: decode the screenshot: %w", what, err)
		}
		out.Content = append(out.Content, &mcp.ImageContent{MIMEType: res.Image.MediaType, Data: b})
		text = append(text, fmt.Sprintf("Screenshot %dx%d (the computer tool's coordinate space).", res.Image.Width, res.Image.Height))
	}
	if res.SettleTimedOut {
		text = append(text, fmt.Sprintf("The screen was still changing after %.0f ms.", res.SettleMS))
	}
	if len(text) == 0 {
		text = append(text, "Done.")
	}
	out.Content = append([]mcp.Content{&mcp.TextContent{Text: strings.Join(text, "\n")}}, out.Content...)
	return out, nil, nil
}

func (s *Server) exec(ctx context.Context, req *mcp.CallToolRequest, in ExecArgs) (*mcp.CallToolResult, any, error) {
	if len(in.Argv) == 0 || in.Argv[0] == "" {
		return nil, nil, &ArgError{"argv", `must name a program, e.g. ["sh", "-c", "ls"]`}
	}
	if in.TimeoutS < 0 || in.TimeoutS > api.MaxExecTimeout {
		return nil, nil, &ArgError{"timeout_s", fmt.Sprintf("must be in (0, %d] seconds, got %g", api.MaxExecTimeout, in.TimeoutS)}
	}
	t, err := s.target(req.Session, in.Target)
	if err != nil {
		return nil, nil, err
	}
	res, err := s.c.Exec(ctx, t, api.ExecRequest{Argv: in.Argv, Stdin: in.Stdin, TimeoutS: in.TimeoutS})
	if err != nil {
		return nil, nil, apiFailure("exec", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "exit code %d", res.ExitCode)
	if res.Signal != 0 {
		fmt.Fprintf(&b, " (killed by signal %d)", res.Signal)
	}
	for _, o := range []struct {
		name string
		get  func() ([]byte, error)
	}{{"stdout", res.StdoutBytes}, {"stderr", res.StderrBytes}} {
		out, err := o.get()
		if err != nil {
			return nil, nil, fmt.Errorf("exec: %w", err)
		}
		if len(out) > 0 {
			fmt.Fprintf(&b, "\n--- %s ---\n%s", o.name, showBytes(out))
		}
	}
	if res.Truncated {
		b.WriteString("\n(output truncated by the guest agent)")
	}
	return textResult(b.String()), res, nil
}

// showBytes is b as text, or as base64 when it is not UTF-8.
func showBytes(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return "(not UTF-8; standard base64) " + base64.StdEncoding.EncodeToString(b)
}

// capped keeps the first n bytes written to it and counts the rest.
type capped struct {
	buf   bytes.Buffer
	n     int
	total int64
}

func (c *capped) Write(p []byte) (int, error) {
	c.total += int64(len(p))
	if room := c.n - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (s *Server) readFile(ctx context.Context, req *mcp.CallToolRequest, in ReadFileArgs) (*mcp.CallToolResult, any, error) {
	if !strings.HasPrefix(in.Path, "/") {
		return nil, nil, &ArgError{"path", fmt.Sprintf("%q is not an absolute path", in.Path)}
	}
	t, err := s.target(req.Session, in.Target)
	if err != nil {
		return nil, nil, err
	}
	w := &capped{n: MaxReadText}
	if _, err := s.c.ReadFile(ctx, t, in.Path, w); err != nil {
		return nil, nil, apiFailure("read_file "+in.Path, err)
	}
	b := w.buf.Bytes()
	if int64(len(b)) < w.total {
		// Cut at a rune boundary so that text stays text.
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.Valid(b); i++ {
			b = b[:len(b)-1]
		}
		if !utf8.Valid(b) {
			b = w.buf.Bytes() // binary: shown as base64 whole
		}
		return textResult(fmt.Sprintf("%s\n(the first %d of %d bytes; read the rest with exec, e.g. tail -c)",
			showBytes(b), len(b), w.total)), nil, nil
	}
	return textResult(showBytes(b)), nil, nil
}

func (s *Server) writeFile(ctx context.Context, req *mcp.CallToolRequest, in WriteFileArgs) (*mcp.CallToolResult, any, error) {
	if !strings.HasPrefix(in.Path, "/") {
		return nil, nil, &ArgError{"path", fmt.Sprintf("%q is not an absolute path", in.Path)}
	}
	data := []byte(in.Content)
	if in.ContentB64 != "" {
		if in.Content != "" {
			return nil, nil, &ArgError{"content_b64", "give content or content_b64, not both"}
		}
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.ContentB64); err != nil {
			return nil, nil, &ArgError{"content_b64", fmt.Sprintf("not standard base64: %v", err)}
		}
	}
	mode := uint64(0o644)
	if in.Mode != "" {
		var err error
		if mode, err = strconv.ParseUint(in.Mode, 8, 32); err != nil || mode > 0o7777 {
			return nil, nil, &ArgError{"mode", fmt.Sprintf("%q is not an octal file mode like 0644", in.Mode)}
		}
	}
	t, err := s.target(req.Session, in.Target)
	if err != nil {
		return nil, nil, err
	}
	if err := s.c.WriteFile(ctx, t, in.Path, bytes.NewReader(data), int64(len(data)), uint32(mode)); err != nil {
		return nil, nil, apiFailure("write_file "+in.Path, err)
	}
	return textResult(fmt.Sprintf("Wrote %d bytes to %s.", len(data), in.Path)), nil, nil
}
