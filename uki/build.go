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
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// DefaultSBAT is the SBAT line naming the UKI itself, as ukify adds it.
const DefaultSBAT = "uki,1,UKI,uki,1,https://uapi-group.org/specifications/specs/unified_kernel_image/\n"

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
	// the newline of a file) is trimmed. No .cmdline section when empty,
	// which only an unsigned UKI may be (see ErrSignedNoCmdline).
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

// ErrSignedNoCmdline refuses a signed UKI without a command line: with no
// .cmdline section systemd-stub passes the boot loader's command line to
// the kernel even under Secure Boot, so the signature would seal nothing of
// what the kernel and the init are told (osb.root=, rdinit=).
var ErrSignedNoCmdline = errors.New("a signed UKI needs a non-empty command line (Options.Cmdline): without .cmdline systemd-stub takes the boot loader's under Secure Boot")

// Write assembles the UKI described by opts and writes it to w. It holds no
// copy of the kernel or initrd beyond the caller's.
func Write(w io.Writer, opts Options) (int64, error) {
	if (opts.Signer == nil) != (opts.Certificate == nil) {
		return 0, errors.New("uki: Signer and Certificate must be set together")
	}
	if opts.Signer != nil && strings.TrimSpace(opts.Cmdline) == "" {
		return 0, fmt.Errorf("uki: %w", ErrSignedNoCmdline)
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
