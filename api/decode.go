package api

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"

	"github.com/plugvisor/plugvisor/errclass"
)

// This file holds the one decoder of every request: bodies (decodeBody)
// and query parameters (checkQuery, queryBool). A bad request is refused
// with 400 and an error that names the field or the parameter, before the
// handler acts on any of it.

var (
	errBadBody  = errclass.New(errclass.Invalid, "bad request body")
	errBadQuery = errclass.New(errclass.Invalid, "bad query parameter")
)

// decodeBody reads a size-limited JSON object into v, a pointer to one of
// the API's body structs. It refuses anything but one JSON object, an
// unknown field (names are matched exactly), a value of the wrong type and
// anything after the object, each with an error that names the field. An
// empty body is refused unless emptyOK.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, emptyOK bool) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return errclass.Also(fmt.Errorf("%w: it may hold %d bytes", errOverLimit, MaxBodyBytes), err)
		}
		return fmt.Errorf("%w: %w", errBadBody, err)
	}
	body = bytes.TrimSpace(body)
	switch {
	case len(body) == 0 && emptyOK:
		return nil
	case len(body) == 0:
		return fmt.Errorf("%w: empty; send a JSON object", errBadBody)
	case body[0] != '{':
		return fmt.Errorf("%w: send a JSON object ({...})", errBadBody)
	}
	if err := cmp.Or(scanMembers(body), exactNames(body, v)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return fmt.Errorf("%w: field %q must be %s, not a JSON %s", errBadBody, typeErr.Field, typeErr.Type, typeErr.Value)
		}
		return fmt.Errorf("%w: %v", errBadBody, strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: data after the JSON object; send exactly one object", errBadBody)
	}
	return nil
}

// scanMembers refuses an object, at any depth, that names a member twice
// (encoding/json would keep the last value silently), and a string, key or
// value, that is not valid UTF-8 or escapes half a surrogate pair
// (encoding/json would turn either into U+FFFD silently). The error gives
// the member's path. Malformed JSON is left to the decoder to describe.
func scanMembers(body []byte) error {
	type level struct {
		path      string
		seen      map[string]bool // nil for an array
		key       string          // the member whose value comes next
		expectKey bool
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var stack []*level
	for {
		from := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		var top *level
		if n := len(stack); n > 0 {
			top = stack[n-1]
		}
		child := ""
		if top != nil {
			child = cmp.Or(top.key, top.path)
		}
		if key, ok := tok.(string); ok && top != nil && top.expectKey {
			name := strings.TrimPrefix(top.path+"."+key, ".")
			if err := checkRawString(memberName(top.path), body[from:dec.InputOffset()]); err != nil {
				return err
			}
			if top.seen[key] {
				return fmt.Errorf("%w: field %q appears twice; send each field once", errBadBody, name)
			}
			top.seen[key], top.key, top.expectKey = true, name, false
			continue
		}
		if _, ok := tok.(string); ok {
			if err := checkRawString(fmt.Sprintf("field %q", child), body[from:dec.InputOffset()]); err != nil {
				return err
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &level{path: child, seen: map[string]bool{}, expectKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, &level{path: child})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if n := len(stack); n > 0 && stack[n-1].seen != nil {
			stack[n-1].expectKey = true
		}
	}
}

// exactNames refuses a member of the body, at any depth, that names no
// field of v's type exactly: encoding/json alone would take "ALLOC_ID" for
// "alloc_id". The error gives the member's path, e.g. "connection.socket".
func exactNames(body []byte, v any) error {
	var tree any
	if err := json.Unmarshal(body, &tree); err != nil {
		return nil // the decoder says what is wrong
	}
	return checkNames(tree, reflect.TypeOf(v), "")
}

func checkNames(value any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch value := value.(type) {
	case map[string]any:
		switch t.Kind() {
		case reflect.Map:
			for k, member := range value {
				if err := checkNames(member, t.Elem(), path+k+"."); err != nil {
					return err
				}
			}
		case reflect.Struct:
			fields := jsonFields(t)
			for _, k := range slices.Sorted(maps.Keys(value)) {
				field, ok := fields[k]
				if !ok {
					return fmt.Errorf("%w: unknown field %q", errBadBody, path+k)
				}
				if err := checkNames(value[k], field, path+k+"."); err != nil {
					return err
				}
			}
		}
	case []any:
		if t.Kind() == reflect.Slice {
			for _, item := range value {
				if err := checkNames(item, t.Elem(), path); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// jsonFields maps the JSON names of struct type t's fields, embedded
// structs' included, to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for _, f := range reflect.VisibleFields(t) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || f.Anonymous || name == "-" {
			continue
		}
		out[cmp.Or(name, f.Name)] = f.Type
	}
	return out
}

// checkQuery refuses a malformed query, a query parameter that the route
// does not take, and one given more than once. route names the route in
// the error, e.g. "GET /v1/plugins".
func checkQuery(rawQuery, route string, allowed []string) error {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return fmt.Errorf("%w: %w; escape the query's values", errBadQuery, err)
	}
	takes := " none"
	if len(allowed) > 0 {
		takes = ": " + strings.Join(allowed, ", ")
	}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		switch {
		case !slices.Contains(allowed, k):
			return fmt.Errorf("%w: unknown parameter %q (%s takes%s)", errBadQuery, k, route, takes)
		case len(q[k]) > 1:
			return fmt.Errorf("%w: %q is given %d times; give it once", errBadQuery, k, len(q[k]))
		}
	}
	return nil
}

// queryBool is the query parameter name as a boolean: "true" or "false",
// false when it is absent.
func queryBool(q url.Values, name string) (bool, error) {
	switch v := q.Get(name); v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, fmt.Errorf("%w: %s is %q; want true or false", errBadQuery, name, v)
	}
}
