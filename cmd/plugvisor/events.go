package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/plugvisor/plugvisor/api"
	cmdline "github.com/plugvisor/plugvisor/internal/cli"
)

func newEventsCmd() *cobra.Command {
	var common commonFlags
	var ptype string
	var replay bool
	cmd := &cobra.Command{
		Use:   "events",
		Short: "follow the agent's plugin events as they happen",
		Long: `Follows the agent's plugin events (registered, updated, deregistered) as they
happen, until interrupted. With -replay, the current plugins come first.`,
		Example: "  plugvisor events -type csi-node -replay\n  plugvisor events -json",
		Args:    cmdline.Args("", "plugvisor events -type csi-node -replay"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			q := url.Values{}
			if ptype != "" {
				q.Set("type", ptype)
			}
			if replay {
				q.Set("replay", "true")
			}
			resp, err := newClient(common.dataDir).do(ctx, "GET", "/v1/events", q, nil)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			return printEvents(resp.Body, cmd.OutOrStdout(), common.json)
		},
	}
	common.register(cmd.Flags())
	cmd.Flags().StringVar(&ptype, "type", "", "only events of this plugin type")
	cmd.Flags().BoolVar(&replay, "replay", false, "print the current plugins first")
	return cmd
}

// printEvents copies an NDJSON event stream to w, as JSON lines or as
// one readable line per event.
func printEvents(r io.Reader, w io.Writer, asJSON bool) error {
	lines := bufio.NewScanner(r)
	lines.Buffer(make([]byte, 64<<10), 4<<20)
	for lines.Scan() {
		if asJSON {
			fmt.Fprintln(w, lines.Text())
			continue
		}
		var ev api.Event
		if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
			return fmt.Errorf("bad event line: %w", err)
		}
		fmt.Fprintln(w, describeEvent(ev))
	}
	return nil
}

func describeEvent(ev api.Event) string {
	var body struct {
		Plugin         pluginJSON  `json:"plugin"`
		Previous       *pluginJSON `json:"previous"`
		Current        *pluginJSON `json:"current"`
		IsCurrent      bool        `json:"is_current"`
		CurrentChanged bool        `json:"current_changed"`
		Gone           bool        `json:"gone"`
	}
	_ = json.Unmarshal(ev.Event, &body)
	p := body.Plugin
	head := fmt.Sprintf("#%d %-12s %s %s alloc %s", ev.Sequence, ev.Kind, p.Type, p.Name, p.AllocID)
	switch {
	case ev.Replayed:
		return head + " (current, replayed)"
	case ev.Kind == "registered" && body.Previous != nil:
		return head + " (takes over from " + body.Previous.AllocID + ")"
	case ev.Kind == "updated":
		return fmt.Sprintf("%s (now at %s, current: %v)", head, p.address(), body.IsCurrent)
	case ev.Kind == "deregistered" && body.Gone:
		return head + " (plugin gone)"
	case ev.Kind == "deregistered" && body.CurrentChanged:
		return head + " (now current: " + body.Current.AllocID + ")"
	case ev.Kind == "deregistered":
		return head + " (current unchanged: " + body.Current.AllocID + ")"
	}
	return head
}
