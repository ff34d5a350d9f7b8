package rootstack

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	var want [][]byte
	for i, size := range []int{5000, HeaderSize, 1} {
		data := bytes.Repeat([]byte{byte('a' + i)}, size)
		p := filepath.Join(dir, string(rune('a'+i)))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		paths, want = append(paths, p), append(want, data)
	}
	var buf bytes.Buffer
	n, err := Write(&buf, paths)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) || n%HeaderSize != 0 {
		t.Fatalf("wrote %d bytes, counted %d; want a multiple of %d", buf.Len(), n, HeaderSize)
	}
	parts, err := Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != len(want) {
		t.Fatalf("%d parts, want %d", len(parts), len(want))
	}
	for i, p := range parts {
		if got := buf.Bytes()[p.Offset : p.Offset+p.Size]; !bytes.Equal(got, want[i]) {
			t.Errorf("part %d: bytes differ", i)
		}
	}
}

func TestParseRejects(t *testing.T) {
	good, _, total, err := Layout([]int64{8192, 100})
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(h []byte)) []byte {
		h := bytes.Clone(good)
		f(h)
		return h
	}
	for _, tc := range []struct {
		name   string
		header []byte
		size   int64
		want   string
	}{
		{"squashfs", append([]byte("hsqs"), make([]byte, HeaderSize)...), total, "no OSBSTACK magic"},
		{"short header", good[:100], total, "header of 100 bytes"},
		{"version", edit(func(h []byte) { binary.LittleEndian.PutUint32(h[8:], 2) }), total, "version 2"},
		{"no parts", edit(func(h []byte) { binary.LittleEndian.PutUint32(h[12:], 0) }), total, "0 parts"},
		{"too many parts", edit(func(h []byte) { binary.LittleEndian.PutUint32(h[12:], MaxParts+1) }), total, "17 parts"},
		{"unaligned", edit(func(h []byte) { binary.LittleEndian.PutUint64(h[16:], HeaderSize+1) }), total, "not 4 KiB aligned"},
		{"inside header", edit(func(h []byte) { binary.LittleEndian.PutUint64(h[16:], 0) }), total, "overlaps"},
		{"overlap", edit(func(h []byte) { binary.LittleEndian.PutUint64(h[32:], HeaderSize*2) }), total, "part 1 at offset 8192 overlaps"},
		{"empty part", edit(func(h []byte) { binary.LittleEndian.PutUint64(h[24:], 0) }), total, "part 0 is empty"},
		{"truncated file", good, total - HeaderSize, "runs past the end"},
		{"huge size", edit(func(h []byte) { binary.LittleEndian.PutUint64(h[40:], 1<<63) }), total, "runs past the end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.header, tc.size)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := Parse(good, total); err != nil {
		t.Fatalf("good header: %v", err)
	}
}

// FuzzParse: any header parses to parts inside the file, in order, or fails.
func FuzzParse(f *testing.F) {
	h, _, total, _ := Layout([]int64{8192, 100})
	f.Add(h, total)
	f.Add([]byte("OSBSTACK"), int64(0))
	f.Fuzz(func(t *testing.T, header []byte, size int64) {
		parts, err := Parse(header, size)
		if err != nil {
			return
		}
		end := int64(HeaderSize)
		for _, p := range parts {
			if p.Offset < end || p.Size <= 0 || p.Offset+p.Size > size || p.Offset%HeaderSize != 0 {
				t.Fatalf("part %+v out of bounds (previous end %d, file %d)", p, end, size)
			}
			end = p.Offset + p.Size
		}
	})
}
