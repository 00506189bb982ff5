package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/client"
	"github.com/deskfarm/deskfarm/internal/farmtest"
	"github.com/deskfarm/deskfarm/web"
	"github.com/spf13/cobra"
)

// After `make run` the host keeps a farm's token in
// client.DefaultTokenFile, and `make test` used to send it to the tests'
// own servers (401: "carries an API token but this server has none"). A
// CLI reads a default token file only when its Env names one, as OSEnv
// does; a test's Env names none.
func TestHostTokenStaysOut(t *testing.T) {
	c := newCLI(t, web.Options{})
	delete(c.env, client.EnvTokenFile) // as TestAgentRun and TestMCPStdio had it
	host := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(host, []byte("host-farm-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// An Env whose default is the host's file sends that file's token.
	c.tokenFile = host
	if res := c.run(nil, "ls"); res.err == nil || !strings.Contains(res.err.Error(), "has none") {
		t.Fatalf("deskfarm ls with the host's token file: %v; want the server's 401", res.err)
	}
	// A test's Env sends none.
	c.tokenFile = ""
	c.mustRun(nil, "ls")
	if OSEnv().TokenFile != client.DefaultTokenFile {
		t.Errorf("OSEnv().TokenFile = %q, want %s", OSEnv().TokenFile, client.DefaultTokenFile)
	}
}

// TestMain (farmtest.Main) poisons this process's deskfarm environment, so
// that a test whose CLI reads the host's instead of its own fails, on every
// machine and not only after `make run`. Here the real process's Env, aimed
// at a test server, does fail.
func TestHostEnvPoisoned(t *testing.T) {
	srv, _ := farmtest.Serve(t, web.Options{})
	var out bytes.Buffer
	env := OSEnv()
	env.Stdout, env.Stderr = &out, &out
	root := &cobra.Command{Use: "deskfarm", SilenceErrors: true, SilenceUsage: true}
	AddCommands(root, env)
	root.SetArgs([]string{"vm", "ls", "--server", srv.URL})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "has none") {
		t.Fatalf("deskfarm vm ls with the process's environment: %v; want the server's 401 for %s", err, farmtest.PoisonedToken)
	}
}
