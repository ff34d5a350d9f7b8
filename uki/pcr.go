package uki

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Measured boot (systemd-stub, PCR 11). The stub extends PCR 11 of the
// TPM's banks, for each section it knows that the UKI holds, in the stub's
// fixed order: first the section name with its NUL, then the section's
// content (VirtualSize bytes), each an EV_IPL event. .pcrsig is never
// measured (it carries the signature of the result). Later systemd
// (systemd-pcrphase) extends the boot phase words ("enter-initrd", ...)
// into the same PCR. A UKI carrying .pcrpkey (the public key, PEM) and
// .pcrsig (signed TPM2 policies for the predicted values) lets the booted
// OS unlock TPM-bound secrets with any UKI signed by that key.
const (
	SectionPCRSig  = ".pcrsig"
	SectionPCRPKey = ".pcrpkey"

	// PCRKernelImage is the PCR systemd-stub measures the UKI into.
	PCRKernelImage = 11
)

// measuredSections252 is systemd 252's order (the first stub that
// measures); 253 added .uname and .sbat after .dtb, 256 .ucode after
// .initrd.
var (
	measuredSections252 = []string{SectionLinux, SectionOSRel, SectionCmdline, SectionInitrd, ".splash", ".dtb", SectionPCRPKey}
	measuredSections253 = []string{SectionLinux, SectionOSRel, SectionCmdline, SectionInitrd, ".ucode", ".splash", ".dtb", SectionUname, SectionSBAT, SectionPCRPKey}
)

// DefaultPCRPhases are the boot phases .pcrsig signs the PCR 11 values
// of. Phases are ':'-separated phase words. The first four are
// systemd-measure's defaults (a systemd initrd, then the system after
// switch-root); the last two are what our own init's boots reach, since it
// extends no initrd phases before systemd's sysinit and ready.
var DefaultPCRPhases = []string{
	"enter-initrd",
	"enter-initrd:leave-initrd",
	"enter-initrd:leave-initrd:sysinit",
	"enter-initrd:leave-initrd:sysinit:ready",
	"sysinit",
	"sysinit:ready",
}

// SignsPCR reports whether a UKI built on stub and signed by signer
// carries .pcrsig and .pcrpkey: the signer is RSA (what systemd verifies)
// and the stub measures (systemd 252 and later).
func SignsPCR(stub []byte, signer crypto.Signer) bool {
	if _, ok := signer.(*rsa.PrivateKey); !ok {
		return false
	}
	p, err := parsePE(stub)
	return err == nil && measuredSections(stubVersion(p)) != nil
}

// measuredSections returns the sections a stub of systemd version v
// measures, in order; nil for stubs that measure nothing.
func measuredSections(v int) []string {
	switch {
	case v >= 253:
		return measuredSections253
	case v == 252:
		return measuredSections252
	}
	return nil
}

var stubVersionRE = regexp.MustCompile(`systemd-stub ([0-9]+)`)

// stubVersion reads systemd's major version from the stub's .sdmagic
// section ("#### LoaderInfo: systemd-stub 252.39-1~deb12u2 ####"); 0 when
// it has none.
func stubVersion(p *peFile) int {
	s, ok := p.section(".sdmagic")
	if !ok {
		return 0
	}
	m := stubVersionRE.FindSubmatch(p.content(s))
	if m == nil {
		return 0
	}
	v, err := strconv.Atoi(string(m[1]))
	if err != nil {
		return 0
	}
	return v
}

// extend is a TPM PCR extend in the SHA-256 bank of data's digest d.
func extend(pcr, d [32]byte) [32]byte {
	return sha256.Sum256(append(pcr[:], d[:]...))
}

// predictPCR11 is PCR 11 after a stub of systemd version v measured
// sections (name -> the sha256 of its content; absent for empty ones,
// which the stub skips) and then the phase words of phase (':'-separated;
// "" for none).
func predictPCR11(v int, sections map[string][32]byte, phase string) [32]byte {
	var pcr [32]byte
	for _, name := range measuredSections(v) {
		d, ok := sections[name]
		if !ok {
			continue
		}
		pcr = extend(pcr, sha256.Sum256(append([]byte(name), 0)))
		pcr = extend(pcr, d)
	}
	if phase != "" {
		for _, word := range strings.Split(phase, ":") {
			pcr = extend(pcr, sha256.Sum256([]byte(word)))
		}
	}
	return pcr
}

// PredictPCR11 returns the SHA-256 value PCR 11 has when the UKI pe was
// booted (by its own systemd-stub) and then phase (e.g. "" right after
// the stub, "sysinit:ready" for a system whose initrd runs no systemd) was
// reached.
func PredictPCR11(pe []byte, phase string) ([32]byte, error) {
	p, err := parsePE(pe)
	if err != nil {
		return [32]byte{}, fmt.Errorf("uki: predict PCR 11: %w", err)
	}
	v := stubVersion(p)
	if measuredSections(v) == nil {
		return [32]byte{}, fmt.Errorf("uki: predict PCR 11: stub (systemd %d) measures nothing", v)
	}
	sections := map[string][32]byte{}
	seen := map[string]bool{}
	for _, s := range p.Sections {
		if seen[s.Name] {
			return [32]byte{}, fmt.Errorf("uki: predict PCR 11: section %s appears twice", s.Name)
		}
		seen[s.Name] = true
		if c := p.content(s); len(c) > 0 {
			sections[s.Name] = sha256.Sum256(c)
		}
	}
	return predictPCR11(v, sections, phase), nil
}

// PCRSignature is one entry of .pcrsig: a TPM2 PolicyPCR digest and its
// signature, by systemd's JSON field names.
type PCRSignature struct {
	PCRs   []int  `json:"pcrs"`
	PKFP   string `json:"pkfp"` // hex SHA-256 of the public key (PKCS#1 DER)
	Policy string `json:"pol"`  // hex TPM2 policy digest
	Sig    string `json:"sig"`  // base64 RSASSA-PKCS1-v1_5 (SHA-256) over the policy digest
}

// tpmCCPolicyPCR and tpmAlgSHA256 are TPM 2.0 constants (Part 2).
const (
	tpmCCPolicyPCR = 0x0000017f
	tpmAlgSHA256   = 0x000b
)

// PolicyPCR11 is the TPM2 policy digest .pcrsig's "pol" holds for PCR 11
// (SHA-256 bank) holding value.
func PolicyPCR11(value [32]byte) [32]byte { return policyPCR(value) }

// policyPCR is the TPM2 policy digest of one PolicyPCR assertion over
// PCR 11 (SHA-256 bank) holding value, starting from the empty policy:
// H(0^32 || TPM_CC_PolicyPCR || TPML_PCR_SELECTION || H(value)).
func policyPCR(value [32]byte) [32]byte {
	var b bytes.Buffer
	b.Write(make([]byte, 32))
	binary.Write(&b, binary.BigEndian, uint32(tpmCCPolicyPCR))
	binary.Write(&b, binary.BigEndian, uint32(1)) // one selection
	binary.Write(&b, binary.BigEndian, uint16(tpmAlgSHA256))
	b.WriteByte(3) // sizeofSelect: PCRs 0-23
	sel := [3]byte{}
	sel[PCRKernelImage/8] |= 1 << (PCRKernelImage % 8)
	b.Write(sel[:])
	d := sha256.Sum256(value[:])
	b.Write(d[:])
	return sha256.Sum256(b.Bytes())
}

// pcrSections makes .pcrpkey (the RSA public key, PEM) and .pcrsig for a
// stub of systemd version v and the other sections of the UKI (name ->
// sha256 of the content, non-empty ones only), signing the PCR 11 value of
// each phase with key.
func pcrSections(v int, key *rsa.PrivateKey, sections map[string][32]byte, phases []string) (pkey, sig []byte, err error) {
	spki, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, fmt.Errorf("pcr public key: %w", err)
	}
	pkey = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: spki})
	fp := sha256.Sum256(x509.MarshalPKCS1PublicKey(&key.PublicKey))
	measured := map[string][32]byte{SectionPCRPKey: sha256.Sum256(pkey)}
	for n, d := range sections {
		if n != SectionPCRPKey && n != SectionPCRSig {
			measured[n] = d
		}
	}
	var entries []PCRSignature
	for _, phase := range phases {
		pol := policyPCR(predictPCR11(v, measured, phase))
		// What TPM2_PolicyAuthorize verifies: the signature over
		// H(approvedPolicy || policyRef), policyRef empty.
		h := sha256.Sum256(pol[:])
		s, err := key.Sign(nil, h[:], crypto.SHA256)
		if err != nil {
			return nil, nil, fmt.Errorf("signing PCR policy for phase %q: %w", phase, err)
		}
		entries = append(entries, PCRSignature{
			PCRs:   []int{PCRKernelImage},
			PKFP:   hex.EncodeToString(fp[:]),
			Policy: hex.EncodeToString(pol[:]),
			Sig:    base64.StdEncoding.EncodeToString(s),
		})
	}
	sig, err = json.Marshal(map[string][]PCRSignature{"sha256": entries})
	if err != nil {
		return nil, nil, err
	}
	return pkey, sig, nil
}
