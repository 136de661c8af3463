package fleet

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

const fuzzKey = "/plugvisor/volumes/default/db"

// testKeyring is a keyring of new random keys with ids, the first primary.
func testKeyring(t testing.TB, ids ...string) *Keyring {
	t.Helper()
	var text strings.Builder
	for _, id := range ids {
		key := make([]byte, KeySize)
		_, _ = rand.Read(key)
		fmt.Fprintf(&text, "%s %s\n", id, base64.StdEncoding.EncodeToString(key))
	}
	k, err := parseKeyring("test", []byte(text.String()))
	require.NoError(t, err)
	return k
}

// FuzzDecodeRecord feeds the record decoder any bytes, with and without a
// keyring: it never panics, a record it accepts encodes back to a record
// that decodes the same, and a record it refuses is corruption naming the
// key.
func FuzzDecodeRecord(f *testing.F) {
	codecs := []codec{{}, {keyring: testKeyring(f, "k1")}}
	for _, c := range codecs {
		good, err := c.encode(fuzzKey, &messages.CatalogVolume{Id: "db", Namespace: "default", PluginId: "ebs"})
		require.NoError(f, err)
		f.Add([]byte(good), c.keyring != nil)
		f.Add([]byte(good)[:len(good)-1], c.keyring != nil)
	}
	f.Add([]byte{}, false)
	f.Add([]byte{0, 0, 0, 0}, true)
	f.Add([]byte("PVS1\x02k1"), true)
	f.Fuzz(func(t *testing.T, value []byte, sealing bool) {
		c := codecs[0]
		if sealing {
			c = codecs[1]
		}
		var m messages.CatalogVolume
		err := c.decode(fuzzKey, value, &m)
		if err != nil {
			require.ErrorIs(t, err, model.ErrCorrupt)
			require.Contains(t, err.Error(), fuzzKey)
			return
		}
		again, err := c.encode(fuzzKey, &m)
		require.NoError(t, err)
		var back messages.CatalogVolume
		require.NoError(t, c.decode(fuzzKey, []byte(again), &back))
		require.True(t, proto.Equal(&m, &back))
	})
}

// TestARecordIsBoundToItsKeyAndItsBytes: with a checksum or sealed, a
// record with a flipped bit, one copied under another key, and one cut
// short are corruption naming the key.
func TestARecordIsBoundToItsKeyAndItsBytes(t *testing.T) {
	for name, c := range map[string]codec{"checksummed": {}, "sealed": {keyring: testKeyring(t, "k1")}} {
		t.Run(name, func(t *testing.T) {
			good, err := c.encode(fuzzKey, &messages.CatalogVolume{Id: "db", Namespace: "default", PluginId: "ebs"})
			require.NoError(t, err)
			flipped := []byte(good)
			flipped[len(flipped)-1] ^= 1
			for _, tt := range []struct {
				name  string
				key   string
				value []byte
			}{
				{"a flipped bit", fuzzKey, flipped},
				{"the record under another key", "/plugvisor/volumes/default/other", []byte(good)},
				{"a value cut short", fuzzKey, []byte(good)[:5]},
			} {
				var m messages.CatalogVolume
				err := c.decode(tt.key, tt.value, &m)
				require.ErrorIs(t, err, model.ErrCorrupt, tt.name)
				require.Contains(t, err.Error(), tt.key, tt.name)
			}
			var m messages.CatalogVolume
			require.NoError(t, c.decode(fuzzKey, []byte(good), &m))
			require.Equal(t, "ebs", m.GetPluginId())
		})
	}
}

// TestASealedRecordHidesItsSecretsAndRefusesWhatTheKeyringDidNotSeal:
// sealed, a volume's secrets do not show in its bytes; a record sealed
// with another keyring, or only checksummed (as anything with etcd's
// credentials but not the keyring could write it: before, the unkeyed
// checksum let a forged claim through), is refused as unsealed; an older
// key of the keyring still opens what it sealed; a checksummed record is
// read while a fleet moves to a keyring (acceptPlain), and an agent
// without the keyring names the flag it lacks.
func TestASealedRecordHidesItsSecretsAndRefusesWhatTheKeyringDidNotSeal(t *testing.T) {
	vol := &messages.CatalogVolume{Id: "db", Namespace: "default", PluginId: "ebs", Secrets: map[string]string{"password": "hunter2-hunter2"}}
	old := testKeyring(t, "k1")
	sealedValue, err := codec{keyring: old}.encode(fuzzKey, vol)
	require.NoError(t, err)
	require.NotContains(t, sealedValue, "hunter2")
	plain, err := codec{}.encode(fuzzKey, vol)
	require.NoError(t, err)
	require.Contains(t, plain, "hunter2", "without a keyring, a record holds its secrets as they are")

	var m messages.CatalogVolume
	err = codec{keyring: testKeyring(t, "k1")}.decode(fuzzKey, []byte(sealedValue), &m)
	require.ErrorIs(t, err, ErrUnsealed, "the same key ID with other bytes")
	err = codec{keyring: testKeyring(t, "k9")}.decode(fuzzKey, []byte(sealedValue), &m)
	require.ErrorIs(t, err, ErrUnsealed)
	require.ErrorContains(t, err, `sealed with key "k1", which this agent's keyring lacks`)
	err = codec{keyring: old}.decode(fuzzKey, []byte(plain), &m)
	require.ErrorIs(t, err, ErrUnsealed)
	require.ErrorContains(t, err, "plugvisor keyring rotate")
	require.NoError(t, codec{keyring: old, acceptPlain: true}.decode(fuzzKey, []byte(plain), &m))

	rotated := &Keyring{ids: append([]string{"k2"}, old.ids...), keys: old.keys, macs: old.macs}
	fresh := testKeyring(t, "k2")
	rotated.keys["k2"], rotated.macs["k2"] = fresh.keys["k2"], fresh.macs["k2"]
	require.NoError(t, codec{keyring: rotated}.decode(fuzzKey, []byte(sealedValue), &m))
	require.Equal(t, "hunter2-hunter2", m.GetSecrets()["password"])
	again, err := codec{keyring: rotated}.encode(fuzzKey, &m)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(again, "PVS1\x02k2"), "a new record is sealed with the primary")

	err = codec{}.decode(fuzzKey, []byte(sealedValue), &m)
	require.ErrorIs(t, err, model.ErrCorrupt)
	require.ErrorContains(t, err, "-cluster-keyring")
}
