package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/plugvisor/plugvisor/messages"
)

// printNode prints the node record of a volume status (api.StatusJSON.Node:
// a messages.VolumeRecord as the API renders it) as aligned fields, one a
// line: the attachment, the stage, each publish, a pending expansion and the
// plugin's condition. A record it cannot read is printed as it came.
func printNode(w io.Writer, node json.RawMessage) error {
	if len(node) == 0 || string(node) == "null" {
		_, err := fmt.Fprintln(w, "  on this node: nothing")
		return err
	}
	var rec messages.VolumeRecord
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(node, &rec); err != nil {
		_, err := fmt.Fprintf(w, "  on this node: %s\n", node)
		return err
	}
	fmt.Fprintln(w, "  on this node:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	field := func(name string, parts ...string) {
		fmt.Fprintf(tw, "    %s:\t%s\n", name, strings.Join(slices.DeleteFunc(parts, func(p string) bool { return p == "" }), ", "))
	}
	if a := rec.GetAttachment(); a != nil {
		field("attachment", a.GetState(), orEmpty("plugin node ID ", a.GetNodeId()), orEmpty("last error: ", a.GetLastError()))
	} else {
		field("attachment", "none")
	}
	if s := rec.GetStage(); s != nil {
		field("stage", s.GetState(), orEmpty("at ", s.GetStagingPath()), orEmpty("last error: ", s.GetLastError()))
	} else {
		field("stage", "none")
	}
	pubs := rec.GetPublishes()
	if len(pubs) == 0 {
		field("publishes", "none")
	}
	for _, alloc := range slices.Sorted(maps.Keys(pubs)) {
		p := pubs[alloc]
		field("publish "+alloc, p.GetState(), orEmpty("at ", p.GetTargetPath()),
			map[bool]string{true: "read-only", false: "read-write"}[p.GetReadOnly()],
			orEmpty("last error: ", p.GetLastError()), orEmpty("fenced: ", p.GetFence()))
	}
	if n := rec.GetPendingExpandBytes(); n > 0 {
		field("pending expansion", fmt.Sprintf("to %d bytes", n), orEmpty("last error: ", rec.GetPendingExpandError()))
	}
	if c := rec.GetCondition(); c != "" {
		field("condition", c)
	}
	return tw.Flush()
}
