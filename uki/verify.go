package uki

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
)

// ErrUnsigned is wrapped by VerifySignature's error for an image that
// carries no Authenticode signature at all.
var ErrUnsigned = errors.New("no Authenticode signature")

// The PKCS #7 structures an Authenticode signature is made of (RFC 2315),
// as far as VerifySignature reads them.
type (
	p7ContentInfo struct {
		ContentType asn1.ObjectIdentifier
		// Content is the [0] EXPLICIT element; its Bytes are the content.
		Content asn1.RawValue `asn1:"optional"`
	}
	p7SignedData struct {
		Version          int
		DigestAlgorithms []pkix.AlgorithmIdentifier `asn1:"set"`
		ContentInfo      p7ContentInfo
		Certificates     asn1.RawValue  `asn1:"optional,tag:0"`
		CRLs             asn1.RawValue  `asn1:"optional,tag:1"`
		SignerInfos      []p7SignerInfo `asn1:"set"`
	}
	p7SignerInfo struct {
		Version         int
		IssuerAndSerial struct {
			Issuer asn1.RawValue
			Serial *big.Int
		}
		DigestAlgorithm           pkix.AlgorithmIdentifier
		AuthenticatedAttributes   asn1.RawValue `asn1:"optional,tag:0"`
		DigestEncryptionAlgorithm pkix.AlgorithmIdentifier
		EncryptedDigest           []byte
		UnauthenticatedAttributes asn1.RawValue `asn1:"optional,tag:1"`
	}
	p7Attribute struct {
		Type   asn1.ObjectIdentifier
		Values asn1.RawValue `asn1:"set"`
	}
	spcIndirectData struct {
		Data struct {
			Type  asn1.ObjectIdentifier
			Value asn1.RawValue `asn1:"optional"`
		}
		MessageDigest struct {
			Algorithm pkix.AlgorithmIdentifier
			Digest    []byte
		}
	}
)

// VerifySignature checks that pe carries an Authenticode signature by
// cert: a PKCS #7 SignedData (SHA-256) whose SpcIndirectDataContent holds
// pe's image hash, whose authenticated attributes hold that content's
// digest, signed by cert's key and naming cert as signer. Any one of the
// certificate table's signatures will do, as for firmware. It checks what
// sbverify --cert checks for a certificate that signed directly (no
// chain); an image without a certificate table wraps ErrUnsigned.
func VerifySignature(pe []byte, cert *x509.Certificate) error {
	p, err := parsePE(pe)
	if err != nil {
		return fmt.Errorf("uki: verify: %w", err)
	}
	addr, size := p.dir(dirSecurity)
	if size == 0 {
		return fmt.Errorf("uki: verify: %w", ErrUnsigned)
	}
	// The image hash covers everything before the certificate table
	// (parsePE checked that it lies inside pe); no section may lie in it.
	for _, s := range p.Sections {
		if s.SizeOfRawData > 0 && uint64(s.PointerToRawData)+uint64(s.SizeOfRawData) > uint64(addr) {
			return fmt.Errorf("uki: verify: section %q overlaps the certificate table at %#x", s.Name, addr)
		}
	}
	if uint64(addr) < uint64(p.SizeOfHeaders) {
		return fmt.Errorf("uki: verify: certificate table at %#x inside the headers", addr)
	}
	unsigned := *p
	unsigned.data = pe[:addr]
	digest, err := authenticodeDigest(&unsigned)
	if err != nil {
		return fmt.Errorf("uki: verify: %w", err)
	}
	table := pe[addr : addr+size]
	var errs []error
	for len(table) >= 8 {
		n := binary.LittleEndian.Uint32(table)
		if n < 8 || uint64(n) > uint64(len(table)) {
			return fmt.Errorf("uki: verify: WIN_CERTIFICATE of %d bytes in a table of %d", n, len(table))
		}
		rev, typ := binary.LittleEndian.Uint16(table[4:]), binary.LittleEndian.Uint16(table[6:])
		if rev == winCertRevision2 && typ == winCertTypePKCSSig {
			err := verifyPKCS7(table[8:n], digest, cert)
			if err == nil {
				return nil
			}
			errs = append(errs, err)
		}
		table = table[min(alignUp(uint64(n), 8), uint64(len(table))):]
	}
	if len(errs) == 0 {
		return fmt.Errorf("uki: verify: %w (the certificate table holds no PKCS #7 signature)", ErrUnsigned)
	}
	return fmt.Errorf("uki: verify: %w", errors.Join(errs...))
}

// verifyPKCS7 checks one DER ContentInfo of an Authenticode signature
// against the image hash digest and cert.
func verifyPKCS7(der []byte, digest []byte, cert *x509.Certificate) error {
	var ci p7ContentInfo
	if rest, err := asn1.Unmarshal(der, &ci); err != nil {
		return fmt.Errorf("signature: %w", err)
	} else if len(bytes.TrimRight(rest, "\x00")) > 0 {
		return errors.New("signature: trailing data")
	}
	if !ci.ContentType.Equal(oidSignedData) {
		return fmt.Errorf("signature: content type %v, not SignedData", ci.ContentType)
	}
	var sd p7SignedData
	if _, err := asn1.Unmarshal(ci.Content.Bytes, &sd); err != nil {
		return fmt.Errorf("signature: SignedData: %w", err)
	}
	if !sd.ContentInfo.ContentType.Equal(oidSpcIndirectData) {
		return fmt.Errorf("signature: signs %v, not SpcIndirectDataContent", sd.ContentInfo.ContentType)
	}
	var seq asn1.RawValue
	if _, err := asn1.Unmarshal(sd.ContentInfo.Content.Bytes, &seq); err != nil {
		return fmt.Errorf("signature: SpcIndirectDataContent: %w", err)
	}
	var ind spcIndirectData
	if _, err := asn1.Unmarshal(seq.FullBytes, &ind); err != nil {
		return fmt.Errorf("signature: SpcIndirectDataContent: %w", err)
	}
	if !ind.MessageDigest.Algorithm.Algorithm.Equal(oidSHA256) {
		return fmt.Errorf("signature: image hash algorithm %v, not SHA-256", ind.MessageDigest.Algorithm.Algorithm)
	}
	if !bytes.Equal(ind.MessageDigest.Digest, digest) {
		return fmt.Errorf("signature is of image hash %x, the image's is %x", ind.MessageDigest.Digest, digest)
	}
	// The message digest covers the content octets of the SEQUENCE (as
	// signedData writes it).
	contentDigest := sha256.Sum256(seq.Bytes)
	var errs []error
	for _, si := range sd.SignerInfos {
		err := verifySigner(si, contentDigest[:], cert)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return errors.New("signature has no signer")
	}
	return errors.Join(errs...)
}

// verifySigner checks one SignerInfo: cert named as signer, its
// authenticated attributes holding contentDigest, signed by cert's key.
func verifySigner(si p7SignerInfo, contentDigest []byte, cert *x509.Certificate) error {
	if !bytes.Equal(si.IssuerAndSerial.Issuer.FullBytes, cert.RawIssuer) || si.IssuerAndSerial.Serial == nil || si.IssuerAndSerial.Serial.Cmp(cert.SerialNumber) != 0 {
		return fmt.Errorf("signed by serial %v of another issuer or certificate, not %s (serial %v)", si.IssuerAndSerial.Serial, cert.Subject, cert.SerialNumber)
	}
	if !si.DigestAlgorithm.Algorithm.Equal(oidSHA256) {
		return fmt.Errorf("signer digest algorithm %v, not SHA-256", si.DigestAlgorithm.Algorithm)
	}
	if len(si.AuthenticatedAttributes.FullBytes) == 0 {
		return errors.New("signer has no authenticated attributes")
	}
	// Signed as a SET OF (tag 0x31), stored as [0] IMPLICIT.
	set := bytes.Clone(si.AuthenticatedAttributes.FullBytes)
	set[0] = 0x31
	var attrs []p7Attribute
	if _, err := asn1.UnmarshalWithParams(set, &attrs, "set"); err != nil {
		return fmt.Errorf("authenticated attributes: %w", err)
	}
	found := false
	for _, a := range attrs {
		if !a.Type.Equal(oidMessageDigest) {
			continue
		}
		var md []byte
		if _, err := asn1.Unmarshal(a.Values.Bytes, &md); err != nil {
			return fmt.Errorf("messageDigest attribute: %w", err)
		}
		if !bytes.Equal(md, contentDigest) {
			return errors.New("messageDigest attribute does not match the signed content")
		}
		found = true
	}
	if !found {
		return errors.New("no messageDigest attribute")
	}
	if err := cert.CheckSignature(x509.SHA256WithRSA, set, si.EncryptedDigest); err != nil {
		return fmt.Errorf("signature by %s: %w", cert.Subject, err)
	}
	return nil
}
