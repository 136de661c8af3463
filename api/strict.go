package api

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/names"
)

// Defaults of Limits.
const (
	DefaultMaxSecrets          = 64
	DefaultMaxParameters       = 64
	DefaultMaxTopologySegments = 64
	DefaultMaxMountFlags       = 32
)

// Limits bound the counts in one request body, so that no client can make
// the agent hold, store and send to a plugin what only the 1 MiB body limit
// bounds. A zero field takes its default; a body over a limit is refused
// with 413, naming the field and the agent flag that raises it, before
// anything changes.
type Limits struct {
	// Secrets bounds the entries of one body's "secrets" (agent flag
	// -max-secrets, default DefaultMaxSecrets).
	Secrets int
	// Parameters bounds the entries of one body's "parameters" (agent flag
	// -max-parameters, default DefaultMaxParameters).
	Parameters int
	// TopologySegments bounds the segments of one body's topologies, every
	// topology's together (agent flag -max-topology-segments, default
	// DefaultMaxTopologySegments).
	TopologySegments int
	// MountFlags bounds one body's mount flags (agent flag -max-mount-flags,
	// default DefaultMaxMountFlags).
	MountFlags int
}

// Validate refuses a negative limit, naming its agent flag.
func (l Limits) Validate() error {
	var errs []error
	for _, c := range l.counts() {
		if c.limit < 0 {
			errs = append(errs, fmt.Errorf("%s is %d; give a positive count, or 0 for the default %d", c.flag, c.limit, c.fallback))
		}
	}
	return errors.Join(errs...)
}

type count struct {
	flag            string
	limit, fallback int
}

func (l Limits) counts() []count {
	return []count{{"-max-secrets", l.Secrets, DefaultMaxSecrets}, {"-max-parameters", l.Parameters, DefaultMaxParameters},
		{"-max-topology-segments", l.TopologySegments, DefaultMaxTopologySegments}, {"-max-mount-flags", l.MountFlags, DefaultMaxMountFlags}}
}

func (l Limits) withDefaults() Limits {
	l.Secrets = cmpZero(l.Secrets, DefaultMaxSecrets)
	l.Parameters = cmpZero(l.Parameters, DefaultMaxParameters)
	l.TopologySegments = cmpZero(l.TopologySegments, DefaultMaxTopologySegments)
	l.MountFlags = cmpZero(l.MountFlags, DefaultMaxMountFlags)
	return l
}

func cmpZero(v, fallback int) int {
	if v <= 0 {
		return fallback
	}
	return v
}

// errOverLimit is a body over one of Limits: 413, where its class alone
// would be 429.
var errOverLimit = errclass.New(errclass.Limit, "request body is over a limit")

// bounded is a body whose maps and lists are checked against Limits once
// it has decoded: their counts, and their keys by names.CheckKey.
type bounded interface {
	checkBounds(l Limits) error
}

// decode is decodeBody, then the checks of a bounded body against s's
// limits.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any, emptyOK bool) error {
	if err := decodeBody(w, r, v, emptyOK); err != nil {
		return err
	}
	if b, ok := v.(bounded); ok {
		return b.checkBounds(s.Limits.withDefaults())
	}
	return nil
}

func (b *CreateBody) checkBounds(l Limits) error {
	var flags []string
	if b.MountOptions != nil {
		flags = b.MountOptions.MountFlags
	}
	return cmp.Or(checkMap("secrets", b.Secrets, l.Secrets, "-max-secrets"),
		checkMap("parameters", b.Parameters, l.Parameters, "-max-parameters"),
		checkTopologies("topology", l, b.Topology.Requisite, b.Topology.Preferred),
		checkCount("mount_options.mount_flags", len(flags), l.MountFlags, "-max-mount-flags"))
}

func (b *SnapshotBody) checkBounds(l Limits) error {
	return cmp.Or(checkMap("secrets", b.Secrets, l.Secrets, "-max-secrets"),
		checkMap("parameters", b.Parameters, l.Parameters, "-max-parameters"))
}

func (b *DeleteSnapshotBody) checkBounds(l Limits) error {
	return checkMap("secrets", b.Secrets, l.Secrets, "-max-secrets")
}

func (b *ModifyBody) checkBounds(l Limits) error {
	return checkMap("mutable_parameters", b.MutableParameters, l.Parameters, "-max-parameters")
}

func (b *VolumeBody) checkBounds(l Limits) error {
	return checkTopologies("topologies", l, b.Topologies)
}

// checkMap refuses more than limit entries in m, or a key names.CheckKey
// refuses.
func checkMap(field string, m map[string]string, limit int, flag string) error {
	if err := checkCount(field, len(m), limit, flag); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if err := names.CheckKey(field, k); err != nil {
			return fmt.Errorf("%w: %w", errBadBody, err)
		}
	}
	return nil
}

// checkTopologies refuses more segments than l.TopologySegments in all the
// lists together, or a segment key names.CheckKey refuses.
func checkTopologies(field string, l Limits, lists ...[]map[string]string) error {
	n := 0
	for _, list := range lists {
		for _, segments := range list {
			n += len(segments)
			for _, k := range slices.Sorted(maps.Keys(segments)) {
				if err := names.CheckKey(field+" segment", k); err != nil {
					return fmt.Errorf("%w: %w", errBadBody, err)
				}
			}
		}
	}
	return checkCount(field+" segments", n, l.TopologySegments, "-max-topology-segments")
}

func checkCount(field string, n, limit int, flag string) error {
	if n > limit {
		return fmt.Errorf("%w: %s holds %d entries, over the limit of %d (agent flag %s); send fewer", errOverLimit, field, n, limit, flag)
	}
	return nil
}

// memberName describes a member name of the object at path, for an error.
func memberName(path string) string {
	if path == "" {
		return "a member name"
	}
	return "a member name in " + quotePath(path)
}

// checkRawString refuses the JSON string raw (with its quotes, as sent,
// after any separators) of what (e.g. `field "name"`) when it holds bytes that are
// not UTF-8 (overlong forms and encoded surrogates included) or escapes
// half a surrogate pair (\ud800 alone): encoding/json would replace either
// with U+FFFD.
func checkRawString(what string, raw []byte) error {
	if problem := rawStringProblem(raw); problem != "" {
		return fmt.Errorf("%w: %s %s", errBadBody, what, problem)
	}
	return nil
}

// rawStringProblem is what checkRawString refuses in raw, e.g. "is not
// valid UTF-8 (byte 0xff); send UTF-8 text", or "" when nothing. It
// describes no field, so that a caller names one only for a refusal.
func rawStringProblem(raw []byte) string {
	start := bytes.IndexByte(raw, '"')
	if start < 0 || len(raw)-start < 2 {
		return "" // not a string: the decoder describes it
	}
	s := raw[start+1 : len(raw)-1]
	for i := 0; i < len(s); {
		switch {
		case s[i] == '\\' && i+5 < len(s) && s[i+1] == 'u':
			r, n := escapedRune(s[i:])
			if r < 0 {
				return fmt.Sprintf("escapes half a surrogate pair (%s); send UTF-8 text", s[i:i+6])
			}
			i += n
		case s[i] == '\\':
			i += 2
		case s[i] < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				return fmt.Sprintf("is not valid UTF-8 (byte %#x); send UTF-8 text", s[i])
			}
			i += size
		}
	}
	return ""
}

// escapedRune reads the \uXXXX escape at the start of s, with the low half
// that must follow a high surrogate; -1 for half a pair.
func escapedRune(s []byte) (rune, int) {
	hex := func(b []byte) rune {
		v, err := strconv.ParseUint(string(b), 16, 16)
		if err != nil {
			return -1
		}
		return rune(v)
	}
	r := hex(s[2:6])
	switch {
	case r < 0xD800 || r > 0xDFFF:
		return r, 6
	case r >= 0xDC00:
		return -1, 6
	case len(s) >= 12 && s[6] == '\\' && s[7] == 'u':
		if low := hex(s[8:12]); low >= 0xDC00 && low <= 0xDFFF {
			return 0x10000 + (r-0xD800)<<10 + (low - 0xDC00), 12
		}
	}
	return -1, 6
}
