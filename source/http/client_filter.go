package httpsource

import (
	"fmt"
	"net/url"

	"github.com/informer-go/informer/internal/wire"
)

// Filter asks a Server for the objects indexed under one value of one of its filter
// indexes (ServerOptions.Filters), as a Kubernetes label selector asks for the objects
// that carry a label: the list holds only those objects, and the watch sends only their
// changes, with an object that moves into the filter sent as ADDED and one that moves
// out of it as DELETED (carrying the last state the filter served), so that a client's
// cache is exactly the matching subset. On the wire it is the query parameters
// index=<Index>&value=<Value>. The zero Filter asks for everything.
type Filter struct {
	// Index names the filter index: one of the Server's ServerOptions.Filters. An index
	// the Server does not have is answered 400, naming the ones it has.
	Index string
	// Value is the value asked for; it may be empty (the objects indexed under "").
	Value string
}

// filterQuery adds f to the query of a Client's base URL; it fails for a value without
// an index.
func filterQuery(q url.Values, f Filter) error {
	switch {
	case f.Index == "" && f.Value == "":
		return nil
	case f.Index == "":
		return fmt.Errorf("httpsource: NewClient: Filter.Value %q without Filter.Index", f.Value)
	}
	q.Set(wire.ParamIndex, f.Index)
	q.Set(wire.ParamValue, f.Value)
	return nil
}
