package informer

import (
	"context"
	"errors"
	"time"
)

// Persister saves an informer's cache and gives it back at the next start: a warm restart
// that resumes the watch from the saved revision instead of listing the whole collection.
// Package persist implements it with a snapshot file; the informer itself does no file I/O.
// Set it with Options.Persist.
//
// The informer calls Load once, at the start of Run, and Save from one goroutine at a time:
// every Interval while it runs, and once more after it stopped. It only saves a state that
// is exactly the source's state at the state's revision (no change queued and not yet
// applied, none applied beyond it, no part of a transaction: see BatchedWatch), so a saved
// cache is never newer or older than one revision.
type Persister[K comparable, V any] interface {
	// Load reads the saved state described by desc, calls add with each of its objects,
	// and returns the revision the state reflects. It returns an error that matches
	// ErrNoPersistedState when nothing was saved, and any other error for a state it
	// refuses (corrupt, truncated, written for another description); add may have been
	// called before such an error, and the caller then discards what it was given.
	Load(ctx context.Context, desc PersistedCache, add func(obj V)) (revision string, err error)
	// Save replaces the saved state with state, atomically: a crash during Save leaves
	// the previous state, never a part of the new one.
	Save(ctx context.Context, desc PersistedCache, state *Snapshot[K, V]) error
	// Interval is how often the informer saves while it runs; 0 or negative means only
	// when it stops.
	Interval() time.Duration
	// Equal reports whether two states of an object are the same. When Options.Revision
	// is nil, it decides which objects of a relist changed (see Options.Persist).
	Equal(a, b V) bool
}

// PersistedCache describes the cache a Persister saves, so that a state saved by another
// configuration is refused rather than loaded wrong.
type PersistedCache struct {
	// Informer is the informer's name (Options.Name).
	Informer string
	// Type is the Go type of the objects, with its package path
	// ("*example.com/app.Host"): a state saved by an informer of another type must not be
	// decoded into this one.
	Type string
	// Source is the source's identity (SourceIdentifier), "" for a source that does not
	// implement it: a state saved from another collection (another etcd cluster or
	// prefix, another server) must not be restored, since its revision means nothing there.
	Source string
	// Indexes are the names of Options.Indexers, sorted. Indexes are rebuilt from the
	// objects when a state is loaded; the names are recorded because a Transform that
	// strips fields may have left out what a new index needs. Indexes added with
	// AddIndexers are not included.
	Indexes []string
}

// ErrNoPersistedState is what Persister.Load returns, wrapped, when no state was saved:
// the informer lists, as on a first start, and reports nothing.
var ErrNoPersistedState = errors.New("no persisted state")
