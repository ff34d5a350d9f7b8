#!/usr/bin/env bash
# Runs every fuzz target of the module for a short while (FUZZTIME, default
# 10s) so CI really executes generated inputs, not only the seed corpus,
# FUZZJOBS targets at a time (default: one per core). Prints each target's
# final exec count; a crash fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
fuzzjobs=${FUZZJOBS:-$(nproc)}

# fuzz FILE DECL: runs one target from its package's directory (nested
# modules, integrations/*, too) and prints one line, or the log on failure.
fuzz() {
	local file=$1 decl=$2 target pkg out execs
	target=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/' <<<"$decl")
	pkg=./$(dirname "$file")
	run() {
		# One worker per target: FUZZJOBS targets share the cores.
		(cd "$pkg" && GONOSUMDB=github.com/ironcore-dev go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime 2s -parallel 1 . 2>&1)
	}
	local status=0
	out=$(run) || status=$?
	# Go's fuzz coordinator can end a loaded run with only "context deadline
	# exceeded" and no failing input: no finding, so run it once more.
	if ((status != 0)) && grep -q 'context deadline exceeded' <<<"$out" && ! grep -q 'Failing input written' <<<"$out"; then
		status=0
		out=$(run) || status=$?
	fi
	if ((status == 0)); then
		execs=$(grep -o 'execs: [0-9]*' <<<"$out" | tail -1 | cut -d' ' -f2 || true)
		printf 'fuzz %-40s %s execs\n' "$pkg.$target" "${execs:-?}"
	else
		printf 'fuzz %-40s FAILED\n%s\n' "$pkg.$target" "$out"
		return 1
	fi
}

# A failed target leaves a file in $failed: a job's exit status can be
# reaped before anyone waits for it.
failed=$(mktemp -d)
trap 'rm -rf "$failed"' EXIT
while IFS=: read -r file _ decl; do
	while (($(jobs -rp | wc -l) >= fuzzjobs)); do wait -n || true; done
	(fuzz "$file" "$decl" || touch "$failed/$RANDOM$RANDOM") &
done < <(git grep -n -E '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' -- '*_test.go' | sort)
wait
[[ -z $(ls -A "$failed") ]]
