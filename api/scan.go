package api

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// MaxDepth is the deepest a request body may nest objects and arrays. No
// body of the API needs more than a few levels.
const MaxDepth = 32

// MaxValues bounds the values of one request body: objects, arrays,
// strings, numbers and literals, members' values and array items alike.
// Each costs the decoder an allocation or a map entry, many times what it
// takes of the body: a 1 MiB body of 100,000 members cost 130 ms of CPU.
// The largest bodies of the API hold a few thousand: a registration's
// options at -max-plugin-options-bytes' default, 16 KiB, at most 2,400.
const MaxValues = 8192

// scanBody checks body, a JSON object, against v, a pointer to the body's
// struct, in one pass before encoding/json decodes it. It refuses, with an
// error that names the member's path:
//   - a member that names no field of v's type exactly (encoding/json
//     alone would take "ALLOC_ID" for "alloc_id");
//   - an object, at any depth, that names a member twice (encoding/json
//     would keep the last value silently);
//   - a string, key or value, that is not UTF-8 or escapes half a
//     surrogate pair (encoding/json would turn either into U+FFFD);
//   - objects and arrays nested deeper than MaxDepth, and more than
//     MaxValues values (413).
//
// Malformed JSON is left to the decoder to describe. The work is linear in
// the body: a level keeps its own key only, a path is put together only
// for an error, and the members of an object are told apart in one set.
func scanBody(body []byte, v any) error {
	s := &bodyScanner{body: body}
	return s.scan(reflect.TypeOf(v))
}

// bodyScanner is one scanBody's state.
type bodyScanner struct {
	body   []byte
	at     int
	levels []scanLevel
	keys   []string // the member names of the open objects, each object's after its parent's
	values int
}

// scanLevel is one object or array that the scanner is inside.
type scanLevel struct {
	object    bool
	typ       reflect.Type // what the container decodes into; nil when no name is checked below
	keys      int          // where this object's member names start in bodyScanner.keys
	seen      map[string]bool
	key       string // the member whose value comes next, or came last
	named     bool   // key holds a member of this object
	expectKey bool
}

// seenSetAfter is how many member names an object holds before they are
// told apart by a set rather than by comparing each with the others.
const seenSetAfter = 8

func (s *bodyScanner) scan(root reflect.Type) error {
	for {
		c, ok := s.next()
		if !ok {
			return nil
		}
		n := len(s.levels)
		switch {
		case c == '{' || c == '[':
			if err := s.open(c == '{', s.childType(root)); err != nil {
				return err
			}
		case c == '}' || c == ']':
			if n == 0 || s.levels[n-1].object != (c == '}') {
				return nil // malformed: the decoder says so
			}
			s.keys = s.keys[:s.levels[n-1].keys]
			s.levels = s.levels[:n-1]
			s.at++
			if n == 1 {
				return nil // anything after the object is the decoder's to refuse
			}
			s.valueDone()
		case c == '"':
			raw, ok := s.stringAt()
			if !ok {
				return nil
			}
			if n > 0 && s.levels[n-1].expectKey {
				if err := s.member(raw); err != nil {
					return err
				}
				continue
			}
			if problem := rawStringProblem(raw); problem != "" {
				return fmt.Errorf("%w: field %s %s", errBadBody, quotePath(pathOf(s.levels, "")), problem)
			}
			if err := s.value(); err != nil {
				return err
			}
			s.valueDone()
		case c == ':' || c == ',':
			s.at++
			if c == ',' && n > 0 && s.levels[n-1].object {
				s.levels[n-1].expectKey = true
			}
		default: // a number, true, false or null
			for s.at < len(s.body) && !endsScalar(s.body[s.at]) {
				s.at++
			}
			if err := s.value(); err != nil {
				return err
			}
			s.valueDone()
		}
	}
}

// endsScalar says whether c ends a number or a literal.
func endsScalar(c byte) bool {
	switch c {
	case ',', ':', ']', '}', '{', '[', '"', ' ', '\t', '\r', '\n':
		return true
	}
	return false
}

// next skips white space and returns the next byte, false at the end.
func (s *bodyScanner) next() (byte, bool) {
	for s.at < len(s.body) {
		switch c := s.body[s.at]; c {
		case ' ', '\t', '\r', '\n':
			s.at++
		default:
			return c, true
		}
	}
	return 0, false
}

// stringAt returns the string starting at s.at, with its quotes, and moves
// past it; false when it does not end.
func (s *bodyScanner) stringAt() ([]byte, bool) {
	for i := s.at + 1; i < len(s.body); i++ {
		switch s.body[i] {
		case '\\':
			i++
		case '"':
			raw := s.body[s.at : i+1]
			s.at = i + 1
			return raw, true
		}
	}
	return nil, false
}

// open enters an object or an array whose value decodes into typ.
func (s *bodyScanner) open(object bool, typ reflect.Type) error {
	if len(s.levels) == MaxDepth {
		return fmt.Errorf("%w: field %s nests objects and arrays deeper than %d levels, the limit; send a flatter body",
			errBadBody, quotePath(pathOf(s.levels, "")), MaxDepth)
	}
	if err := s.value(); err != nil {
		return err
	}
	s.levels = append(s.levels, scanLevel{object: object, typ: typ, keys: len(s.keys), expectKey: object})
	s.at++
	return nil
}

// value counts one more value of the body.
func (s *bodyScanner) value() error {
	if s.values++; s.values > MaxValues {
		return fmt.Errorf("%w: it holds more than %d values (objects, arrays, strings, numbers and literals), the limit; send fewer",
			errOverLimit, MaxValues)
	}
	return nil
}

// member takes the member name raw of the innermost object.
func (s *bodyScanner) member(raw []byte) error {
	n := len(s.levels)
	top := &s.levels[n-1]
	if problem := rawStringProblem(raw); problem != "" {
		return fmt.Errorf("%w: %s %s", errBadBody, memberName(pathOf(s.levels[:n-1], "")), problem)
	}
	key := unquote(raw)
	if s.seenBefore(top, key) {
		return fmt.Errorf("%w: field %s appears twice; send each field once", errBadBody, quotePath(pathOf(s.levels[:n-1], key)))
	}
	if t := top.typ; t != nil && t.Kind() == reflect.Struct {
		if _, ok := fieldsOf(t)[key]; !ok {
			return fmt.Errorf("%w: unknown field %s", errBadBody, quotePath(pathOf(s.levels[:n-1], key)))
		}
	}
	top.key, top.named, top.expectKey = key, true, false
	return nil
}

// seenBefore says whether top already has member key, and remembers it.
func (s *bodyScanner) seenBefore(top *scanLevel, key string) bool {
	if top.seen != nil {
		if top.seen[key] {
			return true
		}
		top.seen[key] = true
		return false
	}
	mine := s.keys[top.keys:]
	for _, k := range mine {
		if k == key {
			return true
		}
	}
	if len(mine) < seenSetAfter {
		s.keys = append(s.keys, key)
		return false
	}
	top.seen = make(map[string]bool, 2*seenSetAfter)
	for _, k := range mine {
		top.seen[k] = true
	}
	top.seen[key] = true
	s.keys = s.keys[:top.keys]
	return false
}

// valueDone notes the end of a value in the innermost container.
func (s *bodyScanner) valueDone() {
	if n := len(s.levels); n > 0 && s.levels[n-1].object {
		s.levels[n-1].expectKey = false
	}
}

// childType is what the value starting now decodes into: root for the
// body itself, the field's, the map's or the slice's element type inside
// a container, nil when no name is checked below.
func (s *bodyScanner) childType(root reflect.Type) reflect.Type {
	t := root
	if n := len(s.levels); n > 0 {
		top := s.levels[n-1]
		switch t = top.typ; {
		case t == nil:
			return nil
		case t.Kind() == reflect.Struct:
			t = fieldsOf(t)[top.key]
		case t.Kind() == reflect.Map && top.object, t.Kind() == reflect.Slice && !top.object:
			t = t.Elem()
		default:
			return nil
		}
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// unquote is the member name raw decodes to.
func unquote(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1])
	}
	var key string
	_ = json.Unmarshal(raw, &key) // raw passed rawStringProblem; the decoder reports anything else
	return key
}

// fieldTypes caches fieldsOf.
var fieldTypes sync.Map // reflect.Type → map[string]reflect.Type

// fieldsOf maps the JSON names of struct type t's fields, embedded
// structs' included, to their types.
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldTypes.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	out := map[string]reflect.Type{}
	for _, f := range reflect.VisibleFields(t) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || f.Anonymous || name == "-" {
			continue
		}
		out[cmp.Or(name, f.Name)] = f.Type
	}
	fieldTypes.Store(t, out)
	return out
}

// pathOf is the dotted path of the members that levels are inside, then
// key when it is not "": "connection.socket_path". Arrays add nothing.
func pathOf(levels []scanLevel, key string) string {
	var b strings.Builder
	add := func(k string) {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(k)
	}
	for _, l := range levels {
		if l.named {
			add(l.key)
		}
	}
	if key != "" {
		add(key)
	}
	return b.String()
}

// maxPathShown bounds the path an error quotes: a body's keys may be long.
const maxPathShown = 256

// quotePath quotes path for an error, cut after maxPathShown bytes.
func quotePath(path string) string {
	if len(path) <= maxPathShown {
		return strconv.Quote(path)
	}
	cut := maxPathShown
	for cut > 0 && !utf8.RuneStart(path[cut]) {
		cut--
	}
	return strconv.Quote(path[:cut]) + "…"
}
