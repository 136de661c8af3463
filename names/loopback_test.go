package names

import "testing"

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "127.0.0.1": true, "127.5.6.7": true, "::1": true,
		"0.0.0.0": false, "": false, "10.0.0.5": false, "example.com": false, "localhost.example.com": false,
	} {
		if got := LoopbackHost(host); got != want {
			t.Errorf("LoopbackHost(%q) = %t, want %t", host, got, want)
		}
	}
}
