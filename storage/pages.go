package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/bits"
	"os"

	bolt "go.etcd.io/bbolt"
)

// The layout of a bbolt file (format version 2), in the machine's byte
// order. Every page starts with a header: id (8 bytes), flags (2), count (2),
// overflow (4). A branch element is pos, ksize (4 each) and a page id (8); a
// leaf element is flags, pos, ksize and vsize (4 each); pos counts from the
// element itself. A bucket's value starts with its root page id and sequence
// (8 each); a root id of 0 means an inline bucket, whose page follows.
const (
	pageHeaderSize   = 16
	elementSize      = 16
	bucketHeaderSize = 16
	metaChecksumAt   = 56 // bytes of the meta covered by its checksum
	boltMagic        = 0xED0CDAED
	boltVersion      = 2
	branchPageFlag   = 0x01
	leafPageFlag     = 0x02
	freelistPageFlag = 0x10
	bucketLeafFlag   = 0x01
	noFreelist       = ^uint64(0)
)

// checkPages proves, before bbolt walks db's pages through its memory map
// and unchecked pointers, that every page it can reach lies inside the file
// and that every element, key and value lies inside its page, so that no
// damaged file makes bbolt read outside the map. bbolt's own check runs on
// a goroutine of its own, where a memory fault kills the process
// (debug.SetPanicOnFault covers only the goroutine that sets it), and so
// do later reads of a page nothing checked. checkPages reads the file with
// ordinary reads into bounds-checked slices instead, and fails on a page
// reached twice, so that no walk can loop.
func checkPages(db *bolt.DB) error {
	f, err := os.Open(db.Path())
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	p := &pageChecker{file: f, pageSize: uint64(db.Info().PageSize), seen: map[uint64]bool{0: true, 1: true}}
	m, headers, err := p.meta()
	if err != nil {
		return err
	}
	err = db.View(func(tx *bolt.Tx) error {
		if uint64(tx.ID()) != m.txid || uint64(tx.Size()) != m.pages*p.pageSize {
			return fmt.Errorf("the meta pages read twice disagree (transaction %d of %d bytes, then %d of %d)",
				tx.ID(), tx.Size(), m.txid, m.pages*p.pageSize)
		}
		return nil
	})
	if err != nil {
		return err
	}
	p.pages = m.pages
	var free []uint64
	if m.freelist != noFreelist {
		if free, err = p.freelist(m.freelist); err != nil {
			return err
		}
	}
	if _, err := p.checkTree(m.root); err != nil {
		return err
	}
	listed := make(map[uint64]bool, len(free))
	for _, id := range free {
		if p.seen[id] || listed[id] {
			return fmt.Errorf("page %d is free and also in use, or listed free twice", id)
		}
		listed[id] = true
	}
	for id := range p.pages {
		if !p.seen[id] && !listed[id] {
			return fmt.Errorf("page %d is neither reached nor free", id)
		}
	}
	if len(headers.pages) > 0 {
		return headers
	}
	return nil
}

// pageChecker reads a bbolt file's pages, each at most once.
type pageChecker struct {
	file     *os.File
	pageSize uint64
	pages    uint64 // the high-water mark: pages 0 to pages-1 are in use or free
	seen     map[uint64]bool
}

// boltMeta is the part of a meta page checkPages needs.
type boltMeta struct {
	root, freelist, pages, txid uint64
}

// meta returns the meta page bbolt uses, the valid one of the two with
// the higher transaction id, and the meta pages whose header is damaged.
func (p *pageChecker) meta() (boltMeta, *damagedMetaHeaders, error) {
	var metas [2]boltMeta
	var errs [2]error
	headers := &damagedMetaHeaders{pageSize: p.pageSize}
	for i := range metas {
		buf := make([]byte, pageHeaderSize+64)
		if _, err := p.file.ReadAt(buf, int64(uint64(i)*p.pageSize)); err != nil {
			return boltMeta{}, nil, readError(uint64(i), err)
		}
		if damage := metaHeaderDamage(uint64(i), buf); damage != "" {
			headers.pages, headers.found = append(headers.pages, uint64(i)), append(headers.found, damage)
		}
		metas[i], errs[i] = p.parseMeta(buf[pageHeaderSize:])
	}
	first, second := 0, 1
	if metas[1].txid > metas[0].txid {
		first, second = 1, 0
	}
	if errs[first] == nil {
		return metas[first], headers, nil
	}
	if errs[second] == nil {
		return metas[second], headers, nil
	}
	return boltMeta{}, nil, errors.Join(errs[:]...)
}

func (p *pageChecker) parseMeta(b []byte) (boltMeta, error) {
	u32 := func(at int) uint32 { return binary.NativeEndian.Uint32(b[at:]) }
	u64 := func(at int) uint64 { return binary.NativeEndian.Uint64(b[at:]) }
	m := boltMeta{root: u64(16), freelist: u64(32), pages: u64(40), txid: u64(48)}
	sum := fnv.New64a()
	_, _ = sum.Write(b[:metaChecksumAt])
	switch {
	case u32(0) != boltMagic || u32(4) != boltVersion || u64(metaChecksumAt) != sum.Sum64():
		return m, errors.New("a meta page is not valid")
	case uint64(u32(8)) != p.pageSize:
		return m, fmt.Errorf("a meta page gives a page size of %d, the other %d", u32(8), p.pageSize)
	}
	return m, nil
}

// page reads page id, which must be of a kind in flags, with its overflow
// pages, and marks them seen.
func (p *pageChecker) page(id uint64, flags uint16) ([]byte, error) {
	if id < 2 || id >= p.pages {
		return nil, fmt.Errorf("page %d is out of range [2, %d)", id, p.pages)
	}
	header := make([]byte, pageHeaderSize)
	if _, err := p.file.ReadAt(header, int64(id*p.pageSize)); err != nil {
		return nil, readError(id, err)
	}
	kind, overflow := binary.NativeEndian.Uint16(header[8:]), uint64(binary.NativeEndian.Uint32(header[12:]))
	switch {
	case binary.NativeEndian.Uint64(header) != id:
		return nil, fmt.Errorf("page %d says it is page %d", id, binary.NativeEndian.Uint64(header))
	case flags&kind == 0 || bits.OnesCount16(kind) != 1:
		return nil, fmt.Errorf("page %d has flags %#x where one of %#x was expected", id, kind, flags)
	case id+overflow >= p.pages:
		return nil, fmt.Errorf("page %d and its %d overflow pages go past the last page, %d", id, overflow, p.pages-1)
	}
	for i := id; i <= id+overflow; i++ {
		if p.seen[i] {
			return nil, fmt.Errorf("page %d is reached twice", i)
		}
		p.seen[i] = true
	}
	buf := make([]byte, (overflow+1)*p.pageSize)
	if _, err := p.file.ReadAt(buf, int64(id*p.pageSize)); err != nil {
		return nil, readError(id, err)
	}
	return buf, nil
}

// freelist returns the ids the freelist page id lists, each inside the file.
func (p *pageChecker) freelist(id uint64) ([]uint64, error) {
	buf, err := p.page(id, freelistPageFlag)
	if err != nil {
		return nil, err
	}
	count, ids := uint64(binary.NativeEndian.Uint16(buf[10:])), uint64(pageHeaderSize)
	if count == 0xFFFF {
		count, ids = binary.NativeEndian.Uint64(buf[ids:]), ids+8
	}
	if count > (uint64(len(buf))-ids)/8 {
		return nil, fmt.Errorf("freelist page %d lists %d ids, more than it holds", id, count)
	}
	free := make([]uint64, count)
	for i := range free {
		if free[i] = binary.NativeEndian.Uint64(buf[ids+8*uint64(i):]); free[i] < 2 || free[i] >= p.pages {
			return nil, fmt.Errorf("freelist page %d lists page %d, out of range [2, %d)", id, free[i], p.pages)
		}
	}
	return free, nil
}

// checkTree checks the branch or leaf page id and every page below it, and
// returns its first key.
func (p *pageChecker) checkTree(id uint64) ([]byte, error) {
	buf, err := p.page(id, branchPageFlag|leafPageFlag)
	if err != nil {
		return nil, err
	}
	return p.checkElements(fmt.Sprintf("page %d", id), buf)
}

// checkElements checks the elements of the page in buf (where names it), the
// keys and values they point to, and the pages and buckets they lead to, and
// returns the page's first key. bbolt writes a page's keys and values one
// after the other, straight after its elements, so each must start where the
// one before it ended: a count, pos or size changed by damage breaks that
// chain. Each branch element's key is its child's first key.
func (p *pageChecker) checkElements(where string, buf []byte) ([]byte, error) {
	flags := binary.NativeEndian.Uint16(buf[8:])
	count := uint64(binary.NativeEndian.Uint16(buf[10:]))
	size := uint64(len(buf))
	switch {
	case count > (size-pageHeaderSize)/elementSize:
		return nil, fmt.Errorf("%s has %d elements, more than it holds", where, count)
	case count == 0 && flags == branchPageFlag: // a cursor would read its first element anyway
		return nil, fmt.Errorf("%s is a branch page with no elements", where)
	}
	var first []byte
	next := pageHeaderSize + count*elementSize // where the next key must start
	for i := range count {
		at := pageHeaderSize + i*elementSize
		e := buf[at : at+elementSize]
		var pos, ksize, vsize uint64
		if flags == branchPageFlag {
			pos, ksize = uint64(binary.NativeEndian.Uint32(e)), uint64(binary.NativeEndian.Uint32(e[4:]))
		} else {
			pos, ksize, vsize = uint64(binary.NativeEndian.Uint32(e[4:])), uint64(binary.NativeEndian.Uint32(e[8:])), uint64(binary.NativeEndian.Uint32(e[12:]))
		}
		if at+pos != next || next+ksize+vsize > size {
			return nil, fmt.Errorf("%s: element %d's key and value do not follow the one before it inside the page", where, i)
		}
		key, value := buf[next:next+ksize], buf[next+ksize:next+ksize+vsize]
		next += ksize + vsize
		if i == 0 {
			first = key
		}
		if err := p.checkChild(where, flags, e, key, value); err != nil {
			return nil, err
		}
	}
	return first, nil
}

// checkChild checks what element e, of key and value, leads to: the page
// below a branch element, or the bucket of a leaf element that holds one.
func (p *pageChecker) checkChild(where string, flags uint16, e, key, value []byte) error {
	if flags == branchPageFlag {
		child := binary.NativeEndian.Uint64(e[8:])
		first, err := p.checkTree(child)
		if err == nil && !bytes.Equal(first, key) {
			err = fmt.Errorf("%s: the key leading to page %d is not that page's first key", where, child)
		}
		return err
	}
	if binary.NativeEndian.Uint32(e)&bucketLeafFlag == 0 {
		return nil
	}
	return p.checkBucket(fmt.Sprintf("%s, bucket %q", where, key), value)
}

// checkBucket checks the bucket whose value is value: its tree of pages, or
// its inline page.
func (p *pageChecker) checkBucket(where string, value []byte) error {
	if len(value) < bucketHeaderSize {
		return fmt.Errorf("%s: the bucket's value is %d bytes, shorter than its header", where, len(value))
	}
	if root := binary.NativeEndian.Uint64(value); root != 0 {
		_, err := p.checkTree(root)
		return err
	}
	inline := value[bucketHeaderSize:]
	if len(inline) < pageHeaderSize || binary.NativeEndian.Uint16(inline[8:]) != leafPageFlag {
		return fmt.Errorf("%s: the inline bucket is not a leaf page", where)
	}
	_, err := p.checkElements(where, inline)
	return err
}

// readError reports a page the file is too short to hold, or an error of
// the operating system.
func readError(id uint64, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("page %d lies past the end of the file: it was cut short", id)
	}
	return err
}
