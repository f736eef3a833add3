# Quickstart: `make demo` (build, profile a bundled example, print the report, write the SVG, run the doctor)
#             `make test` (everything CI runs). Both install missing system packages first.
export PATH := $(PATH):/usr/local/go/bin:$(HOME)/.cargo/bin
WHYSLOW := target/release/whyslow

.PHONY: deps build workloads demo test lint bench clean

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
	cargo test --workspace --locked -- --test-threads=2

lint: deps
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --locked -- -D warnings

bench: build workloads
	bench/record_overhead.sh
	bench/unwind_completeness.sh
	bench/postprocess.sh
	bench/syscalls_overhead.sh
	bench/calls_overhead.sh
	bench/offcpu_alloc_overhead.sh
	bench/import_perfdata.sh
	bench/push_cost.sh
	bench/serve_overhead.sh
	bench/serve_all.sh

clean:
	cargo clean
	$(MAKE) -s -C tests/workloads clean
