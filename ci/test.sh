#!/usr/bin/env bash
# make test: every phase CI runs, each timed, stopping at the first that
# fails; at the end (also after a failure) the table of where the time
# went: phases, test packages, and every QEMU guest the tests booted
# (internal/qemu's boot log, $OSB_BOOT_LOG), from ci/timings. The guests
# of all test processes share one cap, the machine's cores
# (internal/qemu/slots.go).
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
timings=$PWD/out/timings
rm -rf "$timings" && mkdir -p "$timings"
export OSB_BOOT_LOG=$timings/boots.jsonl

# phase NAME CMD...: runs CMD, records NAME, its seconds and exit status.
phase() {
	local name=$1 start=$SECONDS status=0
	shift
	echo "== $name"
	"$@" || status=$?
	echo "$name $((SECONDS - start)) $status" >>"$timings/phases"
	return $status
}

table() { $GO run ./ci/timings "$timings" || true; }
trap table EXIT

out=$PWD/out
gotest() {
	OSB_TEST_OUTPUT=$out/test OSB_HYPERVISOR_OUTPUT=$out/hypervisor \
		OSB_TEST_SIGNED_OUTPUT=$out/test-signed OSB_TEST_SIGN_CERT=$out/keys/db.crt \
		OSB_TEST_ARM64_OUTPUT=$out/test-arm64 \
		$GO test -timeout 80m ./... 2>&1 | tee "$timings/go-test.log"
}
metaloperator() { (cd integrations/metal-operator && GONOSUMDB=github.com/ironcore-dev $GO test -timeout 10m ./...); }

phase setup make --no-print-directory setup &&
	phase vet make --no-print-directory fmt-check vet &&
	phase test-image make --no-print-directory test-image &&
	phase go-test gotest &&
	phase metal-operator metaloperator &&
	phase fuzz ci/fuzz.sh
