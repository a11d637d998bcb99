package main

import (
	"fmt"
	"sort"
	"strings"
)

// report is the text the run prints.
type report struct{ b strings.Builder }

func (r *report) linef(format string, args ...any) {
	fmt.Fprintf(&r.b, format+"\n", args...)
}

func (r *report) String() string { return r.b.String() }

// counts prints the counters, sorted by name.
func (r *report) counts(m map[string]int) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	r.linef("counts:")
	for _, k := range keys {
		r.linef("  %-44s %7d", k, m[k])
	}
}

// maxHistories bounds the calls whose whole history is printed; the rest
// are listed by id.
const maxHistories = 20

// violations prints each violation, with the whole history of its call.
func (r *report) violations(l *ledger, vs []violation) {
	if len(vs) == 0 {
		r.linef("invariants: all held (exactly one outcome per accepted call, none for calls not accepted, rules kept across SIGKILL, no app outlived the daemon, resources back to baseline)")
		return
	}
	r.linef("VIOLATIONS: %d", len(vs))
	printed := map[string]bool{}
	for _, v := range vs {
		if v.Key == "" {
			r.linef("  - %s", v.Rule)
			continue
		}
		r.linef("  - call %s: %s", v.Key, v.Rule)
		if printed[v.Key] || len(printed) >= maxHistories {
			continue
		}
		printed[v.Key] = true
		for _, h := range l.History(v.Key) {
			r.linef("      %s", h)
		}
	}
	if n := countKeys(vs); n > len(printed) {
		r.linef("  (histories of %d of %d calls printed)", len(printed), n)
	}
}

func countKeys(vs []violation) int {
	seen := map[string]bool{}
	for _, v := range vs {
		if v.Key != "" {
			seen[v.Key] = true
		}
	}
	return len(seen)
}
