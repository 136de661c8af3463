package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/plugvisor/plugvisor/api"
)

// registerBatch registers the volumes that file lists
// as a JSON array of api.VolumeBody, all or none: POST /v1/volumes:batch.
// A volume without a namespace gets -namespace. It is refused before any
// request with -id, -plugin or the modes' flags (they describe one volume),
// and when the file is not such a list.
func registerBatch(cmd *cobra.Command, vf *volumeFlags, file string) error {
	for _, name := range []string{"id", "plugin", "access-mode", "attachment-mode", "capability", "topology"} {
		if cmd.Flags().Changed(name) {
			return usageError("-f FILE describes the volumes: leave -%s out", name)
		}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return usageError("-f: %v", err)
	}
	body := api.VolumeBatchBody{}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body.Volumes); err != nil {
		return usageError("-f %s: not a JSON list of volumes (each as POST /v1/volumes takes it: id, plugin_id, access_mode ...): %v", file, err)
	}
	for i := range body.Volumes {
		if body.Volumes[i].Namespace == "" {
			body.Volumes[i].Namespace = vf.namespace
		}
	}
	var out struct {
		Volumes []api.VolumeJSON `json:"volumes"`
	}
	if err := vf.callShowing(cmd, "registering "+count(len(body.Volumes), "volume"), "POST", "/v1/volumes:batch", nil, body, &out); err != nil {
		return err
	}
	stdout := cmd.OutOrStdout()
	if vf.common.json {
		return printJSON(stdout, out)
	}
	for _, v := range out.Volumes {
		fmt.Fprintf(stdout, "registered volume %s/%s on plugin %s\n", v.Namespace, v.ID, v.PluginID)
	}
	return nil
}

// deregisterBatch forgets the volumes ids of -namespace, all or none:
// POST /v1/volumes:deregister.
func deregisterBatch(cmd *cobra.Command, vf *volumeFlags, ids []string) error {
	body := api.DeregisterBatchBody{Namespace: vf.namespace, VolumeIDs: ids}
	var out struct {
		Deregistered []string `json:"deregistered"`
		Namespace    string   `json:"namespace"`
	}
	what := fmt.Sprintf("deregistering volumes %s of namespace %s", strings.Join(ids, ", "), vf.namespace)
	if err := vf.callShowing(cmd, what, "POST", "/v1/volumes:deregister", nil, body, &out); err != nil {
		return err
	}
	stdout := cmd.OutOrStdout()
	if vf.common.json {
		return printJSON(stdout, out)
	}
	for _, id := range out.Deregistered {
		fmt.Fprintf(stdout, "deregistered volume %s/%s (left on its plugin)\n", out.Namespace, id)
	}
	return nil
}
