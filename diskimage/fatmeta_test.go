package diskimage

import (
	"encoding/binary"
	"slices"
	"testing"
)

// TestChainMove moves a chain within a FAT of 16 entries and checks every
// entry after, or that a move that would take used clusters is refused.
func TestChainMove(t *testing.T) {
	const eoc = fatClusterMask
	tests := []struct {
		name     string
		fat      []uint32 // entries from cluster 0
		move     chainMove
		want     []uint32
		wantFail bool
	}{
		{"by one", []uint32{0, 0, eoc, 4, 5, eoc}, chainMove{first: 3, by: 1}, []uint32{0, 0, eoc, 0, 5, 6, eoc}, false},
		{"by more than its length", []uint32{0, 0, eoc, eoc}, chainMove{first: 3, by: 3}, []uint32{0, 0, eoc, 0, 0, 0, eoc}, false},
		{"into a used cluster", []uint32{0, 0, eoc, 4, eoc, 0, eoc}, chainMove{first: 3, by: 2}, nil, true},
		{"not contiguous", []uint32{0, 0, eoc, 5, 0, eoc}, chainMove{first: 3, by: 1}, nil, true},
		{"past the data area", []uint32{0, 0, eoc, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, eoc}, chainMove{first: 3, by: 1}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fat := make([]byte, 4*16)
			for i, v := range tc.fat {
				binary.LittleEndian.PutUint32(fat[4*i:], v)
			}
			chain := func(first uint32) ([]uint32, error) {
				var cs []uint32
				for c := first; c < fatEndOfChain; c = binary.LittleEndian.Uint32(fat[4*c:]) {
					cs = append(cs, c)
				}
				return cs, nil
			}
			err := tc.move.apply(fat, chain, 14) // clusters 2..15
			if tc.wantFail {
				if err == nil {
					t.Fatal("moved, want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := make([]uint32, len(tc.want))
			for i := range got {
				got[i] = binary.LittleEndian.Uint32(fat[4*i:])
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("FAT %v, want %v", got, tc.want)
			}
		})
	}
}
