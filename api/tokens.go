package api

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/names"
)

// Rights is what an ACL token lets its holder do: a set of rights, as
// Nomad's ACL policies split them. Each route needs one right (see
// rights.go and the x-right of each operation in openapi.yaml); a token
// may use the route when its set holds that right.
type Rights uint8

const (
	// Read allows every GET and HEAD: plugins, volumes, events, health,
	// metrics. Every other right includes it.
	Read Rights = 1 << iota
	// Volumes allows what changes volumes: create, register, claim,
	// release, mount, unmount, detach, expand, delete, snapshots, and the
	// Docker volume routes. It does not allow choosing which socket serves
	// a plugin: a volumes token cannot send a volume's secrets elsewhere.
	Volumes
	// Plugins allows registering and deregistering plugin allocations,
	// which decides where the agent sends volumes' secrets and data.
	Plugins
	// Admin is every right, including any administrative route to come.
	Admin

	// NoRights: the request carries no valid token.
	NoRights Rights = 0
	// Write is the rights of a "write" token of a token file written
	// before rights were split: every right, as "admin".
	Write = Read | Volumes | Plugins | Admin
)

// rightName is a right as a token file names it, with what it grants.
type rightName struct {
	name   string
	rights Rights
}

// rightNames are the rights a token file may name, with what each grants.
var rightNames = []rightName{
	{"read", Read},
	{"volumes", Read | Volumes},
	{"plugins", Read | Plugins},
	{"admin", Write},
	{"write", Write},
}

// Has says whether r holds every right of need.
func (r Rights) Has(need Rights) bool { return r&need == need }

// String names r's rights, e.g. "read,volumes", "admin" or "none".
func (r Rights) String() string {
	switch {
	case r == NoRights:
		return "none"
	case r.Has(Admin):
		return "admin"
	}
	var out []string
	for _, n := range []rightName{{"read", Read}, {"volumes", Volumes}, {"plugins", Plugins}} {
		if r.Has(n.rights) {
			out = append(out, n.name)
		}
	}
	return strings.Join(out, ",")
}

// parseRights reads a comma-separated list of right names. A field as
// long as a token is not quoted in the error: it may be the token, its
// line's fields out of order.
func parseRights(field string) (Rights, error) {
	var out Rights
	for _, name := range strings.Split(field, ",") {
		i := slices.IndexFunc(rightNames, func(n rightName) bool { return n.name == name })
		if i < 0 && len(field) >= MinTokenLength {
			return NoRights, fmt.Errorf("the rights field is %d characters and no list of rights; it is not shown, as it may be the token: "+
				"write the token first, then its rights (a comma-separated list of read, volumes, plugins, admin), then its name", len(field))
		}
		if i < 0 {
			return NoRights, fmt.Errorf("rights must be a comma-separated list of read, volumes, plugins, admin (or write, "+
				"the same as admin), not %q", field)
		}
		out |= rightNames[i].rights
	}
	return out, nil
}

// MinTokenLength is the shortest token a token file may hold: a token is a
// password, and a short one can be guessed.
const MinTokenLength = 16

// ErrInvalidTokens: a token file is malformed. The error names the line
// and the fix, never the token.
var ErrInvalidTokens = errclass.New(errclass.Invalid, "invalid token file")

// Tokens is a set of ACL tokens, each with its name and rights. It keeps
// only the tokens' SHA-256 digests, and compares every one of them in
// constant time on every check, so neither the answer's timing nor a memory
// dump gives a token away. It is safe for concurrent use; Replace swaps
// the whole set at once, for a token file read again.
type Tokens struct {
	entries []tokenEntry                 // as parsed
	current atomic.Pointer[[]tokenEntry] // what Replace put in force; nil before
}

type tokenEntry struct {
	digest [sha256.Size]byte
	rights Rights
	name   string
}

// ParseTokens reads a token file: one token per line, then white space,
// then its rights, then optionally its name. Rights are a comma-separated
// list of read, volumes, plugins and admin (see Rights); "write", from
// files written before rights were split, means admin. The name says who
// acted in logs and events ("token:<name>"); it passes the names rules and
// is unique, and defaults to "line<N>". Blank lines and lines starting
// with # are ignored. A token is at least MinTokenLength printable,
// non-space ASCII characters; a token listed twice is an error. Example:
//
//	# ops team: full access
//	3f1c9a5e0b7d4c2a8e6f1b3d5a7c9e0f admin ops
//	# the scheduler mounts volumes; only the orchestrator registers plugins
//	c1d3e5f7a9b1c3d5e7f9a1b3c5d7e9f1 volumes scheduler
//	d4f6a8c0e2b4d6f8a0c2e4b6d8f0a2c4 plugins,volumes orchestrator
//	# dashboards
//	b8d2e4f6a1c3e5d7f9b0a2c4e6d8f0a1 read
func ParseTokens(r io.Reader) (*Tokens, error) {
	t := &Tokens{}
	seen := map[[sha256.Size]byte]int{}
	seenNames := map[string]int{}
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
		if len(fields) != 2 && len(fields) != 3 {
			bad(n, "want a token, its rights (e.g. read, or volumes,plugins) and optionally its name, separated by spaces; found %d fields", len(fields))
			continue
		}
		e := tokenEntry{name: fmt.Sprintf("line%d", n)}
		if len(fields) == 3 {
			e.name = fields[2]
		}
		var err error
		token := fields[0]
		if e.rights, err = parseRights(fields[1]); err != nil {
			bad(n, "%v", err)
			continue
		}
		if err := names.Check("token name", e.name); err != nil {
			bad(n, "%v", err)
			continue
		}
		if first, dup := seenNames[e.name]; dup {
			bad(n, "the name %q is the name of line %d too; give each token its own name", e.name, first)
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
		seen[e.digest], seenNames[e.name] = n, n
		t.entries = append(t.entries, e)
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidTokens, err)
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf("%w: it lists no token; add lines of the form \"<token> <rights> <name>\", e.g. \"<token> read dashboards\"", ErrInvalidTokens)
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
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
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
func (t *Tokens) Len() int { return len(t.list()) }

// Replace puts the tokens of with in force in t, all at once: a check that
// starts after it sees the new set only. A listener keeps its *Tokens, so
// a token file read again takes effect without restarting it.
func (t *Tokens) Replace(with *Tokens) {
	entries := with.list()
	t.current.Store(&entries)
}

// list is the set in force.
func (t *Tokens) list() []tokenEntry {
	if p := t.current.Load(); p != nil {
		return *p
	}
	return t.entries
}

// Rights is what token may do: NoRights when it is not in the set. Every
// entry is compared, in constant time, whatever matches.
func (t *Tokens) Rights(token string) Rights {
	_, rights := t.Lookup(token)
	return rights
}

// Lookup is the name and rights of token: "" and NoRights when it is not
// in the set. Every entry is compared, in constant time, whatever matches.
func (t *Tokens) Lookup(token string) (name string, rights Rights) {
	digest := sha256.Sum256([]byte(token))
	for _, e := range t.list() {
		if subtle.ConstantTimeCompare(digest[:], e.digest[:]) == 1 {
			name, rights = e.name, e.rights
		}
	}
	return name, rights
}
