package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/deskfarm/deskfarm/web"
)

func init() {
	commands["act"] = cmdAct
	commands["screenshot"] = cmdScreenshot
}

// act sends a body to POST /v1/vms/{id}/actions.
func (c *apiClient) act(ctx context.Context, id string, body json.RawMessage) (web.ActionsResponse, error) {
	var out web.ActionsResponse
	err := c.call(ctx, http.MethodPost, vmPath(id, "actions"), body, &out)
	return out, err
}

// cmdAct: deskfarm act [-o FILE] VM JSON. JSON is a Claude tool call
// ({"tool":"computer_20251124","input":{...}}), a bare Claude input (taken as
// computer_20251124), a neutral action ({"kind":...}) or a list of them.
func cmdAct(args []string) error {
	f := newVMFlags("act")
	f.Usage = usageOf(f, "act [-o FILE] [--json] VM JSON")
	out := f.String("o", "", "write the returned image to `FILE` (default: print only its size)")
	tool := f.String("tool", "computer_20251124", "Claude tool version for a bare input")
	raw := f.Bool("json", false, "print the whole JSON response")
	pos, err := f.parse(args, 2, 2)
	if err != nil {
		return err
	}
	body, err := actBody(pos[1], *tool)
	if err != nil {
		return err
	}
	c, err := f.client()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := c.act(ctx, pos[0], body)
	if err != nil {
		return err
	}
	if *raw {
		return printJSON(res)
	}
	if res.Text != "" {
		fmt.Println(res.Text)
	}
	fmt.Fprintf(os.Stderr, "executed %d action(s) in %.0f ms (settled in %.0f ms)\n", res.Executed, res.DurationMS, res.SettleMS)
	if res.Image != nil {
		if *out == "" {
			fmt.Fprintf(os.Stderr, "image %s %dx%d (use -o FILE to save it)\n", res.Image.MediaType, res.Image.Width, res.Image.Height)
			return nil
		}
		b, err := base64.StdEncoding.DecodeString(res.Image.Data)
		if err != nil {
			return fmt.Errorf("decode image: %w", err)
		}
		return os.WriteFile(*out, b, 0o644)
	}
	return nil
}

// actBody wraps what the user typed into an actions request body.
func actBody(arg, tool string) (json.RawMessage, error) {
	var probe any
	if err := json.Unmarshal([]byte(arg), &probe); err != nil {
		return nil, fmt.Errorf("act: JSON argument: %w", err)
	}
	switch v := probe.(type) {
	case []any:
		return json.Marshal(map[string]any{"actions": v})
	case map[string]any:
		switch {
		case v["tool"] != nil || v["actions"] != nil || v["action"] != nil && v["kind"] == nil && isObject(v["action"]):
			return json.RawMessage(arg), nil
		case v["kind"] != nil:
			return json.Marshal(map[string]any{"action": v})
		case v["action"] != nil:
			return json.Marshal(map[string]any{"tool": tool, "input": v})
		}
	}
	return nil, errors.New(`act: JSON must be a Claude input ({"action":"left_click","coordinate":[x,y]}), a tool call ({"tool":...,"input":...}), a neutral action ({"kind":...}) or a list of them`)
}

func isObject(v any) bool { _, ok := v.(map[string]any); return ok }

// cmdScreenshot: deskfarm screenshot [-o FILE] [--format png|jpeg] [--width W --height H] VM
func cmdScreenshot(args []string) error {
	f := newVMFlags("screenshot")
	f.Usage = usageOf(f, "screenshot [-o FILE] [--format png|jpeg] [--width W --height H] VM")
	out := f.String("o", "", "output `FILE` (default: screenshot-VM.png/jpg)")
	format := f.String("format", "", "png or jpeg (default: from -o's extension, else png)")
	width := f.Int("width", 0, "scale to this width (with --height)")
	height := f.Int("height", 0, "scale to this height (with --width)")
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if *format == "" {
		*format = "png"
		if strings.HasSuffix(*out, ".jpg") || strings.HasSuffix(*out, ".jpeg") {
			*format = "jpeg"
		}
	}
	if *out == "" {
		ext := map[string]string{"png": "png", "jpeg": "jpg"}[*format]
		*out = "screenshot-" + pos[0] + "." + ext
	}
	c, err := f.client()
	if err != nil {
		return err
	}
	q := url.Values{"format": {*format}}
	if *width != 0 || *height != 0 {
		q.Set("width", fmt.Sprint(*width))
		q.Set("height", fmt.Sprint(*height))
	}
	resp, err := c.send(context.Background(), request{method: http.MethodGet, path: vmPath(pos[0], "screenshot"), query: q})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	file, err := os.Create(*out)
	if err != nil {
		return err
	}
	if _, err := io.Copy(file, resp.Body); err != nil {
		file.Close()
		os.Remove(*out)
		return err
	}
	fmt.Fprintln(os.Stderr, "wrote", *out)
	return file.Close()
}

func usageOf(f *vmFlags, usage string) func() {
	return func() {
		fmt.Fprintf(vmio.stderr, "usage: deskfarm %s\n\nflags:\n", usage)
		f.PrintDefaults()
	}
}
