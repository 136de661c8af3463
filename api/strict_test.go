package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/csitest"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// members returns n JSON members "<prefix><i>": "v".
func members(prefix string, n int) string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(`"%s%d": "v"`, prefix, i)
	}
	return strings.Join(out, ", ")
}

// TestStrictDecodingRefusesBadTextAndBoundsCountsAndChangesNothing: invalid
// UTF-8 in any JSON string, raw or escaped, is refused naming the field,
// never turned into U+FFFD; map keys pass names.CheckKey; and the counts of
// secrets, parameters, topology segments and mount flags have limits, each
// named with its agent flag (issue 23). No case reaches the plugin or
// changes the catalog.
func TestStrictDecodingRefusesBadTextAndBoundsCountsAndChangesNothing(t *testing.T) {
	f := newAPIFixture(t)
	m := csitest.NewMocks(t) // no RPC is expected: any fails the test
	socket := csitest.SocketPath(t)
	m.Serve(t, socket)
	f.registerController("hostpath", socket)
	const create = "/v1/volumes/default/db/create"
	base := `"plugin_id": "hostpath", "access_mode": "single-node-writer"`
	cases := []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"raw bytes that are not UTF-8 in a secret", "POST", create, `{` + base + `, "secrets": {"token": "a` + "\xff\xfe" + `"}}`,
			400, `field "secrets.token" is not valid UTF-8 (byte 0xff)`},
		{"an overlong encoding in a name", "POST", create, `{` + base + `, "name": "` + "\xc0\xaf" + `"}`, 400, `field "name" is not valid UTF-8`},
		{"a surrogate encoded as UTF-8 in a parameter", "POST", create, `{` + base + `, "parameters": {"p": "` + "\xed\xa0\x80" + `"}}`,
			400, `field "parameters.p" is not valid UTF-8`},
		{"an escaped lone high surrogate", "POST", create, `{` + base + `, "name": "a\ud800b"}`, 400, `field "name" escapes half a surrogate pair (\ud800)`},
		{"an escaped lone low surrogate in a key", "POST", create, `{` + base + `, "secrets": {"\udc00": "v"}}`, 400, `a member name in "secrets" escapes half a surrogate pair (\udc00)`},
		{"a high surrogate followed by no low one", "POST", create, `{` + base + `, "name": "\ud83d\u0041"}`, 400, `escapes half a surrogate pair`},
		{"invalid UTF-8 in a member name", "POST", create, `{` + base + `, "` + "\xff" + `": 1}`, 400, `a member name is not valid UTF-8`},
		{"a bidi character in a secret key", "POST", create, `{` + base + `, "secrets": {"tok\u202eneк": "v"}}`, 400, `must not contain a bidirectional`},
		{"a NUL in a parameter key", "POST", create, `{` + base + `, "parameters": {"a\u0000b": "v"}}`, 400, `parameters key`},
		{"a zero-width character in a topology key", "POST", create, `{` + base + `, "topology": {"requisite": [{"zo\u200bne": "a"}]}}`,
			400, `topology segment key`},
		{"65 secrets", "POST", create, `{` + base + `, "secrets": {` + members("k", 65) + `}}`, 413,
			"secrets holds 65 entries, over the limit of 64 (agent flag -max-secrets)"},
		{"65 parameters", "POST", create, `{` + base + `, "parameters": {` + members("k", 65) + `}}`, 413,
			"parameters holds 65 entries, over the limit of 64 (agent flag -max-parameters)"},
		{"65 topology segments over two topologies", "POST", create,
			`{` + base + `, "topology": {"requisite": [{` + members("r", 40) + `}], "preferred": [{` + members("p", 25) + `}]}}`, 413,
			"topology segments holds 65 entries, over the limit of 64 (agent flag -max-topology-segments)"},
		{"33 mount flags", "POST", create, `{` + base + `, "mount_options": {"mount_flags": [` + strings.Repeat(`"ro",`, 32) + `"ro"]}}`, 413,
			"mount_options.mount_flags holds 33 entries, over the limit of 32 (agent flag -max-mount-flags)"},
		{"a snapshot with 65 secrets", "POST", "/v1/snapshots", `{"volume_id": "db", "name": "s", "secrets": {` + members("k", 65) + `}}`, 413, "-max-secrets"},
		{"a snapshot deletion with a bidi secret key", "DELETE", "/v1/snapshots/hostpath/s1", `{"secrets": {"a\u2066b": "v"}}`, 400, "secrets key"},
		{"a volume registration with 65 topology segments", "POST", "/v1/volumes",
			`{"id": "db", "namespace": "default", "plugin_id": "hostpath", "access_mode": "single-node-writer", "attachment_mode": "file-system", "topologies": [{` + members("t", 65) + `}]}`,
			413, "topologies segments holds 65 entries"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := f.do(c.method, c.path, c.body)
			require.Equal(t, c.status, code, body)
			require.Contains(t, errorOf(t, body), c.want)
			require.NotContains(t, body, "\ufffd", "nothing is turned into U+FFFD")
			stubs, err := f.cat.ListVolumes(context.Background(), "")
			require.NoError(t, err)
			require.Empty(t, stubs, "nothing changed")
		})
	}
}

func TestTextThatIsValidUTF8PassesStrictDecoding(t *testing.T) {
	f := newAPIFixture(t)
	for _, body := range []string{`{"id": "db", "namespace": "default", "plugin_id": "p\ud83d\ude00", "access_mode": "x", "attachment_mode": "file-system"}`,
		`{"id": "db", "namespace": "default", "plugin_id": "plugé", "access_mode": "x\\u0041", "attachment_mode": "file-system",
		  "topologies": [{"topology.kubernetes.io/zone": "a"}]}`} {
		_, got := f.do("POST", "/v1/volumes", body)
		require.NotContains(t, errorOf(t, got), "UTF-8")
		require.NotContains(t, errorOf(t, got), "surrogate")
	}
}

func TestNegativeBodyLimitsAreRefusedNamingTheFlag(t *testing.T) {
	require.NoError(t, api.Limits{}.Validate())
	err := api.Limits{Secrets: -1, MountFlags: -2}.Validate()
	require.ErrorContains(t, err, "-max-secrets is -1")
	require.ErrorContains(t, err, "-max-mount-flags is -2")
}

// TestThePluginsPerTypeLimitAnswers429AndChangesNothing: the limit is a
// limit (429, as documented), not a bad request (issue 23).
func TestThePluginsPerTypeLimitAnswers429AndChangesNothing(t *testing.T) {
	system := probe.NewSystem(t)
	mem, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(t, err)
	reg, err := registry.New(system, registry.Config{Bucket: mem, Logger: probe.Logger(t), Limits: registry.Limits{PluginsPerType: 1}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, reg.Shutdown()) })
	h := (&api.Server{Registry: reg}).Handler()
	require.Equal(t, http.StatusOK, serve(t, h, request{method: "POST", path: "/v1/plugins", body: registerBody("first", "a1")}).status)
	before := reg.ListPlugins("")

	got := serve(t, h, request{method: "POST", path: "/v1/plugins", body: registerBody("second", "a2")})
	require.Equal(t, http.StatusTooManyRequests, got.status, got.body)
	require.Contains(t, got.error(t), "-max-plugins-per-type")
	require.Equal(t, before, reg.ListPlugins(""), "nothing changed")
}
