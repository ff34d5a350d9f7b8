package uki

import (
	"os"
	"testing"
)

// FuzzParsePE feeds arbitrary bytes to the PE parser and, when they parse,
// to everything that consumes a parsed image. Nothing may panic.
func FuzzParsePE(f *testing.F) {
	stub := syntheticStub()
	f.Add(stub)
	f.Add(stub[:0x100])
	if host, err := os.ReadFile(hostStubPath); err == nil {
		f.Add(host)
	}
	opts := testOptions(stub)
	opts.Kernel, opts.Initrd = blob(1, 3000), blob(2, 1000)
	if img, err := Build(opts); err == nil {
		f.Add(img)
	}
	f.Add([]byte("MZ"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := parsePE(data)
		if err != nil {
			return
		}
		if _, err := InspectBytes(data); err != nil {
			t.Fatalf("parsePE accepted what InspectBytes rejects: %v", err)
		}
		for _, s := range p.Sections {
			_ = p.content(s)
		}
		if p.dirOffset(dirSecurity) >= 0 {
			if _, err := authenticodeDigest(p); err != nil {
				t.Fatal(err)
			}
		}
		img, err := Build(Options{Stub: data, Kernel: []byte("kernel"), Cmdline: "x", Sections: []Section{{Name: ".x", Data: []byte{1}}}})
		if err != nil {
			return
		}
		if _, err := parsePE(img); err != nil {
			t.Fatalf("Build produced an image its own parser rejects: %v", err)
		}
	})
}
