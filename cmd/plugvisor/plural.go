package main

import "fmt"

// count is n with the noun that fits it: "1 healthy node", "3 healthy
// nodes", "0 healthy nodes". many is the plural, for nouns whose plural
// is not one + "s".
func count(n int, one string, many ...string) string {
	if n == 1 {
		return "1 " + one
	}
	if len(many) > 0 {
		return fmt.Sprintf("%d %s", n, many[0])
	}
	return fmt.Sprintf("%d %ss", n, one)
}
