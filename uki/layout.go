package uki

import (
	"crypto/rsa"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// layout validates the inputs and computes the output image's headers and
// section placement.
func layout(opts Options) (*plan, error) {
	stub, err := checkInputs(opts)
	if err != nil {
		return nil, err
	}
	adds, err := newSections(opts, stub)
	if err != nil {
		return nil, err
	}
	kept, removedInit, err := keptSections(stub, adds)
	if err != nil {
		return nil, err
	}
	vaEnd, minVA, err := stubExtent(stub)
	if err != nil {
		return nil, err
	}
	nsec := len(kept) + len(adds)
	if nsec > 0xffff {
		return nil, errors.New("uki: too many sections")
	}
	header, err := newHeader(opts.Stub, stub, nsec, minVA)
	if err != nil {
		return nil, err
	}
	pl := &plan{header: header, checksumOff: stub.checksumOffset(), certDirOff: stub.dirOffset(dirSecurity)}
	fileOff, err := pl.placeStubSections(stub, kept, uint64(len(header)))
	if err != nil {
		return nil, err
	}
	headers, va, addedInit, err := pl.placeNewSections(stub, kept, adds, vaEnd, fileOff)
	if err != nil {
		return nil, err
	}
	writeSectionTable(header[stub.sectionTableOff:], headers)
	if err := writeCOFF(header[stub.coffOffset:], stub, nsec, opts.SourceDateEpoch); err != nil {
		return nil, err
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
	binary.LittleEndian.PutUint32(opt[optSizeOfHeaders:], uint32(len(header)))
	clear(header[pl.certDirOff : pl.certDirOff+8]) // any stub signature is dropped
	return pl, nil
}

// checkInputs checks the kernel, the initrd and the stub, and parses the
// stub.
func checkInputs(opts Options) (*peFile, error) {
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
		return nil, fmt.Errorf("uki: stub is built for machine %#x (%s), want %#x (%s): take the stub from the image's own systemd-boot-efi", stub.Machine, machineName(stub.Machine), opts.Machine, machineName(opts.Machine))
	case stub.Machine != MachineAMD64 && stub.Machine != MachineARM64:
		return nil, fmt.Errorf("uki: stub machine %#x is neither x86-64 nor arm64", stub.Machine)
	}
	if stub.NumDirs <= dirSecurity {
		return nil, fmt.Errorf("uki: stub has %d data directories, no certificate table entry", stub.NumDirs)
	}
	if opts.InitrdReader != nil && len(opts.Initrd) > 0 {
		return nil, errors.New("uki: Initrd and InitrdReader are both set")
	}
	return stub, nil
}

// newSection is a section the UKI adds to the stub's.
type newSection struct {
	name string
	region
}

// newSections are the sections to add, in placement order: os-release,
// command line, uname, SBAT, the caller's, the PCR signature (RSA
// signers, stubs that measure), the initrd, the kernel.
func newSections(opts Options, stub *peFile) ([]newSection, error) {
	initrd := region{data: opts.Initrd, src: opts.InitrdReader}
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
	return adds, nil
}

// keptSections are the stub's sections the UKI keeps, all but .sbat
// (the merged one replaces it), and the initialized bytes that drops;
// it checks the added sections' names against them and each other.
func keptSections(stub *peFile, adds []newSection) ([]sectionHeader, uint64, error) {
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
			return nil, 0, fmt.Errorf("uki: section name %q must start with '.' and be at most 8 bytes", a.name)
		}
		if a.len() == 0 {
			return nil, 0, fmt.Errorf("uki: section %s is empty", a.name)
		}
		if names[a.name] {
			return nil, 0, fmt.Errorf("uki: section %s given twice or already in the stub", a.name)
		}
		names[a.name] = true
	}
	return kept, removedInit, nil
}

// stubExtent is where the stub's image ends in memory and where its first
// section starts; its sections must ascend and not overlap.
func stubExtent(stub *peFile) (vaEnd, minVA uint64, err error) {
	minVA = uint64(1<<32 - 1)
	for i, s := range stub.Sections {
		if uint64(s.VirtualAddress) < vaEnd {
			return 0, 0, fmt.Errorf("uki: stub section %d (%s) at VA %#x overlaps or precedes the previous one (ends %#x)", i, s.Name, s.VirtualAddress, vaEnd)
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
	return max(vaEnd, uint64(stub.SizeOfImage)), minVA, nil
}

// newHeader is the UKI's header area (SizeOfHeaders bytes): the stub's,
// its section table cleared for nsec entries. The new table must fit
// below the first section in memory, and whatever lies after the stub's
// table must be room the linker left, not data.
func newHeader(raw []byte, stub *peFile, nsec int, minVA uint64) ([]byte, error) {
	oldTableEnd := stub.sectionTableOff + len(stub.Sections)*sectionHeaderSize
	newTableEnd := stub.sectionTableOff + nsec*sectionHeaderSize
	sizeOfHeaders := max(uint64(stub.SizeOfHeaders), alignUp(uint64(newTableEnd), uint64(stub.FileAlignment)))
	if sizeOfHeaders > minVA {
		return nil, fmt.Errorf("uki: no room for %d section headers: headers would need %#x bytes but the stub's first section starts at VA %#x", nsec, sizeOfHeaders, minVA)
	}
	if end := min(newTableEnd, int(stub.SizeOfHeaders)); end > oldTableEnd {
		if !headerPadding(raw, oldTableEnd, end) {
			return nil, fmt.Errorf("uki: no room for %d section headers: stub header bytes after its section table (%#x..%#x) are in use", nsec, oldTableEnd, end)
		}
	}
	header := make([]byte, sizeOfHeaders)
	copy(header, raw[:stub.SizeOfHeaders])
	clear(header[stub.sectionTableOff:max(oldTableEnd, newTableEnd)])
	return header, nil
}

// placeStubSections lays the kept stub sections out back to back after
// the headers, in their original file order, and returns where the file
// goes on.
func (pl *plan) placeStubSections(stub *peFile, kept []sectionHeader, fileOff uint64) (uint64, error) {
	fa := uint64(stub.FileAlignment)
	order := make([]int, len(kept))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return kept[order[a]].PointerToRawData < kept[order[b]].PointerToRawData })
	moved := false
	for _, i := range order {
		s := &kept[i]
		if s.SizeOfRawData == 0 { // nothing in the file (e.g. .bss)
			s.PointerToRawData = 0
			continue
		}
		if s.SizeOfRawData%uint32(fa) != 0 {
			return 0, fmt.Errorf("uki: stub section %s has SizeOfRawData %#x, not a multiple of FileAlignment", s.Name, s.SizeOfRawData)
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
		return 0, errors.New("uki: stub sections must move in the file but the stub has a debug directory; strip it first")
	}
	return fileOff, nil
}

// placeNewSections lays the added sections out after the stub's, page
// aligned in memory from vaEnd, and returns every section header, the
// end of the image in memory and the initialized bytes added.
func (pl *plan) placeNewSections(stub *peFile, kept []sectionHeader, adds []newSection, vaEnd, fileOff uint64) ([]sectionHeader, uint64, uint64, error) {
	fa := uint64(stub.FileAlignment)
	pageAlign := max(uint64(stub.SectionAlignment), 4096)
	va := alignUp(vaEnd, pageAlign)
	headers := kept
	var addedInit uint64
	for _, a := range adds {
		va = alignUp(va, pageAlign)
		size := uint64(a.len())
		raw := alignUp(size, fa)
		if va+size > 1<<32-1 || fileOff+raw > 1<<32-1 {
			return nil, 0, 0, fmt.Errorf("uki: section %s does not fit in a 4 GiB PE image", a.name)
		}
		headers = append(headers, sectionHeader{
			Name:             a.name,
			VirtualSize:      uint32(size),
			VirtualAddress:   uint32(va),
			SizeOfRawData:    uint32(raw),
			PointerToRawData: uint32(fileOff),
			Characteristics:  scnCntInitializedData | scnMemRead,
		})
		r := a.region
		r.size = uint32(raw)
		pl.regions = append(pl.regions, r)
		va += size
		fileOff += raw
		addedInit += raw
	}
	return headers, va, addedInit, nil
}

// writeSectionTable writes headers into the section table at table.
func writeSectionTable(table []byte, headers []sectionHeader) {
	for i, s := range headers {
		b := table[i*sectionHeaderSize:][:sectionHeaderSize]
		copy(b, s.raw[:])
		clear(b[:8])
		copy(b[:8], s.Name)
		binary.LittleEndian.PutUint32(b[8:], s.VirtualSize)
		binary.LittleEndian.PutUint32(b[12:], s.VirtualAddress)
		binary.LittleEndian.PutUint32(b[16:], s.SizeOfRawData)
		binary.LittleEndian.PutUint32(b[20:], s.PointerToRawData)
		binary.LittleEndian.PutUint32(b[36:], s.Characteristics)
	}
}

// writeCOFF sets the COFF header's section count and timestamp and drops
// its symbol table.
func writeCOFF(coff []byte, stub *peFile, nsec int, epoch int64) error {
	binary.LittleEndian.PutUint16(coff[2:], uint16(nsec))
	if epoch != 0 {
		if epoch < 0 || epoch > 1<<32-1 {
			return fmt.Errorf("uki: SOURCE_DATE_EPOCH %d does not fit a PE timestamp", epoch)
		}
		binary.LittleEndian.PutUint32(coff[4:], uint32(epoch))
	}
	binary.LittleEndian.PutUint32(coff[8:], 0)
	binary.LittleEndian.PutUint32(coff[12:], 0)
	if stub.SymbolTable != 0 {
		ch := binary.LittleEndian.Uint16(coff[18:]) | coffLocalSymsStripped | coffLineNumsStripped
		binary.LittleEndian.PutUint16(coff[18:], ch)
	}
	return nil
}

// sbatHeader is the mandatory first SBAT line (the SBAT format version).
const sbatHeader = "sbat,1,SBAT Version,sbat,1,https://github.com/rhboot/shim/blob/main/SBAT.md"

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

// arm64NOP is the A64 NOP instruction, little-endian.
var arm64NOP = []byte{0x1f, 0x20, 0x03, 0xd5}

// headerPadding says whether stub[from:to], header bytes after the
// section table, are room the linker left: zeros, or (Debian's arm64
// systemd-stub, whose header is written in assembly and padded to its
// first section) A64 NOPs in whole aligned words. No section maps them.
func headerPadding(stub []byte, from, to int) bool {
	zero, nops := true, from%4 == 0
	for i := from; i < to; i++ {
		zero = zero && stub[i] == 0
		nops = nops && stub[i] == arm64NOP[(i-from)%4]
	}
	return zero || nops
}
