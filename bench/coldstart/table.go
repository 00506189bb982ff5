package main

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/bench/internal/stats"
)

// The measures every create gives; steps follow as "step <name>".
const (
	measureCreate     = "Create returned (ready)"
	measureScreenshot = "first screendump answered, from Create's start"
	measureExec       = "first guest exec answered, from Create's start"
)

type sample struct {
	build, measure string
	d              time.Duration
}

type samples []sample

func (s samples) appendTo(path string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	for _, x := range s {
		fmt.Fprintf(f, "%s\t%s\t%.3f\n", x.build, x.measure, float64(x.d)/float64(time.Millisecond))
	}
	return f.Close()
}

// printTable prints the samples in path as one Markdown table, a column
// pair (median, p95) per build in the order the builds first appear.
func printTable(path, what string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var builds, measures []string
	by := map[string]map[string][]time.Duration{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Split(sc.Text(), "\t")
		if len(parts) != 3 {
			continue
		}
		ms, err := strconv.ParseFloat(parts[2], 64)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		b, m := parts[0], parts[1]
		if by[b] == nil {
			by[b] = map[string][]time.Duration{}
			builds = append(builds, b)
		}
		if !slices.Contains(measures, m) {
			measures = append(measures, m)
		}
		by[b][m] = append(by[b][m], time.Duration(ms*float64(time.Millisecond)))
	}
	if err := sc.Err(); err != nil {
		return err
	}
	// The three end-to-end measures first, then steps by the first
	// build's median, slowest first.
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
		return int(stats.Pct(by[builds[0]][b], 50) - stats.Pct(by[builds[0]][a], 50))
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
			fmt.Printf(" %d, %s, %s |", len(d), stats.MS(stats.Pct(d, 50)), stats.MS(stats.Pct(d, 95)))
		}
		fmt.Println()
	}
	return nil
}
