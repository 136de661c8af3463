package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
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
// the API's body structs. It refuses anything but one JSON object, what
// scanBody refuses (an unknown field, a member named twice, a string that
// would change, too deep or too many values), a value of the wrong type
// and anything after the object, each with an error that names the field.
// An empty body is refused unless emptyOK.
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
	if err := scanBody(body, v); err != nil {
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
