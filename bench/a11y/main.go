// Command a11y measures the accessibility tree on the osworld image (issue
// 18 item 1) under whatever accelerator the host gives (TCG here): one VM
// with Chromium on a real page (left half of the screen), LibreOffice Calc
// with a sheet (right half) and a terminal open, then walks of its tree as OSWorld's XML, deskfarm's walk
// (package atspi: on the host, over the VM's accessibility port) and the
// pyatspi walk in the guest that deskfarm ran before and OSWorld's server
// runs (pyatspi_walk.py), alternating so both see the same desktop and
// load. It prints a Markdown table with p50, p95, the tree's size and the
// ratio.
//
//	go run ./bench/a11y [-walks 10] [-old-walks 4] [-bus-walks N] [-asked-walks N] [-top] [-rss] [-gap D] [-out DIR]
package main

import (
	"bytes"
	"context"
	_ "embed"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/atspi"
	"github.com/deskfarm/deskfarm/bench/internal/farm"
	"github.com/deskfarm/deskfarm/bench/internal/stats"
	"github.com/deskfarm/deskfarm/guestx"
	"github.com/deskfarm/deskfarm/vmm"
)

//go:embed pyatspi_walk.py
var oldWalk []byte

const stateDir = farm.DefaultStateDir + "-a11y"

var busWalks, askedWalks int

var outDir string

var topWalk, rss bool

var gap time.Duration

var freshWalks int

var act bool

// steps are the agent's steps -act takes in turn before each walk: each
// changes one application, or none.
var steps = []struct{ name, script string }{
	{"nothing", "true"},
	{"a line typed in the terminal", `wmctrl -x -a gnome-terminal && sleep 0.5 && xdotool type --delay 30 'echo step' && xdotool key Return`},
	{"Tab in Chromium's page", `wmctrl -a "Deskfarm a11y bench" && sleep 0.5 && xdotool key Tab`},
	{"a number typed into Calc", `wmctrl -a "LibreOffice Calc" && sleep 0.5 && xdotool type --delay 30 '42' && xdotool key Return`},
}

// keep writes a walk's tree to outDir, when set.
func keep(name string, b []byte) {
	if outDir != "" {
		_ = os.WriteFile(filepath.Join(outDir, name), b, 0o644)
	}
}

func main() {
	walks := flag.Int("walks", 10, "walks with deskfarm's walker, on the VM's kept session (after the fresh walks)")
	flag.IntVar(&freshWalks, "fresh-walks", 0, "walks with deskfarm's walker on a session of their own (atspi.Options.Fresh, as before sessions were kept), before the kept ones")
	flag.BoolVar(&act, "act", false, "before each walk, act as an agent's step would, in turn: nothing, a line typed in the terminal, Tab in Chromium's page, a number typed into Calc")
	oldWalks := flag.Int("old-walks", 4, "walks with the pyatspi walk in the guest")
	flag.IntVar(&busWalks, "bus-walks", 0, "walks with deskfarm's walker asking every application through the bus daemon (atspi.Options.BusOnly), alternating with the others on the same scene")
	flag.BoolVar(&rss, "rss", false, "print LibreOffice's resident memory in the guest after each walk")
	flag.DurationVar(&gap, "gap", 0, "wait this long before each walk, as an agent's step between two trees")
	flag.BoolVar(&topWalk, "top", false, "print the guest's top (4 samples, 4 s apart) during each kind's second walk")
	flag.IntVar(&askedWalks, "asked-walks", 0, "walks with deskfarm's walker asking each object what it otherwise derives (atspi.Options.AskDerived), alternating with the others on the same scene")
	flag.StringVar(&outDir, "out", "", "a directory to write the last tree of each walk to (deskfarm.xml, pyatspi.xml), to compare them")
	flag.Parse()
	if err := run(*walks, *oldWalks); err != nil {
		fmt.Fprintln(os.Stderr, "bench/a11y:", err)
		os.Exit(1)
	}
}

// page is a real page for Chromium: headings, paragraphs with links, a
// form and a table, the kind of page OSWorld's Chrome tasks open.
func page() string {
	var b strings.Builder
	b.WriteString("<!doctype html><html><head><title>Deskfarm a11y bench</title></head><body><h1>Accessibility bench</h1><nav>")
	for i := range 20 {
		fmt.Fprintf(&b, `<a href="#s%d">Section %d</a> `, i, i)
	}
	b.WriteString("</nav>")
	for i := range 20 {
		fmt.Fprintf(&b, `<h2 id="s%d">Section %d</h2><p>Paragraph %d with <a href="#s%d">a link</a>, <b>bold</b> and <i>italic</i> text, long enough to wrap over a line or two of the window.</p>`, i, i, i, (i+1)%20)
	}
	b.WriteString(`<form><label>Name <input value="deskfarm"></label><select><option>One</option><option>Two</option></select><input type="checkbox" checked><button>Send</button></form><table>`)
	for r := range 8 {
		b.WriteString("<tr>")
		for c := range 5 {
			fmt.Fprintf(&b, "<td>r%dc%d</td>", r, c)
		}
		b.WriteString("</tr>")
	}
	b.WriteString("</table></body></html>")
	return b.String()
}

// sheet is a CSV Calc opens as a sheet of 40 rows and 8 columns.
func sheet() string {
	var b strings.Builder
	for r := range 40 {
		for c := range 8 {
			if c > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%d", r*8+c)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func run(walks, oldWalks int) error {
	ctx := context.Background()
	m, _, err := farm.Open(ctx, stateDir)
	if err != nil {
		return err
	}
	defer func() {
		m.Close()
		os.RemoveAll(stateDir)
	}()
	start := time.Now()
	vm, err := m.Create(ctx, vmm.CreateOptions{Image: "osworld", MemoryMiB: 2048, VCPUs: 2, Width: 1920, Height: 1080})
	if err != nil {
		return err
	}
	defer m.Destroy(context.WithoutCancel(ctx), vm.ID)
	fmt.Fprintf(os.Stderr, "vm %s ready in %v (accel %s)\n", vm.ID, time.Since(start).Round(time.Millisecond), vm.Accel)

	sh := func(script string, timeout time.Duration) error {
		res, err := guestx.Run(ctx, m, vm.ID, guestx.Cmd{Shell: script, Timeout: timeout})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
		}
		return err
	}
	if err := m.WriteFile(ctx, vm.ID, "/tmp/page.html", []byte(page()), 0o644); err != nil {
		return err
	}
	if err := m.WriteFile(ctx, vm.ID, "/tmp/sheet.csv", []byte(sheet()), 0o644); err != nil {
		return err
	}
	if err := sh(`(setsid google-chrome file:///tmp/page.html >/dev/null 2>&1 &)
(setsid libreoffice --calc --infilter=CSV:44,34,76 /tmp/sheet.csv >/dev/null 2>&1 &)
(setsid gnome-terminal >/dev/null 2>&1 &)`, time.Minute); err != nil {
		return fmt.Errorf("open the apps: %w", err)
	}
	// Chromium shows no page in its tree while its window is covered (its
	// document is 0x0), and Calc opens maximized over it: the browser
	// takes the left half of the screen, Calc the right, the terminal
	// the bottom of the left half (raised by -act, it covers only part of
	// the page).
	arrange := `for w in "Deskfarm a11y bench" "LibreOffice Calc"; do wmctrl -r "$w" -b remove,maximized_vert,maximized_horz; done 2>/dev/null
wmctrl -r "Deskfarm a11y bench" -e 0,0,0,960,1040 2>/dev/null; wmctrl -r "LibreOffice Calc" -e 0,960,0,960,1040 2>/dev/null
wmctrl -x -r gnome-terminal -e 0,0,760,960,280 2>/dev/null; true`
	// The scene is up when the walk shows all three, with the page's and
	// the sheet's contents.
	want := []string{`name="Chromium"`, `Section 19`, `name="soffice"`, `name="gnome-terminal-server"`, `<table-cell`}
	deadline := time.Now().Add(6 * time.Minute)
	for {
		if err := sh(arrange, time.Minute); err != nil {
			return fmt.Errorf("arrange the windows: %w", err)
		}
		out, wst, err := atspi.ReadStats(ctx, m, vm.ID, atspi.ModeOSWorld, atspi.Options{})
		missing := ""
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				missing = w
				break
			}
		}
		if err == nil && missing == "" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("scene not up after 6 min: missing %s (%v)", missing, err)
		}
		// Is the kept tree behind? A fresh walk says (and ends the
		// session: the next walk opens another).
		fresh, _, ferr := atspi.ReadStats(ctx, m, vm.ID, atspi.ModeOSWorld, atspi.Options{Fresh: true})
		fmt.Fprintf(os.Stderr, "waiting for the scene: missing %s (%v)%s; a fresh walk has it: %v (%v)\n", missing, err, appLine(wst), missing != "" && strings.Contains(string(fresh), missing), ferr)
		time.Sleep(5 * time.Second)
	}
	fmt.Fprintf(os.Stderr, "scene up %v after the VM\n", time.Since(start).Round(time.Second))
	time.Sleep(10 * time.Second) // let the apps settle

	// series are the walks of one kind of deskfarm's walker.
	type series struct {
		name, file string
		opts       atspi.Options
		d          []time.Duration
		steps      []string
		perStep    map[string][]time.Duration
		last       atspi.Stats
		nodes      int
	}
	walk := func(s *series, i int) error {
		if topWalk && i == 1 {
			// The guest's processes during this walk: who spends the vCPUs.
			go func() {
				res, err := guestx.Run(ctx, m, vm.ID, guestx.Cmd{Shell: "top -b -d 4 -n 4 -w 180 | grep -v ' 0.0 .* 0:' ", Timeout: time.Minute})
				if err == nil {
					fmt.Fprintf(os.Stderr, "guest top during %s %d:\n%s\n", s.name, i, res.Stdout)
				}
			}()
		}
		if act {
			st := steps[i%len(steps)]
			if err := sh(st.script, time.Minute); err != nil {
				return fmt.Errorf("step %q: %w", st.name, err)
			}
			time.Sleep(2 * time.Second) // OSWorld's pause after an action
			s.steps = append(s.steps, st.name)
		}
		time.Sleep(gap)
		t0 := time.Now()
		out, st, err := atspi.ReadStats(ctx, m, vm.ID, atspi.ModeOSWorld, s.opts)
		if err != nil {
			return fmt.Errorf("%s %d: %w", s.name, i, err)
		}
		d := time.Since(t0)
		s.last = st
		keep(s.file, out)
		s.d, s.nodes = append(s.d, d), strings.Count(string(out), "<")-strings.Count(string(out), "</")
		mem := ""
		if rss {
			if res, err := guestx.Run(ctx, m, vm.ID, guestx.Cmd{Shell: "ps -C soffice.bin -o rss=", Timeout: time.Minute}); err == nil {
				mem = ", LibreOffice RSS " + strings.TrimSpace(string(res.Stdout)) + " KiB"
			}
		}
		kept := appLine(st)
		if act {
			step := s.steps[len(s.steps)-1]
			if s.perStep == nil {
				s.perStep = map[string][]time.Duration{}
			}
			s.perStep[step] = append(s.perStep[step], d)
			kept += " after " + step
		}
		fmt.Fprintf(os.Stderr, "%s %d: %v, %d nodes, %d bytes, %d cells on screen without their box%s;%s\n", s.name, i, d.Round(time.Millisecond), s.nodes, len(out), bareCells(out), mem, kept)
		return nil
	}
	direct := &series{name: "deskfarm walk", file: "deskfarm.xml"}
	fresh := &series{name: "fresh walk", file: "fresh.xml", opts: atspi.Options{Fresh: true}}
	// Fresh walks first: each ends the kept session, so they cannot
	// alternate with the kept ones.
	for i := range freshWalks {
		if err := walk(fresh, i); err != nil {
			return err
		}
	}
	viaBus := &series{name: "bus-only walk", file: "bus.xml", opts: atspi.Options{BusOnly: true}}
	asked := &series{name: "asked walk", file: "asked.xml", opts: atspi.Options{AskDerived: true}}
	var old []time.Duration
	var oldNodes int
	for i := 0; i < max(walks, oldWalks, busWalks, askedWalks); i++ {
		if i < busWalks {
			if err := walk(viaBus, i); err != nil {
				return err
			}
		}
		if i < askedWalks {
			if err := walk(asked, i); err != nil {
				return err
			}
		}
		if i < walks {
			if err := walk(direct, i); err != nil {
				return err
			}
		}
		if i < oldWalks {
			t0 := time.Now()
			res, err := guestx.Run(ctx, m, vm.ID, guestx.Cmd{Argv: []string{"python3", "-", "tree"}, Stdin: oldWalk, Timeout: 3 * time.Minute})
			if err != nil {
				return fmt.Errorf("pyatspi walk %d: %w", i, err)
			}
			if res.ExitCode != 0 {
				return fmt.Errorf("pyatspi walk %d: exit %d: %.300s", i, res.ExitCode, res.Stderr)
			}
			d := time.Since(t0)
			out := res.Stdout
			keep("pyatspi.xml", out)
			old, oldNodes = append(old, d), strings.Count(string(out), "<")-strings.Count(string(out), "</")
			fmt.Fprintf(os.Stderr, "pyatspi walk %d: %v, %d nodes, %d bytes\n", i, d.Round(time.Millisecond), oldNodes, len(out))
		}
	}
	fmt.Printf("| accessibility tree, osworld image (%s, 2 vCPU, 1920x1080): Chromium on a page, Calc with a sheet, gnome-terminal | walks | p50 | p95 | nodes |\n|---|---|---|---|---|\n", vm.Accel)
	fmt.Printf("| deskfarm: Go walk on the host over the accessibility port | %d | %s | %s | %d |\n", len(direct.d), stats.MS(stats.Pct(direct.d, 50)), stats.MS(stats.Pct(direct.d, 95)), direct.nodes)
	fmt.Printf("| before: pyatspi walk in the guest (as OSWorld's server) | %d | %s | %s | %d |\n", len(old), stats.MS(stats.Pct(old, 50)), stats.MS(stats.Pct(old, 95)), oldNodes)
	if len(viaBus.d) > 0 {
		fmt.Printf("| deskfarm, every application through the bus daemon (BusOnly) | %d | %s | %s | %d |\n", len(viaBus.d), stats.MS(stats.Pct(viaBus.d, 50)), stats.MS(stats.Pct(viaBus.d, 95)), viaBus.nodes)
		fmt.Printf("\nratio (bus only / deskfarm, p50): %s\n", stats.Ratio(viaBus.d, direct.d))
		for _, a := range viaBus.last.PerApp {
			fmt.Printf("bus-only walk, %s: %d nodes, %d calls, %s\n", a.Name, a.Nodes, a.Calls, stats.MS(a.Walk))
		}
	}
	if len(asked.d) > 0 {
		fmt.Printf("| deskfarm, each object asked what is otherwise derived (AskDerived) | %d | %s | %s | %d |\n", len(asked.d), stats.MS(stats.Pct(asked.d, 50)), stats.MS(stats.Pct(asked.d, 95)), asked.nodes)
		fmt.Printf("\nratio (asked / deskfarm, p50): %s\n", stats.Ratio(asked.d, direct.d))
		for _, a := range asked.last.PerApp {
			fmt.Printf("asked walk, %s: %d nodes, %d calls, %s\n", a.Name, a.Nodes, a.Calls, stats.MS(a.Walk))
		}
	}
	if len(fresh.d) > 0 {
		fmt.Printf("| deskfarm, each walk on a session of its own (Fresh, as before sessions were kept) | %d | %s | %s | %d |\n", len(fresh.d), stats.MS(stats.Pct(fresh.d, 50)), stats.MS(stats.Pct(fresh.d, 95)), fresh.nodes)
		fmt.Printf("\nratio (fresh / kept, p50): %s\n", stats.Ratio(fresh.d, direct.d))
		for _, st := range steps {
			if len(direct.perStep[st.name]) > 0 {
				fmt.Printf("after %s: fresh p50 %s (%d), kept p50 %s (%d)\n", st.name, stats.MS(stats.Pct(fresh.perStep[st.name], 50)), len(fresh.perStep[st.name]), stats.MS(stats.Pct(direct.perStep[st.name], 50)), len(direct.perStep[st.name]))
			}
		}
		// The kept tree against a fresh one, back to back, nothing done
		// between: the same but for what moves on its own (the clock).
		keptTree, _, err := atspi.ReadStats(ctx, m, vm.ID, atspi.ModeOSWorld, atspi.Options{})
		if err != nil {
			return err
		}
		freshTree, _, err := atspi.ReadStats(ctx, m, vm.ID, atspi.ModeOSWorld, atspi.Options{Fresh: true})
		if err != nil {
			return err
		}
		keep("kept-last.xml", keptTree)
		keep("fresh-last.xml", freshTree)
		fmt.Printf("\nthe kept tree against a fresh one right after: %s\n", lineDiff(keptTree, freshTree))
	}
	fmt.Printf("\nratio (before / deskfarm, p50): %s\n", stats.Ratio(old, direct.d))
	fmt.Printf("\ndeskfarm's last walk by application (%d calls in all):\n\n| application | nodes (from its cache) | calls | asked on | walk | of which a Calc sheet's scan (cells kept) |\n|---|---|---|---|---|---|\n", direct.last.Calls)
	for _, a := range direct.last.PerApp {
		scan := ""
		if a.CalcCells > 0 {
			scan = fmt.Sprintf("%s (%d of %d probed)", stats.MS(a.CalcScan), a.CalcCells, a.CalcProbes)
		}
		on := "the bus"
		if a.Peer {
			on = "its own socket"
		}
		fmt.Printf("| %s | %d (%d) | %d | %s | %s | %s |\n", a.Name, a.Nodes, a.FromCache, a.Calls, on, stats.MS(a.Walk), scan)
	}
	fmt.Printf("\nThe same walk's calls by method:\n\n| application | calls by method, most first |\n|---|---|\n")
	for _, a := range direct.last.PerApp {
		fmt.Printf("| %s | %s |\n", a.Name, byCount(a.Methods))
	}
	return nil
}

// byCount lists m's keys by their counts, most first: "GetState 812, …".
func byCount(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// cellTag is a table cell's start tag in OSWorld's XML.
var cellTag = regexp.MustCompile(`<table-cell [^>]*>`)

// bareCells counts the cells on screen (showing, visible) whose box is
// missing from tree: their calls failed (an object gone before it was
// asked, see atspi's walk.go), where OSWorld's server would have written
// it.
func bareCells(tree []byte) int {
	n := 0
	for _, tag := range cellTag.FindAll(tree, -1) {
		if bytes.Contains(tag, []byte(`st:showing="true"`)) && bytes.Contains(tag, []byte(`st:visible="true"`)) && !bytes.Contains(tag, []byte("cp:screencoord=")) {
			n++
		}
	}
	return n
}

// lineDiff says how two trees differ, tag by tag.
func lineDiff(a, b []byte) string {
	x, y := strings.Split(string(a), "<"), strings.Split(string(b), "<")
	if len(x) != len(y) {
		return fmt.Sprintf("%d tags against %d", len(x), len(y))
	}
	var diffs []string
	for i := range x {
		if x[i] != y[i] {
			diffs = append(diffs, fmt.Sprintf("tag %d: %.160q against %.160q", i, x[i], y[i]))
		}
	}
	if len(diffs) == 0 {
		return "identical"
	}
	return fmt.Sprintf("%d tags differ: %s", len(diffs), strings.Join(diffs[:min(len(diffs), 5)], "; "))
}

// appLine is each application's part of a walk: kept or not (and why not,
// when it had a tree kept), and its calls.
func appLine(st atspi.Stats) string {
	var b strings.Builder
	for _, a := range st.PerApp {
		switch {
		case a.Kept:
			fmt.Fprintf(&b, " %s(kept, %d calls)", a.Name, a.Calls)
		case a.Unkept != "":
			fmt.Fprintf(&b, " %s(%d calls, %s; not kept: %s)", a.Name, a.Calls, a.Walk.Round(100*time.Millisecond), a.Unkept)
		default:
			fmt.Fprintf(&b, " %s(%d calls, %s)", a.Name, a.Calls, a.Walk.Round(100*time.Millisecond))
		}
	}
	return b.String()
}
