# Quickstart: `make demo` (build, profile a bundled example, print the report, write the SVG, run the doctor)
#             `make test` (everything CI runs). Both install missing system packages first.
export PATH := $(PATH):/usr/local/go/bin:$(HOME)/.cargo/bin
WHYSLOW := target/release/whyslow

.PHONY: deps build workloads demo test test-under-load lint bench clean install
PREFIX ?= /usr/local

deps:
	@scripts/deps.sh

build: deps
	cargo build --release --locked

workloads: deps
	@$(MAKE) -s -C tests/workloads

demo: build workloads
	$(WHYSLOW) record -o demo.data -- tests/workloads/bin/cpu_split 3
	$(WHYSLOW) report demo.data --limit 10
	$(WHYSLOW) flamegraph demo.data -o demo.svg
	$(WHYSLOW) doctor -o doctor.data -- tests/workloads/bin/doctor_tzlog

test: deps workloads
	cargo test --workspace --locked --no-fail-fast -- --test-threads=2

# The suite must hold on a busy machine: three runs in a row beside `stress-ng --cpu 2` (2 busy cores).
test-under-load: deps workloads
	@command -v stress-ng >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null
	@stress-ng --cpu 2 --quiet & pid=$$!; trap "kill $$pid" EXIT; \
	for i in 1 2 3; do echo "test-under-load: run $$i of 3"; \
		cargo test --workspace --locked -- --test-threads=2 || exit 1; done

lint: deps
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --locked -- -D warnings

bench: build workloads
	bench/record_overhead.sh
	bench/unwind_completeness.sh
	bench/postprocess.sh
	bench/syscalls_overhead.sh
	bench/startup_cost.sh
	bench/calls_overhead.sh
	bench/offcpu_alloc_overhead.sh
	bench/import_perfdata.sh
	bench/push_cost.sh
	bench/serve_overhead.sh
	bench/serve_all.sh

# The binary, its man pages and shell completions under $(PREFIX).
install: build
	install -D -m 755 $(WHYSLOW) $(DESTDIR)$(PREFIX)/bin/whyslow
	$(WHYSLOW) man $(DESTDIR)$(PREFIX)/share/man/man1
	mkdir -p $(DESTDIR)$(PREFIX)/share/bash-completion/completions $(DESTDIR)$(PREFIX)/share/zsh/site-functions \
		$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	$(WHYSLOW) completions bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/whyslow
	$(WHYSLOW) completions zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_whyslow
	$(WHYSLOW) completions fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/whyslow.fish

clean:
	cargo clean
	$(MAKE) -s -C tests/workloads clean
