package fleet

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/names"
)

// A Keyring holds the fleet's record keys: every agent of a fleet is given
// the same keyring file (agent flag -cluster-keyring). With one, each
// record the fleet writes to etcd is sealed with AES-256-GCM under the
// keyring's primary key, the record's key in etcd authenticated with it:
// a copy of etcd's data or a snapshot shows no volume secret, and a record
// written by anything that lacks the keyring (an etcd client of its own, a
// record copied under another key) is refused and reported, never served.
// The grains' requests are signed with it too, so a client of a member's
// port that lacks it cannot change a volume.
//
// The file holds one key a line, "<key ID> <32 bytes, base64>"; the first
// is the primary, which seals; the others only open what they sealed.
// GenerateKey puts a new primary first; `plugvisor keyring rotate` seals
// every record again under the primary (RotateRecords), after which the
// older keys can go. A writer with etcd's own credentials can still put
// back an older sealed value of the same key: etcd's client-certificate
// authentication keeps such writers out.
type Keyring struct {
	ids  []string // in file order: ids[0] is the primary
	keys map[string]cipher.AEAD
	macs map[string][]byte
}

// KeySize is the size of a keyring key: AES-256.
const KeySize = 32

// ErrKeyring is returned for a keyring file that cannot be used: its
// error names the file, the line and the remedy.
var ErrKeyring = errclass.New(errclass.Invalid, "bad keyring")

// LoadKeyring reads a keyring file. It must be a regular file that no
// other user may read or write (0600 or 0400), holding at least one key.
func LoadKeyring(path string) (*Keyring, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w; make one with plugvisor keyring generate %s", ErrKeyring, err, path)
	}
	if !info.Mode().IsRegular() || info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %v: it holds the fleet's secrets, so no other user may read it; chmod 600 %s",
			ErrKeyring, path, info.Mode(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyring, err)
	}
	return parseKeyring(path, b)
}

// parseKeyring parses the text of a keyring file named path.
func parseKeyring(path string, text []byte) (*Keyring, error) {
	k := &Keyring{keys: map[string]cipher.AEAD{}, macs: map[string][]byte{}}
	sc := bufio.NewScanner(bytes.NewReader(text))
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: %s:%d: %s; a line is \"<key ID> <32 bytes in base64>\", as plugvisor keyring generate writes it",
				ErrKeyring, path, line, fmt.Sprintf(format, args...))
		}
		if len(fields) != 2 {
			return nil, bad("%d fields", len(fields))
		}
		id := fields[0]
		if isKey(id) {
			return nil, bad("the first field is a key, not shown; write the key ID first, then the key")
		}
		err := names.Check("key ID", id)
		if err == nil && len(id) > 64 {
			err = fmt.Errorf("key ID %q is %d characters; use at most 64", id, len(id))
		}
		if err != nil && mayBeKey(id) {
			return nil, bad("the key ID is not a name, and is not shown, as it may be part of a key: " +
				"an ID is at most 64 printable ASCII characters, without / or \\")
		}
		if err != nil {
			return nil, bad("%v", err)
		}
		key, err := base64.StdEncoding.DecodeString(fields[1])
		if err != nil || len(key) != KeySize {
			return nil, bad("key %s is not %d bytes in base64", shownID(id), KeySize)
		}
		if _, dup := k.keys[id]; dup {
			return nil, bad("key ID %s appears twice", shownID(id))
		}
		block, _ := aes.NewCipher(key)
		aead, _ := cipher.NewGCM(block)
		k.ids, k.keys[id] = append(k.ids, id), aead
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte("plugvisor request signing"))
		k.macs[id] = mac.Sum(nil)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKeyring, path, err)
	}
	if len(k.ids) == 0 {
		return nil, fmt.Errorf("%w: %s holds no key; make one with plugvisor keyring generate %s", ErrKeyring, path, path)
	}
	return k, nil
}

// isKey reports whether field is a keyring key (KeySize bytes in
// base64), which an error must never show.
func isKey(field string) bool {
	key, err := base64.StdEncoding.DecodeString(field)
	return err == nil && len(key) == KeySize
}

// shownID is id for an error, unless it may be part of a key.
func shownID(id string) string {
	if mayBeKey(id) {
		return "(its ID not shown, as it may be part of a key)"
	}
	return id
}

// mayBeKey reports whether field may be part of a key: base64 of at least
// half a key's bytes, which an error does not show either.
func mayBeKey(field string) bool {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
		if b, err := enc.DecodeString(field); err == nil && len(b) >= KeySize/2 {
			return true
		}
	}
	return false
}

// Primary is the ID of the key that seals.
func (k *Keyring) Primary() string { return k.ids[0] }

// IDs are the keys' IDs, the primary first.
func (k *Keyring) IDs() []string { return slices.Clone(k.ids) }

// GenerateKey puts a new random key first in the keyring file at path
// (made, 0600, when absent), so that it is the primary from the next
// load, and returns its ID. The keys there stay, to open what they
// sealed.
func GenerateKey(path string) (string, error) {
	var old []byte
	if _, err := os.Stat(path); err == nil {
		if _, err := LoadKeyring(path); err != nil {
			return "", err
		}
		if old, err = os.ReadFile(path); err != nil {
			return "", err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	id := time.Now().UTC().Format("20060102T150405Z")
	if bytes.Contains(old, []byte(id+" ")) {
		id += fmt.Sprintf("-%x", key[:2])
	}
	text := append([]byte(id+" "+base64.StdEncoding.EncodeToString(key)+"\n"), old...)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, text, 0o600); err != nil {
		return "", err
	}
	return id, os.Rename(tmp, path)
}

// The sealed form of a record: sealedMagic, the key ID's length (one
// byte), the key ID, a 12-byte nonce, then the protobuf bytes sealed with
// AES-GCM, the record's etcd key as additional data.
var sealedMagic = []byte("PVS1")

// seal seals body as the value of key, under the primary key.
func (k *Keyring) seal(key string, body []byte) []byte {
	id := k.ids[0]
	aead := k.keys[id]
	out := make([]byte, 0, len(sealedMagic)+1+len(id)+aead.NonceSize()+len(body)+aead.Overhead())
	out = append(append(append(out, sealedMagic...), byte(len(id))), id...)
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce)
	out = append(out, nonce...)
	return aead.Seal(out, nonce, body, []byte(key))
}

// sealed reports whether value is in the sealed form.
func sealed(value []byte) bool { return bytes.HasPrefix(value, sealedMagic) }

// open opens the sealed value of key, and says under which key it was
// sealed.
func (k *Keyring) open(key string, value []byte) (body []byte, id string, err error) {
	rest := value[len(sealedMagic):]
	if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
		return nil, "", errors.New("the sealed record is cut short")
	}
	id, rest = string(rest[1:1+int(rest[0])]), rest[1+int(rest[0]):]
	aead, ok := k.keys[id]
	if !ok {
		return nil, id, fmt.Errorf("it is sealed with key %q, which this agent's keyring lacks (it has %s): give every agent the same keyring file", id, strings.Join(k.ids, ", "))
	}
	if len(rest) < aead.NonceSize() {
		return nil, id, errors.New("the sealed record is cut short")
	}
	body, err = aead.Open(nil, rest[:aead.NonceSize()], rest[aead.NonceSize():], []byte(key))
	if err != nil {
		return nil, id, fmt.Errorf("it does not open with key %q: it was not sealed by an agent of this fleet for this key (forged, or copied from another key)", id)
	}
	return body, id, nil
}

// Sign is the signature of a request's bytes under the primary key.
func (k *Keyring) Sign(data []byte) (id string, sig []byte) {
	id = k.ids[0]
	mac := hmac.New(sha256.New, k.macs[id])
	mac.Write(data)
	return id, mac.Sum(nil)
}

// Verify reports whether sig, under key id, signs data.
func (k *Keyring) Verify(id string, data, sig []byte) bool {
	secret, ok := k.macs[id]
	if !ok {
		return false
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(data)
	return hmac.Equal(mac.Sum(nil), sig)
}
