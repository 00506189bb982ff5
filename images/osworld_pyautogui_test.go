package images

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestOSWorldPyautogui runs the Python tests of the osworld image's
// pyautogui module (recipes/osworld/pyautogui.py) against a real X server:
// testdata/osworld/test_pyautogui.py starts its own Xvfb and checks the
// events a window receives, the pointer position and the keymap. It needs
// Debian's python3 with python3-xlib and python3-pil, and xvfb
// (scripts/setup-host.sh installs them); without them it skips, unless CI
// or DESKFARM_REQUIRE_VM is set, where a skip would hide a broken image.
func TestOSWorldPyautogui(t *testing.T) {
	python, why := pyautoguiTestPython()
	if why == "" {
		if _, err := exec.LookPath("Xvfb"); err != nil {
			why = "no Xvfb (Debian package xvfb)"
		}
	}
	if why != "" {
		if os.Getenv("CI") != "" || os.Getenv("DESKFARM_REQUIRE_VM") != "" {
			t.Fatalf("pyautogui tests cannot run: %s (CI/DESKFARM_REQUIRE_VM set; run scripts/setup-host.sh)", why)
		}
		t.Skipf("pyautogui tests skipped: %s (install xvfb python3-xlib python3-pil)", why)
	}
	cmd := exec.CommandContext(t.Context(), python, "-m", "unittest", "-v", "test_pyautogui")
	cmd.Dir = filepath.Join("testdata", "osworld")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s -m unittest test_pyautogui: %v\n%s", python, err, out)
	}
	t.Logf("%s", out)
}

// pyautoguiTestPython returns a python3 that imports Xlib and PIL, Debian's
// /usr/bin/python3 first (another python3 on PATH, e.g. pyenv's, lacks the
// Debian modules), or why there is none.
func pyautoguiTestPython() (string, string) {
	var candidates []string
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		candidates = append(candidates, "/usr/bin/python3")
	}
	if p, err := exec.LookPath("python3"); err == nil && p != "/usr/bin/python3" {
		candidates = append(candidates, p)
	}
	if len(candidates) == 0 {
		return "", "no python3"
	}
	for _, p := range candidates {
		if exec.Command(p, "-c", "import Xlib, PIL").Run() == nil {
			return p, ""
		}
	}
	return "", "no python3 with the Xlib and PIL modules (Debian packages python3-xlib, python3-pil)"
}
