# octosup: `make run` runs the daemon on the example manifest, `make test`
# passes the tests, `make install` installs it as a user service.

GO        ?= go
BIN       := $(CURDIR)/bin
RUNDIR    := $(CURDIR)/.run
PKGS      := ./...
EXAMPLES  := $(notdir $(wildcard examples/*))
export CGO_ENABLED := 1

.PHONY: all deps build examples run test test-cgroup pyclient lint fuzz bench chaos install uninstall clean

all: build

# The jail compiles its seccomp filter with libseccomp (cgo): a fresh
# Debian machine lacks the headers. Installed here when we can (root with
# apt-get), else a clear word of what to install.
deps:
	@if [ ! -e /usr/include/seccomp.h ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing libseccomp-dev (the seccomp headers the jail builds with)"; \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q libseccomp-dev >/dev/null 2>&1 || \
			{ apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q libseccomp-dev >/dev/null; }; \
		else echo "missing /usr/include/seccomp.h: install libseccomp-dev (sudo apt-get install libseccomp-dev)"; exit 1; fi; \
	fi

# octosup-jail, the jail helper octosupd runs between fork and exec of an
# app with --jail-spawn helper (or where the in-process spawn cannot
# run), runs the jail's C setup sequence before its Go runtime starts;
# linked statically (HELPER_LDFLAGS) it maps no shared library either. It
# must sit next to octosupd.
HELPER_LDFLAGS := -extldflags=-static
build: deps
	$(GO) build -o $(BIN)/ ./cmd/octosupd ./cmd/octosupctl
	$(GO) build -ldflags '$(HELPER_LDFLAGS)' -o $(BIN)/ ./cmd/octosup-jail
	$(MAKE) --no-print-directory examples

examples:
	@mkdir -p $(BIN)/examples
	$(GO) build -o $(BIN)/examples/ $(addprefix ./examples/,$(EXAMPLES))

# The shipped manifest names the demo apps under /usr/lib/octosup/examples;
# a checkout runs them from bin/examples instead.
$(RUNDIR)/native-apps.json: configs/native-apps.example.json
	@mkdir -p $(RUNDIR)
	sed 's#/usr/lib/octosup/examples#$(BIN)/examples#g' $< > $@

run: build $(RUNDIR)/native-apps.json
	$(BIN)/octosupd run --config $(RUNDIR)/native-apps.json

# make test includes tools/pyclient's test, which runs the Python control
# client's walkthrough (tools/pyclient/walkthrough.py) against a real
# daemon; it is skipped, saying so, where python3 is missing.
# The tests run real programs (weston, PulseAudio, PipeWire, node, tmux):
# .ci/test-deps installs those missing as root, else names them.
test: build
	@bash .ci/test-deps
	$(GO) test -race -count=1 -timeout 9m $(PKGS)

# make test-cgroup: the supervisor's cgroup tests (limits, the cgroup
# stopper) under user-mode Linux, whose kernel has cgroup v2 with the
# memory, pids, cpu and io controllers, with OCTOSUP_REQUIRE_CGROUP=1:
# a missing controller fails them. Needs user-mode-linux (apt-get
# install user-mode-linux); about a minute. CI runs it after make test.
test-cgroup: deps
	bash .ci/uml-cgroup

# make pyclient: that walkthrough alone, with its output.
pyclient: deps
	$(GO) test -count=1 -v -run TestPythonWalkthrough ./tools/pyclient

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	@# go.mod says which modules octosup uses itself: tidy would change nothing.
	$(GO) mod tidy -diff
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)
	@# Without the tests: code only the tests use is dead in the binaries.
	$(GO) tool staticcheck -tests=false $(PKGS)
	@# Every function a main package (the binaries, bench, chaos, the
	@# examples) cannot reach; code for the tests lives in their packages.
	@out=$$($(GO) tool deadcode $$($(GO) list -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' $(PKGS))); \
		if [ -n "$$out" ]; then echo "deadcode:"; echo "$$out"; exit 1; fi
	@# verify wants a user manager's runtime dir and the ExecStart binaries
	@# in place: give it a throwaway home, and treat any output as failure
	@# (it exits 0 on warnings).
	@if command -v systemd-analyze >/dev/null; then \
		tmp=$$(mktemp -d) && mkdir -p $$tmp/home/.local/bin $$tmp/run && chmod 700 $$tmp/run && \
		touch $$tmp/home/.local/bin/octosupd $$tmp/home/.local/bin/octosupctl && chmod +x $$tmp/home/.local/bin/*; \
		out=$$(HOME=$$tmp/home XDG_RUNTIME_DIR=$$tmp/run systemd-analyze verify --user systemd/octosupd.socket systemd/octosupd.service 2>&1); \
		rm -rf $$tmp; \
		if [ -n "$$out" ]; then echo "systemd-analyze verify:"; echo "$$out"; exit 1; fi; \
	else echo "systemd-analyze not found: units not verified"; fi

# make fuzz: every decoder's fuzz target for FUZZTIME each (hub frames,
# control requests, the manifest, the jail spec, ...). A crasher the
# fuzzer finds lands in that package's testdata/fuzz/FuzzX/, which
# make test replays as a regression case from then on: commit it.
FUZZTIME ?= 20s
fuzz: deps
	@set -e; for pkg in $$($(GO) list ./...); do \
		for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "== $$pkg $$target ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) -parallel 2 $$pkg; \
		done; \
	done

# make install: the binaries, the demo apps, the user units, and the
# README, docs/ and an example manifest in the doc directory (where the
# service's Documentation= points), for the user who runs it: PREFIX is
# ~/.local. A package sets PREFIX=/usr and DESTDIR. The units and the
# example manifest are rewritten to name the installed places (PREFIX's,
# not DESTDIR's): the shipped ones name ~/.local/bin and
# /usr/lib/octosup/examples. make uninstall removes exactly these files.
PREFIX      ?= $(HOME)/.local
BINDIR      ?= $(PREFIX)/bin
LIBDIR      ?= $(PREFIX)/lib
DOCDIR      ?= $(PREFIX)/share/doc/octosup
# A user manager reads units from $(PREFIX)/share/systemd/user for
# PREFIX ~/.local, /usr/local and /usr alike (systemd-analyze --user
# unit-paths).
# For PREFIX ~/.local it is $XDG_DATA_HOME/systemd/user, where the user
# manager looks when XDG_DATA_HOME is set.
XDG_DATA_HOME ?= $(HOME)/.local/share
USERUNITDIR ?= $(if $(filter $(HOME)/.local,$(PREFIX)),$(XDG_DATA_HOME)/systemd/user,$(PREFIX)/share/systemd/user)
PKGLIBDIR   := $(LIBDIR)/octosup
PROGRAMS    := octosupd octosup-jail octosupctl
UNITS       := octosupd.service octosupd.socket
DOCS        := $(wildcard docs/*.md)
WIRESCHEMAS := $(wildcard configs/schema/*.schema.json)

install: build
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(PKGLIBDIR)/examples $(DESTDIR)$(USERUNITDIR) \
		$(DESTDIR)$(DOCDIR)/docs $(DESTDIR)$(DOCDIR)/configs $(DESTDIR)$(DOCDIR)/configs/schema
	install -m 0755 $(addprefix $(BIN)/,$(PROGRAMS)) $(DESTDIR)$(BINDIR)/
	install -m 0755 $(addprefix $(BIN)/examples/,$(EXAMPLES)) $(DESTDIR)$(PKGLIBDIR)/examples/
	for u in $(UNITS); do \
		sed -e 's#%h/.local/bin/#$(BINDIR)/#g' -e 's#%h/.local/share/doc/octosup/#$(DOCDIR)/#g' \
			systemd/$$u > $(DESTDIR)$(USERUNITDIR)/$$u && chmod 0644 $(DESTDIR)$(USERUNITDIR)/$$u || exit 1; \
	done
	install -m 0644 README.md $(DESTDIR)$(DOCDIR)/
	install -m 0644 $(DOCS) $(DESTDIR)$(DOCDIR)/docs/
	install -m 0644 configs/native-apps.schema.json $(DESTDIR)$(DOCDIR)/configs/
	install -m 0644 $(WIRESCHEMAS) $(DESTDIR)$(DOCDIR)/configs/schema/
	sed 's#/usr/lib/octosup/examples#$(PKGLIBDIR)/examples#g' configs/native-apps.example.json \
		> $(DESTDIR)$(DOCDIR)/configs/native-apps.example.json
	chmod 0644 $(DESTDIR)$(DOCDIR)/configs/native-apps.example.json
	@# The make install of old put the units in ~/.config/systemd/user,
	@# which a user manager reads first: left there, they hide these.
	@old=$(HOME)/.config/systemd/user; if [ -z "$(DESTDIR)" ] && [ "$(USERUNITDIR)" != "$$old" ] && \
		[ -e "$$old/octosupd.service" -o -e "$$old/octosupd.socket" ]; then \
		echo "note: $$old/octosupd.service and .socket, from an older make install, hide the units installed in $(USERUNITDIR): rm them, then systemctl --user daemon-reload"; fi

# Files by name, then the directories they alone filled, with rmdir:
# nothing is removed recursively (a mistaken LIBDIR=/usr/lib must not take
# /usr/lib with it), nor a user's manifest, state or jails.
uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(PROGRAMS)) $(addprefix $(DESTDIR)$(USERUNITDIR)/,$(UNITS))
	rm -f $(addprefix $(DESTDIR)$(PKGLIBDIR)/examples/,$(EXAMPLES))
	rm -f $(DESTDIR)$(DOCDIR)/README.md $(addprefix $(DESTDIR)$(DOCDIR)/,$(DOCS)) \
		$(addprefix $(DESTDIR)$(DOCDIR)/configs/,native-apps.schema.json native-apps.example.json) \
		$(addprefix $(DESTDIR)$(DOCDIR)/,$(WIRESCHEMAS))
	rmdir $(DESTDIR)$(PKGLIBDIR)/examples $(DESTDIR)$(PKGLIBDIR) \
		$(DESTDIR)$(DOCDIR)/docs $(DESTDIR)$(DOCDIR)/configs/schema $(DESTDIR)$(DOCDIR)/configs $(DESTDIR)$(DOCDIR) 2>/dev/null || true

clean:
	rm -rf $(BIN) $(RUNDIR)

# make bench: the table of docs/performance.md. Every figure held against a
# goal is a ratio of two figures of the same run (the machine is shared and
# noisy); absolute times are printed, never asserted. Flags go in
# BENCH_FLAGS, e.g. make bench BENCH_FLAGS='--json --spawns 400'.
# bubblewrap is the spawn baseline (d): installed here when missing and we
# are root, else its rows say "skipped".
BENCH_FLAGS ?=
bench:
	@if ! command -v bwrap >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get install -y -q bubblewrap >/dev/null 2>&1 || \
			{ apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null; } || \
			echo "bench: could not install bubblewrap: its rows will say skipped"; \
		else echo "bench: bwrap not found (apt-get install bubblewrap): its rows will say skipped"; fi; \
	fi
	$(GO) build -o $(BIN)/ ./cmd/octosupd
	$(GO) build -ldflags '$(HELPER_LDFLAGS)' -o $(BIN)/ ./cmd/octosup-jail
	CGO_ENABLED=0 $(GO) build -o $(BIN)/bench/ ./bench/hubping ./bench/jsonecho ./bench/toolapp
	$(GO) build -o $(BIN)/octosup-bench ./bench
	$(BIN)/octosup-bench --octosupd $(BIN)/octosupd --hubping $(BIN)/bench/hubping $(BENCH_FLAGS)

# make chaos: a real octosupd with 60 jailed apps under a storm of tool
# calls, app kills, approvals and kernel detaches, then a SIGKILL and a
# restart on the same state; it checks the invariants (chaos/doc.go) and
# exits 1 with the call's history on a violation. Bounded: the storm
# lasts 2 minutes, the whole run about 2.5. Flags in CHAOS_FLAGS, e.g.
# make chaos CHAOS_FLAGS='--seed 42 --duration 30s --apps 20'. make test
# runs a short pass (TestChaosShort).
CHAOS_FLAGS ?=
chaos: build
	CGO_ENABLED=0 $(GO) build -o $(BIN)/chaos/app ./chaos/app
	$(GO) build -o $(BIN)/octosup-chaos ./chaos
	$(BIN)/octosup-chaos --octosupd $(BIN)/octosupd --app $(BIN)/chaos/app $(CHAOS_FLAGS)
