#!/bin/sh
# Prints the layout table of crates/python/src/layout.rs (LAYOUTS) from the headers of each pyenv Python
# 3.8-3.13: offsets.c compiled against each version's headers (the interpreter's internal structs) and run.
# Usage: crates/python/offsets/gen.sh > /tmp/table; then paste it between the markers in layout.rs.
set -e
here=$(dirname "$0")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for minor in 8 9 10 11 12 13; do
	dir=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.$minor.* 2>/dev/null | sort -V | tail -n 1)
	[ -n "$dir" ] || { echo "gen.sh: no pyenv Python 3.$minor" >&2; exit 1; }
	echo "    // $(basename "$dir")"
	cc -o "$out/o$minor" -I "$dir/include/python3.$minor" "$here/offsets.c"
	"$out/o$minor"
done
