package member

// Crash stops the member as a kill -9 would, as far as the cluster sees:
// its membership lease is not revoked, so the others see it leave only
// when the lease expires, and its remote stops answering at once. (Its
// fleet.Store closes normally: the node leaves the health counts at once.)
func (m *Member) Crash() {
	m.stopped.Do(func() {
		m.endRejoins()
		inc := m.latest.Load()
		inc.stopOnce.Do(func() {
			inc.provider.abandon()
			inc.stopCluster()
		})
		if s := m.store.Load(); s != nil {
			_ = s.Close()
		}
		m.router.sending.Wait()
	})
}
