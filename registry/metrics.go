package registry

import "time"

// Metrics receives the registry's measurements; the agent plugs Prometheus
// in. Its methods are called on the registry actor's goroutine and must not
// block.
type Metrics interface {
	// Write counts one answered register or deregister (op), its error,
	// and how long it took from arriving at the actor to its answer
	// (durable write included); 0 for a write refused before it arrived
	// (one left in the inbox when the actor stopped).
	Write(op string, err error, took time.Duration)
	// Batch records how many writes went to disk in one transaction.
	Batch(writes int)
	// EventsSent counts events handed to subscribers.
	EventsSent(n int)
	// Subscribers records how many subscribers there are now.
	Subscribers(n int)
}

type noMetrics struct{}

func (noMetrics) Write(string, error, time.Duration) {}
func (noMetrics) Batch(int)                          {}
func (noMetrics) EventsSent(int)                     {}
func (noMetrics) Subscribers(int)                    {}
