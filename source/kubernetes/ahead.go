package kubernetes

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/informer-go/informer"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// This file holds what the Source does about a resourceVersion the server has not
// reached: the revision of a saved state restored into an informer (Options.Persist of
// the informer) after the cluster's etcd was restored from an older backup. The cluster
// keeps its identity, so SourceID cannot tell. Left alone, a watch from such a revision
// waits forever on either kind of apiserver (with or without its watch cache) and the
// changes made since the backup never arrive; a list from it waits, with the watch
// cache, about 40 s for a "Too large resource version" error.

// saw records that the server has shown the Source resourceVersion rev (a list's, an
// event's or a bookmark's). A revision that is not a decimal integer is ignored.
func (s *Source[V]) saw(rev string) {
	n, err := strconv.ParseUint(rev, 10, 64)
	if err != nil {
		return
	}
	for {
		old := s.seen.Load()
		if n <= old || s.seen.CompareAndSwap(old, n) {
			return
		}
	}
}

// checkReached makes sure, before a watch from rev, that the server has reached rev,
// when the Source has never seen the server at rev or later: rev then comes from
// elsewhere, a restored state. It costs one list of one object (the current
// resourceVersion, a consistent read) per such revision; a watch from a revision the
// server has shown the Source, as every watch of a running informer is, costs nothing.
// If the server is behind rev, it returns an error that matches informer.ErrBadInput
// (the informer reports it and lists again) and remembers rev, so that the list from rev
// that follows fails at once as expired rather than after the server's wait.
func (s *Source[V]) checkReached(ctx context.Context, rev string) error {
	n, err := strconv.ParseUint(rev, 10, 64)
	if err != nil || n <= s.seen.Load() {
		return nil
	}
	_, meta, err := s.list(ctx, metav1.ListOptions{Limit: 1}) // resourceVersion "": the current one
	if err != nil {
		return s.errorf("watch", fmt.Errorf("checking that the server has reached resourceVersion %s: %w", rev, err))
	}
	cur := meta.GetResourceVersion()
	c, err := strconv.ParseUint(cur, 10, 64)
	if err != nil {
		return nil // not an integer: nothing to compare, watch as asked
	}
	s.saw(cur)
	if n <= c {
		return nil
	}
	s.ahead.Store(&rev)
	return fmt.Errorf("kubernetes: watch %s: %w: resourceVersion %s is ahead of the server's current %s: "+
		"the server is behind the snapshot the informer resumes from (its etcd restored from an older backup?); listing afresh",
		s.resource, informer.ErrBadInput, rev, cur)
}

// aheadError returns the error of a list from rev if checkReached found the server behind
// rev and the server has shown nothing as new since; nil otherwise.
func (s *Source[V]) aheadError(rev string) error {
	a := s.ahead.Load()
	if a == nil || *a != rev {
		return nil
	}
	if n, err := strconv.ParseUint(rev, 10, 64); err != nil || n <= s.seen.Load() {
		return nil
	}
	return fmt.Errorf("kubernetes: list %s: %w: resourceVersion %s is ahead of the server (found before the watch from it); listing the current state",
		s.resource, informer.ErrExpired, rev)
}

// tooLarge classifies a "Too large resource version" answer (the server has not reached
// the resourceVersion asked for), or returns nil for any other error. From a list it
// matches informer.ErrExpired: the informer lists the current state instead, as after a
// compaction. From a watch it matches informer.ErrBadInput: the informer reports that the
// server is behind and lists again.
func (s *Source[V]) tooLarge(op string, err error) error {
	if !isTooLargeResourceVersion(err) {
		return nil
	}
	if op == "list" {
		return fmt.Errorf("kubernetes: list %s: %w: the server has not reached the resourceVersion asked for: %w", s.resource, informer.ErrExpired, err)
	}
	return fmt.Errorf("kubernetes: %s %s: %w: the server is behind the resourceVersion the watch starts from (its etcd restored from an older backup?); listing afresh: %w",
		op, s.resource, informer.ErrBadInput, err)
}

// isTooLargeResourceVersion reports whether err is the apiserver's "Too large resource
// version" timeout: by its cause, or by its message for servers older than 1.19, which
// set no cause.
func isTooLargeResourceVersion(err error) bool {
	if apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		return true
	}
	return apierrors.IsTimeout(err) && strings.Contains(err.Error(), "Too large resource version")
}
