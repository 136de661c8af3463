package csi

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// retried are the RPCs a client sends again when they fail UNAVAILABLE:
// they ask nothing of the plugin, and they are the first calls of a mount
// and of each step of the way out. After the plugin restarted on its
// socket, the connection may still hold the old transport, which answers
// EOF once.
var retried = map[string]bool{
	"/csi.v1.Node/NodeGetCapabilities": true,
	"/csi.v1.Identity/GetPluginInfo":   true,
}

// retryAttempts is how many times in all a retried RPC is sent, and
// retryBackoff the wait before the second attempt, doubled before each
// later one.
const (
	retryAttempts = 3
	retryBackoff  = 50 * time.Millisecond
)

// retryUnavailable sends an RPC of retried again while it fails
// UNAVAILABLE, up to retryAttempts in all, and returns the last answer as
// the plugin gave it. (gRPC's own retry policy would wrap the last error
// in its own words, and they would reach the fingerprint's health.)
func retryUnavailable(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if !retried[method] {
		return err
	}
	wait := retryBackoff
	for attempt := 1; attempt < retryAttempts && status.Code(err) == codes.Unavailable; attempt++ {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait *= 2
		err = invoker(ctx, method, req, reply, cc, opts...)
	}
	return err
}
