// Command httpmirror mirrors your own JSON list+watch API with source/http's Client: a
// custom type (Order), a custom key (its int64 ID), an index, and read-your-writes. The
// API is a plain net/http handler written without this library (ordersAPI below), so it
// shows exactly what a service must answer; it runs on a loopback port for the example.
//
//	go run ./examples/httpmirror
//
// The API answers two requests, in the Kubernetes API's JSON shape:
//
//	GET /v1/orders                                → {"metadata":{"resourceVersion":"7"},"items":[{…},…]}
//	GET /v1/orders?watch=1&resourceVersion=7      → 200, Content-Type: application/json, then
//	                                                one line per change, as it happens:
//	                                                {"type":"MODIFIED","resourceVersion":"8","object":{…}}
//
// with type ADDED, MODIFIED or DELETED, and revisions that are decimal integers growing
// with every change (so the Client's Ordered view can compare them). See the package
// documentation of source/http for the rest of the protocol (paging, bookmarks, status
// codes), all optional for a server that does not need it.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/informer-go/informer"
	httpsource "github.com/informer-go/informer/source/http"
)

// Order is the object your API serves, as JSON.
type Order struct {
	ID       int64  `json:"id"`       // the key
	Customer string `json:"customer"` // indexed
	Status   string `json:"status"`   // e.g. open, shipped
}

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "httpmirror:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Your API, with three orders, on a loopback port.
	api := newOrdersAPI()
	api.put(&Order{ID: 1, Customer: "acme", Status: "open"})
	api.put(&Order{ID: 2, Customer: "acme", Status: "open"})
	api.put(&Order{ID: 3, Customer: "globex", Status: "open"})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /v1/orders", api)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(ln) }()
	defer func() { srv.Close(); <-served }()

	// The mirror: a Client of the collection's URL, decoding each item with
	// encoding/json into a new *Order (the default).
	client, err := httpsource.NewClient[*Order]("http://"+ln.Addr().String()+"/v1/orders", httpsource.ClientOptions[*Order]{})
	if err != nil {
		return err
	}
	// Ordered: the API's revisions are growing integers, which turns on WaitForRevision.
	inf, err := informer.New(client.Ordered(), informer.Options[int64, *Order]{
		Name: "orders",
		Key:  func(o *Order) (int64, error) { return o.ID, nil },
		Indexers: informer.Indexers[*Order]{
			"customer": informer.IndexBy(func(o *Order) (string, error) { return o.Customer, nil }),
		},
		ErrorHandler: func(err error) { fmt.Fprintln(os.Stderr, "orders:", err) },
	})
	if err != nil {
		return err
	}
	var mu sync.Mutex // the handler and run print in turn
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	lastSeen := make(chan struct{}) // closed when the handler has seen the last change
	reg, err := inf.AddHandler(informer.HandlerFuncs[*Order]{
		AddFunc: func(o *Order, initial bool) { say("add    %d %s %s (initial %t)", o.ID, o.Customer, o.Status, initial) },
		UpdateFunc: func(old, new *Order) {
			say("update %d %s: %s -> %s", new.ID, new.Customer, old.Status, new.Status)
		},
		DeleteFunc: func(o *Order, _ bool) {
			say("delete %d %s", o.ID, o.Customer)
			if o.ID == 3 {
				close(lastSeen)
			}
		},
	}, informer.HandlerOptions{Name: "printer"})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- inf.Run(runCtx) }()

	select {
	case <-reg.Synced():
	case <-ctx.Done():
		return fmt.Errorf("orders: the handler did not get the initial list: %w", ctx.Err())
	}
	say("== synced")

	// Changes made through your API reach the mirror over the watch.
	api.put(&Order{ID: 2, Customer: "acme", Status: "shipped"})
	api.put(&Order{ID: 4, Customer: "acme", Status: "open"})
	rev := api.delete(3)

	// Read your writes: wait until the cache holds every change up to rev.
	if err := inf.WaitForRevision(ctx, rev); err != nil {
		return fmt.Errorf("orders: waiting for revision %s: %w", rev, err)
	}
	select {
	case <-lastSeen:
	case <-ctx.Done():
		return fmt.Errorf("orders: the handler did not see the last change: %w", ctx.Err())
	}
	acme, err := inf.ByIndex("customer", "acme")
	if err != nil {
		return err
	}
	var ids []int64
	for _, o := range acme {
		ids = append(ids, o.ID)
	}
	slices.Sort(ids)
	say("== at revision %s: %d orders, acme's: %v", rev, inf.Len(), ids)

	stop()
	return <-done
}

// ordersAPI stands for your service. It is written without this library: a revision
// counter, the current orders, and the log of every change, from which a watch sends
// what follows the revision it asks for.
type ordersAPI struct {
	mu      sync.Mutex
	rev     int64
	orders  map[int64]*Order
	log     []change      // every change, oldest first
	changed chan struct{} // closed and replaced at every change
}

// change is one line of the watch stream.
type change struct {
	Type     string `json:"type"`            // ADDED, MODIFIED or DELETED
	Revision string `json:"resourceVersion"` // the revision of this change
	Object   *Order `json:"object"`          // the order after the change (before, for DELETED)
}

func newOrdersAPI() *ordersAPI {
	return &ordersAPI{orders: map[int64]*Order{}, changed: make(chan struct{})}
}

// put adds or replaces an order and returns the change's revision.
func (a *ordersAPI) put(o *Order) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	typ := "ADDED"
	if _, ok := a.orders[o.ID]; ok {
		typ = "MODIFIED"
	}
	a.orders[o.ID] = o
	return a.record(typ, o)
}

// delete removes an order and returns the change's revision.
func (a *ordersAPI) delete(id int64) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	o := a.orders[id]
	delete(a.orders, id)
	return a.record("DELETED", o)
}

func (a *ordersAPI) record(typ string, o *Order) string {
	a.rev++
	rev := strconv.FormatInt(a.rev, 10)
	a.log = append(a.log, change{Type: typ, Revision: rev, Object: o})
	close(a.changed)
	a.changed = make(chan struct{})
	return rev
}

// ServeHTTP answers a list (the whole collection in one page: limit is a hint a server
// may ignore) or, with watch=1, a watch from resourceVersion.
func (a *ordersAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("watch") == "" {
		a.mu.Lock()
		items := slices.SortedFunc(maps.Values(a.orders), func(x, y *Order) int { return int(x.ID - y.ID) })
		rev := strconv.FormatInt(a.rev, 10)
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"metadata": map[string]string{"resourceVersion": rev},
			"items":    items,
		})
		return
	}
	from, err := strconv.ParseInt(q.Get("resourceVersion"), 10, 64)
	if err != nil || from < 0 {
		http.Error(w, "resourceVersion: want a revision this API gave", http.StatusBadRequest)
		return
	}
	// This API keeps its whole log. One that trims it answers 410 Gone to a watch from a
	// revision it no longer has, and the informer lists again.
	ctx := r.Context()
	if s, err := strconv.Atoi(q.Get("timeoutSeconds")); err == nil && s > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(s)*time.Second)
		defer cancel()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w) // one JSON value per line
	for {
		a.mu.Lock()
		pending := a.log[min(int(from), len(a.log)):] // the log's i-th change has revision i+1
		changed := a.changed
		a.mu.Unlock()
		for _, c := range pending {
			if err := enc.Encode(c); err != nil {
				return
			}
			from++
		}
		if flusher != nil {
			flusher.Flush()
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return // the watch's timeout or the client gone: it watches again from its revision
		}
	}
}
