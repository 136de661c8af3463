package storage

// CommitCount returns how many transactions s has committed, so tests and
// benchmarks can see Apply calls sharing commits.
func CommitCount(s *Bolt) int64 {
	return s.writes.commits.Load()
}
