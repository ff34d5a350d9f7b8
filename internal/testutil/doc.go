// Package testutil holds the helpers the os-builder tests share: host tools
// that skip or fail by the CI rule, golden files with -update, test input
// files and the checks on what a write left, a real docker-registry
// process and the images pushed to it, the copy-floor benchmark, the
// interrupted-CLI test, and a fuzz target's scratch directory and tar
// checksums.
//
// It is imported by _test.go files only.
package testutil
