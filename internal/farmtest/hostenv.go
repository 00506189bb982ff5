package farmtest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// PoisonedToken is the API token Main leaves in the process's environment
// and token file: no test server accepts it.
const PoisonedToken = "farmtest-poisoned-host-token"

// Main runs a package's tests (call it from TestMain) with this process's
// deskfarm environment poisoned, as on a host where `make run` left a farm
// running: $DESKFARM_TOKEN and $DESKFARM_TOKEN_FILE hold PoisonedToken and
// $DESKFARM_SERVER names a port where nothing listens. A client or CLI
// that takes its server or token from the process (client.FromEnv,
// cli.OSEnv, which fall back to the host's token file only when these are
// unset) instead of from its test then fails, on every machine, with the
// 401 or the refused connection a developer would otherwise meet only
// after `make run`. A test that means to read the environment sets it with
// t.Setenv.
func Main(m *testing.M) {
	os.Exit(poisoned(m))
}

func poisoned(m *testing.M) int {
	dir, err := os.MkdirTemp("", "farmtest-hostenv-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "farmtest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte(PoisonedToken+"\n"), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "farmtest:", err)
		return 1
	}
	for k, v := range map[string]string{
		"DESKFARM_SERVER":     "http://127.0.0.1:9", // discard: nothing listens
		"DESKFARM_TOKEN":      PoisonedToken,
		"DESKFARM_TOKEN_FILE": file,
	} {
		os.Setenv(k, v)
	}
	return m.Run()
}
