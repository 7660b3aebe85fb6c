PREFIX ?= /usr/local
CARGO ?= cargo

.PHONY: build release test lint install run-example clean bench man completions options check-generated deb static musl systemd-test

build:
	$(CARGO) build

# The cargo target directory: $(CARGO_TARGET_DIR) when set (cargo's convention), else target/.
TARGET_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))
HOST_TARGET := $(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p')
HOST_ARCH := $(shell uname -m)

# The shipped binary is static: musl (static-pie; about 40 kB private memory per resident
# guardian) when its rustup target is installed, else (said on stderr, with the command that adds
# the target) glibc crt-static (static-pie; about 75 kB). Both keep ASLR. Built reproducibly by
# scripts/build-static.sh (no `rustup target add`, ever). It lands in $(DIST).
DIST = $(TARGET_DIR)/dist/guardian

release:
	@bin=$$(sh scripts/build-static.sh $(HOST_ARCH) --glibc-fallback) && install -D -m 0755 "$$bin" $(DIST)
	@echo "release: $(DIST)"

# The README's test command; .ci/run calls it. Two passes:
# 1. every test against the shipped configuration (no test-hooks); the tests that need a hook
#    print `SKIPPED: <test>: needs the test-hooks feature ...` instead of passing untested;
# 2. only those tests (HOOK_TESTS, checked against pass 1's skips) against a test-hooks build.
# Every skip is appended to $(SKIP_LOG); .ci/run counts them.
HOOK_TESTS = namespaces::reused_pid_is_never_signalled \
	behaviour::fork_storm_converges_listing_all_of_proc \
	behaviour::pid_hopper_converges_listing_all_of_proc \
	signals_all::a_fault_inside_guardian_still_ends_it \
	supervise_stop::a_signal_during_start_up_is_handled_as_once_guardian_runs \
	doctor::a_full_proc_listing_is_reported_as_a_note \
	sentinel::a_sentinel_killed_while_guardian_checks_it_still_ends_in_a_teardown
SKIP_LOG = $(TARGET_DIR)/test-skips.log

test:
	@mkdir -p $(TARGET_DIR) && rm -f $(SKIP_LOG)
	GUARDIAN_TEST_SKIP_LOG=$(SKIP_LOG) $(CARGO) test --all-targets
	# The spec crate (spec/events.json current), xtask, and the Rust client (its rmcp tests
	# included; they run the guardian the line above built, $(TARGET_DIR)/debug/guardian).
	$(CARGO) test --package treeguardian-spec --package xtask --package treeguardian-client
	@missing=$$(sed -n 's/^SKIPPED: \(.*\): needs the test-hooks feature.*/\1/p' $(SKIP_LOG) 2>/dev/null | \
		grep -vxF $(foreach t,$(HOOK_TESTS),-e $(t))); \
	if [ -n "$$missing" ]; then echo "make test: add to HOOK_TESTS (they need test-hooks): $$missing" >&2; exit 1; fi
	GUARDIAN_TEST_SKIP_LOG=$(SKIP_LOG) $(CARGO) test --features test-hooks --test it -- --exact $(HOOK_TESTS)

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS=-Dwarnings $(CARGO) doc --quiet --package treeguardian-client --no-deps --all-features

install: release
	install -D -m 0755 $(DIST) $(DESTDIR)$(PREFIX)/bin/guardian
	install -D -m 0644 man/guardian.1 $(DESTDIR)$(PREFIX)/share/man/man1/guardian.1
	install -D -m 0644 completions/guardian.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/guardian
	install -D -m 0644 completions/_guardian $(DESTDIR)$(PREFIX)/share/zsh/vendor-completions/_guardian
	install -D -m 0644 completions/guardian.fish $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/guardian.fish

run-example: release
	$(DIST) -v --events-fd 1 -- sh -c 'setsid env -i sleep 1000 & echo provider done'

# Benchmarks against tini, dumb-init and catatonit (installs them from Debian when missing);
# writes docs/benchmarks.md, docs/teardown.svg and docs/benchmarks-raw.json. The shipped static
# binary is what is measured.
bench: release
	GUARDIAN=$(CURDIR)/$(DIST) python3 bench/run --no-build

clean:
	$(CARGO) clean

# The systemd lane (tests/systemd/run.sh): a Debian 12 root with systemd as init under qemu TCG
# runs the README's systemd lines with the shipped static binary. The root image is built by
# debootstrap once (about 3 minutes) and cached in target/systemd/; a run boots in 1-3 minutes.
systemd-test: release
	tests/systemd/run.sh

# Generated files (checked in): the man page, the help texts guardian prints (man/help/,
# included into the binary), shell completions and spec/options.json (the option list the
# drivers are checked against), from the option table in crates/spec/src/options.rs through the
# xtask crate (clap, clap_mangen and clap_complete stay out of the guardian binary).
XTASK = $(CARGO) run --quiet --package xtask --

man:
	$(XTASK) man man

completions:
	$(XTASK) completions completions

options:
	$(XTASK) options spec

# Fails when man/ (with man/help/), completions/ or spec/options.json differ from what
# crates/spec/src/options.rs generates now.
check-generated:
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(XTASK) man "$$tmp/man" >/dev/null && $(XTASK) completions "$$tmp/completions" >/dev/null && \
	$(XTASK) options "$$tmp/spec" >/dev/null && \
	if diff -ru man "$$tmp/man" && diff -ru completions "$$tmp/completions" && \
	   diff -u spec/options.json "$$tmp/spec/options.json"; then \
		echo "check-generated: man/, completions/ and spec/options.json are up to date"; \
	else \
		echo "check-generated: stale generated files; run 'make man completions options' and commit" >&2; exit 1; \
	fi

# spec/events.json (for the Node and Python drivers) from crates/spec/src/events.rs. A stale
# file fails `cargo test -p treeguardian-spec` (crates/spec/tests/generated.rs).
.PHONY: spec-events
spec-events:
	GUARDIAN_BLESS=1 $(CARGO) test --quiet --package treeguardian-spec --test generated

# Debian package (needs cargo-deb: cargo install cargo-deb --locked). Output: $(TARGET_DIR)/debian/.
deb:
	$(CARGO) deb --package treeguardian

# Statically linked glibc build. The explicit --target keeps RUSTFLAGS away from build
# scripts and proc-macros, which must stay dynamic.
STATIC_TARGET = $(HOST_TARGET)
static:
	RUSTFLAGS="-C target-feature=+crt-static" $(CARGO) build --locked --release --package treeguardian --target $(STATIC_TARGET)
	@ls -l $(TARGET_DIR)/$(STATIC_TARGET)/release/guardian
	@file $(TARGET_DIR)/$(STATIC_TARGET)/release/guardian 2>/dev/null || true

# Static musl build (no C toolchain: guardian has no C code). Needs the rustup target; without
# it, fails naming the one command that adds it (a build never adds it itself).
musl:
	@bin=$$(sh scripts/build-static.sh $(HOST_ARCH)) && ls -l "$$bin"

# npm platform packages of treeguardian: the static musl guardian for linux-x64 and
# linux-arm64 (scripts/build-static.sh; a platform whose rustup target is not installed is
# skipped, naming the command that adds it) in packaging/npm/platforms/*/bin/, ELF headers
# checked, packed with the driver into $(TARGET_DIR)/npm/.
.PHONY: npm-packages
npm-packages:
	sh packaging/npm/build-packages.sh

# The container lane: builds the image from packaging/container/Containerfile with local base
# images (debootstrap + podman import, cached in podman's storage) and checks guardian as PID 1
# under podman and as a Pod's entrypoint under podman kube play. Root; see tests/container/run.sh.
.PHONY: container-test
container-test:
	bash tests/container/run.sh
# Python wheels of treeguardian (packaging/python): the static musl guardian for x86_64 and
# aarch64 (scripts/build-static.sh, as npm-packages) as a script of each platform wheel,
# tagged for glibc and musl distributions, and the sdist (which refuses to build), in
# $(TARGET_DIR)/wheels/. A target whose rustup target is not installed is skipped, naming the
# command that adds it.
.PHONY: wheels python-test
WHEELS = $(TARGET_DIR)/wheels
wheels:
	sh packaging/python/build-wheels.sh $(WHEELS)

# The Python driver's tests: wheels into fresh venvs (no guardian on PATH), pytest against
# the real MCP SDK 2.x and 1.30.0, the mypy --strict usage example.
python-test: wheels
	sh packaging/python/test/run.sh $(WHEELS)

# The pure cgroup v2 lane (issue 19 Must 2): Debian's 6.1 cloud kernel in qemu (-accel tcg) with
# cgroup_no_v1=all and nsdelegate, for each of VM_ARCHES; tests/vm/scenarios.sh plus the
# integration tests' cgroup:: area run inside. Installs qemu and fetches the guest's packages
# itself; prints `vm: N passed, N failed` last. See tests/vm/run.
VM_ARCHES ?= all
.PHONY: vm-test
vm-test:
	tests/vm/run $(VM_ARCHES)

# A release (issue 31; the checklist is in README's Development section).
# dist: every artefact into $(DIST_DIR) (scripts/dist.sh: static binaries x86_64 + aarch64,
# wheels, sdist, npm tarballs, .crate files, .deb, the container image where podman is, and
# SHA256SUMS; SKIPPED lists what this machine could not build and the command that fixes it).
# dist-check: each ecosystem's own pre-publish check on it (scripts/dist-check.sh).
# dist-install-check: a new user's install from only $(DIST_DIR), following the READMEs, into an
# empty venv, npm project and cargo project, each running its README example.
# check-reproducible: the static binaries, built from HEAD in two directories, are identical.
DIST_DIR ?= dist
.PHONY: dist dist-check dist-install-check check-reproducible
dist:
	DIST_DIR=$(DIST_DIR) bash scripts/dist.sh

dist-check:
	DIST_DIR=$(DIST_DIR) bash scripts/dist-check.sh

dist-install-check:
	DIST_DIR=$(DIST_DIR) bash scripts/dist-install-check.sh

check-reproducible:
	bash scripts/check-reproducible.sh
