// Command timings prints where make test's time went: its phases, the
// test packages (from go test's "ok pkg 12.3s" lines) and every QEMU
// guest the tests booted (the boot log internal/qemu writes when
// $OSB_BOOT_LOG is set), slowest first, and the boots grouped by artifact
// and firmware path, which is where a boot booted twice shows.
//
//	timings DIR   # DIR/phases, DIR/go-test.log, DIR/boots.jsonl
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/ironcore-dev/os-builder/internal/qemu"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: timings DIR")
		os.Exit(2)
	}
	if err := report(os.Stdout, os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "timings:", err)
		os.Exit(1)
	}
}

// phase is one line of DIR/phases: "NAME SECONDS STATUS".
type phase struct {
	name    string
	seconds int
	status  string
}

// pkgTime is one package's line of go test's output.
type pkgTime struct {
	name    string
	seconds float64
	result  string // ok, FAIL
}

func report(w io.Writer, dir string) error {
	phases, err := readPhases(filepath.Join(dir, "phases"))
	if err != nil {
		return err
	}
	pkgs, err := readGoTest(filepath.Join(dir, "go-test.log"))
	if err != nil {
		return err
	}
	boots, err := readBoots(filepath.Join(dir, "boots.jsonl"))
	if err != nil {
		return err
	}
	total := 0
	fmt.Fprintf(w, "\n== make test: where the time went\n%-24s %8s %s\n", "phase", "seconds", "status")
	for _, p := range phases {
		total += p.seconds
		fmt.Fprintf(w, "%-24s %8d %s\n", p.name, p.seconds, p.status)
	}
	fmt.Fprintf(w, "%-24s %8d\n", "total", total)

	// A package's boots: records whose test names it.
	bootSecs, bootCount := map[string]float64{}, map[string]int{}
	for _, b := range boots {
		pkg, _, _ := strings.Cut(b.Test, ".")
		bootSecs[pkg] += b.Ran
		bootCount[pkg]++
	}
	sort.SliceStable(pkgs, func(i, j int) bool { return pkgs[i].seconds > pkgs[j].seconds })
	fmt.Fprintf(w, "\n%-44s %8s %6s %12s\n", "package (go test, slowest first)", "seconds", "boots", "in guests")
	for _, p := range pkgs {
		if p.seconds < 1 && bootCount[p.name] == 0 {
			continue
		}
		fmt.Fprintf(w, "%-44s %8.0f %6d %11.0fs%s\n", p.name, p.seconds, bootCount[p.name], bootSecs[p.name], flag(p.result))
	}

	sort.SliceStable(boots, func(i, j int) bool { return boots[i].Ran > boots[j].Ran })
	var ran, waited float64
	fmt.Fprintf(w, "\n%-56s %-22s %-28s %7s %7s %s\n", "boot (slowest first)", "firmware", "artifact", "ran s", "wait s", "ended")
	for _, b := range boots {
		ran += b.Ran
		waited += b.Waited
		fmt.Fprintf(w, "%-56s %-22s %-28s %7.0f %7.0f %s\n", b.Test, b.Arch+" "+b.Firmware, b.Artifact, b.Ran, b.Waited, b.Outcome)
	}
	fmt.Fprintf(w, "%d boots, %.0f s in guests, %.0f s waiting for a slot\n", len(boots), ran, waited)

	// The same bytes through the same firmware path, booted by several
	// tests: candidates for one boot carrying the checks.
	type key struct{ arch, firmware, artifact string }
	groups := map[key][]qemu.BootRecord{}
	for _, b := range boots {
		k := key{b.Arch, b.Firmware, b.Artifact}
		groups[k] = append(groups[k], b)
	}
	keys := make([]key, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if len(groups[keys[i]]) != len(groups[keys[j]]) {
			return len(groups[keys[i]]) > len(groups[keys[j]])
		}
		return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j])
	})
	fmt.Fprintf(w, "\n%-28s %-28s %6s %8s\n", "artifact", "firmware", "boots", "seconds")
	for _, k := range keys {
		s := 0.0
		for _, b := range groups[k] {
			s += b.Ran
		}
		fmt.Fprintf(w, "%-28s %-28s %6d %8.0f\n", k.artifact, k.arch+" "+k.firmware, len(groups[k]), s)
	}
	return nil
}

func flag(result string) string {
	if result == "ok" {
		return ""
	}
	return " " + result
}

func readPhases(path string) ([]phase, error) {
	var out []phase
	err := eachLine(path, func(line string) error {
		f := strings.Fields(line)
		if len(f) != 3 {
			return fmt.Errorf("%q: want NAME SECONDS STATUS", line)
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			return fmt.Errorf("%q: %w", line, err)
		}
		status := "ok"
		if f[2] != "0" {
			status = "FAILED (exit " + f[2] + ")"
		}
		out = append(out, phase{f[0], n, status})
		return nil
	})
	return out, err
}

// goTestLine is go test's summary of one package: "ok  \tPKG\t12.345s" or
// "FAIL\tPKG\t12.345s" (cached results say "(cached)" and take no time).
var goTestLine = regexp.MustCompile(`^(ok|FAIL)\s+(\S+)\s+([0-9.]+)s`)

func readGoTest(path string) ([]pkgTime, error) {
	var out []pkgTime
	err := eachLine(path, func(line string) error {
		m := goTestLine.FindStringSubmatch(line)
		if m == nil {
			return nil
		}
		s, _ := strconv.ParseFloat(m[3], 64)
		name := strings.TrimPrefix(strings.TrimPrefix(m[2], module), "/")
		if name == "" {
			name = "."
		}
		out = append(out, pkgTime{name, s, m[1]})
		return nil
	})
	return out, err
}

const module = "github.com/ironcore-dev/os-builder"

func readBoots(path string) ([]qemu.BootRecord, error) {
	var out []qemu.BootRecord
	err := eachLine(path, func(line string) error {
		var r qemu.BootRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return fmt.Errorf("%q: %w", line, err)
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// eachLine calls fn for every non-empty line of path; a missing file (a
// phase that did not run) has none.
func eachLine(path string, fn func(string) error) error {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			if err := fn(line); err != nil {
				return fmt.Errorf("%s:%d: %w", path, n, err)
			}
		}
	}
	return sc.Err()
}
