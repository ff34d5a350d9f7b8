#!/usr/bin/env bash
# Runs every fuzz target of the module for a short while (FUZZTIME, default
# 10s) so CI really executes generated inputs, not only the seed corpus.
# Prints each target's final exec count; a crash fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
status=0
while IFS=: read -r file _ decl; do
	target=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/' <<<"$decl")
	pkg=./$(dirname "$file")
	log=$(mktemp)
	# From the package's directory: nested modules (integrations/*) too.
	if (cd "$pkg" && GONOSUMDB=github.com/ironcore-dev go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime 2s .) >"$log" 2>&1; then
		execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
		printf 'fuzz %-40s %s execs\n' "$pkg.$target" "${execs:-?}"
	else
		printf 'fuzz %-40s FAILED\n' "$pkg.$target"
		cat "$log"
		status=1
	fi
	rm -f "$log"
done < <(git grep -n -E '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' -- '*_test.go' | sort)
exit $status
