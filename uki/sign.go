package uki

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math/big"
	"sort"
)

// Object identifiers used in an Authenticode signature.
var (
	oidSignedData       = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 2}
	oidSHA256           = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 1}
	oidRSAEncryption    = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}
	oidContentType      = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 3}
	oidMessageDigest    = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 4}
	oidSpcIndirectData  = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 311, 2, 1, 4}
	oidSpcPEImageData   = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 311, 2, 1, 15}
	oidSpcSpOpusInfo    = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 311, 2, 1, 12}
	oidSpcStatementType = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 311, 2, 1, 11}
	oidSpcIndividualSP  = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 311, 2, 1, 21}
)

// WIN_CERTIFICATE constants.
const (
	winCertRevision2   = 0x0200
	winCertTypePKCSSig = 0x0002
)

// Sign returns pe signed with Authenticode (SHA-256, RSA PKCS#1 v1.5) by key
// and cert. A signature already present is replaced. The result is a pure
// function of its inputs: no signing time is included. A UKI (a PE with
// .linux) without a non-empty .cmdline is refused (ErrSignedNoCmdline).
func Sign(pe []byte, key crypto.Signer, cert *x509.Certificate) ([]byte, error) {
	p, err := parsePE(pe)
	if err != nil {
		return nil, fmt.Errorf("uki: sign: %w", err)
	}
	if _, isUKI := p.section(SectionLinux); isUKI {
		s, ok := p.section(SectionCmdline)
		if !ok || len(bytes.TrimSpace(p.content(s))) == 0 {
			return nil, fmt.Errorf("uki: sign: the UKI has no .cmdline: %w", ErrSignedNoCmdline)
		}
	}
	certDir := p.dirOffset(dirSecurity)
	if certDir < 0 {
		return nil, errors.New("uki: sign: image has no certificate table data directory entry")
	}
	end := len(pe)
	if addr, size := p.dir(dirSecurity); size != 0 {
		if uint64(addr)+uint64(size) != uint64(len(pe)) {
			return nil, fmt.Errorf("uki: sign: existing certificate table [%#x, +%#x) is not at the end of the file", addr, size)
		}
		end = int(addr)
	}
	// The certificate table must start 8-byte aligned; the padding is part
	// of the signed (hashed) file.
	out := make([]byte, alignUp(uint64(end), 8), alignUp(uint64(end), 8)+4096)
	copy(out, pe[:end])
	clear(out[certDir : certDir+8])
	p, err = parsePE(out)
	if err != nil {
		return nil, fmt.Errorf("uki: sign: %w", err)
	}
	digest, err := authenticodeDigest(p)
	if err != nil {
		return nil, fmt.Errorf("uki: sign: %w", err)
	}
	wc, err := signDigest(digest, key, cert)
	if err != nil {
		return nil, err
	}
	binary.LittleEndian.PutUint32(out[certDir:], uint32(len(out)))
	binary.LittleEndian.PutUint32(out[certDir+4:], uint32(len(wc)))
	out = append(out, wc...)
	binary.LittleEndian.PutUint32(out[p.checksumOffset():], peChecksum(out, p.checksumOffset()))
	return out, nil
}

// authenticodeHasher hashes the headers the Authenticode way (skipping the
// CheckSum field and the certificate table entry) on creation; section data
// is then written to it in file order.
type authenticodeHasher struct{ hash.Hash }

func newAuthenticodeHasher(header []byte, checksumOff, certDirOff int) authenticodeHasher {
	h := sha256.New()
	h.Write(header[:checksumOff])
	h.Write(header[checksumOff+4 : certDirOff])
	h.Write(header[certDirOff+8:])
	return authenticodeHasher{h}
}

// authenticodeDigest computes the Authenticode image hash of a parsed PE
// file with no certificate table, following the PE specification: headers,
// then each section's raw data in file order, then whatever follows the
// SUM_OF_BYTES_HASHED first bytes.
func authenticodeDigest(p *peFile) ([]byte, error) {
	h := newAuthenticodeHasher(p.data[:p.SizeOfHeaders], p.checksumOffset(), p.dirOffset(dirSecurity))
	secs := append([]sectionHeader(nil), p.Sections...)
	sort.SliceStable(secs, func(i, j int) bool { return secs[i].PointerToRawData < secs[j].PointerToRawData })
	hashed := uint64(p.SizeOfHeaders)
	for _, s := range secs {
		if s.SizeOfRawData == 0 {
			continue
		}
		h.Write(p.rawData(s))
		hashed += uint64(s.SizeOfRawData)
	}
	if hashed < uint64(len(p.data)) {
		h.Write(p.data[hashed:])
	}
	return h.Sum(nil), nil
}

// signDigest builds the WIN_CERTIFICATE (PKCS#7 SignedData over an
// SpcIndirectDataContent carrying the image digest), padded to 8 bytes.
func signDigest(digest []byte, key crypto.Signer, cert *x509.Certificate) ([]byte, error) {
	if key == nil || cert == nil {
		return nil, errors.New("uki: sign: key and certificate are both required")
	}
	pub, ok := key.Public().(*rsa.PublicKey)
	if !ok {
		// ECDSA signatures are randomised; RSA PKCS#1 v1.5 keeps the
		// signed image reproducible and is what UEFI db keys use.
		return nil, fmt.Errorf("uki: sign: key type %T is not RSA", key.Public())
	}
	if !pub.Equal(cert.PublicKey) {
		return nil, errors.New("uki: sign: certificate does not match the private key")
	}
	p7, err := signedData(digest, key, cert)
	if err != nil {
		return nil, err
	}
	n := alignUp(uint64(8+len(p7)), 8)
	wc := make([]byte, n)
	binary.LittleEndian.PutUint32(wc[0:], uint32(8+len(p7)))
	binary.LittleEndian.PutUint16(wc[4:], winCertRevision2)
	binary.LittleEndian.PutUint16(wc[6:], winCertTypePKCSSig)
	copy(wc[8:], p7)
	return wc, nil
}

// signedData returns the DER ContentInfo of an Authenticode signature.
func signedData(digest []byte, key crypto.Signer, cert *x509.Certificate) ([]byte, error) {
	sha256Alg := derSeq(derOID(oidSHA256), derNull)

	// SpcIndirectDataContent ::= SEQUENCE {
	//   data SpcAttributeTypeAndOptionalValue { type, SpcPeImageData },
	//   messageDigest DigestInfo }
	// SpcPeImageData carries empty flags and the traditional
	// "<<<Obsolete>>>" file link (SpcLink.file [2] -> SpcString.unicode [0]).
	obsolete := bmpString("<<<Obsolete>>>")
	peImageData := derSeq(
		der(0x03, []byte{0}), // flags: empty BIT STRING
		der(0xa0, der(0xa2, der(0x80, obsolete))),
	)
	indirect := derSeq(
		derSeq(derOID(oidSpcPEImageData), peImageData),
		derSeq(sha256Alg, der(0x04, digest)),
	)
	// The message digest covers the content octets of the SEQUENCE, not its
	// tag and length (PKCS#7 section 9.3, as Authenticode applies it).
	contentDigest := sha256.Sum256(derContents(indirect))

	attrs := [][]byte{
		derSeq(derOID(oidContentType), derSet(derOID(oidSpcIndirectData))),
		derSeq(derOID(oidMessageDigest), derSet(der(0x04, contentDigest[:]))),
		derSeq(derOID(oidSpcSpOpusInfo), derSet(derSeq())),
		derSeq(derOID(oidSpcStatementType), derSet(derSeq(derOID(oidSpcIndividualSP)))),
	}
	// DER orders SET OF elements by their encodings.
	sort.Slice(attrs, func(i, j int) bool { return string(attrs[i]) < string(attrs[j]) })
	attrSet := derSet(attrs...)
	attrDigest := sha256.Sum256(attrSet) // signed as a SET (tag 0x31)
	sig, err := key.Sign(nil, attrDigest[:], crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("uki: sign: %w", err)
	}

	serial, err := asn1.Marshal(new(big.Int).Set(cert.SerialNumber))
	if err != nil {
		return nil, fmt.Errorf("uki: sign: certificate serial: %w", err)
	}
	signerInfo := derSeq(
		derInt(1),
		derSeq(cert.RawIssuer, serial),
		sha256Alg,
		der(0xa0, derContents(attrSet)), // [0] IMPLICIT SET OF Attribute
		derSeq(derOID(oidRSAEncryption), derNull),
		der(0x04, sig),
	)
	sd := derSeq(
		derInt(1),
		derSet(sha256Alg),
		derSeq(derOID(oidSpcIndirectData), der(0xa0, indirect)),
		der(0xa0, cert.Raw), // certificates [0] IMPLICIT
		derSet(signerInfo),
	)
	return derSeq(derOID(oidSignedData), der(0xa0, sd)), nil
}

// Minimal DER writer: enough for the fixed structures above.

var derNull = []byte{0x05, 0x00}

func der(tag byte, contents ...[]byte) []byte {
	n := 0
	for _, c := range contents {
		n += len(c)
	}
	out := []byte{tag}
	switch {
	case n < 0x80:
		out = append(out, byte(n))
	default:
		var l []byte
		for v := n; v > 0; v >>= 8 {
			l = append([]byte{byte(v)}, l...)
		}
		out = append(out, 0x80|byte(len(l)))
		out = append(out, l...)
	}
	for _, c := range contents {
		out = append(out, c...)
	}
	return out
}

func derSeq(c ...[]byte) []byte { return der(0x30, c...) }
func derSet(c ...[]byte) []byte { return der(0x31, c...) }

func derOID(o asn1.ObjectIdentifier) []byte {
	b, err := asn1.Marshal(o)
	if err != nil {
		panic(err) // constant OIDs above
	}
	return b
}

func derInt(v int) []byte {
	b, err := asn1.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// derContents strips the tag and length of a DER element built by der.
func derContents(b []byte) []byte {
	if b[1] < 0x80 {
		return b[2:]
	}
	return b[2+int(b[1]&0x7f):]
}

func bmpString(s string) []byte {
	var b []byte
	for _, r := range s {
		b = append(b, byte(r>>8), byte(r))
	}
	return b
}
