package uki

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
)

// SectionInfo describes one section of a PE image.
type SectionInfo struct {
	Name            string `json:"name"`
	VirtualAddress  uint32 `json:"virtualAddress"`
	VirtualSize     uint32 `json:"virtualSize"`
	RawOffset       uint32 `json:"rawOffset"`
	RawSize         uint32 `json:"rawSize"`
	Characteristics uint32 `json:"characteristics"`
	// SHA256 is the digest of the section's content (VirtualSize bytes, or
	// fewer if the file holds fewer).
	SHA256 string `json:"sha256"`
}

// Inspect lists the sections of the PE image at path.
func Inspect(path string) ([]SectionInfo, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("uki: inspect: %w", err)
	}
	infos, err := InspectBytes(data)
	if err != nil {
		return nil, fmt.Errorf("uki: inspect %s: %w", path, err)
	}
	return infos, nil
}

// InspectBytes lists the sections of a PE image held in memory.
func InspectBytes(pe []byte) ([]SectionInfo, error) {
	p, err := parsePE(pe)
	if err != nil {
		return nil, err
	}
	infos := make([]SectionInfo, 0, len(p.Sections))
	for _, s := range p.Sections {
		sum := sha256.Sum256(p.content(s))
		infos = append(infos, SectionInfo{
			Name:            s.Name,
			VirtualAddress:  s.VirtualAddress,
			VirtualSize:     s.VirtualSize,
			RawOffset:       s.PointerToRawData,
			RawSize:         s.SizeOfRawData,
			Characteristics: s.Characteristics,
			SHA256:          hex.EncodeToString(sum[:]),
		})
	}
	return infos, nil
}

// SectionData returns the content of the named section of a PE image, e.g.
// the .cmdline or .osrel of a UKI.
func SectionData(pe []byte, name string) ([]byte, error) {
	p, err := parsePE(pe)
	if err != nil {
		return nil, err
	}
	s, ok := p.section(name)
	if !ok {
		return nil, fmt.Errorf("uki: no section %s", name)
	}
	return p.content(s), nil
}
