package images

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestParseStep(t *testing.T) {
	tests := []struct {
		line string
		want step
		ok   bool
	}{
		{"::step 1/6 debootstrap bookworm (minbase)", step{1, 6, "debootstrap bookworm (minbase)"}, true},
		{"::step 6/6 convert to qcow2\n", step{6, 6, "convert to qcow2"}, true},
		{"::step 2/3  padded  ", step{2, 3, "padded"}, true},
		{"::step 3/3", step{3, 3, ""}, true},
		{"::step 12/40 many", step{12, 40, "many"}, true},
		{"::step 0/6 zero", step{}, false},
		{"::step 7/6 past the end", step{}, false},
		{"::step -1/6 negative", step{}, false},
		{"::step 1-6 no slash", step{}, false},
		{"::step a/b letters", step{}, false},
		{"::step /6 empty", step{}, false},
		{" ::step 1/6 indented", step{}, false},
		{"::steps 1/6 wrong word", step{}, false},
		{"I: Retrieving InRelease ::step 1/6", step{}, false},
		{"", step{}, false},
	}
	for _, tt := range tests {
		got, ok := parseStep(tt.line)
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseStep(%q) = %+v, %v; want %+v, %v", tt.line, got, ok, tt.want, tt.ok)
		}
	}
}

// fakeClock is a settable time source.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestProgressLines(t *testing.T) {
	clock := &fakeClock{t: time.Date(2025, 5, 20, 12, 0, 0, 0, time.UTC)}
	var out, logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil)).With("image", "desktop")
	p := newProgress("desktop", &out, log, clock.now)

	p.Tick(15 * time.Second) // nothing printed yet: too early
	clock.advance(2 * time.Second)
	p.Step(step{1, 2, "debootstrap"})
	clock.advance(10 * time.Second)
	p.Tick(15 * time.Second) // 10 s since the step line: quiet
	clock.advance(6 * time.Second)
	p.Tick(15 * time.Second) // 16 s: still working
	clock.advance(60 * time.Second)
	p.Step(step{2, 2, "install packages"})
	clock.advance(14 * time.Second)
	steps := p.Finish()

	want := strings.Join([]string{
		"[desktop] step 1/2: debootstrap (2s)",
		"[desktop] still working on step 1/2: debootstrap (step 16s, total 18s)",
		"[desktop] step 2/2: install packages (1m18s)",
		"",
	}, "\n")
	if out.String() != want {
		t.Errorf("progress lines:\n%s\nwant:\n%s", out.String(), want)
	}
	if len(steps) != 2 || steps[0].Seconds != 76 || steps[1].Seconds != 14 {
		t.Errorf("steps = %+v, want 76 s and 14 s", steps)
	}
	for _, s := range []string{`msg="image build step" image=desktop step=1 steps=2 desc=debootstrap seconds=76`,
		`step=2 steps=2 desc="install packages" seconds=14`} {
		if !strings.Contains(logs.String(), s) {
			t.Errorf("log lacks %q:\n%s", s, logs.String())
		}
	}
}

func TestProgressNilWriter(t *testing.T) {
	p := newProgress("x", nil, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
	p.Step(step{1, 1, "only"})
	p.Tick(0)
	if got := p.Finish(); len(got) != 1 {
		t.Errorf("Finish = %+v", got)
	}
}

func TestTail(t *testing.T) {
	tl := &tail{max: 3}
	for i := 1; i <= 5; i++ {
		tl.Add(fmt.Sprint(i))
	}
	if got := strings.Join(tl.Lines(), ","); got != "3,4,5" {
		t.Errorf("tail = %s, want 3,4,5", got)
	}
}

func TestFmtDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                              "0s",
		1400 * time.Millisecond:        "1s",
		59 * time.Second:               "59s",
		74 * time.Second:               "1m14s",
		62*time.Minute + 5*time.Second: "62m05s",
	} {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%v) = %s, want %s", d, got, want)
		}
	}
}
