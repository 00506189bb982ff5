// Package stats summarises benchmark samples.
package stats

import (
	"fmt"
	"sort"
	"time"
)

// Pct returns the p-th percentile (nearest rank) of d.
func Pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[i]
}

// MS formats d in milliseconds.
func MS(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

// Ratio is how many times slower other is than ours, by median.
func Ratio(other, ours []time.Duration) string {
	o := Pct(ours, 50)
	if o == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1fx", float64(Pct(other, 50))/float64(o))
}
