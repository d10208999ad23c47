package informer

import (
	"errors"
	"fmt"
)

// This file is the typed index API a user writes: the index functions (IndexFunc,
// ValueFunc), an index's declaration (Index, IndexBy, IndexByValues) and the named set of
// them an informer is given (Indexers). The indexes themselves are in index.go.

// IndexFunc returns the values under which an object is indexed: zero, one or several
// (a multi-valued index, such as the users named in an annotation). An error is an error
// for that object: it is reported and the object is not stored.
type IndexFunc[V any] func(obj V) ([]string, error)

// ValueFunc returns the single value under which an object is indexed (its namespace, the
// value of one label). A single-valued index allocates nothing per object.
type ValueFunc[V any] func(obj V) (string, error)

// Index declares one index. Build it with IndexBy (one value per object) or IndexByValues
// (any number of values per object).
type Index[V any] struct {
	one  ValueFunc[V]
	many IndexFunc[V]
}

// IndexBy declares a single-valued index: fn returns the one value of an object.
func IndexBy[V any](fn ValueFunc[V]) Index[V] { return Index[V]{one: fn} }

// IndexByValues declares a multi-valued index: fn returns zero or more values per object.
func IndexByValues[V any](fn IndexFunc[V]) Index[V] { return Index[V]{many: fn} }

// Values returns obj's values in the index, as the cache files obj under them: the one
// value of IndexBy, or IndexByValues' values as its function returned them. A panic of
// the index function is returned as an error. It lets code outside the cache (a
// fanout.Server's filters) index objects exactly as the informer does.
func (ix Index[V]) Values(obj V) ([]string, error) { return ix.AppendValues(nil, obj) }

// AppendValues is Values appending to dst: a single-valued index allocates nothing
// beyond dst's growth.
func (ix Index[V]) AppendValues(dst []string, obj V) (out []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = dst, fmt.Errorf("index function panicked: %v", r)
		}
	}()
	switch {
	case ix.one != nil:
		v, err := ix.one(obj)
		if err != nil {
			return dst, err
		}
		return append(dst, v), nil
	case ix.many != nil:
		vs, err := ix.many(obj)
		if err != nil {
			return dst, err
		}
		return append(dst, vs...), nil
	}
	return dst, errors.New("index declared without a function")
}

// IsZero reports whether ix is the zero Index, declared without a function.
func (ix Index[V]) IsZero() bool { return ix.one == nil && ix.many == nil }

// SingleValued reports whether ix gives each object exactly one value (IndexBy).
func (ix Index[V]) SingleValued() bool { return ix.one != nil }

// Indexers names the indexes of a store.
type Indexers[V any] map[string]Index[V]
