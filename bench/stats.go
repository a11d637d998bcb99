package main

import (
	"math"
	"slices"
	"time"
)

// Summary is a distribution of durations.
type Summary struct {
	N        int
	P50, P99 time.Duration
	Min, Max time.Duration
}

// summarize summarizes d (left unchanged). Percentiles are nearest-rank:
// P99 of 200 samples is the 198th smallest, a sample that was really
// measured, never an interpolation.
func summarize(d []time.Duration) Summary {
	if len(d) == 0 {
		return Summary{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return Summary{N: len(s), P50: percentile(s, 50), P99: percentile(s, 99), Min: s[0], Max: s[len(s)-1]}
}

// percentile of sorted samples by nearest rank, p in (0, 100].
func percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// The epsilon keeps 99% of 200 at rank 198, not 199, whatever the
	// rounding of the product.
	rank := int(math.Ceil(p*float64(n)/100 - 1e-9))
	return sorted[max(1, min(rank, n))-1]
}

// row is a distribution row.
func (s Summary) row(key, label string) Row {
	if s.N == 0 {
		return Row{Key: key, Label: label, Err: "no samples"}
	}
	return Row{Key: key, Label: label, N: s.N, P50: Ms(s.P50), P99: Ms(s.P99)}
}
