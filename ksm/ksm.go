// Package ksm owns the host's kernel same-page merging while a farm runs:
// the settings of ksmd under /sys/kernel/mm/ksm, set when serve starts and
// put back as they were when it stops, and the counters that say what
// merging saves.
//
// QEMU marks guest RAM mergeable (madvise MADV_MERGEABLE, its mem-merge
// option, on by default), so with ksmd running, identical pages of the
// farm's guests (the same kernel, libraries and desktop in every VM of an
// image, and zeroed free pages) are kept once. ksmd only scans memory
// marked mergeable: other processes on the host are untouched. See the
// kernel's Documentation/admin-guide/mm/ksm.rst.
package ksm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultDir is where the kernel shows KSM's settings and counters.
const DefaultDir = "/sys/kernel/mm/ksm"

// ErrUnavailable is returned by Enable when the host does not let deskfarm
// run KSM: no KSM in the kernel, or its settings not writable (not root, a
// read-only /sys in a container).
var ErrUnavailable = errors.New("ksm unavailable on this host")

// Settings are what Enable sets. Zero fields leave the kernel's value.
type Settings struct {
	// Advisor is "scan-time" (the kernel's advisor, since Linux 6.8, picks
	// the pages scanned per wake-up so that a full scan takes
	// AdvisorTargetScanSeconds, within AdvisorMaxCPU) or "none" (a fixed
	// PagesToScan). Empty: "none".
	Advisor string
	// AdvisorMaxCPU caps the advisor's ksmd at this percent of one CPU
	// (advisor_max_cpu; the kernel's default is 70).
	AdvisorMaxCPU int
	// AdvisorTargetScanSeconds is how long the advisor aims a full scan of
	// the mergeable memory to take (advisor_target_scan_time; default 200).
	AdvisorTargetScanSeconds int
	// PagesToScan is the pages ksmd scans per wake-up without the advisor
	// (pages_to_scan; default 100).
	PagesToScan int
	// SleepMillisecs is how long ksmd sleeps between wake-ups
	// (sleep_millisecs; default 20).
	SleepMillisecs int
	// UseZeroPages merges pages of zeros with the kernel's zero page
	// instead of into one KSM page (use_zero_pages): guests zero the pages
	// they free (deskfarm boots them with init_on_free=1), and those are
	// most of an idle guest's identical pages.
	UseZeroPages bool
}

// Farm are the settings serve uses: a fixed 1,000 pages every 20 ms
// (50,000 pages, 195 MiB, a second), the rate the issue tried by hand (4.3
// GiB merged within 2 minutes across 8 QEMUs, ksmd at 0.3-0.4% of a core),
// with zero pages merged into the kernel's zero page. Not the advisor: on
// this host (Linux 6.18) its scan-time mode, with a 60 s target and a 10%
// CPU cap, drove pages_to_scan to its 30,000 maximum with two small guests
// and kept ksmd at 26-38% of a core (bench/density, docs/benchmarks.md,
// "Density").
var Farm = Settings{
	Advisor:        "none",
	PagesToScan:    1000,
	SleepMillisecs: 20,
	UseZeroPages:   true,
}

// Host is a KSM sysfs directory: DefaultDir, or a test's copy.
type Host struct {
	// Dir holds the KSM files. Empty: DefaultDir.
	Dir string
}

func (h Host) dir() string {
	if h.Dir == "" {
		return DefaultDir
	}
	return h.Dir
}

// write is one setting Enable made: the file, the value it found and the
// value it wrote.
type write struct {
	file, old, new string
}

// Enabled is KSM as Enable left it; Restore puts the previous settings
// back.
type Enabled struct {
	host   Host
	writes []write // in the order made
	// pagesToScan is pages_to_scan before Enable switched the advisor
	// (which resets it), for Restore to put back; "" if not switched.
	pagesToScan string
	// Set names each file Enable changed with its new value, for the log.
	Set map[string]string
}

// Enable applies s and starts ksmd (run=1), remembering what it changed.
// Where the host has no KSM or its files are not writable, it returns an
// error wrapping ErrUnavailable and changes nothing.
func (h Host) Enable(s Settings) (*Enabled, error) {
	if err := h.writable(); err != nil {
		return nil, err
	}
	e := &Enabled{host: h, Set: map[string]string{}}
	// The advisor first: switching it resets pages_to_scan, which the
	// kernel refuses to take while the advisor runs.
	plan := []struct {
		file  string
		value string
		set   bool
	}{
		{"advisor_mode", orNone(s.Advisor), true},
		{"advisor_max_cpu", strconv.Itoa(s.AdvisorMaxCPU), s.AdvisorMaxCPU > 0},
		{"advisor_target_scan_time", strconv.Itoa(s.AdvisorTargetScanSeconds), s.AdvisorTargetScanSeconds > 0},
		{"pages_to_scan", strconv.Itoa(s.PagesToScan), s.PagesToScan > 0 && orNone(s.Advisor) == "none"},
		{"sleep_millisecs", strconv.Itoa(s.SleepMillisecs), s.SleepMillisecs > 0},
		{"use_zero_pages", boolValue(s.UseZeroPages), true},
		{"run", "1", true},
	}
	for _, p := range plan {
		if !p.set {
			continue
		}
		if p.file == "advisor_mode" && !h.has(p.file) {
			if p.value == "none" {
				continue // a kernel before the advisor: none is all it does
			}
			return nil, errors.Join(fmt.Errorf("ksm: %s: the kernel has no advisor (Linux 6.8+): %w", p.file, ErrUnavailable), e.Restore())
		}
		old, err := h.read(p.file)
		if err != nil {
			return nil, errors.Join(err, e.Restore())
		}
		if old == p.value {
			continue
		}
		if p.file == "advisor_mode" {
			if e.pagesToScan, err = h.read("pages_to_scan"); err != nil {
				return nil, err
			}
		}
		if err := h.writeFile(p.file, p.value); err != nil {
			return nil, errors.Join(err, e.Restore())
		}
		e.writes = append(e.writes, write{p.file, old, p.value})
		e.Set[p.file] = p.value
	}
	return e, nil
}

// Restore writes back, in reverse order, each setting Enable changed and
// that still holds the value Enable wrote: one changed since by someone
// else (another deskfarm, an operator) is left as it is. run goes back to
// 0 if it was, which stops ksmd but keeps merged pages merged (2 would
// unmerge them and could take the host out of memory). Restore on nil is a
// no-op.
func (e *Enabled) Restore() error {
	if e == nil {
		return nil
	}
	var errs []error
	for i := len(e.writes) - 1; i >= 0; i-- {
		w := e.writes[i]
		cur, err := e.host.read(w.file)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if cur != w.new {
			continue
		}
		if w.file == "pages_to_scan" {
			if mode, err := e.host.read("advisor_mode"); err == nil && mode != "none" {
				continue // restoring the advisor set it already
			}
		}
		if err := e.host.writeFile(w.file, w.old); err != nil {
			errs = append(errs, err)
		}
		if w.file == "advisor_mode" && w.old == "none" && e.pagesToScan != "" {
			// Leaving the advisor reset pages_to_scan to the kernel's
			// default; the host had its own.
			if err := e.host.writeFile("pages_to_scan", e.pagesToScan); err != nil {
				errs = append(errs, err)
			}
		}
	}
	e.writes = nil
	return errors.Join(errs...)
}

// writable checks that Enable could change KSM here.
func (h Host) writable() error {
	fi, err := os.Stat(filepath.Join(h.dir(), "run"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("ksm: no %s (a kernel without CONFIG_KSM): %w", filepath.Join(h.dir(), "run"), ErrUnavailable)
		}
		return fmt.Errorf("ksm: %w: %w", err, ErrUnavailable)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("ksm: %s is not a file: %w", filepath.Join(h.dir(), "run"), ErrUnavailable)
	}
	f, err := os.OpenFile(filepath.Join(h.dir(), "run"), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("ksm: %w: %w", err, ErrUnavailable)
	}
	return f.Close()
}

func (h Host) has(file string) bool {
	_, err := os.Stat(filepath.Join(h.dir(), file))
	return err == nil
}

// read returns a file's value; advisor_mode's "[none] scan-time" form
// becomes the selected word.
func (h Host) read(file string) (string, error) {
	b, err := os.ReadFile(filepath.Join(h.dir(), file))
	if err != nil {
		return "", fmt.Errorf("ksm: read %s: %w", file, err)
	}
	return selected(strings.TrimSpace(string(b))), nil
}

func (h Host) writeFile(file, value string) error {
	// O_TRUNC is harmless on sysfs and keeps a test's plain files right.
	if err := os.WriteFile(filepath.Join(h.dir(), file), []byte(value+"\n"), 0o644); err != nil {
		return fmt.Errorf("ksm: set %s to %s: %w", file, value, err)
	}
	return nil
}

// selected returns the bracketed choice of a sysfs list ("[none]
// scan-time" is "none"), or s itself.
func selected(s string) string {
	i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']')
	if i >= 0 && j > i {
		return s[i+1 : j]
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func boolValue(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// Stats are KSM's counters, in pages (see ksm.rst for each).
type Stats struct {
	Run          int   // run: 0 stopped, 1 running, 2 unmerging
	PagesToScan  int   // pages_to_scan, as the advisor set it
	PagesShared  int64 // pages_shared: KSM pages in use
	PagesSharing int64 // pages_sharing: the sites sharing them (the saving)
	PagesUnique  int64 // pages_unshared: scanned, unique so far
	ZeroPages    int64 // ksm_zero_pages: merged with the zero page (use_zero_pages)
	FullScans    int64 // full_scans: passes over all mergeable memory
	// GeneralProfit is the bytes saved net of KSM's own metadata.
	GeneralProfit int64
}

// SavedBytes is the memory merging saves now: every sharer and zero page
// beyond the KSM pages themselves.
func (s Stats) SavedBytes() int64 {
	return (s.PagesSharing + s.ZeroPages) * int64(os.Getpagesize())
}

// Stats reads the counters.
func (h Host) Stats() (Stats, error) {
	var s Stats
	ints := []struct {
		file string
		dst  *int64
	}{
		{"pages_shared", &s.PagesShared}, {"pages_sharing", &s.PagesSharing},
		{"pages_unshared", &s.PagesUnique}, {"full_scans", &s.FullScans},
	}
	for _, f := range ints {
		v, err := h.readInt(f.file)
		if err != nil {
			return s, err
		}
		*f.dst = v
	}
	// Newer counters: absent on older kernels, left zero.
	if h.has("ksm_zero_pages") {
		s.ZeroPages, _ = h.readInt("ksm_zero_pages")
	}
	if h.has("general_profit") {
		s.GeneralProfit, _ = h.readInt("general_profit")
	}
	run, err := h.readInt("run")
	if err != nil {
		return s, err
	}
	pts, err := h.readInt("pages_to_scan")
	if err != nil {
		return s, err
	}
	s.Run, s.PagesToScan = int(run), int(pts)
	return s, nil
}

func (h Host) readInt(file string) (int64, error) {
	v, err := h.read(file)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ksm: %s: %w", file, err)
	}
	return n, nil
}
