package fleet

// Abandon stops s the way a crashed node stops: the lease is no longer
// kept alive but not revoked, so etcd counts the node down only once the
// lease expires. Close after it returns nil and does nothing.
func Abandon(s *Store) {
	s.closeOnce.Do(func() {
		s.lease.stop()
		s.closeErr = s.client.Close()
	})
}
