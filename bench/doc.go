// Command octosup-bench measures octosupd against baselines run in the
// same process, on the same machine, at the same time, and prints one
// table (or --json): spawn cost with and without the jail against plain
// os/exec and bubblewrap, crash detection against kill+waitpid, the
// daemon's footprint at 10, 100 and 500 apps against the empty daemon, and
// tool calls (kernel → daemon → app → kernel) and requests (app → daemon →
// kernel → app) against a JSON echo between two Go processes and a Go
// relay in the daemon's place (bench/jsonecho), with bench/toolapp as the
// app. The machine it runs on is shared and noisy, so every figure that is
// held against a goal is a ratio of two figures of this run; absolute
// times are printed, never asserted, and a missed goal does not fail the
// run (a figure that could not be measured does).
//
//	make bench                       # builds octosupd, bench/hubping, jsonecho, toolapp, this
//	bin/octosup-bench --list         # what each section measures
//	bin/octosup-bench --only spawn --spawns 400 --json
//
// Each section is a Measurement in measurements(): a name, its own flags
// and a Run that returns rows. A new section is a constructor like
// spawnMeasurement listed there; it starts its own daemon with
// Env.startDaemon and may compare with the rows of the sections before it
// (Env.Earlier). The tools and requests sections share runRoundTrips
// (bench/tools.go); BenchmarkToolCallInProcess profiles the daemon's side
// of a tool call (octosupd has no profiling switch). docs/performance.md
// has the figures of a run, how to reproduce them and what bounds each.
package main
