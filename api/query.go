package api

import "fmt"

func errBadQuery(name, value string) error {
	return fmt.Errorf("%w: query parameter %s=%q is not valid", errBadBody, name, value)
}
