package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/plugvisor/plugvisor/api"
	cmdline "github.com/plugvisor/plugvisor/internal/cli"
)

const nodeLong = `The nodes of a fleet (agents in cluster mode), as "nomad node status" and
"nomad node drain" show and drain them. "list" shows every node the fleet
knows: up or down, its lease, whether it drains, and the claims and
attachments it holds. "drain" makes a node refuse new claims, then waits
while its allocs release theirs; past -deadline, -force frees what is left.
"eligibility -enable" ends a drain. Any agent of the fleet answers for
every node.`

const nodeExample = `  plugvisor node list
  plugvisor node drain -deadline 10m n2
  plugvisor node drain -deadline 1m -force n2
  plugvisor node eligibility -enable n2`

// drainPoll is how often a drain looks at the node's claims.
var drainPoll = 250 * time.Millisecond

func newNodeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "node",
		Short:   "list, drain and make eligible the nodes of a fleet (cluster mode)",
		Long:    nodeLong,
		Example: nodeExample,
	}
	cmd.AddCommand(newNodeListCmd(), newNodeDrainCmd(), newNodeEligibilityCmd())
	return cmd
}

// nodeLeaf returns a node command with the common flags.
func nodeLeaf(cmd *cobra.Command) (*cobra.Command, *commonFlags) {
	common := &commonFlags{}
	common.register(cmd.Flags())
	return cmd, common
}

func newNodeListCmd() *cobra.Command {
	cmd, common := nodeLeaf(&cobra.Command{
		Use:     "list",
		Short:   "every node of the fleet: up or down, lease, drain, claims and attachments",
		Example: "  plugvisor node list\n  plugvisor node list -json",
		Args:    cmdline.Args("", "plugvisor node list"),
	})
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		nodes, err := listNodes(cmd.Context(), newClient(common.dataDir))
		if err != nil {
			return err
		}
		if common.json {
			return printJSON(cmd.OutOrStdout(), map[string]any{"nodes": nodes})
		}
		return nodeTable(cmd.OutOrStdout(), nodes)
	}
	return cmd
}

func listNodes(ctx context.Context, c *client) ([]api.NodeJSON, error) {
	var out struct {
		Nodes []api.NodeJSON `json:"nodes"`
	}
	err := c.call(ctx, "GET", "/v1/fleet/nodes", nil, nil, &out)
	return out.Nodes, err
}

func nodeTable(w io.Writer, nodes []api.NodeJSON) error {
	if len(nodes) == 0 {
		fmt.Fprintln(w, "no nodes in the fleet")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATUS\tLEASE\tELIGIBILITY\tCLAIMS\tATTACHMENTS")
	for _, n := range nodes {
		status, lease, eligibility := "down", "none", "eligible"
		if n.Up {
			status, lease = "up", fmt.Sprintf("%s (%ds left)", n.LeaseID, n.LeaseTTLSeconds)
		}
		if n.Draining {
			eligibility = "draining since " + n.DrainingSince.Format(time.RFC3339)
		}
		var attached []string
		for _, a := range n.Attachments {
			attached = append(attached, fmt.Sprintf("%s/%s (%s)", a.Namespace, a.VolumeID, a.State))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.ID, status, lease, eligibility, claimsText(n.Claims), orNone(attached))
	}
	return tw.Flush()
}

// claimsText names each claim: "web-1 on default/db (write)".
func claimsText(claims []api.NodeClaimJSON) string {
	var out []string
	for _, c := range claims {
		out = append(out, fmt.Sprintf("%s on %s/%s (%s)", c.AllocID, c.Namespace, c.VolumeID, c.Mode))
	}
	return orNone(out)
}

func nodePath(node, action string) string {
	return "/v1/fleet/nodes/" + url.PathEscape(node) + "/" + action
}

func newNodeDrainCmd() *cobra.Command {
	var deadline time.Duration
	var force bool
	cmd, common := nodeLeaf(&cobra.Command{
		Use:   "drain NODE",
		Short: "refuse new claims on a node, and wait while its allocs release theirs",
		Long: `Drains a node: from now on the fleet refuses every new claim of its allocs
(in the claim's own transaction, so no claim slips past), and this command
waits, showing the claims left, until the node holds none. Past -deadline
it fails and the node stays draining; with -force it frees the claims left
instead, as the GC frees a dead node's. A node draining already is drained
on: the command waits (and frees with -force) from now, as the remedy of
a drain past its deadline is the same drain with -force. An unknown node
is refused and nothing changes. "node eligibility -enable" ends the
drain.`,
		Example: "  plugvisor node drain n2\n  plugvisor node drain -deadline 5m -force n2",
		Args:    cmdline.Args("NODE", "plugvisor node drain -deadline 10m n2"),
	})
	cmd.Flags().DurationVar(&deadline, "deadline", time.Hour, "how long to wait for the node's allocs to release their claims")
	cmd.Flags().BoolVar(&force, "force", false, "past the deadline, free the claims left")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if deadline <= 0 {
			return usageError("-deadline is %v: give a positive duration, e.g. -deadline 10m", deadline)
		}
		return nodeDrain(cmd.Context(), newClient(common.dataDir), *common, args[0], deadline, force, cmd.OutOrStdout())
	}
	return cmd
}

// nodeDrain begins the drain of node, then waits for its claims to go.
func nodeDrain(ctx context.Context, c *client, common commonFlags, node string, deadline time.Duration, force bool, stdout io.Writer) error {
	start := time.Now()
	err := c.call(ctx, "POST", nodePath(node, "drain"), nil, nil, nil)
	switch {
	case isStatus(err, http.StatusConflict) && drainingAlready(ctx, c, node): // drain on
		if !common.json {
			fmt.Fprintf(stdout, "node %s was draining already: new claims on it are refused\n", node)
		}
	case err != nil:
		return err
	case !common.json:
		fmt.Fprintf(stdout, "node %s is draining: new claims on it are refused\n", node)
	}
	last := ""
	for {
		n, err := nodeNamed(ctx, c, node)
		if err != nil {
			return err
		}
		if len(n.Claims) == 0 {
			if common.json {
				return printJSON(stdout, n)
			}
			fmt.Fprintf(stdout, "node %s is drained: no claims left (%s)\n", node, time.Since(start).Round(time.Millisecond))
			return nil
		}
		if left := claimsText(n.Claims); left != last && !common.json {
			fmt.Fprintf(stdout, "node %s: claims left (%d): %s\n", node, len(n.Claims), left)
			last = left
		}
		if time.Since(start) >= deadline {
			return drainPastDeadline(ctx, c, common, n, deadline, force, stdout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(drainPoll):
		}
	}
}

// drainPastDeadline frees the claims left on n with force, else fails
// saying what is left and what to do.
func drainPastDeadline(ctx context.Context, c *client, common commonFlags, n *api.NodeJSON, deadline time.Duration, force bool, stdout io.Writer) error {
	if !force {
		return fmt.Errorf("node %s: the deadline of %v passed with claims left (%d): %s; the node stays draining: run the drain again with -force to free them, or plugvisor node eligibility -enable %s to end it",
			n.ID, deadline, len(n.Claims), claimsText(n.Claims), n.ID)
	}
	var out struct {
		Freed []api.FreedJSON `json:"freed"`
	}
	if err := c.call(ctx, "POST", nodePath(n.ID, "free-claims"), nil, nil, &out); err != nil {
		return err
	}
	if common.json {
		return printJSON(stdout, out)
	}
	var freed []string
	for _, f := range out.Freed {
		freed = append(freed, fmt.Sprintf("%s on %s/%s", f.AllocID, f.Namespace, f.VolumeID))
	}
	fmt.Fprintf(stdout, "node %s: the deadline of %v passed: claims freed by force (%d): %s\n", n.ID, deadline, len(freed), orNone(freed))
	return nil
}

// drainingAlready reports whether node is draining, for a drain refused
// 409: only then is the refusal "draining already", and the drain goes on.
func drainingAlready(ctx context.Context, c *client, node string) bool {
	n, err := nodeNamed(ctx, c, node)
	return err == nil && n.Draining
}

// nodeNamed is the node of the fleet with that ID.
func nodeNamed(ctx context.Context, c *client, node string) (*api.NodeJSON, error) {
	nodes, err := listNodes(ctx, c)
	if err != nil {
		return nil, err
	}
	for i := range nodes {
		if nodes[i].ID == node {
			return &nodes[i], nil
		}
	}
	return nil, fmt.Errorf("node %s is gone from the fleet", node)
}

func newNodeEligibilityCmd() *cobra.Command {
	var enable, disable bool
	cmd, common := nodeLeaf(&cobra.Command{
		Use:   "eligibility NODE -enable|-disable",
		Short: "end a node's drain (-enable), or refuse new claims on it without waiting (-disable)",
		Example: `  plugvisor node eligibility -enable n2
  plugvisor node eligibility -disable n2`,
		Args: cmdline.Args("NODE", "plugvisor node eligibility -enable n2"),
	})
	cmd.Flags().BoolVar(&enable, "enable", false, "the node takes new claims again")
	cmd.Flags().BoolVar(&disable, "disable", false, "the node refuses new claims (a drain that does not wait)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if enable == disable {
			return usageError("give one of -enable or -disable")
		}
		c, node, stdout := newClient(common.dataDir), args[0], cmd.OutOrStdout()
		if disable {
			var n api.NodeJSON
			if err := c.call(cmd.Context(), "POST", nodePath(node, "drain"), nil, nil, &n); err != nil {
				return err
			}
			return printOr(stdout, *common, n, "node %s is ineligible: new claims on it are refused\n", node)
		}
		var out struct {
			NodeID      string `json:"node_id"`
			WasDraining bool   `json:"was_draining"`
		}
		if err := c.call(cmd.Context(), "POST", nodePath(node, "eligible"), nil, nil, &out); err != nil {
			return err
		}
		if !out.WasDraining {
			return printOr(stdout, *common, out, "node %s was eligible already: nothing changed\n", node)
		}
		return printOr(stdout, *common, out, "node %s is eligible: it takes new claims again\n", node)
	}
	return cmd
}

// printOr prints v as JSON under -json, else the line format says.
func printOr(w io.Writer, common commonFlags, v any, format string, args ...any) error {
	if common.json {
		return printJSON(w, v)
	}
	_, err := fmt.Fprintf(w, format, args...)
	return err
}
