package images

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
)

// stepPrefix starts the lines a recipe prints before each major step:
// "::step N/M description".
const stepPrefix = "::step "

// step is one parsed "::step N/M description" line.
type step struct {
	N, M int
	Desc string
}

// parseStep parses a "::step N/M description" line. The prefix must start
// the line; 1 <= N <= M; the description may be empty.
func parseStep(line string) (step, bool) {
	rest, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), stepPrefix)
	if !ok {
		return step{}, false
	}
	frac, desc, _ := strings.Cut(rest, " ")
	ns, ms, ok := strings.Cut(frac, "/")
	if !ok {
		return step{}, false
	}
	n, err1 := strconv.Atoi(ns)
	m, err2 := strconv.Atoi(ms)
	if err1 != nil || err2 != nil || n < 1 || n > m {
		return step{}, false
	}
	return step{N: n, M: m, Desc: strings.TrimSpace(desc)}, true
}

// stepRecord is a finished step, as kept in the manifest.
type stepRecord struct {
	N       int     `json:"n"`
	M       int     `json:"m"`
	Desc    string  `json:"desc"`
	Seconds float64 `json:"seconds"`
}

// progress reports a build's steps: human lines on w, one slog record per
// finished step on log (which carries the image's attributes). It is safe for concurrent use (the output reader and the
// still-working ticker call it).
type progress struct {
	name string
	w    io.Writer // nil: no human lines
	log  *slog.Logger
	now  func() time.Time

	mu        sync.Mutex
	start     time.Time
	cur       step
	curStart  time.Time
	lastPrint time.Time
	done      []stepRecord
}

func newProgress(name string, w io.Writer, log *slog.Logger, now func() time.Time) *progress {
	t := now()
	return &progress{name: name, w: w, log: log, now: now, start: t, lastPrint: t}
}

// printf writes one human line: "[name] ...".
func (p *progress) printf(format string, args ...any) {
	if p.w == nil {
		return
	}
	fmt.Fprintf(p.w, "[%s] %s\n", p.name, fmt.Sprintf(format, args...))
}

// Step records that the build entered st.
func (p *progress) Step(st step) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.now()
	p.finishLocked(t)
	p.cur, p.curStart, p.lastPrint = st, t, t
	p.printf("step %d/%d: %s (%s)", st.N, st.M, st.Desc, fmtDuration(t.Sub(p.start)))
	p.log.Debug("image build step started", "step", st.N, "steps", st.M, "desc", st.Desc)
}

// Tick prints a "still working" line when nothing was printed for every.
func (p *progress) Tick(every time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.now()
	if t.Sub(p.lastPrint) < every {
		return
	}
	p.lastPrint = t
	if p.cur.N == 0 {
		p.printf("still working (%s)", fmtDuration(t.Sub(p.start)))
		return
	}
	p.printf("still working on step %d/%d: %s (step %s, total %s)",
		p.cur.N, p.cur.M, p.cur.Desc, fmtDuration(t.Sub(p.curStart)), fmtDuration(t.Sub(p.start)))
}

// Finish closes the current step and returns all finished steps.
func (p *progress) Finish() []stepRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finishLocked(p.now())
	return append([]stepRecord(nil), p.done...)
}

// Elapsed is the time since the build started.
func (p *progress) Elapsed() time.Duration {
	return p.now().Sub(p.start)
}

func (p *progress) finishLocked(t time.Time) {
	if p.cur.N == 0 {
		return
	}
	d := t.Sub(p.curStart)
	p.done = append(p.done, stepRecord{N: p.cur.N, M: p.cur.M, Desc: p.cur.Desc, Seconds: roundSeconds(d)})
	p.log.Info("image build step", "step", p.cur.N, "steps", p.cur.M, "desc", p.cur.Desc, "seconds", roundSeconds(d))
	p.cur = step{}
}

// fmtDuration formats d to whole seconds: "24s", "1m14s".
func fmtDuration(d time.Duration) string {
	d = d.Round(time.Second)
	if d < time.Minute {
		return fmt.Sprintf("%ds", int(d/time.Second))
	}
	return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
}

func roundSeconds(d time.Duration) float64 {
	return float64(d.Round(10*time.Millisecond)) / float64(time.Second)
}

// tail keeps the last max lines written to it.
type tail struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (t *tail) Add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == t.max {
		copy(t.lines, t.lines[1:])
		t.lines = t.lines[:t.max-1]
	}
	t.lines = append(t.lines, line)
}

func (t *tail) Lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.lines...)
}
