// Package keyvalue reads files of KEY=VALUE lines: os-release(5) and the
// kernel's uevent files. It is the one parser for both, so the builder
// (reading an image's os-release) and the init (reading /sys) need not
// each keep their own, and it sits under internal so that importing it
// pulls in nothing else of the module.
package keyvalue

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
)

// Parse reads KEY=VALUE lines into a map; a later key wins. Surrounding
// white space, blank lines, comment lines (#) and lines without "=" are
// skipped. A value in single quotes is taken literally; one in double
// quotes has the backslash escapes os-release allows (\" \\ \$ \`)
// undone. Other values are kept as they are, so uevent values, which the
// kernel never quotes, read back exactly unless they start and end with
// the same quote.
func Parse(r io.Reader) (map[string]string, error) {
	m := map[string]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		m[k] = unquote(v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("keyvalue: %w", err)
	}
	return m, nil
}

// ReadFile parses the file at path (see Parse).
func ReadFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("keyvalue: %w", err)
	}
	defer f.Close()
	m, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("keyvalue: %s: %w", path, err)
	}
	return m, nil
}

func unquote(v string) string {
	if len(v) < 2 || v[0] != v[len(v)-1] {
		return v
	}
	switch v[0] {
	case '\'':
		return v[1 : len(v)-1]
	case '"':
		inner := v[1 : len(v)-1]
		var b strings.Builder
		for i := 0; i < len(inner); i++ {
			if inner[i] == '\\' && i+1 < len(inner) && strings.IndexByte("\"\\$`", inner[i+1]) >= 0 {
				i++
			}
			b.WriteByte(inner[i])
		}
		return b.String()
	}
	return v
}
