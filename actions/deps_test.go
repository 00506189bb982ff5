package actions

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// goList runs `go list` in the module root with args.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := exec.LookPath(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			t.Fatalf("no go command to list dependencies with: %v", err)
		}
	}
	cmd := exec.Command(gobin, append([]string{"list"}, args...)...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list %v: %v\n%s", args, err, msg)
	}
	return strings.Fields(string(out))
}

// TestModelLinksOnlyStdlib: the model links nothing outside the standard
// library and this module, and nothing that only plays input
// (the desk, Cua, OSWorld) links an AI SDK; only the vocabularies do
// (issue 14, item 8).
func TestModelLinksOnlyStdlib(t *testing.T) {
	const self = "github.com/deskfarm/deskfarm/"
	for _, dep := range goList(t, "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./actions") {
		if !strings.HasPrefix(dep, self) {
			t.Errorf("actions links %s", dep)
		}
	}
	sdks := []string{"github.com/anthropics/", "github.com/openai/"}
	for _, pkg := range []string{"./actions", "./player", "./desk", "./cua", "./osworld"} {
		for _, dep := range goList(t, "-deps", pkg) {
			for _, sdk := range sdks {
				if strings.HasPrefix(dep, sdk) {
					t.Errorf("%s links the AI SDK package %s", pkg, dep)
				}
			}
		}
	}
	// The check can fail: the vocabularies do link the SDKs.
	var linked bool
	for _, dep := range goList(t, "-deps", "./vocab") {
		linked = linked || strings.HasPrefix(dep, sdks[0])
	}
	if !linked {
		t.Error("vocab links no anthropic-sdk-go package; is the check still looking at the right names?")
	}
}
