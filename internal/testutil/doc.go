// Package testutil holds the helpers the os-builder tests share: host tools
// that skip or fail by the CI rule, golden files with -update, test input
// files, a real docker-registry process, the copy-floor benchmark, and a
// fuzz target's scratch directory and tar checksums.
//
// It is imported by _test.go files only.
package testutil
