package postgres

// PretendTimelineChanged makes s remember the server on another timeline than its own,
// as if the server had been restored or promoted since the last list, and closes the
// connection s keeps between watches, so that the next watch connects again.
func PretendTimelineChanged[V any](s *Source[V]) {
	s.mu.Lock()
	s.ident.timeline++
	st := s.parked
	s.parked = nil
	s.mu.Unlock()
	if st != nil {
		st.close()
	}
}
