package docs_test

import (
	"strings"
	"testing"
)

// FuzzShellSegments: the splitter of documented shell lines never panics,
// and without quotes no word holds a separator, redirection or blank.
func FuzzShellSegments(f *testing.F) {
	for _, s := range []string{
		`bin/builder build recipes/test.yaml --output out/test`,
		`make setup builder && bin/builder build r.yaml --exclude-layer x   # the main job`,
		`SCRIPT=$(bin/serverboot plan --image $IMG --json | jq -r '.steps[1].scripts[0].url')`,
		`bin/redfish-emulator --listen 127.0.0.1:8001 --qemu-pxe-bootfile "$SCRIPT" &`,
		`docker-registry serve /tmp/r.yml >/tmp/r.log 2>&1 &`,
		`a "unterminated`, `)))((`, `2>`, `'`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		segs := shellSegments(line)
		quoted := strings.ContainsAny(line, `'"`)
		for _, seg := range segs {
			if len(seg) == 0 {
				t.Fatalf("%q: empty segment in %q", line, segs)
			}
			for _, w := range seg {
				if !quoted && (w == "" || strings.ContainsAny(w, " \t|&;()<>")) {
					t.Fatalf("%q: word %q holds a separator", line, w)
				}
			}
		}
	})
}
