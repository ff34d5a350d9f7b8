package uki

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// MachineFor is the PE machine of a Debian architecture's EFI binaries
// (amd64, arm64); 0, which Options.Machine takes as any, for others.
func MachineFor(arch string) uint16 {
	switch arch {
	case "amd64":
		return MachineAMD64
	case "arm64":
		return MachineARM64
	}
	return 0
}

// machineName names a PE machine for errors.
func machineName(m uint16) string {
	switch m {
	case MachineAMD64:
		return "x86-64"
	case MachineARM64:
		return "arm64"
	}
	return "unknown"
}

// PE/COFF constants used here (Microsoft PE format specification).
const (
	MachineAMD64 = 0x8664
	MachineARM64 = 0xaa64

	magicPE32Plus = 0x20b

	coffHeaderSize    = 20
	sectionHeaderSize = 40

	// Offsets inside the optional header (identical for PE32 and PE32+ for
	// the fields used here).
	optSizeOfCode            = 4
	optSizeOfInitializedData = 8
	optSectionAlignment      = 32
	optFileAlignment         = 36
	optSizeOfImage           = 56
	optSizeOfHeaders         = 60
	optCheckSum              = 64
	// PE32+ only.
	optNumberOfRvaAndSizes = 108
	optDataDirectories     = 112

	dirSecurity = 4 // certificate table, its VirtualAddress is a file offset
	dirDebug    = 6

	scnCntInitializedData = 0x00000040
	scnMemRead            = 0x40000000

	// coffLocalSymsStripped and coffLineNumsStripped are cleared/set when
	// the COFF symbol table is stripped.
	coffLineNumsStripped  = 0x0004
	coffLocalSymsStripped = 0x0008
	coffSymbolSize        = 18
)

// ErrNotPE is wrapped by the parser's errors for input that is not a PE
// image at all.
var ErrNotPE = errors.New("not a PE image")

// sectionHeader is one IMAGE_SECTION_HEADER.
type sectionHeader struct {
	Name             string
	VirtualSize      uint32
	VirtualAddress   uint32
	SizeOfRawData    uint32
	PointerToRawData uint32
	Characteristics  uint32
	// raw keeps the fields not modelled above (relocation and line number
	// pointers) so that stub headers are copied unchanged.
	raw [sectionHeaderSize]byte
}

// peFile is a parsed PE32+ image. It keeps the original bytes; all offsets
// were checked against len(data) by parsePE.
type peFile struct {
	data []byte

	peOffset        int // "PE\0\0"
	coffOffset      int
	optOffset       int
	optSize         int
	sectionTableOff int

	Machine          uint16
	TimeDateStamp    uint32
	SymbolTable      uint32
	NumberOfSymbols  uint32
	SectionAlignment uint32
	FileAlignment    uint32
	SizeOfImage      uint32
	SizeOfHeaders    uint32
	NumDirs          uint32
	Sections         []sectionHeader
}

func (p *peFile) checksumOffset() int { return p.optOffset + optCheckSum }

// dirOffset is the file offset of data directory entry i, or -1 if the
// optional header has no such entry.
func (p *peFile) dirOffset(i int) int {
	if uint32(i) >= p.NumDirs {
		return -1
	}
	return p.optOffset + optDataDirectories + 8*i
}

// dir returns data directory entry i (zero when absent).
func (p *peFile) dir(i int) (addr, size uint32) {
	off := p.dirOffset(i)
	if off < 0 {
		return 0, 0
	}
	return binary.LittleEndian.Uint32(p.data[off:]), binary.LittleEndian.Uint32(p.data[off+4:])
}

// parsePE parses the headers of a PE32+ image and validates that every
// structure it describes lies inside data. It never panics on bad input.
func parsePE(data []byte) (*peFile, error) {
	if len(data) < 0x40 || data[0] != 'M' || data[1] != 'Z' {
		return nil, fmt.Errorf("%w: missing MZ signature", ErrNotPE)
	}
	p := &peFile{data: data}
	lfanew := binary.LittleEndian.Uint32(data[0x3c:])
	if uint64(lfanew)+4+coffHeaderSize > uint64(len(data)) {
		return nil, fmt.Errorf("%w: PE header offset %#x beyond end of file (%d bytes)", ErrNotPE, lfanew, len(data))
	}
	p.peOffset = int(lfanew)
	if string(data[p.peOffset:p.peOffset+4]) != "PE\x00\x00" {
		return nil, fmt.Errorf("%w: missing PE signature at %#x", ErrNotPE, p.peOffset)
	}
	p.coffOffset = p.peOffset + 4
	coff := data[p.coffOffset:]
	p.Machine = binary.LittleEndian.Uint16(coff[0:])
	nsec := int(binary.LittleEndian.Uint16(coff[2:]))
	p.TimeDateStamp = binary.LittleEndian.Uint32(coff[4:])
	p.SymbolTable = binary.LittleEndian.Uint32(coff[8:])
	p.NumberOfSymbols = binary.LittleEndian.Uint32(coff[12:])
	p.optSize = int(binary.LittleEndian.Uint16(coff[16:]))
	p.optOffset = p.coffOffset + coffHeaderSize
	if p.optSize < optDataDirectories || p.optOffset+p.optSize > len(data) {
		return nil, fmt.Errorf("optional header (%d bytes at %#x) is truncated or too small for PE32+", p.optSize, p.optOffset)
	}
	opt := data[p.optOffset : p.optOffset+p.optSize]
	if m := binary.LittleEndian.Uint16(opt); m != magicPE32Plus {
		return nil, fmt.Errorf("optional header magic %#x: only PE32+ (0x20b) is supported", m)
	}
	p.SectionAlignment = binary.LittleEndian.Uint32(opt[optSectionAlignment:])
	p.FileAlignment = binary.LittleEndian.Uint32(opt[optFileAlignment:])
	p.SizeOfImage = binary.LittleEndian.Uint32(opt[optSizeOfImage:])
	p.SizeOfHeaders = binary.LittleEndian.Uint32(opt[optSizeOfHeaders:])
	p.NumDirs = binary.LittleEndian.Uint32(opt[optNumberOfRvaAndSizes:])
	if uint64(p.NumDirs)*8 > uint64(p.optSize-optDataDirectories) {
		return nil, fmt.Errorf("optional header claims %d data directories but has room for %d", p.NumDirs, (p.optSize-optDataDirectories)/8)
	}
	if !isPow2(p.FileAlignment) || p.FileAlignment < 512 || p.FileAlignment > 64<<10 {
		return nil, fmt.Errorf("FileAlignment %#x is not a power of two in [512, 64K]", p.FileAlignment)
	}
	if !isPow2(p.SectionAlignment) || p.SectionAlignment < p.FileAlignment {
		return nil, fmt.Errorf("SectionAlignment %#x is not a power of two >= FileAlignment %#x", p.SectionAlignment, p.FileAlignment)
	}
	p.sectionTableOff = p.optOffset + p.optSize
	tableEnd := p.sectionTableOff + nsec*sectionHeaderSize
	if tableEnd > len(data) {
		return nil, fmt.Errorf("section table (%d sections at %#x) runs past end of file", nsec, p.sectionTableOff)
	}
	if uint64(p.SizeOfHeaders) > uint64(len(data)) || uint64(tableEnd) > uint64(p.SizeOfHeaders) {
		return nil, fmt.Errorf("SizeOfHeaders %#x does not cover the section table (ends at %#x) or exceeds the file (%d bytes)", p.SizeOfHeaders, tableEnd, len(data))
	}
	for i := range nsec {
		off := p.sectionTableOff + i*sectionHeaderSize
		var s sectionHeader
		copy(s.raw[:], data[off:off+sectionHeaderSize])
		s.Name = cString(s.raw[:8])
		s.VirtualSize = binary.LittleEndian.Uint32(s.raw[8:])
		s.VirtualAddress = binary.LittleEndian.Uint32(s.raw[12:])
		s.SizeOfRawData = binary.LittleEndian.Uint32(s.raw[16:])
		s.PointerToRawData = binary.LittleEndian.Uint32(s.raw[20:])
		s.Characteristics = binary.LittleEndian.Uint32(s.raw[36:])
		if s.SizeOfRawData > 0 && uint64(s.PointerToRawData)+uint64(s.SizeOfRawData) > uint64(len(data)) {
			return nil, fmt.Errorf("section %d (%q): raw data [%#x, +%#x) runs past end of file (%d bytes)", i, s.Name, s.PointerToRawData, s.SizeOfRawData, len(data))
		}
		p.Sections = append(p.Sections, s)
	}
	if sa, ss := p.dir(dirSecurity); ss != 0 && uint64(sa)+uint64(ss) > uint64(len(data)) {
		return nil, fmt.Errorf("certificate table [%#x, +%#x) runs past end of file (%d bytes)", sa, ss, len(data))
	}
	return p, nil
}

// rawData returns the section's bytes as stored in the file (SizeOfRawData,
// padding included).
func (p *peFile) rawData(s sectionHeader) []byte {
	if s.SizeOfRawData == 0 { // PointerToRawData is meaningless then
		return nil
	}
	return p.data[s.PointerToRawData : s.PointerToRawData+s.SizeOfRawData]
}

// content returns the section's meaningful bytes: min(VirtualSize,
// SizeOfRawData) of them.
func (p *peFile) content(s sectionHeader) []byte {
	b := p.rawData(s)
	if s.VirtualSize < uint32(len(b)) {
		b = b[:s.VirtualSize]
	}
	return b
}

func (p *peFile) section(name string) (sectionHeader, bool) {
	for _, s := range p.Sections {
		if s.Name == name {
			return s, true
		}
	}
	return sectionHeader{}, false
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func isPow2(v uint32) bool { return v != 0 && v&(v-1) == 0 }

func alignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }

// checksummer computes the PE image checksum (the 16-bit one's-complement
// sum of the file's little-endian words, plus the file length) over data fed
// in any number of Write calls. The caller must zero the CheckSum field in
// what it feeds. Because 2^16 ≡ 1 (mod 0xffff), summing 64-bit words with
// end-around carry and folding at the end gives the same result as the
// word-by-word definition, eight times faster.
type checksummer struct {
	sum     uint64
	n       uint64
	pending []byte // 0..7 bytes not yet summed
	buf     [8]byte
}

func (c *checksummer) add64(v uint64) {
	var carry uint64
	c.sum, carry = bits.Add64(c.sum, v, 0)
	c.sum += carry // 2^64 ≡ 1 (mod 0xffff)
}

func (c *checksummer) Write(b []byte) (int, error) {
	n := len(b)
	c.n += uint64(n)
	if len(c.pending) > 0 {
		k := copy(c.buf[len(c.pending):], b)
		c.pending = c.buf[:len(c.pending)+k]
		b = b[k:]
		if len(c.pending) < 8 {
			return n, nil
		}
		c.add64(binary.LittleEndian.Uint64(c.buf[:]))
		c.pending = c.buf[:0]
	}
	for len(b) >= 8 {
		c.add64(binary.LittleEndian.Uint64(b))
		b = b[8:]
	}
	if len(b) > 0 {
		c.pending = c.buf[:copy(c.buf[:], b)]
	}
	return n, nil
}

// Sum returns the checksum of everything written so far.
func (c *checksummer) Sum() uint32 {
	s := c.sum
	if len(c.pending) > 0 {
		var tail [8]byte
		copy(tail[:], c.pending)
		var carry uint64
		s, carry = bits.Add64(s, binary.LittleEndian.Uint64(tail[:]), 0)
		s += carry
	}
	s = (s >> 32) + (s & 0xffffffff)
	s = (s >> 32) + (s & 0xffffffff)
	s = (s >> 16) + (s & 0xffff)
	s = (s >> 16) + (s & 0xffff)
	s = (s >> 16) + (s & 0xffff)
	return uint32(s) + uint32(c.n)
}

// peChecksum computes the checksum of a complete file whose CheckSum field
// is at checksumOff (its current value is ignored).
func peChecksum(data []byte, checksumOff int) uint32 {
	var c checksummer
	c.Write(data[:checksumOff])
	c.Write(make([]byte, 4))
	c.Write(data[checksumOff+4:])
	return c.Sum()
}
