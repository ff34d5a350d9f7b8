#!/usr/bin/env bash
# Runs every fuzz target of the module for a short while (FUZZTIME, default
# 10s) so CI really executes generated inputs, not only the seed corpus,
# FUZZJOBS targets at a time (default: one per core). Prints each target's
# final exec count and its execs per second as it ends (over the whole
# run, and fuzzing: past the worker's start and baseline coverage), then a
# table of all targets, target / execs / execs/s / fuzzing execs/s,
# slowest first, marking those fuzzing under FUZZMINRATE (default 1000)
# execs/s; a crash fails the run (a slow target does not: the rate follows
# the machine's load). FUZZMATCH
# (an extended regexp on "file:line:func Fuzz...") picks targets, to
# measure a few; FUZZJOBS=1 measures them one at a time.
#
# Each input that adds coverage is minimised for at most FUZZMINIMIZE
# (default 100 execs), a failing one too (still written and shown, less
# minimal): at Go's default of 60 s, or 2 s, a 10 s run of a fresh corpus
# spent most of its time minimising and executed a few hundred inputs.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
fuzzjobs=${FUZZJOBS:-$(nproc)}
fuzzminimize=${FUZZMINIMIZE:-100x}
fuzzmatch=${FUZZMATCH:-.}
fuzzminrate=${FUZZMINRATE:-1000}

# fuzz FILE DECL: runs one target from its package's directory (nested
# modules, integrations/*, too) and prints one line, or the log on failure.
fuzz() {
	local file=$1 decl=$2 target pkg out last secs execs rate
	target=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/' <<<"$decl")
	pkg=./$(dirname "$file")
	run() {
		# One worker per target: FUZZJOBS targets share the cores.
		(cd "$pkg" && GONOSUMDB=github.com/ironcore-dev go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$fuzzminimize" -parallel 1 . 2>&1)
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
		# Go's progress lines: "fuzz: elapsed: 10s, execs: 12345 (...)",
		# every 3 s and at the end. The run's rate is over the whole run;
		# the fuzzing rate from the first line to the last, past the start
		# (the worker's start and its baseline coverage of the cached
		# corpus, seconds for a large test binary), so it says what the
		# target reaches however long the start took.
		progress=$(grep -o 'elapsed: [0-9]*s, execs: [0-9]*' <<<"$out" || true)
		read -r secs execs < <(tail -1 <<<"$progress" | sed -E 's/elapsed: ([0-9]+)s, execs: ([0-9]+)/\1 \2/') || true
		read -r secs0 execs0 < <(head -1 <<<"$progress" | sed -E 's/elapsed: ([0-9]+)s, execs: ([0-9]+)/\1 \2/') || true
		rate='?' fuzzrate='?'
		if [[ $secs =~ ^[0-9]+$ && $execs =~ ^[0-9]+$ ]] && ((secs > 0)); then
			rate=$((execs / secs))
			fuzzrate=$rate
			if [[ $secs0 =~ ^[0-9]+$ && $execs0 =~ ^[0-9]+$ ]] && ((secs > secs0)); then
				fuzzrate=$(((execs - execs0) / (secs - secs0)))
			fi
		fi
		printf 'fuzz %-45s %9s execs %7s execs/s, fuzzing %7s execs/s\n' "$pkg.$target" "${execs:-?}" "$rate" "$fuzzrate"
		printf '%s %s %s %s\n' "$pkg.$target" "${execs:-?}" "$rate" "$fuzzrate" >"$results/$target.$RANDOM$RANDOM"
	else
		printf 'fuzz %-45s FAILED\n%s\n' "$pkg.$target" "$out"
		return 1
	fi
}

# A failed target leaves a file in $failed: a job's exit status can be
# reaped before anyone waits for it. Each finished one leaves its line of
# the table in $results.
failed=$(mktemp -d)
results=$(mktemp -d)
trap 'rm -rf "$failed" "$results"' EXIT
while IFS=: read -r file _ decl; do
	while (($(jobs -rp | wc -l) >= fuzzjobs)); do wait -n || true; done
	(fuzz "$file" "$decl" || touch "$failed/$RANDOM$RANDOM") &
done < <(git grep -n -E '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' -- '*_test.go' | grep -E -- "$fuzzmatch" | sort)
wait
# The table: slowest fuzzing first ("?" rates, no progress line, sort
# first); targets whose fuzzing rate is under FUZZMINRATE are marked.
echo
printf '%-50s %10s %9s %9s\n' target execs execs/s fuzzing
cat "$results"/* 2>/dev/null | sort -k4,4n | while read -r t n r fr; do
	mark=
	if ! [[ $fr =~ ^[0-9]+$ ]] || ((fr < fuzzminrate)); then
		mark="  < $fuzzminrate"
	fi
	printf '%-50s %10s %9s %9s%s\n' "$t" "$n" "$r" "$fr" "$mark"
done
[[ -z $(ls -A "$failed") ]]
