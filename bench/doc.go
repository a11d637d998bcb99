// Command octosup-bench measures octosupd against baselines run in the
// same process, on the same machine, at the same time, and prints one
// table (or --json): spawn cost with and without the jail against plain
// os/exec and bubblewrap, crash detection against kill+waitpid, and the
// daemon's footprint at 10, 100 and 500 apps against the empty daemon.
// The machine it runs on is shared and noisy, so every figure that is
// held against a goal is a ratio of two figures of this run; absolute
// times are printed, never asserted, and a missed goal does not fail the
// run (a figure that could not be measured does).
//
//	make bench                       # builds octosupd, bench/hubping, this
//	bin/octosup-bench --list         # what each section measures
//	bin/octosup-bench --only spawn --spawns 400 --json
//
// Each section is a Measurement in measurements(): a name, its own flags
// and a Run that returns rows. A new section (tool calls, requests) is a
// constructor like spawnMeasurement listed there; it starts its own
// daemon with Env.startDaemon and may compare with the rows of the
// sections before it (Env.Earlier). docs/performance.md has the figures
// of a run, how to reproduce them and what bounds each.
package main
