package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/plugvisor/plugvisor/registry"
)

// request wraps body as a POST with a JSON body.
func request(body string) (*httptest.ResponseRecorder, *http.Request) {
	r := httptest.NewRequest(http.MethodPost, "/v1/fuzz", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	return httptest.NewRecorder(), r
}

// requireBadBodyOrLimit fails unless err is one of the decoders' own
// refusals: a bad body, or a body over the size limit.
func requireBadBodyOrLimit(t *testing.T, err error) {
	t.Helper()
	var tooBig *http.MaxBytesError
	if !errors.Is(err, errBadBody) && !errors.As(err, &tooBig) {
		t.Fatalf("decoder failed with an error of no known kind: %v", err)
	}
}

// FuzzDecodePluginBody: POST /v1/plugins. Whatever the body, decoding
// either refuses it as a bad body or gives a registration that survives a
// round trip through JSON unchanged; validation never panics on it, and
// never accepts a network address.
func FuzzDecodePluginBody(f *testing.F) {
	fuzzBody(f, func(t *testing.T, b *PluginBody) {
		info := b.pluginInfo()
		if registry.ValidateRegistration(info) == nil && info.GetConnection().GetAddress() != "" {
			t.Fatalf("the API accepted a network address: %v", info)
		}
	},
		`{"type":"csi-node","name":"ebs","alloc_id":"a1","connection":{"socket_path":"/run/ebs.sock"}}`,
		`{"type":"csi-node","name":".","alloc_id":"..","connection":{"address":"tcp://127.0.0.1:1","tls":{"ca_file":"/x"}}}`,
		`{"type":"d","name":"n","alloc_id":"a","options":{"k":"v"},"version":"1"}`,
		`{"type":7}`, `[1,2]`, `{"type":"\u202e"}`, `{"TYPE":"csi-node"}`)
}

// fuzzJSONBody fuzzes decodeBody into a fresh *T: a body is either
// refused as bad or decodes to a value that survives a round trip.
func fuzzJSONBody[T any](f *testing.F, seeds ...string) {
	fuzzBody[T](f, nil, seeds...)
}

// fuzzBody is fuzzJSONBody with a further check of every accepted body.
func fuzzBody[T any](f *testing.F, check func(*testing.T, *T), seeds ...string) {
	for _, s := range append(seeds, ``, `null`, `[]`, `{"colour":1}`, `{}{}`) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var v T
		w, r := request(body)
		if err := decodeBody(w, r, &v, false); err != nil {
			requireBadBodyOrLimit(t, err)
			return
		}
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("a decoded body does not encode: %v", err)
		}
		var again T
		if err := json.Unmarshal(out, &again); err != nil || !reflect.DeepEqual(normalise(v), normalise(again)) {
			t.Fatalf("round trip changed %+v into %+v (%v)", v, again, err)
		}
		if check != nil {
			check(t, &v)
		}
	})
}

// normalise re-encodes v so that nil and empty collections compare equal.
func normalise(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// FuzzDecodeVolumeBody: POST /v1/volumes.
func FuzzDecodeVolumeBody(f *testing.F) {
	fuzzJSONBody[VolumeBody](f,
		`{"id":"v","plugin_id":"p","access_mode":"single-node-writer","attachment_mode":"file-system"}`,
		`{"id":"../v","namespace":".","topologies":[{"zone":"a"},{}]}`)
}

// FuzzDecodeAllocBody: POST /v1/volumes/{ns}/{id}/claim, release, mount
// and unmount.
func FuzzDecodeAllocBody(f *testing.F) {
	fuzzJSONBody[AllocBody](f, `{"alloc_id":"a1","read_only":true}`, `{"alloc_id":"a1","release":true}`)
}

// FuzzDecodeCreateBody: POST /v1/volumes/{ns}/{id}/create.
func FuzzDecodeCreateBody(f *testing.F) {
	fuzzJSONBody[CreateBody](f,
		`{"plugin_id":"hp","access_mode":"single-node-writer","capacity":{"required_bytes":1024},"secrets":{"k":"v"},"mount_options":{"fs_type":"ext4","mount_flags":["ro"]}}`)
}

// FuzzDecodeDetachBody: POST /v1/volumes/{ns}/{id}/detach.
func FuzzDecodeDetachBody(f *testing.F) {
	fuzzJSONBody[DetachBody](f, `{"node_id":"node-1"}`, `{"node_id":"\u202e.."}`)
}

// FuzzDecodeExpandBody: POST /v1/volumes/{ns}/{id}/expand.
func FuzzDecodeExpandBody(f *testing.F) {
	fuzzJSONBody[ExpandBody](f, `{"required_bytes":1073741824,"limit_bytes":2147483648}`,
		`{"required_bytes":-1}`, `{"required_bytes":1e400}`)
}

// FuzzDecodeSnapshotBody: POST /v1/snapshots.
func FuzzDecodeSnapshotBody(f *testing.F) {
	fuzzJSONBody[SnapshotBody](f,
		`{"namespace":"default","volume_id":"v","name":"s1","parameters":{"k":"v"},"secrets":{"token":"x"}}`,
		`{"volume_id":"..","name":"","secrets":{"":""}}`)
}

// FuzzDecodeDeleteSnapshotBody: DELETE /v1/snapshots/....
func FuzzDecodeDeleteSnapshotBody(f *testing.F) {
	fuzzJSONBody[DeleteSnapshotBody](f, `{"secrets":{"token":"x"}}`, `{"secrets":null}`)
}

// FuzzDecodeDockerVolumeBody: POST /v1/docker/volumes.
func FuzzDecodeDockerVolumeBody(f *testing.F) {
	fuzzJSONBody[DockerVolumeBody](f, `{"name":"data","driver":"local","options":{"size":"1G"}}`,
		`{"name":".","driver":"../x"}`)
}

// FuzzDecodeDockerMountBody: POST /v1/docker/volumes/{name}/mount and /unmount.
func FuzzDecodeDockerMountBody(f *testing.F) {
	fuzzJSONBody[DockerMountBody](f, `{"id":"container-1"}`, `{"id":7}`)
}
