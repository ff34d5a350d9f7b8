package uki

import (
	"crypto"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

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
