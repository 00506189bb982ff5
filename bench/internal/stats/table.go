package stats

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sample is one measurement of one build (a side of a comparison).
type Sample struct {
	Build, Measure string
	D              time.Duration
}

// Samples are a run's measurements, kept as TSV lines ("build\tmeasure\tms")
// so that runs of several processes (rounds alternating between builds)
// make one table.
type Samples []Sample

// AppendTo appends s to the file at path.
func (s Samples) AppendTo(path string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	for _, x := range s {
		fmt.Fprintf(f, "%s\t%s\t%.3f\n", x.Build, x.Measure, float64(x.D)/float64(time.Millisecond))
	}
	return f.Close()
}

// PrintTable prints the samples in path (written by AppendTo) as Print
// does.
func PrintTable(path, what string) error {
	s, err := ReadSamples(path)
	if err != nil {
		return err
	}
	s.Print(what)
	return nil
}

// ReadSamples reads the samples AppendTo wrote to path.
func ReadSamples(path string) (Samples, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out Samples
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Split(sc.Text(), "\t")
		if len(parts) != 3 {
			continue
		}
		ms, err := strconv.ParseFloat(parts[2], 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, Sample{Build: parts[0], Measure: parts[1], D: time.Duration(ms * float64(time.Millisecond))})
	}
	return out, sc.Err()
}

// Print prints s as one Markdown table, a column triple (n, median, p95)
// per build in the order the builds first appear; measures keep their
// first order, except those named "step ...", which come last, slowest
// first by the first build's median.
func (s Samples) Print(what string) {
	var builds, measures []string
	by := map[string]map[string][]time.Duration{}
	for _, x := range s {
		if by[x.Build] == nil {
			by[x.Build] = map[string][]time.Duration{}
			builds = append(builds, x.Build)
		}
		if !slices.Contains(measures, x.Measure) {
			measures = append(measures, x.Measure)
		}
		by[x.Build][x.Measure] = append(by[x.Build][x.Measure], x.D)
	}
	if len(builds) == 0 {
		return
	}
	slices.SortStableFunc(measures, func(a, b string) int {
		sa, sb := strings.HasPrefix(a, "step "), strings.HasPrefix(b, "step ")
		if sa != sb {
			if sa {
				return 1
			}
			return -1
		}
		if !sa {
			return 0
		}
		return int(Pct(by[builds[0]][b], 50) - Pct(by[builds[0]][a], 50))
	})
	fmt.Printf("| measure (%s) |", what)
	for _, b := range builds {
		fmt.Printf(" %s: n, median, p95 |", b)
	}
	fmt.Printf("\n|---|%s\n", strings.Repeat("---|", len(builds)))
	for _, m := range measures {
		fmt.Printf("| %s |", m)
		for _, b := range builds {
			d := by[b][m]
			if len(d) == 0 {
				fmt.Print(" (none) |")
				continue
			}
			fmt.Printf(" %d, %s, %s |", len(d), MS(Pct(d, 50)), MS(Pct(d, 95)))
		}
		fmt.Println()
	}
}

// Side is what a side-by-side bench (bench/compare.sh) is told: its
// build's name in the samples, and whether to append them to a file or to
// print a file's table.
type Side struct {
	Label, Raw, Table string
}

// SideFlags registers -label, -raw and -table on the command line.
func SideFlags() *Side {
	s := &Side{}
	flag.StringVar(&s.Label, "label", "deskfarm", "this build's name in the samples (-raw)")
	flag.StringVar(&s.Raw, "raw", "", "append the samples to this file (one \"label\\tmeasure\\tms\" line each) instead of printing a table")
	flag.StringVar(&s.Table, "table", "", "print the table of the samples in this file (written by -raw), builds side by side, and exit")
	return s
}

// Main runs the bench named name once flags are parsed: with -table it
// prints that file's table under what; otherwise run measures, and its
// samples are appended to -raw or printed under the what it returns (what
// itself when that is ""). An error exits 1, named by the bench.
func (s *Side) Main(name, what string, run func(label string) (Samples, string, error)) {
	err := func() error {
		if s.Table != "" {
			return PrintTable(s.Table, what)
		}
		out, w, err := run(s.Label)
		if err != nil {
			return err
		}
		if s.Raw != "" {
			return out.AppendTo(s.Raw)
		}
		if w == "" {
			w = what
		}
		out.Print(w)
		return nil
	}()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench/%s: %v\n", name, err)
		os.Exit(1)
	}
}
