package etcd

// ParkedToken returns the continue token of the page the parked list stream reads next,
// or "" if none is parked.
func ParkedToken[V any](s *Source[V]) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.parked == nil {
		return ""
	}
	return s.parked.token
}

// OpenWatches returns how many watches of s are open now.
func OpenWatches[V any](s *Source[V]) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watches
}
