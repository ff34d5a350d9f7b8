package uki

import (
	"testing"
)

// FuzzParsePE feeds arbitrary bytes to the PE parser and, when they parse,
// to everything that consumes a parsed image. Nothing may panic. The seeds
// are small: the host's 80 KiB stub made every input that large, and the
// fuzzer spent its time copying and minimising them (715 execs in 10 s);
// the unit tests read the host stub.
func FuzzParsePE(f *testing.F) {
	stub := syntheticStub()
	f.Add(stub)
	f.Add(stub[:0x100])
	opts := testOptions(stub)
	opts.Kernel, opts.Initrd = blob(1, 300), blob(2, 100)
	img, err := Build(opts)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(img)
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
		opts := Options{Stub: data, Kernel: []byte("kernel"), Cmdline: "x", Sections: []Section{{Name: ".x", Data: []byte{1}}}}
		// A fuzzed alignment makes images of hundreds of MiB that take
		// tens of milliseconds to build; the layout is what varies.
		if pl, err := layout(opts); err != nil || pl.size() > 1<<20 {
			return
		}
		img, err := Build(opts)
		if err != nil {
			return
		}
		if _, err := parsePE(img); err != nil {
			t.Fatalf("Build produced an image its own parser rejects: %v", err)
		}
	})
}
