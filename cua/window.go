package cua

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// windowOp is a window command, carried out with xdotool in the guest's
// session (bookworm's xdotool 3.20160805: it has no windowclose and no
// windowstate, so close_window and maximize_window are not served).
type windowOp struct {
	command string
	id      string // X window id, decimal
	app     string // get_application_windows
	a, b    int    // width, height or x, y
}

func (windowOp) isOp() {}

// windowID reads Cua's window_id, an int or a string of one.
func windowID(command string, raw json.RawMessage) (string, error) {
	var p struct {
		WindowID json.RawMessage `json:"window_id"`
	}
	if err := decode(command, raw, &p); err != nil {
		return "", err
	}
	if len(p.WindowID) == 0 || string(p.WindowID) == "null" {
		return "", missing(command, "window_id")
	}
	s := strings.Trim(string(p.WindowID), `"`)
	n, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return "", fmt.Errorf("%s: window_id %s is not an X window id", command, p.WindowID)
	}
	return strconv.FormatUint(n, 10), nil
}

func windowParser(command string) parser {
	return func(raw json.RawMessage, _ string) (op, error) {
		o := windowOp{command: command}
		switch command {
		case "get_current_window_id":
			return o, nil
		case "get_application_windows":
			var p struct {
				App *string `json:"app"`
			}
			if err := decode(command, raw, &p); err != nil {
				return nil, err
			}
			if p.App == nil {
				return nil, missing(command, "app")
			}
			o.app = *p.App
			return o, nil
		}
		id, err := windowID(command, raw)
		if err != nil {
			return nil, err
		}
		o.id = id
		var names [2]string
		switch command {
		case "set_window_size":
			names = [2]string{"width", "height"}
		case "set_window_position":
			names = [2]string{"x", "y"}
		default:
			return o, nil
		}
		var p map[string]*float64
		if err := decode(command, raw, &p); err != nil {
			return nil, err
		}
		for i, n := range names {
			v := p[n]
			if v == nil {
				return nil, missing(command, n)
			}
			px, err := pixel(command, n, *v)
			if err != nil {
				return nil, err
			}
			if i == 0 {
				o.a = px
			} else {
				o.b = px
			}
		}
		return o, nil
	}
}

func init() {
	for _, c := range []string{"get_current_window_id", "get_application_windows", "get_window_name",
		"get_window_size", "get_window_position", "set_window_size", "set_window_position",
		"minimize_window", "activate_window"} {
		commands[c] = windowParser(c)
	}
	params["get_current_window_id"] = ""
	params["get_application_windows"] = "app"
	for _, c := range []string{"get_window_name", "get_window_size", "get_window_position", "minimize_window", "activate_window"} {
		params[c] = "window_id"
	}
	params["set_window_size"] = "window_id width height"
	params["set_window_position"] = "window_id x y"
}

// Answers of the window commands (generic.py GenericWindowHandler).
type (
	windowIDReply struct {
		WindowID int64 `json:"window_id"`
	}
	windowsReply struct {
		Windows []int64 `json:"windows"`
	}
	nameReply struct {
		Name string `json:"name"`
	}
	windowSizeReply struct {
		Width  int `json:"width"`
		Height int `json:"height"`
	}
	windowPosReply struct {
		X int `json:"x"`
		Y int `json:"y"`
	}
)

// parseShellVars reads xdotool's --shell output (KEY=number lines:
// getwindowgeometry's WINDOW, X, Y, WIDTH, HEIGHT, SCREEN; getmouselocation's
// X, Y, SCREEN, WINDOW) and requires the named keys.
func parseShellVars(out string, need ...string) (map[string]int, error) {
	g := map[string]int{}
	for _, line := range strings.Fields(out) {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("xdotool printed %q", line)
		}
		g[k] = n
	}
	for _, k := range need {
		if _, ok := g[k]; !ok {
			return nil, fmt.Errorf("no %s in xdotool's %q", k, out)
		}
	}
	return g, nil
}

func (s session) window(ctx context.Context, o windowOp) (any, error) {
	switch o.command {
	case "get_current_window_id":
		out, err := s.check(ctx, nil, "xdotool", "getactivewindow")
		if err != nil {
			return nil, err
		}
		id, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("No active window")
		}
		return windowIDReply{WindowID: id}, nil
	case "get_application_windows":
		// xdotool matches names as case-insensitive extended regexps;
		// Cua's is a case-insensitive substring.
		res, err := s.run(ctx, nil, guestCallTimeout, "xdotool", "search", "--name", regexp.QuoteMeta(o.app))
		if err != nil {
			return nil, err
		}
		ids := []int64{}
		for _, f := range strings.Fields(string(res.Stdout)) {
			if id, err := strconv.ParseInt(f, 10, 64); err == nil {
				ids = append(ids, id)
			}
		}
		return windowsReply{Windows: ids}, nil
	case "get_window_name":
		out, err := s.check(ctx, nil, "xdotool", "getwindowname", o.id)
		if err != nil {
			return nil, err
		}
		return nameReply{Name: strings.TrimSuffix(string(out), "\n")}, nil
	case "get_window_size", "get_window_position":
		out, err := s.check(ctx, nil, "xdotool", "getwindowgeometry", "--shell", o.id)
		if err != nil {
			return nil, err
		}
		g, err := parseShellVars(string(out), "X", "Y", "WIDTH", "HEIGHT")
		if err != nil {
			return nil, err
		}
		if o.command == "get_window_size" {
			return windowSizeReply{Width: g["WIDTH"], Height: g["HEIGHT"]}, nil
		}
		return windowPosReply{X: g["X"], Y: g["Y"]}, nil
	}
	argv := map[string][]string{
		"set_window_size":     {"xdotool", "windowsize", o.id, strconv.Itoa(o.a), strconv.Itoa(o.b)},
		"set_window_position": {"xdotool", "windowmove", o.id, strconv.Itoa(o.a), strconv.Itoa(o.b)},
		"minimize_window":     {"xdotool", "windowminimize", o.id},
		"activate_window":     {"xdotool", "windowactivate", o.id},
	}[o.command]
	if argv == nil {
		return nil, fmt.Errorf("window command %s not implemented", o.command)
	}
	if _, err := s.check(ctx, nil, argv...); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}
