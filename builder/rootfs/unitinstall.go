package rootfs

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
)

// maxUnitFile bounds a unit file before it is read.
const maxUnitFile = 1 << 20

// installDirs maps the [Install] keys that make links to the directory
// suffix `systemctl enable` puts them in ("" for Alias=, a link of its own).
var installDirs = map[string]string{
	"WantedBy":   ".wants",
	"RequiredBy": ".requires",
	"UpheldBy":   ".upholds",
	"Alias":      "",
}

// unitTypes are the suffixes systemd knows unit names by.
var unitTypes = []string{".service", ".socket", ".device", ".mount", ".automount", ".swap",
	".target", ".path", ".timer", ".slice", ".scope"}

// installLinks reads unit file data (unitName, at file) and returns the
// links enabling it makes, relative to /etc/systemd/system. Every value of
// WantedBy=, RequiredBy=, UpheldBy=, Alias= and Also= must be a plain unit
// name: the links are made under the image's /etc, and a "/" or ".." would
// put them anywhere. Errors name the file and line.
func installLinks(unitName, file string, r io.Reader) ([]string, error) {
	lines, err := installSection(file, io.LimitReader(r, maxUnitFile+1))
	if err != nil {
		return nil, err
	}
	values := map[string][]string{}
	for _, l := range lines {
		if _, ok := installDirs[l.key]; !ok && l.key != "Also" {
			continue
		}
		if l.value == "" { // an empty assignment resets the list, as in systemd
			values[l.key] = nil
			continue
		}
		for _, v := range strings.Fields(l.value) {
			if err := checkUnitName(v); err != nil {
				return nil, fmt.Errorf("%s:%d: %s=%s: %w", file, l.line, l.key, v, err)
			}
			if l.key == "Alias" && path.Ext(v) != path.Ext(unitName) {
				return nil, fmt.Errorf("%s:%d: Alias=%s: an alias of %s must end in %s", file, l.line, v, unitName, path.Ext(unitName))
			}
			values[l.key] = append(values[l.key], v)
		}
	}
	var links []string
	for _, key := range []string{"WantedBy", "RequiredBy", "UpheldBy", "Alias"} {
		for _, v := range values[key] {
			if key == "Alias" {
				links = append(links, v)
			} else {
				links = append(links, v+installDirs[key]+"/"+unitName)
			}
		}
	}
	return links, nil
}

// checkUnitName accepts what systemd accepts as a unit name (a prefix of
// letters, digits and ":-_.\@", then a unit type suffix) without "..".
func checkUnitName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty unit name")
	case len(name) > 255:
		return fmt.Errorf("unit name longer than 255 bytes")
	case strings.Contains(name, ".."):
		return fmt.Errorf("%q is not a plain unit name: it contains \"..\"", name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(":-_.\\@", c)) {
			return fmt.Errorf("%q is not a plain unit name: %q is not allowed (only letters, digits and \":-_.\\@\")", name, c)
		}
	}
	ext := path.Ext(name)
	if !slices.Contains(unitTypes, ext) || len(name) == len(ext) {
		return fmt.Errorf("%q is not a unit name (like foo.target): it ends in none of %s", name, strings.Join(unitTypes, " "))
	}
	return nil
}

// unitLine is one assignment in a unit file's [Install] section.
type unitLine struct {
	key, value string
	line       int // where the assignment starts
}

// installSection parses the assignments of the [Install] section: comments
// (# ;), sections, backslash continuations as systemd reads them.
func installSection(file string, r io.Reader) ([]unitLine, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxUnitFile)
	var out []unitLine
	var section string
	var cont *strings.Builder // an assignment continued on the next line
	start, n, size := 0, 0, 0
	for sc.Scan() {
		n++
		size += len(sc.Bytes()) + 1
		if size > maxUnitFile {
			return nil, fmt.Errorf("%s: larger than %d bytes", file, maxUnitFile)
		}
		text := sc.Text()
		if cont == nil {
			trimmed := strings.TrimSpace(text)
			if trimmed == "" || trimmed[0] == '#' || trimmed[0] == ';' {
				continue
			}
			if trimmed[0] == '[' {
				if !strings.HasSuffix(trimmed, "]") {
					return nil, fmt.Errorf("%s:%d: malformed section header %q", file, n, trimmed)
				}
				section = trimmed[1 : len(trimmed)-1]
				continue
			}
			cont, start = &strings.Builder{}, n
		} else if t := strings.TrimSpace(text); t != "" && (t[0] == '#' || t[0] == ';') {
			continue // comments inside a continuation are skipped
		}
		if strings.HasSuffix(text, `\`) {
			cont.WriteString(strings.TrimSuffix(text, `\`) + " ")
			continue
		}
		cont.WriteString(text)
		assignment := strings.TrimSpace(cont.String())
		cont = nil
		if section != "Install" {
			continue
		}
		key, value, ok := strings.Cut(assignment, "=")
		if !ok {
			return nil, fmt.Errorf("%s:%d: %q is not a key=value assignment", file, start, assignment)
		}
		out = append(out, unitLine{key: strings.TrimSpace(key), value: strings.TrimSpace(value), line: start})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if cont != nil {
		return nil, fmt.Errorf("%s:%d: the file ends inside a continued line", file, start)
	}
	return out, nil
}
