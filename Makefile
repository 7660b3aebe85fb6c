PREFIX ?= /usr/local
CARGO ?= cargo

.PHONY: build release test lint install run-example clean man completions check-generated

build:
	$(CARGO) build

release:
	$(CARGO) build --release

# The README's test command; .ci/run calls it.
test:
	$(CARGO) test --all-targets

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

install: release
	install -D -m 0755 target/release/guardian $(DESTDIR)$(PREFIX)/bin/guardian
	install -D -m 0644 man/guardian.1 $(DESTDIR)$(PREFIX)/share/man/man1/guardian.1
	install -D -m 0644 completions/guardian.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/guardian
	install -D -m 0644 completions/_guardian $(DESTDIR)$(PREFIX)/share/zsh/vendor-completions/_guardian
	install -D -m 0644 completions/guardian.fish $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/guardian.fish

run-example: release
	target/release/guardian -v --events-fd 1 -- sh -c 'setsid env -i sleep 1000 & echo provider done'

clean:
	$(CARGO) clean

# Generated files (checked in): the man page and shell completions, from src/cli.rs through
# the xtask crate (clap_mangen and clap_complete stay out of the guardian binary).
XTASK = $(CARGO) run --quiet --package xtask --

man:
	$(XTASK) man man

completions:
	$(XTASK) completions completions

# Fails when man/ or completions/ differ from what src/cli.rs generates now.
check-generated:
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(XTASK) man "$$tmp/man" >/dev/null && $(XTASK) completions "$$tmp/completions" >/dev/null && \
	if diff -ru man "$$tmp/man" && diff -ru completions "$$tmp/completions"; then \
		echo "check-generated: man/ and completions/ are up to date"; \
	else \
		echo "check-generated: stale generated files; run 'make man completions' and commit" >&2; exit 1; \
	fi
