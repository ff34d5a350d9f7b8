// Package debpkg reads Debian binary packages (.deb, deb(5)): an ar archive
// of debian-binary, control.tar[.COMP] and data.tar[.COMP]. It does what
// dpkg asks of dpkg-deb while it unpacks (--fsys-tarfile, --control) and
// what it asks of dpkg-split (is this a split part?), so that a foreign
// architecture's bootstrap can run those natively: under qemu-user each
// call costs a process start and a decompression in emulation.
//
// Anything it does not know (another compression, a control archive that
// is more than flat files) is ErrUnsupported before anything is written,
// and the caller hands the package to the real tool.
package debpkg

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// ErrUnsupported: the package is valid as far as read, but uses what this
// package does not implement; the real dpkg-deb may.
var ErrUnsupported = errors.New("debpkg: unsupported")

const (
	arMagic      = "!<arch>\n"
	arHeaderSize = 60
	// maxControl bounds a control archive, uncompressed: dpkg's own
	// control files are kilobytes. Names count: a PAX name can be a MiB.
	maxControl = 64 << 20
	// maxControlFiles bounds its entries: a package has a dozen control
	// files, and an empty one costs nothing against maxControl but is
	// kept, then written, all the same (TestControlBounds).
	maxControlFiles = 1024
)

// member is one ar member: its name and its bytes.
type member struct {
	name string
	r    io.Reader
}

// reader walks the ar members of a .deb.
type reader struct {
	br   *bufio.Reader
	left int64 // bytes of the file not yet read, an upper bound for sizes
	skip int64 // what remains of the current member, with its padding
}

func newReader(f *os.File) (*reader, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	r := &reader{br: bufio.NewReaderSize(f, 1<<16), left: fi.Size()}
	magic := make([]byte, len(arMagic))
	if _, err := io.ReadFull(r.br, magic); err != nil || string(magic) != arMagic {
		return nil, fmt.Errorf("%s: not a Debian package (no ar magic)", f.Name())
	}
	r.left -= int64(len(arMagic))
	return r, nil
}

// next returns the next member, io.EOF after the last.
func (r *reader) next() (member, error) {
	if r.skip > 0 {
		if _, err := r.br.Discard(int(r.skip)); err != nil {
			return member{}, err
		}
		r.left -= r.skip
		r.skip = 0
	}
	var h [arHeaderSize]byte
	if _, err := io.ReadFull(r.br, h[:]); err != nil {
		if err == io.EOF {
			return member{}, io.EOF
		}
		return member{}, fmt.Errorf("ar header: %w", err)
	}
	r.left -= arHeaderSize
	if string(h[58:60]) != "`\n" {
		return member{}, errors.New("ar header: bad terminator")
	}
	name := strings.TrimRight(string(h[:16]), " ")
	name = strings.TrimSuffix(name, "/") // GNU ar's form
	size, err := strconv.ParseInt(strings.TrimSpace(string(h[48:58])), 10, 64)
	if err != nil || size < 0 || size > r.left {
		return member{}, fmt.Errorf("ar member %q: size %q past the end of the file", name, strings.TrimSpace(string(h[48:58])))
	}
	r.skip = size + size%2
	return member{name: name, r: &countedReader{r: io.LimitReader(r.br, size), n: &r.skip, left: &r.left}}, nil
}

// countedReader keeps reader's bookkeeping right as a member is read.
type countedReader struct {
	r       io.Reader
	n, left *int64
}

func (c *countedReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n -= int64(n)
	*c.left -= int64(n)
	return n, err
}

// find returns the member whose name, less its compression suffix, is
// base ("control.tar", "data.tar"), checking the format on the way.
func find(f *os.File, base string) (member, error) {
	r, err := newReader(f)
	if err != nil {
		return member{}, err
	}
	first := true
	for {
		m, err := r.next()
		if err == io.EOF {
			return member{}, fmt.Errorf("%s: no %s member", f.Name(), base)
		}
		if err != nil {
			return member{}, fmt.Errorf("%s: %w", f.Name(), err)
		}
		if first {
			first = false
			if m.name != "debian-binary" {
				return member{}, fmt.Errorf("%s: first member %q, not debian-binary: %w", f.Name(), m.name, ErrUnsupported)
			}
			v, err := io.ReadAll(io.LimitReader(m.r, 16))
			if err != nil {
				return member{}, fmt.Errorf("%s: %w", f.Name(), err)
			}
			if !bytes.HasPrefix(v, []byte("2.")) {
				return member{}, fmt.Errorf("%s: format %q: %w", f.Name(), bytes.TrimSpace(v), ErrUnsupported)
			}
			continue
		}
		if m.name == base || strings.HasPrefix(m.name, base+".") {
			return m, nil
		}
	}
}

// decompress reads m's tar archive through the decompressor its name says.
func decompress(m member) (io.ReadCloser, error) {
	_, comp, _ := strings.Cut(m.name, ".tar")
	switch comp {
	case "":
		return io.NopCloser(m.r), nil
	case ".xz":
		r, err := xz.NewReader(m.r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		return io.NopCloser(r), nil
	case ".zst":
		r, err := zstd.NewReader(m.r, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		return r.IOReadCloser(), nil
	case ".gz":
		r, err := gzip.NewReader(m.r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		return r, nil
	}
	return nil, fmt.Errorf("%s: compression %q: %w", m.name, comp, ErrUnsupported)
}

// FsysTarfile writes the package's filesystem tree, the data.tar member
// uncompressed, to w: `dpkg-deb --fsys-tarfile`.
func FsysTarfile(w io.Writer, deb string) error {
	f, err := os.Open(deb)
	if err != nil {
		return err
	}
	defer f.Close()
	m, err := find(f, "data.tar")
	if err != nil {
		return err
	}
	r, err := decompress(m)
	if err != nil {
		return fmt.Errorf("%s: %w", deb, err)
	}
	defer r.Close()
	if _, err := io.Copy(w, r); err != nil {
		return fmt.Errorf("%s: %s: %w", deb, m.name, err)
	}
	return nil
}

// controlFile is one file of a control archive.
type controlFile struct {
	name  string
	mode  os.FileMode
	mtime time.Time
	data  []byte
}

// readControl reads the control archive: flat regular files under "./"
// (anything else is ErrUnsupported), at most maxControlFiles of them and
// maxControl bytes in all, names included.
func readControl(deb string) (files []controlFile, top *tar.Header, err error) {
	f, err := os.Open(deb)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	m, err := find(f, "control.tar")
	if err != nil {
		return nil, nil, err
	}
	r, err := decompress(m)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", deb, err)
	}
	defer r.Close()
	tr := tar.NewReader(r)
	var total int64
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, top, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %s: %w", deb, m.name, err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		switch {
		case name == "" && h.Typeflag == tar.TypeDir:
			top = h
			continue
		case h.Typeflag != tar.TypeReg || name == "" || name == "." || name == ".." || strings.Contains(name, "/"):
			return nil, nil, fmt.Errorf("%s: %s: entry %q: %w", deb, m.name, h.Name, ErrUnsupported)
		}
		if len(files) == maxControlFiles {
			return nil, nil, fmt.Errorf("%s: %s: more than %d entries", deb, m.name, maxControlFiles)
		}
		total += h.Size + int64(len(h.Name))
		if h.Size < 0 || total > maxControl {
			return nil, nil, fmt.Errorf("%s: %s: more than %d bytes", deb, m.name, maxControl)
		}
		data := make([]byte, h.Size)
		if _, err := io.ReadFull(tr, data); err != nil {
			return nil, nil, fmt.Errorf("%s: %s: %s: %w", deb, m.name, h.Name, err)
		}
		files = append(files, controlFile{name: name, mode: os.FileMode(h.Mode).Perm(), mtime: h.ModTime, data: data})
	}
}

// Control extracts the package's control files into dir, created if it
// does not exist: `dpkg-deb --control DEB DIR` as dpkg calls it (as root,
// so modes and times are the archive's; owners stay root's).
func Control(deb, dir string) error {
	files, top, err := readControl(deb)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o777); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	d, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	for _, cf := range files {
		if err := writeControlFile(d, cf); err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
	}
	if top != nil {
		if err := os.Chmod(dir, os.FileMode(top.Mode).Perm()); err != nil {
			return err
		}
		if err := os.Chtimes(dir, top.ModTime, top.ModTime); err != nil {
			return err
		}
	}
	return nil
}

func writeControlFile(d *os.Root, cf controlFile) error {
	// As tar does: a file in the way is replaced, not written through.
	if err := d.Remove(cf.name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := d.OpenFile(cf.name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(cf.data)
	if err == nil {
		err = f.Chmod(cf.mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return d.Chtimes(cf.name, cf.mtime, cf.mtime)
}

// IsSplitPart says whether deb is a part of a split package (its first
// member is debian-split, dpkg-split(1)) rather than a whole one.
func IsSplitPart(deb string) (bool, error) {
	f, err := os.Open(deb)
	if err != nil {
		return false, err
	}
	defer f.Close()
	r, err := newReader(f)
	if err != nil {
		return false, err
	}
	m, err := r.next()
	if err != nil {
		return false, fmt.Errorf("%s: %w", deb, err)
	}
	return m.name == "debian-split", nil
}
