package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/internal/cli"
)

// run runs "deskfarm ARGS..." in-process and returns what it printed.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	env := &cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out,
		Interactive: func(any) bool { return false }, Exit: func(int) {},
		Getenv: func(string) string { return "" }}
	root := newRoot(env, func() {})
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// --help lists every command, with the subcommands the README uses.
func TestHelpListsAllCommands(t *testing.T) {
	out, err := run(t, "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"serve", "image", "vm", "episode", "act", "screenshot", "completion"} {
		if !strings.Contains(out, "\n  "+cmd+" ") {
			t.Errorf("deskfarm --help does not list %s:\n%s", cmd, out)
		}
	}
	subs := map[string][]string{
		"vm":      {"create", "ls", "rm", "reset", "exec", "get", "put"},
		"episode": {"start", "end", "ls", "pools"},
		"image":   {"build", "ls", "prune"},
	}
	for cmd, want := range subs {
		out, err := run(t, cmd, "--help")
		if err != nil {
			t.Fatal(err)
		}
		for _, sub := range want {
			if !strings.Contains(out, "\n  "+sub+" ") {
				t.Errorf("deskfarm %s --help does not list %s:\n%s", cmd, sub, out)
			}
		}
	}
	out, _ = run(t, "serve", "--help")
	for _, flag := range []string{"--listen", "--warm", "--pools", "--pool", "--novnc-dir", "--token", "--accel", "--state-dir"} {
		if !strings.Contains(out, flag+" ") {
			t.Errorf("deskfarm serve --help lacks %s:\n%s", flag, out)
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	if _, err := run(t, "vms"); err == nil || !strings.Contains(err.Error(), `unknown command "vms"`) {
		t.Errorf("deskfarm vms: %v", err)
	}
}

func TestCompletion(t *testing.T) {
	out, err := run(t, "completion", "bash")
	if err != nil || !strings.Contains(out, "__start_deskfarm") {
		t.Errorf("completion bash: %v\n%.200s", err, out)
	}
	// Completing a subcommand name needs no server.
	out, err = run(t, "__complete", "vm", "re")
	if err != nil || !strings.Contains(out, "reset") {
		t.Errorf("complete vm re: %v\n%s", err, out)
	}
	out, err = run(t, "__complete", "image", "build", "")
	if err != nil || !strings.Contains(out, "desktop") {
		t.Errorf("complete image build: %v\n%s", err, out)
	}
}
