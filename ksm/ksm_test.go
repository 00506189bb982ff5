package ksm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeSysfs writes the KSM files of a Linux 6.18 host with KSM off, as read
// on this project's host (cat /sys/kernel/mm/ksm/*, 2026-12-01).
func fakeSysfs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"run": "0", "pages_to_scan": "100", "sleep_millisecs": "20", "use_zero_pages": "0",
		"advisor_mode": "[none] scan-time", "advisor_max_cpu": "70", "advisor_target_scan_time": "200",
		"advisor_min_pages_to_scan": "500", "advisor_max_pages_to_scan": "30000",
		"pages_shared": "0", "pages_sharing": "0", "pages_unshared": "0", "full_scans": "0",
		"ksm_zero_pages": "0", "general_profit": "0",
	}
	for f, v := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func readFile(t *testing.T, dir, f string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, f))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestEnableAndRestore(t *testing.T) {
	dir := fakeSysfs(t)
	os.WriteFile(filepath.Join(dir, "pages_to_scan"), []byte("1000\n"), 0o644)
	e, err := Host{Dir: dir}.Enable(Settings{Advisor: "scan-time", AdvisorMaxCPU: 10, AdvisorTargetScanSeconds: 60, SleepMillisecs: 20, UseZeroPages: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"run": "1", "advisor_mode": "scan-time", "advisor_max_cpu": "10",
		"advisor_target_scan_time": "60", "use_zero_pages": "1", "sleep_millisecs": "20"}
	for f, v := range want {
		if got := readFile(t, dir, f); got != v {
			t.Errorf("after Enable %s = %q, want %q", f, got, v)
		}
	}
	// What was already so is not reported as set.
	if _, ok := e.Set["sleep_millisecs"]; ok || e.Set["run"] != "1" || len(e.Set) != 5 {
		t.Errorf("Set = %v, want the 5 changed files", e.Set)
	}
	if err := e.Restore(); err != nil {
		t.Fatal(err)
	}
	back := map[string]string{"run": "0", "advisor_mode": "none", "advisor_max_cpu": "70",
		"advisor_target_scan_time": "200", "use_zero_pages": "0", "pages_to_scan": "1000"}
	for f, v := range back {
		if got := readFile(t, dir, f); got != v {
			t.Errorf("after Restore %s = %q, want %q", f, got, v)
		}
	}
}

// A setting someone else changed while the farm ran is theirs: Restore
// leaves it.
func TestRestoreKeepsOthersChanges(t *testing.T) {
	dir := fakeSysfs(t)
	e, err := Host{Dir: dir}.Enable(Settings{PagesToScan: 1000, UseZeroPages: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, dir, "pages_to_scan"); got != "1000" {
		t.Fatalf("pages_to_scan = %q, want 1000", got)
	}
	os.WriteFile(filepath.Join(dir, "pages_to_scan"), []byte("5000\n"), 0o644)
	if err := e.Restore(); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, dir, "pages_to_scan"); got != "5000" {
		t.Errorf("pages_to_scan = %q after Restore, want the operator's 5000", got)
	}
	if got := readFile(t, dir, "run"); got != "0" {
		t.Errorf("run = %q after Restore, want 0", got)
	}
	if err := (*Enabled)(nil).Restore(); err != nil {
		t.Fatal(err)
	}
}

func TestUnavailable(t *testing.T) {
	if _, err := (Host{Dir: filepath.Join(t.TempDir(), "none")}).Enable(Farm); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("no ksm dir: %v, want ErrUnavailable", err)
	}
	// A kernel before the advisor: asking for it changes nothing.
	dir := fakeSysfs(t)
	os.Remove(filepath.Join(dir, "advisor_mode"))
	if _, err := (Host{Dir: dir}).Enable(Settings{Advisor: "scan-time"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("no advisor: %v, want ErrUnavailable", err)
	}
	if got := readFile(t, dir, "run"); got != "0" {
		t.Fatalf("run = %q after a refused Enable", got)
	}
	// Without the advisor asked for, it runs on a fixed rate.
	if _, err := (Host{Dir: dir}).Enable(Settings{PagesToScan: 1000}); err != nil {
		t.Fatalf("no advisor, fixed rate: %v", err)
	}
	if os.Geteuid() != 0 {
		ro := fakeSysfs(t)
		os.Chmod(filepath.Join(ro, "run"), 0o444)
		if _, err := (Host{Dir: ro}).Enable(Farm); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("read-only run: %v, want ErrUnavailable", err)
		}
	}
}

// The farm's settings: a fixed rate, the advisor off.
func TestEnableFarm(t *testing.T) {
	dir := fakeSysfs(t)
	e, err := Host{Dir: dir}.Enable(Farm)
	if err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{"run": "1", "advisor_mode": "[none] scan-time", "pages_to_scan": "1000", "use_zero_pages": "1"} {
		if got := readFile(t, dir, f); got != v {
			t.Errorf("%s = %q, want %q", f, got, v)
		}
	}
	if err := e.Restore(); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, dir, "pages_to_scan"); got != "100" {
		t.Errorf("pages_to_scan = %q after Restore, want 100", got)
	}
}

func TestStats(t *testing.T) {
	dir := fakeSysfs(t)
	os.WriteFile(filepath.Join(dir, "pages_sharing"), []byte("1000\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "ksm_zero_pages"), []byte("24\n"), 0o644)
	s, err := Host{Dir: dir}.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.PagesSharing != 1000 || s.ZeroPages != 24 || s.PagesToScan != 100 || s.Run != 0 {
		t.Fatalf("stats %+v", s)
	}
	if got, want := s.SavedBytes(), int64(1024*os.Getpagesize()); got != want {
		t.Fatalf("saved %d, want %d", got, want)
	}
}
