//go:build !unix

package discovery

// checkTrusted checks nothing where files have no unix owner.
func checkTrusted(dir, path string) error { return nil }
