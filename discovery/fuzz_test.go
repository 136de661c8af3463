package discovery

import (
	"errors"
	"reflect"
	"testing"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

// fuzzSpec: whatever a spec file holds, parsing either refuses it with one
// of the package's sentinels or gives a candidate with exactly one kind of
// address that the registry accepts and that survives the trip through the
// registry's ConnectionInfo unchanged.
func fuzzSpec(t *testing.T, kind Kind, data []byte) {
	c := Candidate{Name: "p", Kind: kind, Source: "/etc/docker/plugins/p.spec"}
	var err error
	if kind == KindJSON {
		err = c.parseJSON(data)
	} else {
		err = c.parseSpec(data)
	}
	if err != nil {
		var perr *PluginError
		if !errors.As(err, &perr) || perr.Kind == nil {
			t.Fatalf("refusal is not a *PluginError with a kind: %v", err)
		}
		return
	}
	if (c.SocketPath == "") == (c.TCPAddr == "") {
		t.Fatalf("candidate from %q has socket %q and TCP address %q", data, c.SocketPath, c.TCPAddr)
	}
	info := &messages.PluginInfo{Type: "docker-volume", Name: "p", AllocId: "a", Connection: c.ConnectionInfo()}
	if err := registry.ValidatePlugin(info); err != nil {
		t.Fatalf("spec %q parsed, but the registry refuses its address: %v", data, err)
	}
	back, err := FromConnectionInfo("p", c.ConnectionInfo())
	if err != nil {
		t.Fatalf("spec %q parsed, but its ConnectionInfo does not: %v", data, err)
	}
	if back.SocketPath != c.SocketPath || back.TCPAddr != c.TCPAddr || !reflect.DeepEqual(back.TLS, c.TLS) {
		t.Fatalf("round trip through ConnectionInfo changed %+v into %+v", c, back)
	}
}

// FuzzParseSpec fuzzes the text of a .spec file: one URL.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"unix:///run/docker/plugins/p.sock", "tcp://127.0.0.1:8080", "http://localhost", "https://h:443/",
		"unix://relative", "ftp://x", "tcp://h", "  tcp://[::1]:1  \n", "tcp://u@h:1", "unix:///" + string(make([]byte, 120))} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { fuzzSpec(t, KindSpec, data) })
}

// FuzzParseSpecJSON fuzzes the text of a .json spec file.
func FuzzParseSpecJSON(f *testing.F) {
	for _, s := range []string{
		`{"Name":"p","Addr":"tcp://127.0.0.1:9000","TLSConfig":{"InsecureSkipVerify":true,"CAFile":"/ca"}}`,
		`{"Addr":"https://h:1"}`, `{"Addr":"http://h:1","TLSConfig":{}}`, `{"Addr":"unix:///p.sock"}`, `{}`, `[`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { fuzzSpec(t, KindJSON, data) })
}

// FuzzDecodeManifest fuzzes the answer to Plugin.Activate: a manifest is
// either refused or has a list, whose plugin types are unique.
func FuzzDecodeManifest(f *testing.F) {
	for _, s := range []string{`{"Implements":["VolumeDriver"]}`, `{"Implements":[]}`, `{}`, `{"Implements":null}`,
		`{"Implements":["VolumeDriver","VolumeDriver","csi","authz","NetworkDriver","IpamDriver","x"]}`, `[]`, `"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := decodeManifest(body)
		if err != nil {
			return
		}
		if m.Implements == nil {
			t.Fatalf("manifest %q decoded without a list", body)
		}
		seen := map[string]bool{}
		for _, typ := range TypesFor(m) {
			if seen[typ] {
				t.Fatalf("TypesFor(%q) repeats %q", m.Implements, typ)
			}
			seen[typ] = true
		}
	})
}
