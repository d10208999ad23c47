package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/informer-go/informer"
	httpsource "github.com/informer-go/informer/source/http"
)

// This file is the whole adapter: the five extension points of httpsource.Client set up
// for etcd's JSON gateway, which serves etcd's gRPC API as JSON over HTTP/1.1 on every
// client URL (POST /v3/kv/range, POST /v3/watch). Keys and values travel base64-encoded
// (encoding/json decodes them into []byte); 64-bit integers travel as strings.

// Decoder turns an etcd key and value into a V. For a delete, value is nil: the key alone
// must make an object the informer's key function accepts (OnDelete receives the state the
// informer held, not that object).
type Decoder[V any] func(key, value []byte) (V, error)

// GatewayOptions configures NewGatewayClient.
type GatewayOptions struct {
	// HTTPClient sends the requests; nil means http.DefaultClient.
	HTTPClient *http.Client
}

// NewGatewayClient returns a Client that mirrors every key under prefix through the JSON
// gateway at endpoint ("http://127.0.0.1:2379"). Its revisions are etcd's, so it is
// returned Ordered (Informer.WaitForRevision works).
func NewGatewayClient[V any](endpoint, prefix string, decode Decoder[V], opts GatewayOptions) (httpsource.OrderedClient[V], error) {
	g := gateway[V]{
		key:      []byte(prefix),
		rangeEnd: prefixEnd([]byte(prefix)),
		decode:   decode,
	}
	c, err := httpsource.NewClient(endpoint, httpsource.ClientOptions[V]{
		HTTPClient: opts.HTTPClient,
		// 1. The requests: POST with a JSON body, built from the informer's options.
		ListRequest:  g.listRequest,
		WatchRequest: g.watchRequest,
		// 2. A page with the revision the list is pinned to, kept in the continue token.
		DecodeList: g.decodeList,
		Decode:     g.decodeKV,
		// 3. A watch line: several events, a progress mark (a bookmark) or a cancellation.
		DecodeFrame: g.decodeFrame,
		// 4. 400 {"code":11,…compacted} and a compacted watch are expired revisions.
		Classify: classify,
		// 5. A value that does not decode is skipped and reported.
		// The gateway takes no watch timeout: the client ends each watch at the
		// informer's timeout, and the informer watches again from where it was.
		EndWatchAtTimeout: true,
	})
	if err != nil {
		return httpsource.OrderedClient[V]{}, err
	}
	return c.Ordered(), nil
}

type gateway[V any] struct {
	key, rangeEnd []byte
	decode        Decoder[V]
}

// prefixEnd is the end of the key range of a prefix, as clientv3.GetPrefixRangeEnd.
func prefixEnd(prefix []byte) []byte {
	end := []byte(string(prefix))
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0} // every key
}

// rangeRequest is the body of POST /v3/kv/range (etcdserverpb.RangeRequest).
type rangeRequest struct {
	Key          []byte `json:"key"`
	RangeEnd     []byte `json:"range_end"`
	Limit        int64  `json:"limit,omitempty,string"`
	Revision     int64  `json:"revision,omitempty,string"`
	Serializable bool   `json:"serializable,omitempty"`
}

// The continue token: the revision the list is pinned to and the key the next page starts
// at, "<revision>/<base64 key>".
func continueToken(rev string, next []byte) string {
	return rev + "/" + base64.RawURLEncoding.EncodeToString(next)
}

func parseContinue(tok string) (int64, []byte, error) {
	r, k, ok := strings.Cut(tok, "/")
	rev, err := strconv.ParseInt(r, 10, 64)
	key, kerr := base64.RawURLEncoding.DecodeString(k)
	if !ok || err != nil || rev <= 0 || kerr != nil {
		return 0, nil, fmt.Errorf("%w: malformed continue token %q", informer.ErrBadInput, tok)
	}
	return rev, key, nil
}

// listRequest makes a page request. The first page reads the newest state (a
// linearizable read, fresh enough for any ListOptions.Revision); later pages read at the
// first page's revision, from the key after the last one sent.
func (g gateway[V]) listRequest(req *httpsource.OutgoingRequest, opts informer.ListOptions) error {
	r := rangeRequest{Key: g.key, RangeEnd: g.rangeEnd, Limit: opts.Limit}
	if opts.Continue != "" {
		rev, next, err := parseContinue(opts.Continue)
		if err != nil {
			return err
		}
		r.Key, r.Revision, r.Serializable = next, rev, true
	}
	return gatewayPost(req, "/v3/kv/range", r)
}

// watchRequest opens a watch of the prefix after opts.Revision, with progress
// notifications (bookmarks).
func (g gateway[V]) watchRequest(req *httpsource.OutgoingRequest, opts informer.WatchOptions) error {
	if opts.SendInitialEvents {
		return fmt.Errorf("the etcd gateway has no streaming list: %w", informer.ErrNotSupported)
	}
	start := int64(0)
	if opts.Revision != "" {
		rev, err := strconv.ParseInt(opts.Revision, 10, 64)
		if err != nil || rev < 0 {
			return fmt.Errorf("%w: malformed revision %q", informer.ErrBadInput, opts.Revision)
		}
		start = rev + 1
	}
	type create struct {
		Key            []byte `json:"key"`
		RangeEnd       []byte `json:"range_end"`
		StartRevision  int64  `json:"start_revision,omitempty,string"`
		ProgressNotify bool   `json:"progress_notify"`
	}
	return gatewayPost(req, "/v3/watch", map[string]create{"create_request": {g.key, g.rangeEnd, start, true}})
}

// gatewayPost turns the default request into a POST of body to path.
func gatewayPost(req *httpsource.OutgoingRequest, path string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req.Method, req.URL.Path, req.URL.RawQuery, req.Body = http.MethodPost, path, "", b
	return nil
}

// rangeResponse is the answer to POST /v3/kv/range; the key-values stay raw, for Decode.
type rangeResponse struct {
	Header struct {
		Revision string `json:"revision"`
	} `json:"header"`
	Kvs  []json.RawMessage `json:"kvs"`
	More bool              `json:"more"`
}

// keyValue is an etcd key-value (mvccpb.KeyValue) as the gateway sends it.
type keyValue struct {
	Key         []byte `json:"key"`
	ModRevision string `json:"mod_revision"`
	Version     string `json:"version"`
	Value       []byte `json:"value"`
}

// decodeList splits a page. The header's revision is the store's current one: it is the
// list's revision on the first page only; later pages report the one their request was
// pinned to, from the continue token.
func (g gateway[V]) decodeList(body []byte, opts informer.ListOptions) (httpsource.RawList, error) {
	var page rangeResponse
	if err := json.Unmarshal(body, &page); err != nil {
		return httpsource.RawList{}, err
	}
	l := httpsource.RawList{Revision: page.Header.Revision, Items: page.Kvs}
	if opts.Continue != "" {
		l.Revision, _, _ = strings.Cut(opts.Continue, "/")
	}
	if page.More && len(page.Kvs) > 0 {
		var last struct {
			Key []byte `json:"key"`
		}
		if err := json.Unmarshal(page.Kvs[len(page.Kvs)-1], &last); err != nil {
			return httpsource.RawList{}, err
		}
		l.Continue = continueToken(l.Revision, append(last.Key, 0))
	}
	return l, nil
}

// decodeKV decodes one key-value of a page.
func (g gateway[V]) decodeKV(raw json.RawMessage) (V, error) {
	var kv keyValue
	if err := json.Unmarshal(raw, &kv); err != nil {
		var zero V
		return zero, err
	}
	if kv.Value == nil {
		kv.Value = []byte{} // an empty value: nil means a delete
	}
	v, err := g.decode(kv.Key, kv.Value)
	if err != nil {
		err = fmt.Errorf("key %q at revision %s: %w", kv.Key, kv.ModRevision, err)
	}
	return v, err
}

// watchLine is one line of POST /v3/watch: a WatchResponse, or a stream error.
type watchLine struct {
	Result *struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
		Created         bool   `json:"created"`
		Canceled        bool   `json:"canceled"`
		CompactRevision string `json:"compact_revision"`
		CancelReason    string `json:"cancel_reason"`
		Events          []struct {
			Type string   `json:"type"` // "PUT" is left out, as the zero value
			Kv   keyValue `json:"kv"`
		} `json:"events"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// decodeFrame turns a watch line into events: one per change, all of a transaction in one
// line; a progress notification is a bookmark; a compacted cancellation is an expired
// revision (see classify).
func (g gateway[V]) decodeFrame(f *httpsource.Frame[V]) error {
	var line watchLine
	if err := json.Unmarshal(f.Data, &line); err != nil {
		return err
	}
	r := line.Result
	switch {
	case line.Error != nil:
		return grpcStatus(line.Error.Code, line.Error.Message)
	case r == nil:
		return errors.New("a watch line with neither result nor error")
	case r.Canceled && r.CompactRevision != "" && r.CompactRevision != "0":
		return grpcStatus(codeOutOfRange, "watch canceled: required revision has been compacted (compact revision "+r.CompactRevision+")")
	case r.Canceled:
		return grpcStatus(0, "watch canceled: "+r.CancelReason)
	case r.Created:
		return nil // the header's revision is not a bookmark: older events may follow
	case len(r.Events) == 0:
		if r.Header.Revision == "" {
			return errors.New("a progress notification without a revision")
		}
		f.Add(informer.Event[V]{Type: informer.Bookmark, Revision: r.Header.Revision})
		return nil
	}
	skippedLast := false
	for _, e := range r.Events {
		skippedLast = false
		ev := informer.Event[V]{Type: informer.Modified, Revision: e.Kv.ModRevision}
		var value []byte
		switch e.Type {
		case "DELETE":
			// The watch does not ask for the previous value: the object carries the key
			// alone, and the informer hands OnDelete the state it held.
			ev.Type, ev.LastStateUnknown = informer.Deleted, true
		case "", "PUT":
			value = e.Kv.Value
			if value == nil {
				value = []byte{} // an empty value, not a delete
			}
			if e.Kv.Version == "1" {
				ev.Type = informer.Added
			}
		default:
			return fmt.Errorf("unknown event type %q", e.Type)
		}
		obj, err := g.decode(e.Kv.Key, value)
		if err != nil {
			if ev.Type == informer.Deleted {
				return fmt.Errorf("%w: the delete of %q cannot be decoded: %w", informer.ErrBadInput, e.Kv.Key, err)
			}
			f.Skip(fmt.Sprintf("key %q at revision %s", e.Kv.Key, e.Kv.ModRevision), err)
			skippedLast = true
			continue
		}
		ev.Object = obj
		f.Add(ev)
	}
	if skippedLast { // the informer's revision still moves past the skipped change
		f.Add(informer.Event[V]{Type: informer.Bookmark, Revision: r.Events[len(r.Events)-1].Kv.ModRevision})
	}
	return nil
}

// The gRPC codes the gateway's errors carry.
const (
	codeDeadlineExceeded = 4
	codeOutOfRange       = 11
	codeUnavailable      = 14
)

// grpcStatus is the StatusError of a gRPC failure inside the stream.
func grpcStatus(code int, message string) *httpsource.StatusError {
	return &httpsource.StatusError{Reason: "grpc code " + strconv.Itoa(code), Message: message, Body: fmt.Appendf(nil, `{"code":%d}`, code)}
}

// classify sorts the gateway's failures by gRPC code ({"code":N,"message":…}, in a
// response body or from decodeFrame): a compacted revision is expired (list again at
// once), a future revision or an unavailable server is transient.
func classify(se *httpsource.StatusError) error {
	var body struct {
		Code int `json:"code"`
	}
	if json.Unmarshal(se.Body, &body) != nil {
		return nil
	}
	switch {
	case body.Code == codeOutOfRange && strings.Contains(se.Message, "compacted"):
		return informer.ErrExpired
	case body.Code == codeOutOfRange, body.Code == codeDeadlineExceeded:
		return informer.ErrRetryable
	case body.Code == codeUnavailable:
		return informer.ErrUnavailable
	}
	return nil
}
