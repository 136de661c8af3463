package storagetest

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
)

// Flip is one bit of a state file to flip: bit Bit of the byte at Offset,
// which lies in a page of kind Kind ("meta", "freelist", "branch" or "leaf").
type Flip struct {
	Kind   string
	Offset int
	Bit    uint8
}

// String names the flip in test output.
func (f Flip) String() string {
	return fmt.Sprintf("%s page, byte %d, bit %d", f.Kind, f.Offset, f.Bit)
}

// Apply returns a copy of data with f's bit flipped.
func (f Flip) Apply(data []byte) []byte {
	out := append([]byte(nil), data...)
	out[f.Offset] ^= 1 << f.Bit
	return out
}

// The layout of a bbolt file (go.etcd.io/bbolt, format version 2), in the
// machine's byte order: every page starts with a 16-byte header (id, flags,
// count, overflow), and branch and leaf pages with count 16-byte elements.
const (
	pageHeader   = 16
	elementSize  = 16
	metaSize     = 64
	branchFlag   = 0x01
	leafFlag     = 0x02
	freelistFlag = 0x10
)

// PageFlips picks perKind flips in each kind of page that the newest meta
// page of the bbolt file data reaches (its free pages are left out): in the
// meta pages' fields; in the freelist's header and page IDs; in branch and
// leaf pages' headers, elements and keys. The first branch flip is the one
// that crashed bbolt (issue 23): bit 3 of the top byte of an element's pos.
func PageFlips(data []byte, perKind int, rng *rand.Rand) ([]Flip, error) {
	candidates, err := flipCandidates(data)
	if err != nil {
		return nil, err
	}
	var flips []Flip
	for _, kind := range []string{"meta", "freelist", "branch", "leaf"} {
		offsets := candidates[kind]
		if len(offsets) == 0 {
			return nil, fmt.Errorf("storagetest: the file has no %s page to flip a bit in", kind)
		}
		for i := range perKind {
			f := Flip{Kind: kind, Offset: offsets[rng.IntN(len(offsets))], Bit: uint8(rng.IntN(8))}
			if kind == "branch" && i == 0 {
				f.Offset, f.Bit = candidates["branch pos top byte"][0], 3
			}
			flips = append(flips, f)
		}
	}
	return flips, nil
}

// flipCandidates lists, by page kind, the offsets worth flipping a bit in.
func flipCandidates(data []byte) (map[string][]int, error) {
	u16 := func(at int) int { return int(binary.NativeEndian.Uint16(data[at:])) }
	u32 := func(at int) int { return int(binary.NativeEndian.Uint32(data[at:])) }
	u64 := func(at int) int { return int(binary.NativeEndian.Uint64(data[at:])) }
	if len(data) < 2*pageHeader+metaSize {
		return nil, fmt.Errorf("storagetest: %d bytes is no bbolt file", len(data))
	}
	ps := u32(pageHeader + 8)
	meta := pageHeader // the newer of the two meta pages
	if u64(ps+pageHeader+48) > u64(meta+48) {
		meta = ps + pageHeader
	}
	hwm, freelist := u64(meta+40), u64(meta+32)
	if hwm*ps > len(data) || freelist >= hwm {
		return nil, fmt.Errorf("storagetest: the meta page does not match a file of %d bytes", len(data))
	}
	candidates := map[string][]int{}
	for _, m := range []int{pageHeader, ps + pageHeader} {
		candidates["meta"] = appendRange(candidates["meta"], m, metaSize)
	}
	free := map[int]bool{}
	at := freelist * ps
	count, ids := u16(at+10), at+pageHeader
	if count == 0xFFFF {
		count, ids = u64(ids), ids+8
	}
	for i := range count {
		free[u64(ids+8*i)] = true
	}
	candidates["freelist"] = appendRange(candidates["freelist"], at, ids+8*count-at)

	// A free page is stepped over alone: its header, and the overflow
	// count in it, are from before it was freed, and the pages that
	// overflow covered may have been handed out again since.
	for id, next := 2, 0; id < hwm; id = next {
		at := id * ps
		next = id + 1
		if free[id] {
			continue
		}
		next += u32(at + 12)
		kind := map[int]string{branchFlag: "branch", leafFlag: "leaf"}[u16(at+8)]
		if kind == "" {
			continue
		}
		count := u16(at + 10)
		candidates[kind] = appendRange(candidates[kind], at, pageHeader+count*elementSize)
		for i := range count {
			elem := at + pageHeader + i*elementSize
			pos, ksize := u32(elem), u32(elem+4)
			if kind == "leaf" {
				pos, ksize = u32(elem+4), u32(elem+8)
			} else {
				candidates["branch pos top byte"] = append(candidates["branch pos top byte"], elem+3)
			}
			candidates[kind] = appendRange(candidates[kind], elem+pos, ksize)
		}
	}
	return candidates, nil
}

// appendRange appends the offsets from..from+n-1 to offsets.
func appendRange(offsets []int, from, n int) []int {
	for i := range n {
		offsets = append(offsets, from+i)
	}
	return offsets
}
