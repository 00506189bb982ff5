package osworld

import (
	"strings"
	"testing"
)

func TestShlexSplit(t *testing.T) {
	// Expected values are what Python 3.11's shlex.split returns for each
	// input (run by hand on the host's python3).
	for in, want := range map[string]string{
		`ls -l ~/a`:               "ls|-l|~/a",
		`echo 'a b' "c d"`:        "echo|a b|c d",
		`a\ b c`:                  "a b|c",
		`"x\"y" 'p\q'`:            `x"y|p\q`,
		`"a\qb"`:                  `a\qb`,
		`  spaced   out  `:        "spaced|out",
		`python -c "print('hi')"`: "python|-c|print('hi')",
		`x""y`:                    "xy",
		`''`:                      "",
	} {
		got, err := shlexSplit(in)
		if err != nil || strings.Join(got, "|") != want {
			t.Errorf("shlexSplit(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{`"open`, `'open`, `trailing\`} {
		if _, err := shlexSplit(bad); err == nil {
			t.Errorf("shlexSplit(%q): no error", bad)
		}
	}
}

func TestExpandPath(t *testing.T) {
	for in, want := range map[string]string{
		"~":               "/home/user",
		"~/Desktop/a.txt": "/home/user/Desktop/a.txt",
		"$HOME/x":         "/home/user/x",
		"${HOME}/x/$USER": "/home/user/x/user",
		"$HOMEDIR/x":      "$HOMEDIR/x",
		"/tmp/~/a":        "/tmp/~/a",
	} {
		if got := expandPath(in, "user", "/home/user"); got != want {
			t.Errorf("expandPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseWindows(t *testing.T) {
	// Hand-written in the formats of wmctrl -l (id, desktop, host, title)
	// and of windowsScript's xdotool branch.
	ws := parseWindows("wmctrl\n0x01a00003 -1 deskfarm pcmanfm\n0x02400006  0 deskfarm  report.docx - LibreOffice Writer\n0x02600001  0 N/A \n")
	if len(ws) != 3 || ws[1].ID != "0x02400006" || ws[1].Title != " report.docx - LibreOffice Writer" || ws[2].Title != "" {
		t.Errorf("wmctrl: %q", ws)
	}
	if w, ok := matchOpened(ws, "report.docx", "report"); !ok || w.ID != "0x02400006" {
		t.Errorf("match %v %v", w, ok)
	}
	ws = parseWindows("xdotool\n4194310\tTerminal - user@deskfarm: ~\n")
	if len(ws) != 1 || ws[0].ID != "4194310" || ws[0].Title != "Terminal - user@deskfarm: ~" {
		t.Errorf("xdotool: %q", ws)
	}
	// window_exists reads wmctrl -l's stdout as printed, xdotool's titles.
	if got := windowListing("wmctrl\n0x01a00003 -1 deskfarm pcmanfm\n"); got != "0x01a00003 -1 deskfarm pcmanfm\n" {
		t.Errorf("wmctrl listing %q", got)
	}
	if got := windowListing("xdotool\n4194310\tTerminal\n4194311\tmousepad\n"); got != "Terminal\nmousepad\n" {
		t.Errorf("xdotool listing %q", got)
	}
}

// TestParseCommandShellTruthiness: OSWorld's server hands "shell" to
// subprocess as it came, so a task's "shell": "true" (multi_apps/2373b66a
// and four more) runs under sh; deskfarm answered 500 to it before.
func TestParseCommandShellTruthiness(t *testing.T) {
	for shell, want := range map[string]bool{
		`"true"`: true, `"false"`: true, `""`: false, `1`: true, `0`: false, `null`: false, `true`: true, `false`: false,
	} {
		c, err := parseCommand([]byte(`{"command": "echo a && echo b", "shell": `+shell+`}`), "/home/user")
		if err != nil {
			t.Errorf("shell %s: %v", shell, err)
			continue
		}
		if got := c.Argv[0] == "/bin/sh"; got != want {
			t.Errorf("shell %s: argv %q, under sh %v; want %v", shell, c.Argv, got, want)
		}
	}
}
