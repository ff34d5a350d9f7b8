package qemu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"
	"unicode/utf16"

	"github.com/ironcore-dev/os-builder/internal/boundedfile"
)

// OVMFCodeSecureBoot is Debian's OVMF build that enforces Secure Boot once
// a PK is enrolled; it needs SMM (Config.SecureBoot sets the machine up).
var OVMFCodeSecureBoot = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"

// SecureBootKeys are DER X.509 certificates to enroll: PK, KEK and db
// (e.g. `builder genkey`'s db.crt for all three in a lab). Only db decides
// what boots; PK and KEK must merely exist for the firmware to leave setup
// mode.
type SecureBootKeys struct {
	PK, KEK, DB []byte
}

// maxVarsSize bounds the variable store file read: OVMF's are 128 KiB or
// 528 KiB.
const maxVarsSize = 4 << 20

// EDK2 variable store layout (MdeModulePkg VariableFormat.h): after the
// firmware volume header comes a VARIABLE_STORE_HEADER, then variables,
// each an AUTHENTICATED_VARIABLE_HEADER, its UTF-16 name and its data
// (unpadded between them on x64), the next header 4-byte aligned; free
// space is 0xff.
const (
	varStoreHeaderSize = 28
	varHeaderSize      = 60
	varStartID         = 0x55aa
	varAdded           = 0x3f
	varStoreFormatted  = 0x5a
	varStoreHealthy    = 0xfe

	attrNV            = 0x01
	attrBS            = 0x02
	attrRT            = 0x04
	attrTimeBasedAuth = 0x20
)

// GUIDs in their on-disk (mixed-endian) byte order.
var (
	guidAuthVarStore   = guidBytes(0xaaf32c78, 0x947b, 0x439a, [8]byte{0xa1, 0x80, 0x2e, 0x14, 0x4e, 0xc3, 0x77, 0x92})
	guidGlobal         = guidBytes(0x8be4df61, 0x93ca, 0x11d2, [8]byte{0xaa, 0x0d, 0x00, 0xe0, 0x98, 0x03, 0x2b, 0x8c})
	guidImageSecDB     = guidBytes(0xd719b2cb, 0x3d3a, 0x4596, [8]byte{0xa3, 0xbc, 0xda, 0xd0, 0x0e, 0x67, 0x65, 0x6f})
	guidSecureBootEn   = guidBytes(0xf0a30bc7, 0xaf08, 0x4556, [8]byte{0x99, 0xc4, 0x00, 0x10, 0x09, 0xc9, 0x3a, 0x44})
	guidCustomMode     = guidBytes(0xc076ec0c, 0x7028, 0x4399, [8]byte{0xa0, 0x72, 0x71, 0xee, 0x5c, 0x44, 0x8b, 0x9f})
	guidCertX509       = guidBytes(0xa5c059a1, 0x94e4, 0x4aa7, [8]byte{0x87, 0xb5, 0xab, 0x15, 0x5c, 0x2b, 0xf0, 0x72})
	guidSignatureOwner = guidBytes(0x6f73622d, 0x6275, 0x696c, [8]byte{'d', 'e', 'r', '-', 't', 'e', 's', 't'})
)

func guidBytes(a uint32, b, c uint16, d [8]byte) [16]byte {
	var g [16]byte
	binary.LittleEndian.PutUint32(g[0:], a)
	binary.LittleEndian.PutUint16(g[4:], b)
	binary.LittleEndian.PutUint16(g[6:], c)
	copy(g[8:], d[:])
	return g
}

// EnrollSecureBoot writes to dst a copy of the OVMF variable store template
// (e.g. OVMFVars, an empty store) with keys enrolled and Secure Boot
// switched on (SecureBootEnable=1, CustomMode=0): the firmware starts in
// user mode and runs only images db allows. The variables are written
// directly, the way the firmware stores them, so no boot is needed.
func EnrollSecureBoot(template, dst string, keys SecureBootKeys) error {
	if len(keys.PK) == 0 || len(keys.KEK) == 0 || len(keys.DB) == 0 {
		return errors.New("qemu: enroll secure boot: PK, KEK and db certificates are all required")
	}
	store, err := boundedfile.Read(template, maxVarsSize)
	if err != nil {
		return fmt.Errorf("qemu: enroll secure boot: %w", err)
	}
	free, end, err := varStoreFree(store)
	if err != nil {
		return fmt.Errorf("qemu: enroll secure boot: %s: %w", template, err)
	}
	// A fixed time stamp: time-based authenticated variables carry one, and
	// later updates must be newer.
	stamp := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	const auth = attrNV | attrBS | attrRT | attrTimeBasedAuth
	var vars bytes.Buffer
	for _, v := range []struct {
		name  string
		guid  [16]byte
		attrs uint32
		data  []byte
	}{
		{"PK", guidGlobal, auth, x509SignatureList(keys.PK)},
		{"KEK", guidGlobal, auth, x509SignatureList(keys.KEK)},
		{"db", guidImageSecDB, auth, x509SignatureList(keys.DB)},
		{"SecureBootEnable", guidSecureBootEn, attrNV | attrBS, []byte{1}},
		{"CustomMode", guidCustomMode, attrNV | attrBS, []byte{0}},
	} {
		ts := time.Time{}
		if v.attrs&attrTimeBasedAuth != 0 {
			ts = stamp
		}
		appendVariable(&vars, v.name, v.guid, v.attrs, ts, v.data)
	}
	if free+vars.Len() > end {
		return fmt.Errorf("qemu: enroll secure boot: %s: %d bytes of variables do not fit in %d free bytes", template, vars.Len(), end-free)
	}
	copy(store[free:], vars.Bytes())
	if err := os.WriteFile(dst, store, 0o600); err != nil {
		return fmt.Errorf("qemu: enroll secure boot: %w", err)
	}
	return nil
}

// varStoreFree finds the authenticated variable store in a firmware
// volume image and returns where its free space starts and where the store
// ends. Every existing variable is skipped; offsets are checked against the
// image, so hostile input yields an error, never a panic.
func varStoreFree(fv []byte) (free, end int, err error) {
	// EFI_FIRMWARE_VOLUME_HEADER: "_FVH" at 40, HeaderLength (u16) at 48.
	if len(fv) < 56 || string(fv[40:44]) != "_FVH" {
		return 0, 0, errors.New("no firmware volume header")
	}
	start := int(binary.LittleEndian.Uint16(fv[48:]))
	if start < 56 || start+varStoreHeaderSize > len(fv) {
		return 0, 0, fmt.Errorf("firmware volume header length %d out of range", start)
	}
	h := fv[start:]
	if !bytes.Equal(h[:16], guidAuthVarStore[:]) {
		return 0, 0, errors.New("not an authenticated variable store")
	}
	size := int(binary.LittleEndian.Uint32(h[16:]))
	if h[20] != varStoreFormatted || h[21] != varStoreHealthy {
		return 0, 0, fmt.Errorf("variable store not formatted/healthy (format %#x, state %#x)", h[20], h[21])
	}
	end = start + size
	if size < varStoreHeaderSize || end > len(fv) {
		return 0, 0, fmt.Errorf("variable store size %d out of range", size)
	}
	off := start + varStoreHeaderSize
	for off+varHeaderSize <= end && binary.LittleEndian.Uint16(fv[off:]) == varStartID {
		nameSize := int(binary.LittleEndian.Uint32(fv[off+36:]))
		dataSize := int(binary.LittleEndian.Uint32(fv[off+40:]))
		if nameSize > end || dataSize > end {
			return 0, 0, fmt.Errorf("variable at %#x: sizes out of range", off)
		}
		next := align4(off + varHeaderSize + nameSize + dataSize)
		if next > end {
			return 0, 0, fmt.Errorf("variable at %#x runs past the store", off)
		}
		off = next
	}
	for _, b := range fv[off:end] {
		if b != 0xff {
			return 0, 0, fmt.Errorf("free space at %#x is not erased", off)
		}
	}
	return off, end, nil
}

func align4(n int) int { return (n + 3) &^ 3 }

// appendVariable appends one AUTHENTICATED_VARIABLE_HEADER, name and data,
// padded to the next header with 0xff (erased flash) as the firmware
// leaves it.
func appendVariable(buf *bytes.Buffer, name string, guid [16]byte, attrs uint32, ts time.Time, data []byte) {
	var nameBytes []byte
	for _, u := range utf16.Encode([]rune(name + "\x00")) {
		nameBytes = binary.LittleEndian.AppendUint16(nameBytes, u)
	}
	h := make([]byte, varHeaderSize)
	binary.LittleEndian.PutUint16(h[0:], varStartID)
	h[2] = varAdded
	binary.LittleEndian.PutUint32(h[4:], attrs)
	// MonotonicCount (8 bytes at 8) stays 0; EFI_TIME at 16.
	if !ts.IsZero() {
		binary.LittleEndian.PutUint16(h[16:], uint16(ts.Year()))
		h[18], h[19], h[20], h[21], h[22] = byte(ts.Month()), byte(ts.Day()), byte(ts.Hour()), byte(ts.Minute()), byte(ts.Second())
	}
	// PubKeyIndex (4 bytes at 32) stays 0.
	binary.LittleEndian.PutUint32(h[36:], uint32(len(nameBytes)))
	binary.LittleEndian.PutUint32(h[40:], uint32(len(data)))
	copy(h[44:], guid[:])
	buf.Write(h)
	buf.Write(nameBytes)
	buf.Write(data) // right after the name: x64 EDK2 aligns headers only
	pad(buf)
}

func pad(buf *bytes.Buffer) {
	for buf.Len()%4 != 0 {
		buf.WriteByte(0xff)
	}
}

// x509SignatureList is an EFI_SIGNATURE_LIST holding one X.509
// certificate.
func x509SignatureList(der []byte) []byte {
	sigSize := 16 + len(der)
	b := make([]byte, 0, 28+sigSize)
	b = append(b, guidCertX509[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(28+sigSize)) // SignatureListSize
	b = binary.LittleEndian.AppendUint32(b, 0)                  // SignatureHeaderSize
	b = binary.LittleEndian.AppendUint32(b, uint32(sigSize))    // SignatureSize
	b = append(b, guidSignatureOwner[:]...)
	return append(b, der...)
}
