package storage

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
)

// metaPageFlag is the flags of a meta page's header.
const metaPageFlag = 0x04

// A meta page's header, its page ID and flags, lies outside the checksum
// bbolt keeps of the meta page. bbolt never looks at it when it opens a
// file, and its consistency check then fails with "panic: assertion
// failed". Each meta page's header has one right value, page 0's and page
// 1's, whatever bbolt wrote: one found damaged is rewritten with it, and
// both commits are kept. (A damaged meta page body fails its checksum,
// and bbolt falls back to the commit before.)

// damagedMetaHeaders is the error of checkPages for a file whose one
// trouble is the header of a meta page: the meta pages listed.
type damagedMetaHeaders struct {
	pages    []uint64
	pageSize uint64
	found    []string // what each header said
}

func (e *damagedMetaHeaders) Error() string {
	return "the header of a meta page is damaged: " + strings.Join(e.found, "; ")
}

// metaHeaderDamage describes the header of meta page id if it is not what
// bbolt writes there, or says "".
func metaHeaderDamage(id uint64, header []byte) string {
	got, flags := binary.NativeEndian.Uint64(header), binary.NativeEndian.Uint16(header[8:])
	if got == id && flags == metaPageFlag {
		return ""
	}
	return fmt.Sprintf("meta page %d says it is page %d with flags %#x", id, got, flags)
}

// repair rewrites the damaged meta page headers of the file at path, and
// syncs it. The caller holds the file's lock for writing.
func (e *damagedMetaHeaders) repair(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	header := make([]byte, pageHeaderSize)
	for _, id := range e.pages {
		binary.NativeEndian.PutUint64(header, id)
		binary.NativeEndian.PutUint16(header[8:], metaPageFlag)
		if _, err := f.WriteAt(header, int64(id*e.pageSize)); err != nil {
			_ = f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
