package api

import (
	"cmp"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// requireBatchVerdict fails unless the batch check accepted exactly the
// batches of 1 to model.MaxBatch volumes that name no (namespace, ID)
// twice, and refused the others as ErrInvalid naming the volumes field.
func requireBatchVerdict(t *testing.T, keys [][2]string, err error) {
	t.Helper()
	seen := map[[2]string]bool{}
	good := len(keys) > 0 && len(keys) <= model.MaxBatch
	for _, k := range keys {
		good = good && !seen[k]
		seen[k] = true
	}
	switch {
	case good && err != nil:
		t.Fatalf("a good batch of %d was refused: %v", len(keys), err)
	case !good && err == nil:
		t.Fatalf("a bad batch of %d was taken: %v", len(keys), keys)
	case err != nil && (!errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), "volumes")):
		t.Fatalf("a bad batch's refusal is not ErrInvalid naming volumes: %v", err)
	}
}

// FuzzDecodeVolumeBatchBody: POST /v1/volumes:batch. A body is refused as
// bad or round-trips, and its batch check takes exactly the batches of 1
// to MaxBatch distinct volumes.
func FuzzDecodeVolumeBatchBody(f *testing.F) {
	fuzzBody(f, func(t *testing.T, b *VolumeBatchBody) {
		named := make([]*model.CSIVolume, len(b.Volumes))
		keys := make([][2]string, len(b.Volumes))
		for i, v := range b.Volumes {
			named[i] = &model.CSIVolume{ID: v.ID, Namespace: v.Namespace}
			keys[i] = [2]string{cmp.Or(v.Namespace, model.DefaultNamespace), v.ID}
		}
		requireBatchVerdict(t, keys, model.CheckRegisterBatch(named))
	},
		`{"volumes":[{"id":"a","plugin_id":"hp","access_mode":"single-node-writer"},{"id":"b","plugin_id":"hp","access_mode":"single-node-writer"}]}`,
		`{"volumes":[{"id":"a"},{"id":"a","namespace":"default"}]}`,
		`{"volumes":[]}`, `{"volumes":null}`, `{"volumes":[null]}`)
}

// FuzzDecodeDeregisterBatchBody: POST /v1/volumes:deregister, as
// FuzzDecodeVolumeBatchBody.
func FuzzDecodeDeregisterBatchBody(f *testing.F) {
	fuzzBody(f, func(t *testing.T, b *DeregisterBatchBody) {
		keys := make([][2]string, len(b.VolumeIDs))
		for i, id := range b.VolumeIDs {
			keys[i] = [2]string{cmp.Or(b.Namespace, model.DefaultNamespace), id}
		}
		requireBatchVerdict(t, keys, model.CheckDeregisterBatch(b.Namespace, b.VolumeIDs))
	},
		`{"namespace":"prod","volume_ids":["a","b"]}`, `{"volume_ids":["a","a"]}`, `{"volume_ids":[]}`,
		`{"volume_ids":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q","r","s","t","u","v","w","x","y","z"]}`)
}

// FuzzDecodeExpectBody: PUT /v1/csi/plugins/{name}/expect. A body is
// refused as bad or round-trips; its counts are taken exactly from 0 to
// model.MaxExpected, and a refusal names the field.
func FuzzDecodeExpectBody(f *testing.F) {
	fuzzBody(f, func(t *testing.T, b *ExpectBody) {
		err := model.CheckExpectation("hp", b.Nodes, b.Controllers)
		in := func(n int) bool { return n >= 0 && n <= model.MaxExpected }
		switch good := in(b.Nodes) && in(b.Controllers); {
		case good && err != nil:
			t.Fatalf("good counts %+v refused: %v", b, err)
		case !good && err == nil:
			t.Fatalf("bad counts %+v taken", b)
		case err != nil && !strings.Contains(err.Error(), "nodes is") && !strings.Contains(err.Error(), "controllers is"):
			t.Fatalf("the refusal of %+v names no field: %v", b, err)
		}
	},
		`{"nodes":3,"controllers":1}`, `{"nodes":-1}`, `{"controllers":100001}`, `{"nodes":1e3}`, `{"nodes":"3"}`)
}

// FuzzMountGroup: mount_group in a mount's body. Whatever the string, the
// body decodes, and the check takes exactly the empty string and the
// decimal GIDs from 0 to volumes.MaxMountGroup written without a sign or
// a leading zero.
func FuzzMountGroup(f *testing.F) {
	for _, s := range []string{"", "0", "1000", "4294967294", "4294967295", "-1", "007", "+5", "1e3", " 1", "٣", "18446744073709551616"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, group string) {
		raw, err := json.Marshal(map[string]string{"alloc_id": "a1", "mount_group": group})
		if err != nil {
			t.Fatal(err)
		}
		var body AllocBody
		w, r := request(string(raw))
		if err := decodeBody(w, r, &body, false); err != nil {
			requireBadBodyOrLimit(t, err)
			return
		}
		good := body.MountGroup == "" || isGID(body.MountGroup)
		switch err := volumes.CheckMountGroup(body.MountGroup); {
		case good && err != nil:
			t.Fatalf("mount group %q refused: %v", body.MountGroup, err)
		case !good && err == nil:
			t.Fatalf("mount group %q taken", body.MountGroup)
		case err != nil && !strings.Contains(err.Error(), "mount_group"):
			t.Fatalf("the refusal of %q names no field: %v", body.MountGroup, err)
		}
	})
}

// isGID reports whether s is a GID in decimal, from 0 to
// volumes.MaxMountGroup, without a sign or a leading zero.
func isGID(s string) bool {
	if s == "" || len(s) > 10 || s[0] == '0' && s != "0" {
		return false
	}
	var n uint64
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
		n = n*10 + uint64(r-'0')
	}
	return n <= volumes.MaxMountGroup
}
