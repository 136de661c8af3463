package member

// Crash stops the member as a kill -9 would: its lease is not revoked, so
// the others see it leave only when the lease expires, and its remote stops
// answering at once.
func (m *Member) Crash() {
	m.stopped.Do(func() {
		m.provider.stop()
		m.stopCluster()
		_ = m.provider.client.Close()
	})
}
