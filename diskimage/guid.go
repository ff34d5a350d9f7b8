package diskimage

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// seededGUID derives a GUID from the seed and a role name, so the same
// inputs give the same disk. Its version and variant bits mark it as an
// RFC 9562 version 8 ("custom") UUID: it is a hash, not a random number.
func seededGUID(seed, name string) string {
	sum := sha256.Sum256([]byte("os-builder/diskimage/guid\x00" + seed + "\x00" + name))
	b := sum[:16]
	b[6] = b[6]&0x0f | 0x80
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// SeededVolumeID derives a FAT volume serial number from the seed.
func SeededVolumeID(seed string) uint32 {
	sum := sha256.Sum256([]byte("os-builder/diskimage/fat-volume-id\x00" + seed))
	return binary.LittleEndian.Uint32(sum[:4])
}
