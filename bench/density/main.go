// Command density measures what an idle desktop costs the host, in one run
// on one host, before (KSM off, guests without the balloon: deskfarm
// before issue 17) and after (KSM with ksm.Farm's settings, the balloon's
// free page reporting), then creates desktops on the "after" farm until
// admission (vmm.Config.MemoryOvercommit and its MemAvailable floor) or
// -max stops it. For each side: the host's MemAvailable drop per desktop,
// each QEMU's RSS and PSS, ksmd's CPU, reset/screenshot/click timings on
// one of the desktops, and what a desktop with a browser open on a page
// costs on top. It prints Markdown tables.
//
// It needs the host to itself: the "before" side needs KSM off, and other
// VMs or builds move MemAvailable.
//
//	go run ./bench/density [-image desktop] [-n 6] [-max 50] [-state DIR]
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/bench/internal/farm"
	"github.com/deskfarm/deskfarm/bench/internal/stats"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/ksm"
	"github.com/deskfarm/deskfarm/player"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vocab"
)

// reserveMiB is the host memory admission keeps (vmm.DefaultMemoryReserveMiB),
// the floor of the extrapolation too.
const reserveMiB = vmm.DefaultMemoryReserveMiB

type options struct {
	image        string
	mem, vcpus   int
	n, max       int
	rounds       int
	state        string
	overcommit   float64
	ksmWait      time.Duration
	activeWait   time.Duration
	fillDeadline time.Duration
	idleWindow   time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.image, "image", "desktop", "image of the desktops")
	flag.IntVar(&o.mem, "memory", 1024, "guest memory in MiB")
	flag.IntVar(&o.vcpus, "vcpus", 2, "guest vCPUs")
	flag.IntVar(&o.n, "n", 6, "idle desktops on each side")
	flag.IntVar(&o.max, "max", 50, "desktops to try on the after side in all")
	flag.IntVar(&o.rounds, "rounds", 10, "resets, screenshots and clicks timed on each side")
	flag.StringVar(&o.state, "state", "/var/lib/deskfarm-bench-density", "the farm's state dir")
	flag.Float64Var(&o.overcommit, "overcommit", 3, "vmm.Config.MemoryOvercommit of the after side")
	flag.DurationVar(&o.ksmWait, "ksm-wait", 4*time.Minute, "longest wait for KSM to settle after the creates")
	flag.DurationVar(&o.activeWait, "active-wait", 90*time.Second, "how long the browser runs before its desktop is measured")
	flag.DurationVar(&o.idleWindow, "idle-window", 30*time.Second, "the idle desktops' settle without KSM, and the window of ksmd's idle CPU")
	flag.DurationVar(&o.fillDeadline, "fill-deadline", 10*time.Minute, "longest time spent filling the host")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench/density:", err)
		os.Exit(1)
	}
}

// side is one side's numbers.
type side struct {
	name        string
	creates     []time.Duration
	started     map[string]int // vmm.VM.Start -> count
	availDrop   float64        // MiB of MemAvailable per desktop
	avail0      int            // MiB available before the first desktop
	rss, pss    []float64      // MiB per QEMU, idle
	tcg         []float64      // MiB of that RSS in TCG's code buffer
	settle      time.Duration  // from the last create to the measure
	ksmCPU      float64        // ksmd, % of one core, while settling
	ksmIdleCPU  float64        // ksmd, % of one core, after settling
	ksmSaved    int64          // bytes
	reset, shot []time.Duration
	click       []time.Duration
	active      bool    // the browser was measured
	activeRSS   float64 // MiB more in the browsing desktop's QEMU
	activePSS   float64
	activeAvail float64 // MiB less MemAvailable
	// usedRSS and usedPSS are the browsing desktop's, MiB, once reset
	// and settled: a desktop back in the pool after an episode.
	usedRSS, usedPSS float64
}

func run(o options) error {
	ctx := context.Background()
	st, err := ksm.Host{}.Stats()
	if err != nil {
		return err
	}
	if st.Run != 0 || st.PagesShared > 0 {
		return fmt.Errorf("KSM is on or holds merged pages on this host (run=%d, pages_shared=%d): the before side needs it off and unmerged (echo 2 > %s/run)",
			st.Run, st.PagesShared, ksm.DefaultDir)
	}
	before, err := measureSide(ctx, o, "before: KSM off, no balloon", vmm.Config{StateDir: o.state, NoBalloon: true}, false)
	if err != nil {
		return err
	}
	printSides(o, before)

	e, err := ksm.Host{}.Enable(ksm.Farm)
	if err != nil {
		return err
	}
	defer func() {
		if err := e.Restore(); err != nil {
			fmt.Fprintln(os.Stderr, "restore ksm:", err)
		}
	}()
	fmt.Fprintf(os.Stderr, "ksm enabled: %v\n", e.Set)
	after, err := measureSide(ctx, o, "after: KSM (ksm.Farm), balloon with free page reporting", vmm.Config{StateDir: o.state, MemoryOvercommit: o.overcommit}, true)
	if err != nil {
		return err
	}
	printSides(o, before, after)
	return nil
}

func measureSide(ctx context.Context, o options, name string, cfg vmm.Config, withKSM bool) (side, error) {
	s := side{name: name, started: map[string]int{}}
	m, log, err := farm.OpenConfig(ctx, cfg)
	if err != nil {
		return s, err
	}
	defer m.Close()
	desks := desk.NewPool(m, log)
	defer desks.Close()
	var vms []vmm.VM
	defer func() { destroyAll(m, vms) }()

	s.avail0 = availMiB(3)
	fmt.Fprintf(os.Stderr, "%s: %d MiB available; creating %d desktops\n", name, s.avail0, o.n)
	if used, limit := m.Capacity(); used == 0 {
		fmt.Fprintf(os.Stderr, "  admission: guest memory limit %d MiB\n", limit)
	}
	opts := vmm.CreateOptions{Image: o.image, MemoryMiB: o.mem, VCPUs: o.vcpus}
	for i := 0; i < o.n; i++ {
		t0 := time.Now()
		vm, err := m.Create(ctx, opts)
		if err != nil {
			return s, fmt.Errorf("%s: create %d: %w", name, i, err)
		}
		s.creates = append(s.creates, time.Since(t0))
		s.started[string(vm.Start)]++
		vms = append(vms, vm)
		fmt.Fprintf(os.Stderr, "  desktop %d (%s) in %s by %s\n", i+1, vm.ID, stats.MS(s.creates[i]), vm.Start)
	}
	t0 := time.Now()
	cpu0 := ksmdCPU()
	if withKSM {
		waitKSM(o.ksmWait)
	} else {
		time.Sleep(o.idleWindow)
	}
	s.settle = time.Since(t0)
	s.ksmCPU = cpuPct(ksmdCPU()-cpu0, s.settle)
	cpu1, t1 := ksmdCPU(), time.Now()
	time.Sleep(o.idleWindow)
	s.ksmIdleCPU = cpuPct(ksmdCPU()-cpu1, time.Since(t1))
	s.availDrop = float64(s.avail0-availMiB(3)) / float64(len(vms))
	for _, vm := range vms {
		rss, pss := qemuMem(vm.Domain)
		s.rss, s.pss = append(s.rss, rss), append(s.pss, pss)
		s.tcg = append(s.tcg, tcgCodeMiB(vm.Domain))
	}
	if st, err := (ksm.Host{}).Stats(); err == nil {
		s.ksmSaved = st.SavedBytes()
	}
	fmt.Fprintf(os.Stderr, "%s: %.0f MiB MemAvailable per desktop, QEMU RSS %.0f PSS %.0f MiB (mean) after %s; ksmd %.1f%% settling, %.1f%% idle\n",
		name, s.availDrop, mean(s.rss), mean(s.pss), s.settle.Round(time.Second), s.ksmCPU, s.ksmIdleCPU)

	if s.reset, s.shot, s.click, err = timeCalls(ctx, m, desks, vms[0], o.rounds); err != nil {
		return s, fmt.Errorf("%s: %w", name, err)
	}

	// A browser open on a page, in a desktop that was not reset.
	if len(vms) > 1 {
		if err := activeCost(ctx, m, vms[1], o.activeWait, &s); err != nil {
			fmt.Fprintf(os.Stderr, "%s: active desktop not measured: %v\n", name, err)
		} else if _, err := m.Reset(ctx, vms[1].ID); err != nil {
			return s, err
		} else {
			time.Sleep(o.idleWindow)
			s.usedRSS, s.usedPSS = qemuMem(vms[1].Domain)
			fmt.Fprintf(os.Stderr, "  the browsing desktop reset, %s later: QEMU RSS %.0f, PSS %.0f MiB\n", o.idleWindow, s.usedRSS, s.usedPSS)
		}
	}
	if withKSM {
		vms, err = fill(ctx, m, desks, o, opts, vms)
		if err != nil {
			return s, err
		}
	}
	return s, nil
}

// timeCalls times reset (as the reset route answers: once the desk has
// applied it), a screenshot through the desk, and a click settled on the
// desktop's background.
func timeCalls(ctx context.Context, m *vmm.Manager, desks *desk.Pool, vm vmm.VM, n int) (reset, shot, click []time.Duration, err error) {
	d, err := desks.Get(ctx, vm.ID)
	if err != nil {
		return nil, nil, nil, err
	}
	shotActs, err := vocab.TranslateClaude(vocab.Computer20251124, []byte(`{"action":"screenshot"}`))
	if err != nil {
		return nil, nil, nil, err
	}
	clickActs, err := vocab.TranslateClaude(vocab.Computer20251124, []byte(fmt.Sprintf(`{"action":"left_click","coordinate":[%d,%d]}`, vm.Width/2, vm.Height/3)))
	if err != nil {
		return nil, nil, nil, err
	}
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if _, err := m.Reset(ctx, vm.ID); err != nil {
			return nil, nil, nil, err
		}
		if err := desks.WaitReset(ctx, vm.ID, t0); err != nil {
			return nil, nil, nil, err
		}
		reset = append(reset, time.Since(t0))
		t0 = time.Now()
		if _, err := d.Run(ctx, player.ScreenshotSize{}, shotActs, player.RunOptions{NoSettle: true, Screenshot: player.ScreenshotAlways}); err != nil {
			return nil, nil, nil, fmt.Errorf("screenshot: %w", err)
		}
		shot = append(shot, time.Since(t0))
		t0 = time.Now()
		if _, err := d.Run(ctx, player.ScreenshotSize{}, clickActs, player.RunOptions{Screenshot: player.ScreenshotAlways}); err != nil {
			return nil, nil, nil, fmt.Errorf("click: %w", err)
		}
		click = append(click, time.Since(t0))
	}
	return reset, shot, click, nil
}

// activeCost opens the desktop image's browser on a page and measures what
// that desktop costs more once it has run for wait.
func activeCost(ctx context.Context, m *vmm.Manager, vm vmm.VM, wait time.Duration, s *side) error {
	page := `<!doctype html><title>density</title><h1>deskfarm density</h1>` + strings.Repeat(`<p>An active desktop: a browser open on a page, scrolled, with text and a table.</p><table><tr><td>a</td><td>b</td></tr></table>`, 200)
	if err := m.WriteFile(ctx, vm.ID, "/tmp/density.html", []byte(page), 0o644); err != nil {
		return err
	}
	rss0, pss0 := qemuMem(vm.Domain)
	avail0 := availMiB(3)
	cmd := "setsid firefox-esr --new-window file:///tmp/density.html >/dev/null 2>&1 < /dev/null &"
	argv := []string{"runuser", "-u", "user", "--", "env", "DISPLAY=:0", "HOME=/home/user", "XAUTHORITY=/home/user/.Xauthority", "sh", "-c", cmd}
	if _, err := m.Exec(ctx, vm.ID, vmm.ExecRequest{Argv: argv, Timeout: 30 * time.Second}); err != nil {
		return err
	}
	time.Sleep(wait)
	res, err := m.Exec(ctx, vm.ID, vmm.ExecRequest{Argv: []string{"pgrep", "-c", "firefox"}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) == "0" {
		return fmt.Errorf("no firefox process after %s (%v)", wait, err)
	}
	rss1, pss1 := qemuMem(vm.Domain)
	s.active, s.activeRSS, s.activePSS, s.activeAvail = true, rss1-rss0, pss1-pss0, float64(avail0-availMiB(3))
	fmt.Fprintf(os.Stderr, "  browser open %s: QEMU RSS +%.0f, PSS +%.0f, MemAvailable -%.0f MiB\n", wait, s.activeRSS, s.activePSS, s.activeAvail)
	return nil
}

// fill creates desktops until there are o.max, admission refuses one three
// times with a minute between (KSM merging the newest meanwhile), or the
// deadline passes; it prints each step and a summary, and returns the VMs.
func fill(ctx context.Context, m *vmm.Manager, desks *desk.Pool, o options, opts vmm.CreateOptions, vms []vmm.VM) ([]vmm.VM, error) {
	deadline := time.Now().Add(o.fillDeadline)
	refusals := 0
	var stop string
	var creates []time.Duration
	fmt.Println("\n| desktops | create | MemAvailable | KSM saves | note |\n|---|---|---|---|---|")
	for len(vms) < o.max {
		if time.Now().After(deadline) {
			stop = fmt.Sprintf("the %s deadline", o.fillDeadline)
			break
		}
		t0 := time.Now()
		vm, err := m.Create(ctx, opts)
		if errors.Is(err, vmm.ErrInsufficientResources) {
			refusals++
			fmt.Printf("| %d | refused | %d MiB | %s | %v |\n", len(vms), availMiB(1), ksmSaved(), err)
			if refusals == 3 {
				stop = "admission (three refusals a minute apart)"
				break
			}
			time.Sleep(time.Minute)
			continue
		}
		if err != nil {
			return vms, fmt.Errorf("fill: create %d: %w", len(vms)+1, err)
		}
		creates = append(creates, time.Since(t0))
		vms = append(vms, vm)
		fmt.Printf("| %d | %s | %d MiB | %s | |\n", len(vms), stats.MS(creates[len(creates)-1]), availMiB(1), ksmSaved())
	}
	if stop == "" {
		stop = fmt.Sprintf("-max %d", o.max)
	}
	time.Sleep(30 * time.Second)
	var rss, pss []float64
	for _, vm := range vms {
		r, p := qemuMem(vm.Domain)
		rss, pss = append(rss, r), append(pss, p)
	}
	avail := availMiB(3)
	fmt.Printf("\n%d desktops up (stopped by %s); MemAvailable %d MiB; QEMU RSS %.0f, PSS %.0f MiB per desktop (mean); KSM saves %s; create p50 %s p95 %s\n",
		len(vms), stop, avail, mean(rss), mean(pss), ksmSaved(), stats.MS(stats.Pct(creates, 50)), stats.MS(stats.Pct(creates, 95)))
	// The calls at full density: the CPU, not memory, is what they share.
	reset, shot, click, err := timeCalls(ctx, m, desks, vms[len(vms)-1], 5)
	if err != nil {
		return vms, fmt.Errorf("calls at full density: %w", err)
	}
	fmt.Printf("at %d desktops: reset p50 %s, screenshot p50 %s, click settled p50 %s (5 each)\n", len(vms),
		stats.MS(stats.Pct(reset, 50)), stats.MS(stats.Pct(shot, 50)), stats.MS(stats.Pct(click, 50)))
	return vms, nil
}

func printSides(o options, sides ...side) {
	fmt.Printf("\n| measure (%s image, %d MiB, %d vCPU, %d desktops) |", o.image, o.mem, o.vcpus, o.n)
	for _, s := range sides {
		fmt.Printf(" %s |", s.name)
	}
	fmt.Printf("\n|---|%s\n", strings.Repeat("---|", len(sides)))
	row := func(label string, f func(side) string) {
		fmt.Printf("| %s |", label)
		for _, s := range sides {
			fmt.Printf(" %s |", f(s))
		}
		fmt.Println()
	}
	row("started from", func(s side) string { return fmt.Sprint(s.started) })
	row("create p50 / p95", func(s side) string {
		return stats.MS(stats.Pct(s.creates, 50)) + " / " + stats.MS(stats.Pct(s.creates, 95))
	})
	row("host MemAvailable drop per desktop", func(s side) string { return fmt.Sprintf("%.0f MiB", s.availDrop) })
	row("QEMU RSS per desktop (mean, min-max)", func(s side) string {
		return fmt.Sprintf("%.0f MiB (%.0f-%.0f)", mean(s.rss), minOf(s.rss), maxOf(s.rss))
	})
	row("QEMU PSS per desktop (mean)", func(s side) string { return fmt.Sprintf("%.0f MiB", mean(s.pss)) })
	row("of the RSS, TCG's translated code (rwx mappings, mean)", func(s side) string { return fmt.Sprintf("%.0f MiB", mean(s.tcg)) })
	row("desktops per host, extrapolated ((MemAvailable - 2 GiB) / drop)", func(s side) string {
		if s.availDrop <= 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.0f", float64(s.avail0-reserveMiB)/s.availDrop)
	})
	row("the browsing desktop, reset (back in the pool), after the idle window: QEMU RSS / PSS", func(s side) string {
		if !s.active {
			return "not measured"
		}
		return fmt.Sprintf("%.0f / %.0f MiB", s.usedRSS, s.usedPSS)
	})
	row("desktops per host, extrapolated by PSS ((MemAvailable - 2 GiB) / PSS)", func(s side) string {
		if mean(s.pss) <= 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.0f", float64(s.avail0-reserveMiB)/mean(s.pss))
	})
	row("settled after", func(s side) string { return s.settle.Round(time.Second).String() })
	row("KSM saves", func(s side) string { return fmt.Sprintf("%.0f MiB", float64(s.ksmSaved)/(1<<20)) })
	row("ksmd CPU settling / idle", func(s side) string { return fmt.Sprintf("%.1f%% / %.1f%% of a core", s.ksmCPU, s.ksmIdleCPU) })
	row(fmt.Sprintf("reset, applied to the desk, p50 / p95 (%d)", o.rounds), func(s side) string {
		return stats.MS(stats.Pct(s.reset, 50)) + " / " + stats.MS(stats.Pct(s.reset, 95))
	})
	row("screenshot through the desk p50 / p95", func(s side) string {
		return stats.MS(stats.Pct(s.shot, 50)) + " / " + stats.MS(stats.Pct(s.shot, 95))
	})
	row("click, settled, with screenshot p50 / p95", func(s side) string {
		return stats.MS(stats.Pct(s.click, 50)) + " / " + stats.MS(stats.Pct(s.click, 95))
	})
	row(fmt.Sprintf("browser open on a page (%s): QEMU RSS / PSS / MemAvailable, more", o.activeWait), func(s side) string {
		if !s.active {
			return "not measured"
		}
		return fmt.Sprintf("+%.0f / +%.0f / %.0f MiB", s.activeRSS, s.activePSS, s.activeAvail)
	})
}

// waitKSM waits until ksmd has made two full scans and its savings moved
// less than 2% over 15 s, or max.
func waitKSM(max time.Duration) {
	deadline := time.Now().Add(max)
	st0, _ := ksm.Host{}.Stats()
	prev := st0.SavedBytes()
	for time.Now().Before(deadline) {
		time.Sleep(15 * time.Second)
		st, err := ksm.Host{}.Stats()
		if err != nil {
			return
		}
		saved := st.SavedBytes()
		fmt.Fprintf(os.Stderr, "  ksm: %d full scans, saves %.0f MiB, pages_to_scan %d\n", st.FullScans-st0.FullScans, float64(saved)/(1<<20), st.PagesToScan)
		if st.FullScans-st0.FullScans >= 2 && saved > 0 && abs(saved-prev) < saved/50 {
			return
		}
		prev = saved
	}
}

func ksmSaved() string {
	st, err := ksm.Host{}.Stats()
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%.0f MiB", float64(st.SavedBytes())/(1<<20))
}

// destroyAll destroys vms, four at a time.
func destroyAll(m *vmm.Manager, vms []vmm.VM) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, vm := range vms {
		wg.Add(1)
		sem <- struct{}{}
		go func(id string) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := m.Destroy(context.Background(), id); err != nil {
				fmt.Fprintf(os.Stderr, "destroy %s: %v\n", id, err)
			}
		}(vm.ID)
	}
	wg.Wait()
}

// availMiB is the host's MemAvailable, the median of n reads a second
// apart.
func availMiB(n int) int {
	var v []int
	for i := 0; i < n; i++ {
		if i > 0 {
			time.Sleep(time.Second)
		}
		v = append(v, meminfo("MemAvailable:"))
	}
	sort.Ints(v)
	return v[len(v)/2]
}

func meminfo(key string) int {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key); ok {
			kib, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kib / 1024
		}
	}
	return 0
}

// qemuMem is a domain's QEMU RSS and PSS in MiB (/proc/PID/smaps_rollup).
func qemuMem(domain string) (rss, pss float64) {
	b, err := os.ReadFile(filepath.Join(vmm.DefaultQEMUPidDir, domain+".pid"))
	if err != nil {
		return 0, 0
	}
	f, err := os.Open(filepath.Join("/proc", strings.TrimSpace(string(b)), "smaps_rollup"))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			continue
		}
		kib, _ := strconv.ParseFloat(fields[1], 64)
		switch fields[0] {
		case "Rss:":
			rss = kib / 1024
		case "Pss:":
			pss = kib / 1024
		}
	}
	return rss, pss
}

// tcgCodeMiB is the resident part of a QEMU's rwx mappings: TCG's buffer
// of translated code (QEMU 7.2 maps it read-write-execute), not guest RAM.
func tcgCodeMiB(domain string) float64 {
	b, err := os.ReadFile(filepath.Join(vmm.DefaultQEMUPidDir, domain+".pid"))
	if err != nil {
		return 0
	}
	f, err := os.Open(filepath.Join("/proc", strings.TrimSpace(string(b)), "smaps"))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	rwx, kib := false, 0.0
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && strings.Contains(fields[0], "-") && len(fields[1]) == 4 {
			rwx = fields[1] == "rwxp"
			continue
		}
		if rwx && len(fields) == 3 && fields[0] == "Rss:" {
			v, _ := strconv.ParseFloat(fields[1], 64)
			kib += v
		}
	}
	return kib / 1024
}

// ksmdCPU is ksmd's CPU time so far (utime + stime of /proc/PID/stat).
func ksmdCPU() time.Duration {
	dirs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, c := range dirs {
		b, err := os.ReadFile(c)
		if err != nil || strings.TrimSpace(string(b)) != "ksmd" {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(filepath.Dir(c), "stat"))
		if err != nil {
			return 0
		}
		// Fields after the ")" of the command: state is 3rd, utime 14th.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		return time.Duration(ut+st) * time.Second / 100 // USER_HZ
	}
	return 0
}

func cpuPct(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return 100 * float64(cpu) / float64(wall)
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t / float64(len(v))
}

func minOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
