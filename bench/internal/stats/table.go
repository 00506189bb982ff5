package stats

import (
	"bufio"
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
