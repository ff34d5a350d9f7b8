// Package testutil holds the helpers the os-builder tests share: host tools
// that skip or fail by the CI rule, golden files with -update, test input
// files, a real docker-registry process and the copy-floor benchmark.
//
// It is imported by _test.go files only.
package testutil
