package osworld

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
)

// ErrBadRequest marks a request the handler cannot parse (a 400, or the
// status OSWorld's server gives for that route).
var ErrBadRequest = errors.New("bad request")

// command is a parsed "command" + "shell" body of /execute, /setup/execute
// and /setup/launch.
type command struct {
	// Argv is what runs: the expanded list, or sh -c for shell commands.
	Argv []string
	// Text is how /setup/launch names it in its answer: the shell string,
	// or the list joined by spaces.
	Text string
	// Timeout is the optional "timeout" (osworld-server's /execute), in
	// seconds; 0 when absent.
	Timeout float64
}

type commandBody struct {
	Command json.RawMessage `json:"command"`
	Shell   pyTruth         `json:"shell"`
	Timeout *float64        `json:"timeout"`
}

// pyTruth is a JSON value read as Python's bool() of it, as OSWorld's
// server passes data.get("shell") straight to subprocess: five tasks send
// "shell": "true" (a string, so true), and "false" as a string is true too.
type pyTruth bool

func (t *pyTruth) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch v := v.(type) {
	case nil:
		*t = false
	case bool:
		*t = pyTruth(v)
	case float64:
		*t = v != 0
	case string:
		*t = v != ""
	case []any:
		*t = len(v) > 0
	case map[string]any:
		*t = len(v) > 0
	}
	return nil
}

// parseCommand reads a command body as OSWorld's server does: a string with
// shell false is split like shlex.split; every list element starting with
// "~/" is expanded to home; with shell true the string (or the list's first
// element, the rest being sh's $0...) runs under /bin/sh -c, as
// subprocess.run(shell=True) does.
func parseCommand(body []byte, home string) (command, error) {
	var b commandBody
	if err := json.Unmarshal(body, &b); err != nil {
		return command{}, fmt.Errorf("%w: body: %w", ErrBadRequest, err)
	}
	var list []string
	var str string
	isStr := false
	switch {
	case len(b.Command) == 0 || string(b.Command) == "null":
		return command{}, fmt.Errorf("%w: no command", ErrBadRequest)
	case b.Command[0] == '"':
		if err := json.Unmarshal(b.Command, &str); err != nil {
			return command{}, fmt.Errorf("%w: command: %w", ErrBadRequest, err)
		}
		isStr = true
	default:
		if err := json.Unmarshal(b.Command, &list); err != nil {
			return command{}, fmt.Errorf("%w: command: want a string or a list of strings: %w", ErrBadRequest, err)
		}
	}
	var c command
	if b.Timeout != nil {
		c.Timeout = *b.Timeout
	}
	if isStr && !bool(b.Shell) {
		var err error
		if list, err = shlexSplit(str); err != nil {
			return command{}, fmt.Errorf("%w: command: %w", ErrBadRequest, err)
		}
		isStr = false
	}
	if isStr {
		// A string with shell=true is not expanded: the shell does that.
		c.Argv = []string{"/bin/sh", "-c", str}
		c.Text = str
		return c, nil
	}
	for i, a := range list {
		if strings.HasPrefix(a, "~/") {
			list[i] = home + a[1:]
		}
	}
	if len(list) == 0 {
		return command{}, fmt.Errorf("%w: empty command", ErrBadRequest)
	}
	if bool(b.Shell) {
		c.Argv = append([]string{"/bin/sh", "-c"}, list...)
		c.Text = fmt.Sprint(pyList(list))
		return c, nil
	}
	c.Argv = list
	c.Text = strings.Join(list, " ")
	return c, nil
}

// pyList formats a list as Python's str() of a list of str would, which is
// what /setup/launch echoes for a shell command given as a list.
type pyList []string

func (l pyList) String() string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// shlexSplit splits s as Python's shlex.split (POSIX mode, no comments):
// whitespace separates words; single quotes keep everything literally;
// double quotes keep everything but backslash escapes of \ " $ ` and
// newline; a backslash outside quotes escapes the next character.
func shlexSplit(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == ' ' || r == '\t' || r == '\n' || r == '\r':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case r == '\\':
			inWord = true
			if i+1 >= len(rs) {
				return nil, errors.New("no escaped character")
			}
			i++
			cur.WriteRune(rs[i])
		case r == '\'':
			inWord = true
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				j++
			}
			if j >= len(rs) {
				return nil, errors.New("no closing quotation")
			}
			cur.WriteString(string(rs[i+1 : j]))
			i = j
		case r == '"':
			inWord = true
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				if rs[j] == '\\' && j+1 < len(rs) && strings.ContainsRune("\\\"$`\n", rs[j+1]) {
					j++
				}
				cur.WriteRune(rs[j])
			}
			if j >= len(rs) {
				return nil, errors.New("no closing quotation")
			}
			i = j
		default:
			inWord = true
			cur.WriteRune(r)
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// expandPath is os.path.expandvars(os.path.expanduser(p)) for the desktop
// user: "~" and "~/" become home, and $HOME, ${HOME}, $USER and ${USER}
// their values. Other variables are left as they are (expandvars leaves
// unknown ones too; the server's environment has little else).
func expandPath(p, user, home string) string {
	if p == "~" {
		p = home
	} else if strings.HasPrefix(p, "~/") {
		p = home + p[1:]
	}
	r := strings.NewReplacer("${HOME}", home, "${USER}", user)
	p = r.Replace(p)
	p = replaceVar(p, "$HOME", home)
	return replaceVar(p, "$USER", user)
}

// replaceVar replaces $NAME where it is not followed by more name
// characters.
func replaceVar(p, v, val string) string {
	var b strings.Builder
	for {
		i := strings.Index(p, v)
		if i < 0 {
			b.WriteString(p)
			return b.String()
		}
		end := i + len(v)
		if end < len(p) && isNameByte(p[end]) {
			b.WriteString(p[:end])
			p = p[end:]
			continue
		}
		b.WriteString(p[:i])
		b.WriteString(val)
		p = p[end:]
	}
}

func isNameByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// absGuestPath makes p absolute against home, as a relative path would be
// taken against the server's working directory (the user's home).
func absGuestPath(p, home string) string {
	if !path.IsAbs(p) {
		p = path.Join(home, p)
	}
	return path.Clean(p)
}

// window is one top-level window the window manager lists.
type window struct {
	ID    string
	Title string
}

// windowListing is windowsScript's output as OSWorld's server reads it for
// window_exists: `wmctrl -l`'s stdout exactly; without wmctrl, xdotool's
// titles one a line (the image then has no ids or host column to match).
func windowListing(out string) string {
	tool, rest, _ := strings.Cut(out, "\n")
	if tool != "xdotool" {
		return rest
	}
	var b strings.Builder
	for _, w := range parseWindows(out) {
		b.WriteString(w.Title)
		b.WriteByte('\n')
	}
	return b.String()
}

// parseWindows reads windowsScript's output: "wmctrl" then `wmctrl -l`
// lines (id, desktop, host, title), or "xdotool" then "id<TAB>title" lines.
func parseWindows(out string) []window {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 {
		return nil
	}
	var ws []window
	switch lines[0] {
	case "wmctrl":
		for _, l := range lines[1:] {
			// wmctrl -l: "0x01e00003  0 host Title with  spaces"; the title
			// keeps its inner spacing.
			rest := l
			var fields []string
			for len(fields) < 3 {
				rest = strings.TrimLeft(rest, " ")
				i := strings.IndexByte(rest, ' ')
				if i < 0 {
					fields = append(fields, rest)
					rest = ""
					break
				}
				fields = append(fields, rest[:i])
				rest = rest[i:]
			}
			if len(fields) < 1 || fields[0] == "" {
				continue
			}
			if len(rest) > 0 {
				rest = rest[1:]
			}
			ws = append(ws, window{ID: fields[0], Title: rest})
		}
	case "xdotool":
		for _, l := range lines[1:] {
			id, title, ok := strings.Cut(l, "\t")
			if ok && id != "" {
				ws = append(ws, window{ID: id, Title: title})
			}
		}
	}
	return ws
}

// matchOpened is the first window whose title contains name or stem, as
// OSWorld's open_file looks for (case-sensitive substring).
func matchOpened(ws []window, name, stem string) (window, bool) {
	for _, w := range ws {
		if strings.Contains(w.Title, name) || strings.Contains(w.Title, stem) {
			return w, true
		}
	}
	return window{}, false
}
