package storage

import (
	"bytes"
	"testing"
)

// BenchmarkSealUnseal is what a checksum adds to one record of typical size
// (a registration is about 200 bytes): sealing on Apply, checking on Load.
func BenchmarkSealUnseal(b *testing.B) {
	bucket, key, value := []byte("registry.allocations"), []byte("csi-node\x00ebs\x00alloc-1"), bytes.Repeat([]byte("v"), 200)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := unseal(bucket, key, seal(bucket, key, value)); err != nil {
			b.Fatal(err)
		}
	}
}
