package uki

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"debug/pe"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

const hostStubPath = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub"

// hostStub returns the host's systemd-stub (package systemd-boot-efi).
func hostStub(t testing.TB) []byte {
	t.Helper()
	testutil.RequireFiles(t, hostStubPath)
	return testutil.ReadFile(t, hostStubPath)
}

// blob returns n deterministic pseudo-random bytes for seed.
func blob(seed uint64, n int) []byte {
	b := make([]byte, n+8)
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := 0; i < n; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[i:], x)
	}
	return b[:n]
}

// testOptions is a UKI from the given stub and fake kernel/initrd blobs of
// odd sizes (so padding is exercised).
func testOptions(stub []byte) Options {
	return Options{
		Stub:            stub,
		Kernel:          blob(1, 3<<20+123),
		Initrd:          blob(2, 1<<20+7),
		Cmdline:         "console=ttyS0 osb.mode=memory\n",
		OSRelease:       "PRETTY_NAME=\"Test OS\"\nID=debian\nVERSION_ID=12\n",
		Uname:           "6.1.0-99-amd64\n",
		SourceDateEpoch: 1700000000,
	}
}

// syntheticStub is a minimal PE32+ EFI application with a .text and a .sbat
// section whose headers leave room for only two more section headers, so
// the builder must grow the headers and move the sections in the file. It
// keeps golden output independent of the host's systemd version.
func syntheticStub() []byte {
	const (
		lfanew   = 0x40
		optSize  = 0xf0
		fileAl   = 0x200
		sectAl   = 0x1000
		textVA   = 0x1000
		sbatVA   = 0x2000
		textRaw  = 0x200
		sbatRaw  = 0x400
		fileSize = 0x600
	)
	b := make([]byte, fileSize)
	copy(b, "MZ")
	binary.LittleEndian.PutUint32(b[0x3c:], lfanew)
	copy(b[lfanew:], "PE\x00\x00")
	coff := b[lfanew+4:]
	binary.LittleEndian.PutUint16(coff[0:], MachineAMD64)
	binary.LittleEndian.PutUint16(coff[2:], 2)
	binary.LittleEndian.PutUint16(coff[16:], optSize)
	binary.LittleEndian.PutUint16(coff[18:], 0x206)
	opt := coff[20:]
	binary.LittleEndian.PutUint16(opt[0:], magicPE32Plus)
	binary.LittleEndian.PutUint32(opt[optSizeOfCode:], 0x200)
	binary.LittleEndian.PutUint32(opt[optSizeOfInitializedData:], 0x200)
	binary.LittleEndian.PutUint32(opt[16:], textVA) // AddressOfEntryPoint
	binary.LittleEndian.PutUint32(opt[optSectionAlignment:], sectAl)
	binary.LittleEndian.PutUint32(opt[optFileAlignment:], fileAl)
	binary.LittleEndian.PutUint32(opt[optSizeOfImage:], 0x3000)
	binary.LittleEndian.PutUint32(opt[optSizeOfHeaders:], 0x200)
	binary.LittleEndian.PutUint16(opt[68:], 10) // EFI application
	binary.LittleEndian.PutUint32(opt[optNumberOfRvaAndSizes:], 16)
	table := opt[optSize:]
	sec := func(i int, name string, va, vs, raw, ptr, ch uint32) {
		h := table[i*sectionHeaderSize:]
		copy(h, name)
		binary.LittleEndian.PutUint32(h[8:], vs)
		binary.LittleEndian.PutUint32(h[12:], va)
		binary.LittleEndian.PutUint32(h[16:], raw)
		binary.LittleEndian.PutUint32(h[20:], ptr)
		binary.LittleEndian.PutUint32(h[36:], ch)
	}
	code := []byte{0x48, 0x31, 0xc0, 0xc3} // xor rax, rax; ret (EFI_SUCCESS)
	sbat := sbatHeader + "\nstub,1,Test Stub,stub,1,https://example.invalid/\n"
	sec(0, ".text", textVA, uint32(len(code)), fileAl, textRaw, 0x60000020)
	sec(1, ".sbat", sbatVA, uint32(len(sbat)), fileAl, sbatRaw, scnCntInitializedData|scnMemRead)
	copy(b[textRaw:], code)
	copy(b[sbatRaw:], sbat)
	binary.LittleEndian.PutUint32(opt[optCheckSum:], peChecksum(b, lfanew+4+20+optCheckSum))
	return b
}

// refChecksum is the PE checksum computed the textbook way, word by word,
// independently of checksummer.
func refChecksum(b []byte, checksumOff int) uint32 {
	var sum uint32
	for i := 0; i < len(b); i += 2 {
		if i == checksumOff || i == checksumOff+2 {
			continue
		}
		w := uint32(b[i])
		if i+1 < len(b) {
			w |= uint32(b[i+1]) << 8
		}
		sum += w
		sum = (sum & 0xffff) + (sum >> 16)
	}
	return sum + uint32(len(b))
}

func checksumFieldOffset(t testing.TB, b []byte) int {
	t.Helper()
	return int(binary.LittleEndian.Uint32(b[0x3c:])) + 4 + coffHeaderSize + optCheckSum
}

func TestChecksumMatchesReference(t *testing.T) {
	for _, n := range []int{0, 1, 2, 7, 8, 9, 63, 64, 65, 4097} {
		b := blob(uint64(n), n+0x100)
		want := refChecksum(b, 0x40)
		if got := peChecksum(b, 0x40); got != want {
			t.Errorf("len %d: peChecksum = %#x, want %#x", len(b), got, want)
		}
		// Arbitrary write splits must not matter.
		var c checksummer
		c.Write(b[:0x40])
		c.Write(make([]byte, 4))
		rest := b[0x44:]
		for i := 1; len(rest) > 0; i = i%13 + 1 {
			k := min(i, len(rest))
			c.Write(rest[:k])
			rest = rest[k:]
		}
		if got := c.Sum(); got != want {
			t.Errorf("len %d: split checksum = %#x, want %#x", len(b), got, want)
		}
	}
	// The stub's linker computed its checksum: we must agree with it.
	stub := hostStub(t)
	off := checksumFieldOffset(t, stub)
	if got, want := peChecksum(stub, off), binary.LittleEndian.Uint32(stub[off:]); got != want {
		t.Errorf("stub checksum: computed %#x, stored %#x", got, want)
	}
}

// checkInvariants re-parses a UKI with debug/pe and checks the layout rules
// the builder promises, and that every added section holds exactly what
// opts asked for.
func checkInvariants(t *testing.T, img []byte, opts Options) {
	t.Helper()
	f, err := pe.NewFile(bytes.NewReader(img))
	if err != nil {
		t.Fatalf("debug/pe: %v", err)
	}
	oh, ok := f.OptionalHeader.(*pe.OptionalHeader64)
	if !ok {
		t.Fatalf("optional header is %T, want PE32+", f.OptionalHeader)
	}
	stub, err := pe.NewFile(bytes.NewReader(opts.Stub))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.FileHeader.NumberOfSections; int(got) != len(f.Sections) {
		t.Errorf("NumberOfSections %d, parsed %d", got, len(f.Sections))
	}
	if opts.SourceDateEpoch != 0 && f.FileHeader.TimeDateStamp != uint32(opts.SourceDateEpoch) {
		t.Errorf("TimeDateStamp %d, want %d", f.FileHeader.TimeDateStamp, opts.SourceDateEpoch)
	}
	tableEnd := binary.LittleEndian.Uint32(img[0x3c:]) + 4 + coffHeaderSize + uint32(f.FileHeader.SizeOfOptionalHeader) + uint32(len(f.Sections))*sectionHeaderSize
	if oh.SizeOfHeaders < tableEnd || oh.SizeOfHeaders%oh.FileAlignment != 0 {
		t.Errorf("SizeOfHeaders %#x: section table ends %#x, FileAlignment %#x", oh.SizeOfHeaders, tableEnd, oh.FileAlignment)
	}
	stubNames := map[string]bool{}
	for _, s := range stub.Sections {
		stubNames[s.Name] = true
	}
	want := map[string][]byte{
		".osrel":   []byte(opts.OSRelease),
		".cmdline": []byte(strings.TrimSpace(opts.Cmdline)),
		".uname":   []byte(strings.TrimSpace(opts.Uname)),
		".initrd":  opts.Initrd,
		".linux":   opts.Kernel,
	}
	for _, s := range opts.Sections {
		want[s.Name] = s.Data
	}
	var prevEnd uint32
	var fileEnd uint32 = oh.SizeOfHeaders
	sbats := 0
	for i, s := range f.Sections {
		if s.VirtualAddress < prevEnd {
			t.Errorf("section %d %s: VA %#x below previous end %#x", i, s.Name, s.VirtualAddress, prevEnd)
		}
		prevEnd = s.VirtualAddress + s.VirtualSize
		if s.Offset%oh.FileAlignment != 0 || s.Size%oh.FileAlignment != 0 {
			t.Errorf("section %s: raw [%#x, +%#x) not FileAlignment-aligned", s.Name, s.Offset, s.Size)
		}
		if s.Offset != fileEnd {
			t.Errorf("section %s at file offset %#x, want %#x (contiguous)", s.Name, s.Offset, fileEnd)
		}
		fileEnd = s.Offset + s.Size
		if s.Name == ".sbat" {
			sbats++
		}
		if stubNames[s.Name] && s.Name != ".sbat" {
			old := stub.Section(s.Name)
			a, _ := old.Data()
			b, _ := s.Data()
			if old.VirtualAddress != s.VirtualAddress || old.VirtualSize != s.VirtualSize || !bytes.Equal(a, b) {
				t.Errorf("stub section %s changed", s.Name)
			}
			continue
		}
		if s.VirtualAddress%oh.SectionAlignment != 0 || s.VirtualAddress%4096 != 0 {
			t.Errorf("section %s: VA %#x not aligned", s.Name, s.VirtualAddress)
		}
		if s.Characteristics != pe.IMAGE_SCN_CNT_INITIALIZED_DATA|pe.IMAGE_SCN_MEM_READ {
			t.Errorf("section %s: characteristics %#x", s.Name, s.Characteristics)
		}
		if s.Size < s.VirtualSize || s.Size-s.VirtualSize >= oh.FileAlignment {
			t.Errorf("section %s: SizeOfRawData %#x for VirtualSize %#x", s.Name, s.Size, s.VirtualSize)
		}
		data, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data[s.VirtualSize:], make([]byte, s.Size-s.VirtualSize)) {
			t.Errorf("section %s: padding not zero", s.Name)
		}
		if w, ok := want[s.Name]; ok {
			if !bytes.Equal(data[:s.VirtualSize], w) {
				t.Errorf("section %s: content differs from input (%d vs %d bytes)", s.Name, s.VirtualSize, len(w))
			}
			delete(want, s.Name)
		}
	}
	for name, w := range want {
		if len(w) > 0 {
			t.Errorf("section %s missing", name)
		}
	}
	if sbats != 1 {
		t.Errorf("%d .sbat sections, want 1", sbats)
	}
	if last := f.Sections[len(f.Sections)-1]; last.Name != ".linux" {
		t.Errorf("last section %s, want .linux", last.Name)
	}
	if want := uint32(alignUp(uint64(prevEnd), uint64(oh.SectionAlignment))); oh.SizeOfImage != want {
		t.Errorf("SizeOfImage %#x, want %#x", oh.SizeOfImage, want)
	}
	sec := oh.DataDirectory[pe.IMAGE_DIRECTORY_ENTRY_SECURITY]
	switch {
	case sec.Size == 0 && fileEnd != uint32(len(img)):
		t.Errorf("file is %#x bytes, sections end at %#x", len(img), fileEnd)
	case sec.Size != 0 && (sec.VirtualAddress != fileEnd || sec.VirtualAddress+sec.Size != uint32(len(img))):
		t.Errorf("certificate table [%#x,+%#x) not right after sections (%#x) at end of file (%#x)", sec.VirtualAddress, sec.Size, fileEnd, len(img))
	}
	off := checksumFieldOffset(t, img)
	if got, want := oh.CheckSum, refChecksum(img, off); got != want {
		t.Errorf("CheckSum %#x, independent computation %#x", got, want)
	}
}

func TestBuildHostStub(t *testing.T) {
	opts := testOptions(hostStub(t))
	opts.Sections = []Section{{Name: ".pcrpkey", Data: []byte("not a real key\n")}}
	img, err := Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, img, opts)

	sbat, err := SectionData(img, ".sbat")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(sbat), "\n"), "\n")
	if !strings.HasPrefix(lines[0], "sbat,1,") || !strings.Contains(string(sbat), "\nsystemd,1,") || lines[len(lines)-1] != strings.TrimSpace(DefaultSBAT) {
		t.Errorf(".sbat does not merge the stub's lines and the uki line:\n%s", sbat)
	}

	// Streaming to a file gives the same bytes.
	path := filepath.Join(t.TempDir(), "uki.efi")
	if err := BuildFile(path, opts); err != nil {
		t.Fatal(err)
	}
	onDisk, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, img) {
		t.Error("BuildFile and Build differ")
	}
	if again, _ := Build(opts); !bytes.Equal(again, img) {
		t.Error("Build is not reproducible")
	}
}

func TestBuildSyntheticStubGrowsHeaders(t *testing.T) {
	opts := testOptions(syntheticStub())
	img, err := Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, img, opts)
	p, err := parsePE(img)
	if err != nil {
		t.Fatal(err)
	}
	if p.SizeOfHeaders != 0x400 {
		t.Errorf("SizeOfHeaders %#x, want 0x400 (grown for 7 headers)", p.SizeOfHeaders)
	}
}

// objdumpSections runs objdump -h and returns section name -> size.
func objdumpSections(t *testing.T, path string) map[string]uint64 {
	t.Helper()
	out, err := exec.Command(testutil.RequireTool(t, "objdump"), "-h", path).CombinedOutput()
	if err != nil {
		t.Fatalf("objdump -h: %v\n%s", err, out)
	}
	re := regexp.MustCompile(`(?m)^\s*\d+\s+(\.\S+)\s+([0-9a-f]+)\s`)
	m := map[string]uint64{}
	for _, sm := range re.FindAllStringSubmatch(string(out), -1) {
		n, _ := strconv.ParseUint(sm[2], 16, 64)
		m[sm[1]] = n
	}
	return m
}

func TestObjdumpAndSbverifyReadUKI(t *testing.T) {
	testutil.RequireTool(t, "objdump")
	sbverify := testutil.RequireTool(t, "sbverify")
	opts := testOptions(hostStub(t))
	path := filepath.Join(t.TempDir(), "uki.efi")
	if err := BuildFile(path, opts); err != nil {
		t.Fatal(err)
	}
	img, _ := os.ReadFile(path)
	sbat, _ := SectionData(img, ".sbat")
	got := objdumpSections(t, path)
	for name, size := range map[string]int{
		".osrel":   len(opts.OSRelease),
		".cmdline": len(strings.TrimSpace(opts.Cmdline)),
		".uname":   len(strings.TrimSpace(opts.Uname)),
		".sbat":    len(sbat),
		".initrd":  len(opts.Initrd),
		".linux":   len(opts.Kernel),
	} {
		if got[name] != uint64(size) {
			t.Errorf("objdump: %s size %#x, want %#x", name, got[name], size)
		}
	}
	out, err := exec.Command(sbverify, "--list", path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "No signature table present") {
		t.Errorf("sbverify --list: %v\n%s", err, out)
	}
}

// goldenDump is the textual section table of a UKI.
func goldenDump(img []byte) (string, error) {
	p, err := parsePE(img)
	if err != nil {
		return "", err
	}
	infos, err := InspectBytes(img)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "size %#x checksum %#x SizeOfImage %#x SizeOfHeaders %#x timestamp %d\n",
		len(img), binary.LittleEndian.Uint32(img[p.checksumOffset():]), p.SizeOfImage, p.SizeOfHeaders, p.TimeDateStamp)
	fmt.Fprintf(&b, "%-9s %10s %10s %10s %10s %10s %s\n", "name", "va", "vsize", "rawoff", "rawsize", "flags", "sha256")
	for _, s := range infos {
		fmt.Fprintf(&b, "%-9s %#10x %#10x %#10x %#10x %#10x %s\n", s.Name, s.VirtualAddress, s.VirtualSize, s.RawOffset, s.RawSize, s.Characteristics, s.SHA256[:16])
	}
	sum := sha256.Sum256(img)
	fmt.Fprintf(&b, "file sha256 %x\n", sum)
	return b.String(), nil
}

func TestGoldenSectionTable(t *testing.T) {
	opts := testOptions(syntheticStub())
	opts.Kernel = blob(1, 100_001)
	opts.Initrd = blob(2, 50_003)
	img, err := Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := goldenDump(img)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Golden(t, filepath.Join("testdata", "sections.golden"), []byte(got))
}

func TestBadInput(t *testing.T) {
	stub := syntheticStub()
	patched := func(off int, v uint16) []byte {
		b := bytes.Clone(stub)
		binary.LittleEndian.PutUint16(b[off:], v)
		return b
	}
	withDebugDir := bytes.Clone(stub)
	binary.LittleEndian.PutUint32(withDebugDir[0x58+optDataDirectories+8*dirDebug+4:], 28)
	junkAfterTable := bytes.Clone(stub)
	junkAfterTable[0x1a0] = 0xff
	many := make([]Section, 100)
	for i := range many {
		many[i] = Section{Name: fmt.Sprintf(".x%d", i), Data: []byte{1}}
	}
	tests := []struct {
		name    string
		mutate  func(*Options)
		wantErr string
	}{
		{"empty stub", func(o *Options) { o.Stub = nil }, "stub is empty"},
		{"not a PE", func(o *Options) { o.Stub = blob(3, 4096) }, "not a PE image"},
		{"truncated in DOS header", func(o *Options) { o.Stub = stub[:0x30] }, "not a PE image"},
		{"truncated in optional header", func(o *Options) { o.Stub = stub[:0x80] }, "optional header"},
		{"truncated in section data", func(o *Options) { o.Stub = stub[:0x500] }, "runs past end of file"},
		{"wrong machine", func(o *Options) { o.Stub = patched(0x44, 0x14c) }, "neither x86-64 nor arm64"},
		{"machine mismatch", func(o *Options) { o.Machine = MachineARM64 }, "machine 0x8664 (x86-64), want 0xaa64 (arm64)"},
		{"PE32 not PE32+", func(o *Options) { o.Stub = patched(0x58, 0x10b) }, "only PE32+"},
		{"empty kernel", func(o *Options) { o.Kernel = nil }, "kernel is empty"},
		{"bad section name", func(o *Options) { o.Sections = []Section{{Name: "pcrsig", Data: []byte{1}}} }, "must start with '.'"},
		{"long section name", func(o *Options) { o.Sections = []Section{{Name: ".toolongname", Data: []byte{1}}} }, "at most 8 bytes"},
		{"section clashes with stub", func(o *Options) { o.Sections = []Section{{Name: ".text", Data: []byte{1}}} }, "already in the stub"},
		{"empty extra section", func(o *Options) { o.Sections = []Section{{Name: ".splash"}} }, ".splash is empty"},
		{"no room for headers", func(o *Options) { o.Sections = many }, "no room for"},
		{"stub must move but has debug directory", func(o *Options) { o.Stub = withDebugDir }, "debug directory"},
		{"header space after table in use", func(o *Options) { o.Stub = junkAfterTable }, "are in use"},
		{"certificate without signer", func(o *Options) { o.Certificate = &x509.Certificate{} }, "set together"},
		{"timestamp overflow", func(o *Options) { o.SourceDateEpoch = 1 << 33 }, "does not fit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := testOptions(stub)
			tc.mutate(&opts)
			_, err := Build(opts)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestMergeSBAT(t *testing.T) {
	stubWith := func(sbat string) *peFile {
		b := syntheticStub()
		p, _ := parsePE(b)
		s, _ := p.section(".sbat")
		copy(b[s.PointerToRawData:s.PointerToRawData+s.SizeOfRawData], make([]byte, s.SizeOfRawData))
		copy(b[s.PointerToRawData:], sbat)
		binary.LittleEndian.PutUint32(b[p.sectionTableOff+sectionHeaderSize+8:], uint32(len(sbat)))
		p, _ = parsePE(b)
		return p
	}
	tests := []struct {
		name, stub, extra, want string
	}{
		{"default uki line", sbatHeader + "\nsystemd,1,X\n\x00", "", sbatHeader + "\nsystemd,1,X\n" + DefaultSBAT},
		{"dedupe and trim", "sbat,1,V\r\na,1\n\na,1\n", "b,2\na,1\n", "sbat,1,V\na,1\nb,2\n"},
		{"stub without header", "a,1\n", "sbat,1,Mine\nb,1", "sbat,1,Mine\na,1\nb,1\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := mergeSBAT(stubWith(tc.stub), Options{SBAT: tc.extra, Kernel: []byte("x")})
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestInspect(t *testing.T) {
	opts := testOptions(syntheticStub())
	path := filepath.Join(t.TempDir(), "uki.efi")
	if err := BuildFile(path, opts); err != nil {
		t.Fatal(err)
	}
	infos, err := Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range infos {
		names = append(names, s.Name)
	}
	if got, want := strings.Join(names, " "), ".text .osrel .cmdline .uname .sbat .initrd .linux"; got != want {
		t.Errorf("sections %q, want %q", got, want)
	}
	last := infos[len(infos)-1]
	if sum := sha256.Sum256(opts.Kernel); last.SHA256 != fmt.Sprintf("%x", sum) || last.VirtualSize != uint32(len(opts.Kernel)) {
		t.Errorf(".linux info %+v does not describe the kernel", last)
	}
	if _, err := Inspect(filepath.Join(t.TempDir(), "missing.efi")); err == nil {
		t.Error("Inspect of a missing file succeeded")
	}
}

// TestInitrdReaderSameBytes: an initrd streamed from a reader gives the
// same image as the same initrd in memory: unsigned, signed, and signed
// with the PCR 11 signature (the Debian stub measures).
func TestInitrdReaderSameBytes(t *testing.T) {
	dir := testKeyDir(t)
	key, cert, err := LoadSigner(filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		stub   []byte
		signed bool
	}{
		{"unsigned", syntheticStub(), false},
		{"signed", syntheticStub(), true},
		{"signed, measured", hostStub(t), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := testOptions(tc.stub)
			if tc.signed {
				opts.Signer, opts.Certificate = key, cert
			}
			want, err := Build(opts)
			if err != nil {
				t.Fatal(err)
			}
			initrd := opts.Initrd
			opts.Initrd = nil
			opts.InitrdReader = io.NewSectionReader(bytes.NewReader(initrd), 0, int64(len(initrd)))
			got, err := Build(opts)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Error("the image with the initrd from a reader differs from the one with the initrd in memory")
			}
			opts.Initrd = initrd
			if _, err := Build(opts); err == nil {
				t.Error("Initrd and InitrdReader both set: no error")
			}
		})
	}
}
