package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// FuzzScanBody holds the one-pass scan to a reference made of
// encoding/json's own parts, on every valid JSON object: the scan refuses
// a body exactly when the reference finds a member named twice, a string
// encoding/json would change, a member that names no field, nesting
// deeper than MaxDepth or more than MaxValues values; and a refusal is a
// bad body (400) or over a limit (413).
func FuzzScanBody(f *testing.F) {
	for _, s := range []string{
		`{"type":"csi-node","name":"p","alloc_id":"a1","connection":{"socket_path":"/s"},"options":{"k":"v"}}`,
		`{"connection":{"socket_path":"/s","socket_path":"/t"}}`, `{"a\u0062":1}`, `{"name":"\ud800"}`,
		`{"options":{"k":"v","k":"w"}}`, `{"options":{"a":"1","b":"2","c":"3","d":"4","e":"5","f":"6","g":"7","h":"8","i":"9","a":"0"}}`,
		`{"connection":{"SOCKET_PATH":"/s"}}`, `{"options":{"x":{"y":[[[{"z":1,"z":2}]]]}}}`, `{"type":"` + "\xff" + `"}`,
		`{"options":` + strings.Repeat(`{"a":`, MaxDepth) + `1` + strings.Repeat(`}`, MaxDepth) + `}`,
		`{"options":[` + strings.Repeat(`1,`, MaxValues) + `1]}`, `{"type":"x" , "name" : "y"}`, `{"":{"":1}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		if !json.Valid([]byte(body)) || !strings.HasPrefix(strings.TrimSpace(body), "{") {
			return
		}
		err := scanBody([]byte(strings.TrimSpace(body)), &PluginBody{})
		if err != nil && !errors.Is(err, errBadBody) && !errors.Is(err, errOverLimit) {
			t.Fatalf("a refusal of no known kind: %v", err)
		}
		depth, values, twice, changed := referenceTokens([]byte(body))
		unknown := referenceNames([]byte(body), reflect.TypeOf(PluginBody{}))
		want := depth > MaxDepth || values > MaxValues || twice || changed || unknown
		if (err != nil) != want {
			t.Fatalf("the scan says %v; the reference: depth %d, %d values, a member twice %t, a string changed %t, an unknown field %t",
				err, depth, values, twice, changed, unknown)
		}
	})
}

// referenceTokens walks body with encoding/json's tokenizer: its deepest
// nesting, its values, whether an object names a member twice, and
// whether decoding would change a string.
func referenceTokens(body []byte) (depth, values int, twice, changed bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	type object struct{ seen map[string]bool }
	var stack []*object
	expectKey := false
	for {
		from := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return
		}
		raw := body[from:dec.InputOffset()]
		if s, ok := tok.(string); ok {
			// encoding/json puts U+FFFD for what it cannot decode: more of
			// them than the string sent, as such or escaped, is a change.
			sent := bytes.Count(raw, []byte("\uFFFD")) + bytes.Count(bytes.ToLower(raw), []byte(`\ufffd`))
			changed = changed || strings.Count(s, "\uFFFD") > sent
			if expectKey {
				top := stack[len(stack)-1]
				twice = twice || top.seen[s]
				top.seen[s], expectKey = true, false
				continue
			}
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			values++
			var o *object
			if tok == json.Delim('{') {
				o = &object{seen: map[string]bool{}}
			}
			stack = append(stack, o)
			depth = max(depth, len(stack))
			expectKey = o != nil
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		default:
			values++
		}
		expectKey = len(stack) > 0 && stack[len(stack)-1] != nil
	}
}

// referenceNames says whether any member of body names no field of t
// exactly, by the decoded tree.
func referenceNames(body []byte, t reflect.Type) bool {
	var tree any
	if json.Unmarshal(body, &tree) != nil {
		return false
	}
	var walk func(value any, t reflect.Type) bool
	walk = func(value any, t reflect.Type) bool {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch value := value.(type) {
		case map[string]any:
			for k, member := range value {
				switch t.Kind() {
				case reflect.Map:
					if walk(member, t.Elem()) {
						return true
					}
				case reflect.Struct:
					field, ok := fieldsOf(t)[k]
					if !ok || walk(member, field) {
						return true
					}
				}
			}
		case []any:
			for _, item := range value {
				if t.Kind() == reflect.Slice && walk(item, t.Elem()) {
					return true
				}
			}
		}
		return false
	}
	return walk(tree, t)
}
