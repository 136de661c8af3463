package api

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Rights is what an ACL token lets its holder do.
type Rights int

const (
	// NoRights: the request carries no valid token.
	NoRights Rights = iota
	// Read allows GET and HEAD requests.
	Read
	// Write allows every request.
	Write
)

func (r Rights) String() string {
	switch r {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return "none"
}

// MinTokenLength is the shortest token a token file may hold: a token is a
// password, and a short one can be guessed.
const MinTokenLength = 16

// ErrInvalidTokens: a token file is malformed. The error names the line
// and the fix, never the token.
var ErrInvalidTokens = errors.New("api: invalid token file")

// Tokens is a set of ACL tokens, each with its rights. It keeps only the
// tokens' SHA-256 digests, and compares every one of them in constant time
// on every check, so neither the answer's timing nor a memory dump gives a
// token away. It is read-only once built and safe for concurrent use.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	digest [sha256.Size]byte
	rights Rights
}

// ParseTokens reads a token file: one token per line, then white space, then
// its rights, "read" or "write". Blank lines and lines starting with # are
// ignored. A token is at least MinTokenLength printable, non-space ASCII
// characters; a token listed twice is an error. Example:
//
//	# ops team: full access
//	3f1c9a5e0b7d4c2a8e6f1b3d5a7c9e0f write
//	# dashboards
//	b8d2e4f6a1c3e5d7f9b0a2c4e6d8f0a1 read
func ParseTokens(r io.Reader) (*Tokens, error) {
	t := &Tokens{}
	seen := map[[sha256.Size]byte]int{}
	scanner := bufio.NewScanner(r)
	var problems []error
	bad := func(line int, format string, args ...any) {
		problems = append(problems, fmt.Errorf("%w: line %d: "+format, append([]any{ErrInvalidTokens, line}, args...)...))
	}
	for n := 1; scanner.Scan(); n++ {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			bad(n, "want a token and its rights (read or write) separated by a space; found %d fields", len(fields))
			continue
		}
		token, rights := fields[0], fields[1]
		var e tokenEntry
		switch rights {
		case "read":
			e.rights = Read
		case "write":
			e.rights = Write
		default:
			bad(n, "rights must be read or write, not %q", rights)
			continue
		}
		if len(token) < MinTokenLength {
			bad(n, "the token is %d characters; use at least %d (e.g. openssl rand -hex 32)", len(token), MinTokenLength)
			continue
		}
		if !printableASCII(token) {
			bad(n, "the token must be printable ASCII")
			continue
		}
		e.digest = sha256.Sum256([]byte(token))
		if first, dup := seen[e.digest]; dup {
			bad(n, "the token of line %d is listed again; give each token one line", first)
			continue
		}
		seen[e.digest] = n
		t.entries = append(t.entries, e)
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidTokens, err)
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf("%w: it lists no token; add lines of the form \"<token> read\" or \"<token> write\"", ErrInvalidTokens)
	}
	return t, nil
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// LoadTokens reads the token file at path (see ParseTokens). The file must
// not be readable or writable by group or others, as ssh insists for its
// keys: tokens are secrets.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("api: token file: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("api: token file: %w", err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file (%s); use a regular file with mode 0600",
			ErrInvalidTokens, path, info.Mode().Type())
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %04o, so others may read the tokens; run chmod 600 %s",
			ErrInvalidTokens, path, perm, path)
	}
	t, err := ParseTokens(f)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return t, nil
}

// Len is how many tokens the set holds.
func (t *Tokens) Len() int { return len(t.entries) }

// Rights is what token may do: NoRights when it is not in the set. Every
// entry is compared, in constant time, whatever matches.
func (t *Tokens) Rights(token string) Rights {
	digest := sha256.Sum256([]byte(token))
	got := NoRights
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(digest[:], e.digest[:]) == 1 {
			got = e.rights
		}
	}
	return got
}
