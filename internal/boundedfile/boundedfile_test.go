package boundedfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		limit      int64
		want, err  string
	}{
		{"fits", small, 5, "12345", ""},
		{"too big", small, 4, "", "more than 4"},
		{"directory", dir, 100, "", "not a regular file"},
		{"missing", filepath.Join(dir, "none"), 100, "", "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(tc.path, tc.limit)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("Read = %q, %v", got, err)
			}
		})
	}
}
