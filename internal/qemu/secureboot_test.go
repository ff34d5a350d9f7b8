package qemu

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unicode/utf16"
)

// storeVar is one variable as the firmware reads it back.
type storeVar struct {
	name  string
	guid  [16]byte
	attrs uint32
	data  []byte
}

// readVariables walks a variable store the way EDK2 does on x64: data
// right after the name, headers 4-byte aligned.
func readVariables(t *testing.T, fv []byte) []storeVar {
	t.Helper()
	start := int(binary.LittleEndian.Uint16(fv[48:]))
	var out []storeVar
	for off := start + varStoreHeaderSize; binary.LittleEndian.Uint16(fv[off:]) == varStartID; {
		ns := int(binary.LittleEndian.Uint32(fv[off+36:]))
		ds := int(binary.LittleEndian.Uint32(fv[off+40:]))
		var g [16]byte
		copy(g[:], fv[off+44:])
		u := make([]uint16, ns/2-1)
		for i := range u {
			u[i] = binary.LittleEndian.Uint16(fv[off+varHeaderSize+2*i:])
		}
		data := fv[off+varHeaderSize+ns : off+varHeaderSize+ns+ds]
		if fv[off+2] == varAdded {
			out = append(out, storeVar{string(utf16.Decode(u)), g, binary.LittleEndian.Uint32(fv[off+4:]), data})
		}
		off = align4(off + varHeaderSize + ns + ds)
	}
	return out
}

// certFromList returns the certificate of a one-entry X.509 signature list.
func certFromList(t *testing.T, l []byte) *x509.Certificate {
	t.Helper()
	if len(l) < 44 || !bytes.Equal(l[:16], guidCertX509[:]) || int(binary.LittleEndian.Uint32(l[16:])) != len(l) {
		t.Fatalf("not a one-entry X.509 signature list: %x", l[:min(len(l), 44)])
	}
	c, err := x509.ParseCertificate(l[44:])
	if err != nil {
		t.Fatalf("signature list certificate: %v", err)
	}
	return c
}

func testCert(t *testing.T, cn string) []byte {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<31, 0)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// TestEnrollSecureBoot enrolls into OVMF's empty store and reads the
// variables back as the firmware would: PK, KEK and db hold the given
// certificates, Secure Boot is on, custom mode off.
func TestEnrollSecureBoot(t *testing.T) {
	if _, err := os.Stat(OVMFVars); err != nil {
		t.Skipf("no OVMF: %v", err)
	}
	keys := SecureBootKeys{PK: testCert(t, "pk"), KEK: testCert(t, "kek"), DB: testCert(t, "db")}
	dst := filepath.Join(t.TempDir(), "vars.fd")
	if err := EnrollSecureBoot(OVMFVars, dst, keys); err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadFile(dst)
	in, _ := os.ReadFile(OVMFVars)
	if len(out) != len(in) {
		t.Fatalf("store size %d, template %d", len(out), len(in))
	}
	got := map[string]storeVar{}
	for _, v := range readVariables(t, out) {
		got[v.name] = v
	}
	const auth = attrNV | attrBS | attrRT | attrTimeBasedAuth
	for _, tc := range []struct {
		name  string
		guid  [16]byte
		attrs uint32
		cn    string
		value []byte
	}{
		{"PK", guidGlobal, auth, "pk", nil},
		{"KEK", guidGlobal, auth, "kek", nil},
		{"db", guidImageSecDB, auth, "db", nil},
		{"SecureBootEnable", guidSecureBootEn, attrNV | attrBS, "", []byte{1}},
		{"CustomMode", guidCustomMode, attrNV | attrBS, "", []byte{0}},
	} {
		v, ok := got[tc.name]
		switch {
		case !ok:
			t.Errorf("%s not in the store", tc.name)
			continue
		case v.guid != tc.guid || v.attrs != tc.attrs:
			t.Errorf("%s: guid %x attrs %#x, want %x %#x", tc.name, v.guid, v.attrs, tc.guid, tc.attrs)
		case tc.value != nil && !bytes.Equal(v.data, tc.value):
			t.Errorf("%s = %x, want %x", tc.name, v.data, tc.value)
		case tc.cn != "":
			if c := certFromList(t, v.data); c.Subject.CommonName != tc.cn {
				t.Errorf("%s holds %q, want %q", tc.name, c.Subject.CommonName, tc.cn)
			}
		}
	}
	// Enrolling again into the enrolled store still finds the free space.
	if free, _, err := varStoreFree(out); err != nil || free <= 0 {
		t.Errorf("enrolled store: free %d, %v", free, err)
	}
}

// TestReadVariablesMatchesDebianStore checks the test's reader (and so the
// layout EnrollSecureBoot writes) on Debian's own enrolled store: its db
// must come out as a parseable certificate list.
func TestReadVariablesMatchesDebianStore(t *testing.T) {
	const snakeoil = "/usr/share/OVMF/OVMF_VARS_4M.snakeoil.fd"
	fv, err := os.ReadFile(snakeoil)
	if err != nil {
		t.Skipf("no enrolled OVMF store: %v", err)
	}
	if _, _, err := varStoreFree(fv); err != nil {
		t.Fatal(err)
	}
	for _, v := range readVariables(t, fv) {
		if v.name == "db" && v.guid == guidImageSecDB {
			certFromList(t, v.data[:binary.LittleEndian.Uint32(v.data[16:])])
			return
		}
	}
	t.Error("no db in Debian's enrolled store")
}

// TestVarStoreFreeRejects: damaged stores are errors, never panics.
func TestVarStoreFreeRejects(t *testing.T) {
	good, err := os.ReadFile(OVMFVars)
	if err != nil {
		t.Skipf("no OVMF: %v", err)
	}
	mut := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	start := int(binary.LittleEndian.Uint16(good[48:]))
	for _, tc := range []struct {
		name string
		fv   []byte
	}{
		{"empty", nil},
		{"not a volume", mut(func(b []byte) []byte { b[40] = 'X'; return b })},
		{"header length past end", mut(func(b []byte) []byte { binary.LittleEndian.PutUint16(b[48:], 0xfff0); return b[:0x1000] })},
		{"not authenticated", mut(func(b []byte) []byte { b[start] ^= 1; return b })},
		{"store past end", mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[start+16:], 1<<30); return b })},
		{"unformatted", mut(func(b []byte) []byte { b[start+20] = 0; return b })},
		{"variable past store", mut(func(b []byte) []byte {
			off := start + varStoreHeaderSize
			binary.LittleEndian.PutUint16(b[off:], varStartID)
			binary.LittleEndian.PutUint32(b[off+40:], 1<<28)
			return b
		})},
		{"free space written", mut(func(b []byte) []byte { b[start+varStoreHeaderSize+100] = 0; return b })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := varStoreFree(tc.fv); err == nil {
				t.Error("accepted")
			}
		})
	}
}

// FuzzVarStoreFree: any bytes give an error or offsets inside the input.
func FuzzVarStoreFree(f *testing.F) {
	if b, err := os.ReadFile(OVMFVars); err == nil {
		f.Add(b[:0x2000])
	}
	f.Add(make([]byte, 100))
	f.Fuzz(func(t *testing.T, fv []byte) {
		free, end, err := varStoreFree(fv)
		if err == nil && (free > end || end > len(fv) || free < 0) {
			t.Fatalf("free %d end %d len %d", free, end, len(fv))
		}
	})
}
