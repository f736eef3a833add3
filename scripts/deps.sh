#!/usr/bin/env bash
# Installs the system packages whyslow's build, demo, tests and benchmarks need, only where missing.
# Runs apt-get as root (or through sudo); prints what it installs.
set -euo pipefail
need=()
have() { command -v "$1" >/dev/null 2>&1; }
pkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for cmd_pkg in gcc:gcc g++:g++ make:make pkg-config:pkg-config clang:clang perf:linux-perf nginx:nginx \
               strace:strace ltrace:ltrace hyperfine:hyperfine bpftool:bpftool sqlite3:sqlite3 wrk:wrk \
               protoc:protobuf-compiler promtool:prometheus chromium:chromium \
               redis-server:redis-server redis-benchmark:redis-tools \
               mariadbd:mariadb-server mariadb-slap:mariadb-client pgbench:postgresql \
               debuginfod:debuginfod debuginfod-find:debuginfod javac:openjdk-17-jdk-headless \
               jcmd:openjdk-17-jdk-headless; do
  cmd=${cmd_pkg%%:*}; pkg=${cmd_pkg#*:}
  have "$cmd" || need+=("$pkg")
done
# libc6-dbg: the symbols of glibc's local functions (IFUNC implementations such as __memmove_avx_unaligned_erms).
# libprotobuf-dev: the doctor's protobuf-reflection workload links the real library.
# golang-1.19-go: the Go 1.18-1.19 layout of .gopclntab (Debian's own Go programs, prometheus among them).
for pkg in libelf-dev zlib1g-dev libc6-dbg libprotobuf-dev golang-1.19-go; do pkg_installed "$pkg" || need+=("$pkg"); done
if ! have go && [ ! -x /usr/local/go/bin/go ]; then need+=(golang-go); fi
if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
# The web UI's browser tests: Playwright from PyPI in a venv under the repository (.venv-ui), driving the
# system's Chromium above (never `playwright install`, which downloads a browser build of its own).
root="$(cd "$(dirname "$0")/.." && pwd)"
if ! "$root/.venv-ui/bin/python" -c "import playwright" >/dev/null 2>&1; then
  echo "deps: installing playwright into .venv-ui"
  if ! python3 -m venv --clear "$root/.venv-ui" >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv --clear "$root/.venv-ui"
  fi
  "$root/.venv-ui/bin/pip" install -q "playwright==1.65.2"
fi
if ! have cargo; then
  echo "deps: cargo not found: install Rust (https://rustup.rs) and re-run" >&2
  exit 1
fi
