// Package uki assembles and signs Unified Kernel Images (UAPI group UKI
// specification) in pure Go: it appends the kernel, initrd, command line,
// os-release, uname and SBAT sections to a systemd-stub PE image, and signs
// the result with Authenticode, without objcopy, ukify or sbsign.
//
// Layout decisions (see docs in Options):
//   - New sections follow the stub's last section, in this order: .osrel,
//     .cmdline, .uname, .sbat, caller sections, .initrd, .linux. The kernel
//     comes last as ukify does, so it sits at the top of the image.
//   - Every new section starts on a page boundary in memory (VirtualAddress
//     aligned to max(SectionAlignment, 4 KiB)), so the kernel and initrd are
//     page aligned once the firmware has loaded the image.
//   - SBAT follows ukify's convention: the stub's own .sbat lines, then the
//     kernel's .sbat lines (if the kernel is a PE carrying one), then
//     Options.SBAT (default DefaultSBAT, the "uki" component line), duplicates
//     dropped. The merged text replaces the stub's .sbat. The Debian 252 stub
//     leaves only 0x100 bytes of address space for its .sbat, too little to
//     grow it in place, so the stub's .sbat header is always dropped and the
//     merged .sbat is appended as a new section: exactly one .sbat remains,
//     as shim requires.
//   - The stub's COFF symbol table and any old signature are stripped (image
//     files should carry neither, and a signature would be invalid anyway).
package uki

import (
	"bufio"
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// DefaultSBAT is the SBAT line naming the UKI itself, as ukify adds it.
const DefaultSBAT = "uki,1,UKI,uki,1,https://uapi-group.org/specifications/specs/unified_kernel_image/\n"

// sbatHeader is the mandatory first SBAT line (the SBAT format version).
const sbatHeader = "sbat,1,SBAT Version,sbat,1,https://github.com/rhboot/shim/blob/main/SBAT.md"

// Standard UKI section names.
const (
	SectionOSRel   = ".osrel"
	SectionCmdline = ".cmdline"
	SectionUname   = ".uname"
	SectionSBAT    = ".sbat"
	SectionInitrd  = ".initrd"
	SectionLinux   = ".linux"
)

// Section is a named PE section to add.
type Section struct {
	Name string // at most 8 bytes, e.g. ".pcrsig"
	Data []byte
}

// Options describes one UKI.
type Options struct {
	// Stub is the systemd-stub PE image (linuxx64.efi.stub). Required.
	Stub []byte
	// Kernel is the kernel image (bzImage / EFI-stub Image). Required.
	Kernel []byte
	// Initrd is the initramfs; no .initrd section when empty.
	Initrd []byte
	// InitrdReader, when set instead of Initrd, is the initramfs read as
	// it is written: an initrd of a GiB costs no GiB of memory (it is
	// read twice: for the checksum, and the signature, then for the image).
	InitrdReader *io.SectionReader
	// Cmdline is the kernel command line; surrounding white space (such as
	// the newline of a file) is trimmed. No .cmdline section when empty.
	Cmdline string
	// OSRelease is the os-release file of the OS, stored as is.
	OSRelease string
	// Uname is the kernel release (`uname -r`), trimmed.
	Uname string
	// SBAT lines appended to the stub's (and kernel's) SBAT; empty means
	// DefaultSBAT.
	SBAT string
	// Sections are extra sections (e.g. .splash, .pcrpkey, .pcrsig), placed
	// after .sbat and before .initrd, in the given order.
	Sections []Section
	// Machine, when non-zero, is the PE machine the stub must be built for
	// (MachineAMD64, MachineARM64). Otherwise any of the two is accepted.
	Machine uint16
	// SourceDateEpoch, when non-zero, becomes the COFF TimeDateStamp;
	// otherwise the stub's value is kept. Either way the output is
	// reproducible.
	SourceDateEpoch int64
	// Signer and Certificate, when set, sign the image (Authenticode) while
	// it is written, giving the same bytes as Sign on the unsigned image
	// (with the same Sections). An RSA Signer also signs the image's PCR 11 values (measured boot):
	// .pcrpkey and .pcrsig are added after Sections when the stub measures
	// (systemd 252 and later) and Sections holds neither.
	Signer      crypto.Signer
	Certificate *x509.Certificate
	// PCRPhases are the boot phases .pcrsig covers; nil means
	// DefaultPCRPhases.
	PCRPhases []string
}

// region is a piece of the output after the headers: its content (data,
// or len bytes of src) followed by zeros up to size bytes.
type region struct {
	data []byte
	src  *io.SectionReader
	size uint32
}

func (r region) len() int64 {
	if r.src != nil {
		return r.src.Size()
	}
	return int64(len(r.data))
}

// copyBuf sizes the chunks a region from a reader is copied in.
const copyBuf = 1 << 20

func (r region) writeContent(w io.Writer) error {
	if r.src == nil {
		_, err := w.Write(r.data)
		return err
	}
	n, err := io.CopyBuffer(w, io.NewSectionReader(r.src, 0, r.src.Size()), make([]byte, copyBuf))
	if err == nil && n != r.src.Size() {
		err = fmt.Errorf("read %d of %d bytes", n, r.src.Size())
	}
	return err
}

// plan is a fully laid-out image: the headers, the section data in file
// order (contiguous, no gaps, no trailing data) and an optional certificate
// table. It lets Write stream the image without copying the inputs.
type plan struct {
	header      []byte
	regions     []region
	checksumOff int
	certDirOff  int
	cert        []byte // WIN_CERTIFICATE, padded to 8 bytes
}

func (pl *plan) size() int64 {
	n := int64(len(pl.header)) + int64(len(pl.cert))
	for _, r := range pl.regions {
		n += int64(r.size)
	}
	return n
}

var zeros = make([]byte, 64<<10)

func writeZeros(w io.Writer, n int64) error {
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := w.Write(zeros[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// writeSections writes the regions, with their padding, to w.
func (pl *plan) writeSections(w io.Writer) error {
	for _, r := range pl.regions {
		if err := r.writeContent(w); err != nil {
			return err
		}
		if err := writeZeros(w, int64(r.size)-r.len()); err != nil {
			return err
		}
	}
	return nil
}

// finish signs (if asked) and sets the checksum in the header.
func (pl *plan) finish(signer crypto.Signer, cert *x509.Certificate) error {
	var sections checksummer
	if signer != nil {
		h := newAuthenticodeHasher(pl.header, pl.checksumOff, pl.certDirOff)
		if err := pl.writeSections(io.MultiWriter(h, &sections)); err != nil {
			return err
		}
		wc, err := signDigest(h.Sum(nil), signer, cert)
		if err != nil {
			return err
		}
		pl.cert = wc
		binary.LittleEndian.PutUint32(pl.header[pl.certDirOff:], uint32(pl.size()-int64(len(wc))))
		binary.LittleEndian.PutUint32(pl.header[pl.certDirOff+4:], uint32(len(wc)))
	} else if err := pl.writeSections(&sections); err != nil {
		return err
	}
	if pl.size() > 1<<32-1 {
		return fmt.Errorf("image would be %d bytes, more than a PE file can hold", pl.size())
	}
	// The checksum is additive over even-aligned pieces: every piece here
	// has an even length, so the pieces' sums combine.
	var c checksummer
	binary.LittleEndian.PutUint32(pl.header[pl.checksumOff:], 0)
	c.Write(pl.header)
	c.Write(pl.cert)
	if len(sections.pending) > 0 { // regions are FileAlignment multiples
		return errors.New("internal error: section regions not 8-byte multiples")
	}
	c.add64(sections.sum)
	c.n += sections.n
	binary.LittleEndian.PutUint32(pl.header[pl.checksumOff:], c.Sum())
	return nil
}

func (pl *plan) writeTo(w io.Writer) error {
	if _, err := w.Write(pl.header); err != nil {
		return err
	}
	if err := pl.writeSections(w); err != nil {
		return err
	}
	_, err := w.Write(pl.cert)
	return err
}

// Write assembles the UKI described by opts and writes it to w. It holds no
// copy of the kernel or initrd beyond the caller's.
func Write(w io.Writer, opts Options) (int64, error) {
	if (opts.Signer == nil) != (opts.Certificate == nil) {
		return 0, errors.New("uki: Signer and Certificate must be set together")
	}
	pl, err := layout(opts)
	if err != nil {
		return 0, err
	}
	if err := pl.finish(opts.Signer, opts.Certificate); err != nil {
		return 0, fmt.Errorf("uki: %w", err)
	}
	cw := &countingWriter{w: w}
	if err := pl.writeTo(cw); err != nil {
		return cw.n, fmt.Errorf("uki: writing image: %w", err)
	}
	return cw.n, nil
}

// Build assembles the UKI described by opts in memory.
func Build(opts Options) ([]byte, error) {
	var buf bytes.Buffer
	n := len(opts.Stub) + len(opts.Kernel) + len(opts.Initrd) + 64<<10
	if opts.InitrdReader != nil {
		n += int(opts.InitrdReader.Size())
	}
	buf.Grow(n)
	if _, err := Write(&buf, opts); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// BuildFile assembles the UKI into path atomically: it is written to a
// temporary file in the same directory, synced, and renamed into place.
func BuildFile(path string, opts Options) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("uki: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if _, err := Write(bw, opts); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("uki: writing %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("uki: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("uki: syncing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("uki: closing %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("uki: %w", err)
	}
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// layout validates the inputs and computes the output image's headers and
// section placement.
func layout(opts Options) (*plan, error) {
	if len(opts.Kernel) == 0 {
		return nil, errors.New("uki: kernel is empty")
	}
	if len(opts.Stub) == 0 {
		return nil, errors.New("uki: stub is empty")
	}
	stub, err := parsePE(opts.Stub)
	if err != nil {
		return nil, fmt.Errorf("uki: parsing stub: %w", err)
	}
	switch {
	case opts.Machine != 0 && stub.Machine != opts.Machine:
		return nil, fmt.Errorf("uki: stub is built for machine %#x, want %#x", stub.Machine, opts.Machine)
	case stub.Machine != MachineAMD64 && stub.Machine != MachineARM64:
		return nil, fmt.Errorf("uki: stub machine %#x is neither x86-64 nor arm64", stub.Machine)
	}
	if stub.NumDirs <= dirSecurity {
		return nil, fmt.Errorf("uki: stub has %d data directories, no certificate table entry", stub.NumDirs)
	}

	if opts.InitrdReader != nil && len(opts.Initrd) > 0 {
		return nil, errors.New("uki: Initrd and InitrdReader are both set")
	}
	initrd := region{data: opts.Initrd, src: opts.InitrdReader}

	// The new sections, in placement order.
	type newSection struct {
		name string
		region
	}
	var adds []newSection
	add := func(name string, data []byte) {
		if len(data) > 0 {
			adds = append(adds, newSection{name, region{data: data}})
		}
	}
	add(SectionOSRel, []byte(opts.OSRelease))
	add(SectionCmdline, []byte(strings.TrimSpace(opts.Cmdline)))
	add(SectionUname, []byte(strings.TrimSpace(opts.Uname)))
	add(SectionSBAT, []byte(mergeSBAT(stub, opts)))
	for _, s := range opts.Sections {
		adds = append(adds, newSection{s.Name, region{data: s.Data}})
	}
	if key, ok := opts.Signer.(*rsa.PrivateKey); ok && SignsPCR(opts.Stub, key) {
		sections := map[string][32]byte{}
		given := map[string]bool{}
		for _, a := range append(adds, newSection{SectionInitrd, initrd}, newSection{SectionLinux, region{data: opts.Kernel}}) {
			given[a.name] = true
			if a.len() == 0 {
				continue
			}
			h := sha256.New()
			if err := a.writeContent(h); err != nil {
				return nil, fmt.Errorf("uki: reading %s: %w", a.name, err)
			}
			sections[a.name] = [32]byte(h.Sum(nil))
		}
		if !given[SectionPCRPKey] && !given[SectionPCRSig] {
			phases := opts.PCRPhases
			if phases == nil {
				phases = DefaultPCRPhases
			}
			pkey, sig, err := pcrSections(stubVersion(stub), key, sections, phases)
			if err != nil {
				return nil, fmt.Errorf("uki: %w", err)
			}
			add(SectionPCRPKey, pkey)
			add(SectionPCRSig, sig)
		}
	}
	if initrd.len() > 0 {
		adds = append(adds, newSection{SectionInitrd, initrd})
	}
	add(SectionLinux, opts.Kernel)

	// Stub sections kept: all but .sbat, which the merged one replaces.
	var kept []sectionHeader
	removedInit := uint64(0)
	for _, s := range stub.Sections {
		if s.Name == SectionSBAT {
			removedInit += uint64(s.SizeOfRawData)
			continue
		}
		kept = append(kept, s)
	}
	names := map[string]bool{}
	for _, s := range kept {
		names[s.Name] = true
	}
	for _, a := range adds {
		if a.name == "" || len(a.name) > 8 || a.name[0] != '.' {
			return nil, fmt.Errorf("uki: section name %q must start with '.' and be at most 8 bytes", a.name)
		}
		if a.len() == 0 {
			return nil, fmt.Errorf("uki: section %s is empty", a.name)
		}
		if names[a.name] {
			return nil, fmt.Errorf("uki: section %s given twice or already in the stub", a.name)
		}
		names[a.name] = true
	}

	// Memory layout of the stub: sections must ascend and not overlap.
	var vaEnd uint64
	minVA := uint64(1<<32 - 1)
	for i, s := range stub.Sections {
		if uint64(s.VirtualAddress) < vaEnd {
			return nil, fmt.Errorf("uki: stub section %d (%s) at VA %#x overlaps or precedes the previous one (ends %#x)", i, s.Name, s.VirtualAddress, vaEnd)
		}
		// In memory a section spans VirtualSize bytes (SizeOfRawData when
		// VirtualSize is zero); raw padding beyond it is not mapped.
		span := s.VirtualSize
		if span == 0 {
			span = s.SizeOfRawData
		}
		vaEnd = uint64(s.VirtualAddress) + uint64(span)
		minVA = min(minVA, uint64(s.VirtualAddress))
	}
	vaEnd = max(vaEnd, uint64(stub.SizeOfImage))

	// Headers: the new section table must fit below the first section in
	// memory, and whatever lies after the stub's table must be zero (room
	// the linker left, not data).
	nsec := len(kept) + len(adds)
	if nsec > 0xffff {
		return nil, errors.New("uki: too many sections")
	}
	oldTableEnd := stub.sectionTableOff + len(stub.Sections)*sectionHeaderSize
	newTableEnd := stub.sectionTableOff + nsec*sectionHeaderSize
	fa := uint64(stub.FileAlignment)
	sizeOfHeaders := max(uint64(stub.SizeOfHeaders), alignUp(uint64(newTableEnd), fa))
	if sizeOfHeaders > minVA {
		return nil, fmt.Errorf("uki: no room for %d section headers: headers would need %#x bytes but the stub's first section starts at VA %#x", nsec, sizeOfHeaders, minVA)
	}
	if end := min(newTableEnd, int(stub.SizeOfHeaders)); end > oldTableEnd {
		for _, b := range opts.Stub[oldTableEnd:end] {
			if b != 0 {
				return nil, fmt.Errorf("uki: no room for %d section headers: stub header bytes after its section table (%#x..%#x) are in use", nsec, oldTableEnd, end)
			}
		}
	}
	header := make([]byte, sizeOfHeaders)
	copy(header, opts.Stub[:stub.SizeOfHeaders])
	clear(header[stub.sectionTableOff:max(oldTableEnd, newTableEnd)])

	// File layout: kept stub sections back to back after the headers, in
	// their original file order, then the new ones.
	order := make([]int, len(kept))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return kept[order[a]].PointerToRawData < kept[order[b]].PointerToRawData })
	pl := &plan{header: header, checksumOff: stub.checksumOffset(), certDirOff: stub.dirOffset(dirSecurity)}
	fileOff := sizeOfHeaders
	moved := false
	for _, i := range order {
		s := &kept[i]
		if s.SizeOfRawData == 0 { // nothing in the file (e.g. .bss)
			s.PointerToRawData = 0
			continue
		}
		if s.SizeOfRawData%uint32(fa) != 0 {
			return nil, fmt.Errorf("uki: stub section %s has SizeOfRawData %#x, not a multiple of FileAlignment", s.Name, s.SizeOfRawData)
		}
		if uint64(s.PointerToRawData) != fileOff {
			moved = true
		}
		pl.regions = append(pl.regions, region{data: stub.rawData(*s), size: s.SizeOfRawData})
		s.PointerToRawData = uint32(fileOff)
		fileOff += uint64(s.SizeOfRawData)
	}
	if _, dbgSize := stub.dir(dirDebug); moved && dbgSize != 0 {
		// Debug directory entries hold file offsets we would have to fix.
		return nil, errors.New("uki: stub sections must move in the file but the stub has a debug directory; strip it first")
	}

	pageAlign := max(uint64(stub.SectionAlignment), 4096)
	va := alignUp(vaEnd, pageAlign)
	headers := kept
	var addedInit uint64
	for _, a := range adds {
		va = alignUp(va, pageAlign)
		size := uint64(a.len())
		raw := alignUp(size, fa)
		if va+size > 1<<32-1 || fileOff+raw > 1<<32-1 {
			return nil, fmt.Errorf("uki: section %s does not fit in a 4 GiB PE image", a.name)
		}
		h := sectionHeader{
			Name:             a.name,
			VirtualSize:      uint32(size),
			VirtualAddress:   uint32(va),
			SizeOfRawData:    uint32(raw),
			PointerToRawData: uint32(fileOff),
			Characteristics:  scnCntInitializedData | scnMemRead,
		}
		headers = append(headers, h)
		r := a.region
		r.size = uint32(raw)
		pl.regions = append(pl.regions, r)
		va += size
		fileOff += raw
		addedInit += raw
	}

	// Section table.
	for i, s := range headers {
		b := header[stub.sectionTableOff+i*sectionHeaderSize:][:sectionHeaderSize]
		copy(b, s.raw[:])
		clear(b[:8])
		copy(b[:8], s.Name)
		binary.LittleEndian.PutUint32(b[8:], s.VirtualSize)
		binary.LittleEndian.PutUint32(b[12:], s.VirtualAddress)
		binary.LittleEndian.PutUint32(b[16:], s.SizeOfRawData)
		binary.LittleEndian.PutUint32(b[20:], s.PointerToRawData)
		binary.LittleEndian.PutUint32(b[36:], s.Characteristics)
	}

	// COFF header: section count, timestamp, no symbol table.
	coff := header[stub.coffOffset:]
	binary.LittleEndian.PutUint16(coff[2:], uint16(nsec))
	if opts.SourceDateEpoch != 0 {
		if opts.SourceDateEpoch < 0 || opts.SourceDateEpoch > 1<<32-1 {
			return nil, fmt.Errorf("uki: SOURCE_DATE_EPOCH %d does not fit a PE timestamp", opts.SourceDateEpoch)
		}
		binary.LittleEndian.PutUint32(coff[4:], uint32(opts.SourceDateEpoch))
	}
	binary.LittleEndian.PutUint32(coff[8:], 0)
	binary.LittleEndian.PutUint32(coff[12:], 0)
	if stub.SymbolTable != 0 {
		ch := binary.LittleEndian.Uint16(coff[18:]) | coffLocalSymsStripped | coffLineNumsStripped
		binary.LittleEndian.PutUint16(coff[18:], ch)
	}

	// Optional header.
	opt := header[stub.optOffset:]
	init := uint64(binary.LittleEndian.Uint32(opt[optSizeOfInitializedData:]))
	if init += addedInit; init >= removedInit {
		init -= removedInit
	} else {
		init = 0
	}
	init = min(init, 1<<32-1)
	binary.LittleEndian.PutUint32(opt[optSizeOfInitializedData:], uint32(init))
	binary.LittleEndian.PutUint32(opt[optSizeOfImage:], uint32(alignUp(va, uint64(stub.SectionAlignment))))
	binary.LittleEndian.PutUint32(opt[optSizeOfHeaders:], uint32(sizeOfHeaders))
	clear(header[pl.certDirOff : pl.certDirOff+8]) // any stub signature is dropped
	return pl, nil
}

// mergeSBAT builds the .sbat text: the SBAT header line, then the stub's,
// the kernel's and the caller's component lines, each once.
func mergeSBAT(stub *peFile, opts Options) string {
	var parts []string
	if s, ok := stub.section(SectionSBAT); ok {
		parts = append(parts, string(stub.content(s)))
	}
	if k, err := parsePE(opts.Kernel); err == nil {
		if s, ok := k.section(SectionSBAT); ok {
			parts = append(parts, string(k.content(s)))
		}
	}
	if opts.SBAT != "" {
		parts = append(parts, opts.SBAT)
	} else {
		parts = append(parts, DefaultSBAT)
	}
	// The first "sbat," (format version) line found wins and goes first.
	header := sbatHeader
	var lines []string
	seen := map[string]bool{}
	for _, p := range parts {
		for line := range strings.SplitSeq(p, "\n") {
			line = strings.TrimSpace(strings.TrimRight(line, "\x00"))
			switch {
			case line == "" || seen[line]:
			case strings.HasPrefix(line, "sbat,"):
				if !seen["sbat,"] {
					header = line
				}
				seen["sbat,"] = true
			default:
				seen[line] = true
				lines = append(lines, line)
			}
		}
	}
	out := header + "\n"
	for _, l := range lines {
		out += l + "\n"
	}
	return out
}
