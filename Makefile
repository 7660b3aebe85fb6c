PREFIX ?= /usr/local
CARGO ?= cargo

.PHONY: build release test lint install run-example clean

build:
	$(CARGO) build

release:
	$(CARGO) build --release

# The README's test command; .ci/run calls it.
test:
	$(CARGO) test --all-targets

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings

install: release
	install -D -m 0755 target/release/guardian $(DESTDIR)$(PREFIX)/bin/guardian

run-example: release
	target/release/guardian -v --events-fd 1 -- sh -c 'setsid env -i sleep 1000 & echo provider done'

clean:
	$(CARGO) clean
