package uki

import (
	"bytes"
	"testing"
)

// TestHeaderPadding: the room after a stub's section table is zeros or,
// in Debian's arm64 stub, A64 NOPs in whole words; anything else is data.
func TestHeaderPadding(t *testing.T) {
	nops := bytes.Repeat(arm64NOP, 8)
	tests := []struct {
		name     string
		b        []byte
		from, to int
		want     bool
	}{
		{"zeros", make([]byte, 32), 0, 32, true},
		{"nops", nops, 0, 32, true},
		{"nops, part", nops, 8, 20, true},
		{"nops, unaligned start", nops, 2, 20, false},
		{"a byte of data among zeros", append(make([]byte, 16), 1), 0, 17, false},
		{"a word of data among nops", append(bytes.Clone(nops[:16]), 0, 0, 0x80, 0xd2), 0, 20, false},
		{"empty", nil, 0, 0, true},
	}
	for _, tt := range tests {
		if got := headerPadding(tt.b, tt.from, tt.to); got != tt.want {
			t.Errorf("%s: headerPadding = %v, want %v", tt.name, got, tt.want)
		}
	}
}
