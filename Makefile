# gym-otel-spank: build, install and test.
#
#   make              build/gym_otel.so (the SPANK plugin, C), build/gym_otel_core.so
#                     (its Go core, loaded only for jobs that ask), build/gym-otel-spank
#   make install      PREFIX=/usr DESTDIR= SLURM_PLUGIN_DIR=<detected> SYSCONFDIR=/etc
#   make demo         the main job: a real sbatch --gym-otel job on a local Slurm
#                     with a local OTLP backend (installs what it needs; root)
#   make test         every test, on real parts (installs what it needs; root)
#   make collector    build/otelcol-gym, the slim collector (cold: ~9 min, 3 GB)
#   make standins     build/standins/*: vLLM, dcgm, Gym stand-ins, a hung backend
#   make man          build/man/gym_otel.8, build/man/gym-otel-spank.1
#   make rpm          build/rpm/*.rpm (a payload check here: see packaging/rpm)
#   make plugin-test  the plugin's tests on a real local Slurm (tests/plugin; root)
#   make docker-test  the multi-node tests on Slurm 22.05, 24.11 and 26.05 in containers
#   make vm-test      the containment suite in a qemu guest: cgroup v2 under systemd, Slurm 26.05
#                     with cgroup/v2 (tests/vm; root; TCG without /dev/kvm: see tests/vm/README.md)
#   make demo-cluster the main job on a two-node Slurm in containers
#   make bench-scale  the plugin at scale: a simulated cluster of 32 slurmd, one collector's CPU (about 25 min)

GO       ?= go
CC       ?= gcc
BUILD    ?= build
PREFIX   ?= /usr
BINDIR   ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
DESTDIR  ?=

# Where slurmd looks for plugins: pkg-config's libdir + /slurm when Slurm
# ships a slurm.pc (RPM), Debian's /usr/lib/<multiarch>/slurm-wlm, else
# /usr/lib64/slurm. Override with SLURM_PLUGIN_DIR=...
SLURM_PLUGIN_DIR ?= $(shell \
	if d=$$(pkg-config --variable=libdir slurm 2>/dev/null) && [ -n "$$d" ]; then echo "$$d/slurm"; \
	elif m=$$($(CC) -print-multiarch 2>/dev/null) && [ -n "$$m" ] && [ -d "/usr/lib/$$m/slurm-wlm" ]; then echo "/usr/lib/$$m/slurm-wlm"; \
	else echo /usr/lib64/slurm; fi)
SLURM_INCLUDE ?= /usr/include

CFLAGS   ?= -O2 -g
# Both shared objects run inside Slurm's root processes: hardened as
# distributions build daemons (stack protector, fortified libc calls, full
# RELRO with immediate binding, no executable stack).
HARDEN_CFLAGS = -fstack-protector-strong -D_FORTIFY_SOURCE=2
HARDEN_LDFLAGS = -Wl,-z,relro,-z,now -Wl,-z,noexecstack
PLUGIN_CFLAGS = $(CFLAGS) $(HARDEN_CFLAGS) -std=gnu11 -Wall -Wextra -Werror -fPIC \
	-I$(SLURM_INCLUDE) -Iinclude
PLUGIN_LDFLAGS = -shared -Wl,--version-script=spank/gym_otel.map $(HARDEN_LDFLAGS) -ldl

PLUGIN_SRCS = spank/gym_otel.c spank/args.c spank/core.c spank/submit.c \
	spank/prolog.c spank/step.c spank/node.c spank/record.c spank/taskenv.c \
	spank/cgroup.c spank/bound.c spank/notice.c spank/hold.c spank/controlsock.c \
	spank/phase.c spank/stepstart.c spank/handoff.c
PLUGIN_HDRS = spank/args.h spank/core.h spank/submit.h spank/prolog.h \
	spank/step.h spank/node.h spank/record.h spank/taskenv.h spank/cgroup.h \
	spank/bound.h spank/notice.h spank/hold.h spank/controlsock.h spank/log.h \
	spank/phase.h spank/clock.h spank/stepstart.h spank/handoff.h \
	spank/compat.h include/gym_otel_core.h include/gym_otel_contract.h

.PHONY: all build install test unit-test plugin-test vet clean FORCE deps collector standins man rpm demo

all: build

build: $(BUILD)/gym_otel.so $(BUILD)/gym_otel_step.so $(BUILD)/gym_otel_core.so $(BUILD)/gym-otel-spank

$(BUILD)/gym_otel.so: $(PLUGIN_SRCS) $(PLUGIN_HDRS) spank/gym_otel.map Makefile
	@mkdir -p $(BUILD)
	$(CC) $(PLUGIN_CFLAGS) -o $@ $(PLUGIN_SRCS) $(PLUGIN_LDFLAGS)

# The step-only design (docs/performance.md, "A plugin without job prolog
# and epilog"): the same sources without slurm_spank_job_prolog/epilog, so
# slurmd starts no `slurmstepd spank prolog|epilog` for the jobs that do not
# ask. Not installed by default; a site chooses it in plugstack.conf.
$(BUILD)/gym_otel_step.so: $(PLUGIN_SRCS) $(PLUGIN_HDRS) spank/gym_otel.map Makefile
	@mkdir -p $(BUILD)
	$(CC) $(PLUGIN_CFLAGS) -DGOS_STEP_ONLY -o $@ $(PLUGIN_SRCS) $(PLUGIN_LDFLAGS)

# Go decides what to rebuild (FORCE); -z nodelete: Slurm's dlclose must not
# unmap a Go runtime. cgo's header of the exports (build/gym_otel_core.h) is
# kept: tests/packaging compares it with include/gym_otel_core.h.
$(BUILD)/gym_otel_core.so: FORCE
	@mkdir -p $(BUILD)
	CGO_ENABLED=1 CGO_CFLAGS="-O2 -g $(HARDEN_CFLAGS)" \
		CGO_LDFLAGS="-Wl,-z,nodelete $(HARDEN_LDFLAGS)" $(GO) build -buildmode=c-shared \
		-o $@ ./spank/core

# The Slurm release whose headers the plugin is built against, for
# `gym-otel-spank --version` (empty when the headers are not there)
# (slurm_version.h's SLURM_VERSION_NUMBER, 0xMMmmuu).
SLURM_VERSION ?= $(shell n=$$(awk '/define SLURM_VERSION_NUMBER/ {print $$3}' $(SLURM_INCLUDE)/slurm/slurm_version.h 2>/dev/null); \
	[ -n "$$n" ] && printf '%d.%02d.%d' $$((n >> 16 & 255)) $$((n >> 8 & 255)) $$((n & 255)))

# The Go linker writes its output through a shared mapping of the file, and
# on Linux 6.18 the page cache then holds it in large folios, each of which
# a process running the binary maps whole at a fault (265-407 KiB per
# fault measured, against fault-around's 64 KiB): the collector run from the linker's
# output maps 31-35 MiB of its file against 22-23 MiB for a copy
# (docs/performance.md, P4). A node runs the copy install(1) or rpm wrote,
# so the two Go executables are linked to NAME.link (which Go does not link
# again when it is up to date) and copied to NAME when their build IDs
# differ; the tests and the bench run the copy, as a node would.
define copy_link
	@if [ "$$($(GO) tool buildid $(1).link)" != "$$($(GO) tool buildid $(1) 2>/dev/null)" ]; then \
		echo "install -m 0755 $(1).link $(1)"; install -m 0755 $(1).link $(1); fi
endef

$(BUILD)/gym-otel-spank: FORCE
	@mkdir -p $(BUILD)
	$(GO) build -ldflags "-X main.slurmVersion=$(SLURM_VERSION)" -o $@.link ./cmd/gym-otel-spank
	$(call copy_link,$@)

install: build
	install -d $(DESTDIR)$(SLURM_PLUGIN_DIR) $(DESTDIR)$(BINDIR) \
		$(DESTDIR)$(SYSCONFDIR)/slurm/plugstack.conf.d
	install -m 0755 $(BUILD)/gym_otel.so $(DESTDIR)$(SLURM_PLUGIN_DIR)/gym_otel.so
	install -m 0755 $(BUILD)/gym_otel_core.so $(DESTDIR)$(SLURM_PLUGIN_DIR)/gym_otel_core.so
	# Execute-only: the supervisor it runs as the job's user is then not
	# dumpable from its execve on (the job's tasks cannot read its memory).
	install -m 0711 $(BUILD)/gym-otel-spank $(DESTDIR)$(BINDIR)/gym-otel-spank
	printf '%s\n' \
		'# gym-otel-spank: a per-job OpenTelemetry Collector (sbatch/srun/salloc --gym-otel).' \
		'# Arguments: site=FILE default=off|on prolog_timeout=SECONDS (keep below PrologEpilogTimeout)' \
		'#            collector_wait=prolog|step (step: the steps wait for the collector, not the prolog)' \
		'#            cli=PATH record_dir=PATH core=PATH and inline otel keys (on_failure=fail, ...).' \
		'# slurmd decides at start whether to run SPANK job prologs: restart it after adding the plugin.' \
		'# Needs PrologFlags=Alloc in slurm.conf (the job prolog must see the job on every node).' \
		'required $(SLURM_PLUGIN_DIR)/gym_otel.so site=$(SYSCONFDIR)/slurm/gym-otel.yaml cli=$(BINDIR)/gym-otel-spank' \
		> $(DESTDIR)$(SYSCONFDIR)/slurm/plugstack.conf.d/gym-otel.conf
	@echo "installed. Make sure plugstack.conf includes $(SYSCONFDIR)/slurm/plugstack.conf.d/*.conf,"
	@echo "set PrologFlags=Alloc (or Alloc,Contain) in slurm.conf, and restart slurmd on every node"
	@echo "(it decides at start whether any plugin has a job prolog/epilog)."

# The whole module with real parts required; tests/plugin (real Slurm, root)
# skips itself there and runs in plugin-test.
# The README's test command: on a fresh machine it installs the Debian
# packages, builds every part, and runs every test on real parts.
# Every suite runs whatever an earlier one did; the failed ones are named at
# the end, and then make fails.
test: deps build collector standins man rpm
	@failed=; \
	for t in vet unit-test plugin-test docker-test; do \
		start=$$(date +%s); \
		if $(MAKE) $$t; then r=passed; else r=FAILED; failed="$$failed $$t"; fi; \
		echo "make test: $$t $$r in $$(( $$(date +%s) - start )) s" >&2; \
	done; \
	if [ -n "$$failed" ]; then echo "make test: FAILED:$$failed" >&2; exit 1; fi; \
	echo "make test: every suite passed" >&2

# The fuzz targets run a number of inputs, not a duration: with -fuzztime
# as a duration Go's fuzzing coordinator fails the run with "context
# deadline exceeded" (and no failing input) when the deadline comes while a
# worker minimizes a new interesting input, which takes up to
# -fuzzminimizetime (60 s by default; FuzzLoadYAML's minimizations ran 20-50
# s on 2 cores, "0/sec" in the progress lines). Minimizing is bounded by 3 s.
FUZZ_EXECS := 20000x
unit-test:
	GYM_OTEL_REQUIRE_REAL=1 $(GO) test -count=1 -timeout 20m ./...
	cd tests/standins && $(GO) vet ./... && $(GO) test -count=1 ./...
	# the collector's own files (startgc.go, startpages.go); go test runs vet's checks on them
	cd collector && CGO_ENABLED=0 $(GO) test -count=1 -trimpath -tags $(COLLECTOR_TAGS) .
	$(GO) test -run XXX -fuzz FuzzParseSpec -fuzztime $(FUZZ_EXECS) -fuzzminimizetime 3s ./helper/config
	$(GO) test -run XXX -fuzz FuzzLoadYAML -fuzztime $(FUZZ_EXECS) -fuzzminimizetime 3s ./helper/config

deps:
	bash .ci/install-deps.sh

# Go skips the link when build/otelcol-gym is up to date; a cold build takes
# about 9 minutes and 3 GB of memory on 2 cores, then the caches make it fast.
# remove_all_sd leaves Prometheus' optional service discoveries (AWS, Azure,
# GCE, Consul, Docker, ... 226 packages) out of the prometheus receiver: the
# rendered scrape jobs use static_configs only (file and HTTP discovery stay).
# The binary is 29 MiB smaller and an idle collector's VmRSS 16 MiB lower
# (docs/performance.md, P4). -s -w drop the symbol table and DWARF, which
# are never mapped, so they only save disk.
COLLECTOR_TAGS := remove_all_sd
collector: $(BUILD)/otelcol-gym
$(BUILD)/otelcol-gym: FORCE
	@mkdir -p $(BUILD)
	cd collector && CGO_ENABLED=0 $(GO) build -tags $(COLLECTOR_TAGS) -trimpath -ldflags="-s -w" -o ../$(BUILD)/otelcol-gym.link .
	$(call copy_link,$@)

standins: FORCE
	@mkdir -p $(BUILD)/standins
	cd tests/standins && $(GO) build -o ../../$(BUILD)/standins/ ./cmd/...

man: $(BUILD)/man/gym_otel.8 $(BUILD)/man/gym-otel-spank.1
$(BUILD)/man/%: docs/man/%.md
	@mkdir -p $(BUILD)/man
	pandoc -s -f markdown-smart -t man $< -o $@

# An RPM built with Debian's rpmbuild: slurm-devel is not packaged here, so
# its headers come from libslurm-dev (--nodeps skips the BuildRequires check).
# The payload is checked by tests/packaging; the package is not meant for EL.
rpm: build collector man
	@mkdir -p $(BUILD)/rpm
	rpmbuild -bb --build-in-place --nodeps \
		--define "_topdir $(CURDIR)/$(BUILD)/rpmbuild" \
		--define "_rpmdir $(CURDIR)/$(BUILD)/rpm" \
		--define "_slurm_plugindir /usr/lib64/slurm" \
		packaging/rpm/gym-otel-spank.spec

demo: deps build collector standins
	bash tests/demo/demo.sh

plugin-test: build
	GYM_OTEL_REQUIRE_REAL=1 GYM_OTEL_PLUGIN_TESTS=1 $(GO) test -count=1 -v -timeout 45m ./tests/plugin/

vet:
	$(GO) vet ./...
	# the tests' build of the supervisor (hwmon_testbuild.go, built by TestHwmonScraped)
	$(GO) vet -tags gymotel_hwmon_test ./helper/supervise
	@out=$$(gofmt -l cmd helper internal spank tests collector); [ -z "$$out" ] || { echo "gofmt: $$out"; exit 1; }

clean:
	rm -f $(BUILD)/gym_otel.so $(BUILD)/gym_otel_core.so $(BUILD)/gym-otel-spank $(BUILD)/gym-otel-spank.link

FORCE:

# ------------------------------------------------- multi-node docker cluster
# tests/slurm-docker: ctl + c1 + c2 + an OTLP backend in containers built
# from debootstrap (no registry), Slurm 22.05 (bookworm), 24.11 (trixie) and
# 26.05 (sid);
# the plugin built against each image's spank.h and installed with make
# install. Root, docker and docker-compose. Cold: ~1 min per image build.
#   make docker-test    per suite: up, the main job + variants + faults, down
#   make demo-cluster   the main job on the bookworm cluster, where it went, down
.PHONY: docker-test demo-cluster
docker-test: deps build collector standins
	bash tests/slurm-docker/test.sh bookworm trixie sid

demo-cluster: deps build collector standins
	bash tests/slurm-docker/demo.sh bookworm

# ------------------------------------------------- cgroup v2 + systemd guest
# tests/vm: a Debian sid guest (debootstrap, systemd as PID 1, unified cgroup
# v2, Slurm 26.05 with cgroup/v2, proctrack/cgroup, task/cgroup,
# PrologFlags=Alloc,Contain) booted with qemu-system-x86_64; its image is
# cached under /var/cache/gym-otel-vm by a hash of its recipe. Root, qemu.
.PHONY: vm-test
vm-test: build collector
	bash tests/vm/run.sh

# ---------------------------------------------------------------- benchmarks
# make bench: P1-P7 of docs/performance.md on a local Slurm of its own
# (/var/lib/gym-otel-bench, ports 17817+, its own munged), separate from the
# plugin tests' cluster, and P8, the job's files under five backend outages
# of 3 minutes each at 20,000 spans/s (no Slurm; GYM_OTEL_BENCH_OUTAGE_SECONDS
# sets the length); prints one table (also build/bench/result.txt).
# About 35 minutes; GYM_OTEL_BENCH_QUICK=1 about 14; GYM_OTEL_BENCH_ONLY=P1,P8
# runs a part. Root. Never part of `make test`: it prints, it does not gate.
.PHONY: bench
bench: deps build collector standins
	@mkdir -p $(BUILD)/bench
	$(GO) build -o $(BUILD)/bench/ ./tests/bench ./tests/bench/loadgen
	$(BUILD)/bench/bench

# make bench-scale: the plugin at scale (tests/scale, docs/performance.md):
# a simulated cluster of GOS_SCALE_NODES (default 32) slurmd on this host,
# one job over all of them without and with --gym-otel (slurmctld RPCs by
# type from sdiag, prolog and end times across nodes, readiness before the
# first task, the collectors' PSS), then one collector's CPU and memory idle
# with the default scrape targets and at 10,000 spans/s, and what dominates.
# About 25 minutes (4 for the cluster, 21 for the node); root; prints tables
# (also build/bench-scale/). Never part of `make test`.
GOS_SCALE_NODES ?= 32
.PHONY: bench-scale
bench-scale: deps build collector standins
	@mkdir -p $(BUILD)/bench
	$(GO) build -o $(BUILD)/bench/ ./tests/bench/loadgen
	@start=$$(date +%s); \
	bash tests/scale/run.sh --nodes $(GOS_SCALE_NODES) && bash tests/scale/node.sh; rc=$$?; \
	echo "make bench-scale took $$(( $$(date +%s) - start )) s"; exit $$rc
