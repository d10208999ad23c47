package httpsource

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/internal/wiretest"

	"github.com/informer-go/informer"
)

// A list item that does not decode is left out and reported; the rest of the page is
// used. Through an informer the error reaches its handler and fanout.Stats.DecodeErrors, and a
// later change of the item that decodes reaches the cache as an Added event.
func TestClientListSkipsUndecodableItems(t *testing.T) {
	var errs testkit.Errors
	_, ts := newFake(t, []string{listBody("5", o("a", "1"), `{"name":"b","val":7}`, o("c", "1"))},
		stream(ev("MODIFIED", "6", o("b", "fixed"))))
	c := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{OnDecodeError: errs.Report})
	l, err := c.List(context.Background(), informer.ListOptions{})
	if err != nil || wiretest.State(l.Items) != "a=1 c=1" || l.Revision != "5" {
		t.Fatalf("%s @%s, %v", wiretest.State(l.Items), l.Revision, err)
	}
	got := errs.All()
	if len(got) != 1 || c.DecodeErrors() != 1 {
		t.Fatalf("reported %v, counted %d", got, c.DecodeErrors())
	}
	var de *DecodeError
	if !errors.As(got[0], &de) || !errors.Is(got[0], informer.ErrDecode) || !errors.Is(got[0], informer.ErrBadInput) {
		t.Fatalf("%#v: want a *DecodeError matching ErrDecode and ErrBadInput", got[0])
	}
	if want := `httpsource GET ` + ts.URL + `?resourceVersion=0: cannot decode list item 1 "{\"name\":\"b\",\"val\":7}": json: cannot unmarshal number`; !strings.HasPrefix(de.Error(), want) {
		t.Errorf("message %q, want it to start with %q", de.Error(), want)
	}

}

// A list through an informer: the undecodable item reaches the informer's error handler
// with no wiring and is counted in fanout.Stats.DecodeErrors, the rest is cached, and the item's later fix arrives through the watch as an Added event.
func TestClientUndecodableItemFixedLater(t *testing.T) {
	_, ts := newFake(t, []string{listBody("5", o("a", "1"), `{"name":"b","val":7}`)},
		stream(ev("MODIFIED", "6", o("b", "fixed"))))
	rec := wiretest.NewRecorder()
	c := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{}) // informer.New hands c its error sink
	inf, err := informer.New(c, informer.Options[string, *wiretest.Obj]{Key: wiretest.ObjKey, Backoff: wiretest.TestBackoff, ErrorHandler: rec.OnError})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddHandler(rec, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	wiretest.Run(t, inf)
	wiretest.Converge(t, &wiretest.Mirror{Inf: inf, Rec: rec}, func() string { return "a=1 b=fixed" })
	if n := inf.Stats().DecodeErrors; n != 1 {
		t.Errorf("Stats.DecodeErrors %d, want 1", n)
	}
	if !rec.HasError(informer.ErrDecode) {
		t.Errorf("errors %v: want the undecodable item reported", rec.Errors())
	}
	if got := rec.Calls(); !slices.Contains(got, "add b=fixed") {
		t.Errorf("calls %q: want the fix delivered as an add", got)
	}
}

// fakeStore is a toy list+watch API of another shape than Kubernetes': lists are
// POST /range {"after":K,"rev":R,"limit":N} answered {"rev":R,"rows":[…],"more":true} with
// the store's current revision, not the pinned one; watches are POST /watch {"from":R}
// answered with lines that carry several changes each, progress marks and errors.
type fakeStore struct {
	mu      sync.Mutex
	log     []string
	current int
	rows    []string // name:val
	lines   []string // the watch stream
	fail    int      // list answers 400 {"code":11} when its rev is below this
}

func (s *fakeStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.log = append(s.log, r.Method+" "+r.URL.Path+" "+string(body))
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	s.mu.Lock()
	current, fail, all := s.current, s.fail, s.rows
	s.mu.Unlock()
	switch r.URL.Path {
	case "/range":
		var q struct {
			After string `json:"after"`
			Rev   int    `json:"rev"`
			Limit int    `json:"limit"`
		}
		_ = json.Unmarshal(body, &q)
		if q.Rev != 0 && q.Rev < fail {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"code":11,"message":"required revision has been compacted"}`)
			return
		}
		var rows []string
		more := false
		for _, row := range all {
			name, val, _ := strings.Cut(row, ":")
			if name <= q.After {
				continue
			}
			if len(rows) == q.Limit {
				more = true
				break
			}
			rows = append(rows, fmt.Sprintf(`{"k":%q,"v":%s}`, name, val))
		}
		fmt.Fprintf(w, `{"rev":%d,"rows":[%s],"more":%v}`, current, strings.Join(rows, ","), more)
	case "/watch":
		s.mu.Lock()
		lines := s.lines
		s.mu.Unlock()
		for _, l := range lines {
			_, _ = io.WriteString(w, l+"\n")
		}
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	default:
		http.NotFound(w, r)
	}
}

func (s *fakeStore) setLines(lines ...string) {
	s.mu.Lock()
	s.lines = lines
	s.mu.Unlock()
}

func (s *fakeStore) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// storeToken is the fake store's continue token: the pinned revision and the last key.
func storeToken(rev, after string) string { return rev + "/" + after }

func parseStoreToken(tok string) (rev, after string, err error) {
	rev, after, ok := strings.Cut(tok, "/")
	if !ok {
		return "", "", fmt.Errorf("%w: malformed continue token %q", informer.ErrBadInput, tok)
	}
	return rev, after, nil
}

// storeOptions are the five extension points set up for fakeStore.
func storeOptions(errs *testkit.Errors) ClientOptions[*wiretest.Obj] {
	decodeRow := func(raw json.RawMessage) (*wiretest.Obj, error) {
		var row struct {
			K string `json:"k"`
			V string `json:"v"`
		}
		if err := json.Unmarshal(raw, &row); err != nil {
			return nil, err
		}
		return &wiretest.Obj{Name: row.K, Val: row.V}, nil
	}
	return ClientOptions[*wiretest.Obj]{
		ListRequest: func(req *OutgoingRequest, opts informer.ListOptions) error {
			q := map[string]any{"limit": opts.Limit}
			if opts.Continue != "" {
				rev, after, err := parseStoreToken(opts.Continue)
				if err != nil {
					return err
				}
				q["after"], q["rev"] = after, json.Number(rev)
			}
			req.Method, req.URL.Path, req.URL.RawQuery = http.MethodPost, "/range", ""
			req.Body, _ = json.Marshal(q)
			return nil
		},
		WatchRequest: func(req *OutgoingRequest, opts informer.WatchOptions) error {
			req.Method, req.URL.Path, req.URL.RawQuery = http.MethodPost, "/watch", ""
			req.Body = []byte(fmt.Sprintf(`{"from":%q}`, opts.Revision))
			return nil
		},
		Decode: decodeRow,
		DecodeList: func(body []byte, opts informer.ListOptions) (RawList, error) {
			var page struct {
				Rev  int               `json:"rev"`
				Rows []json.RawMessage `json:"rows"`
				More bool              `json:"more"`
			}
			if err := json.Unmarshal(body, &page); err != nil {
				return RawList{}, err
			}
			rev := strconv.Itoa(page.Rev) // the first page pins the list's revision
			if opts.Continue != "" {
				rev, _, _ = parseStoreToken(opts.Continue)
			}
			l := RawList{Revision: rev, Items: page.Rows}
			if page.More {
				last, err := decodeRow(page.Rows[len(page.Rows)-1])
				if err != nil {
					return RawList{}, err
				}
				l.Continue = storeToken(rev, last.Name)
			}
			return l, nil
		},
		DecodeFrame: func(f *Frame[*wiretest.Obj]) error {
			var line struct {
				Rev     string `json:"rev"`
				Changes []struct {
					Del bool            `json:"del"`
					Row json.RawMessage `json:"row"`
				} `json:"changes"`
				Progress bool `json:"progress"`
				Err      *struct {
					Code int    `json:"code"`
					Msg  string `json:"msg"`
				} `json:"err"`
			}
			if err := json.Unmarshal(f.Data, &line); err != nil {
				return err
			}
			if line.Err != nil {
				return &StatusError{Code: line.Err.Code, Message: line.Err.Msg}
			}
			if line.Progress {
				f.Add(informer.Event[*wiretest.Obj]{Type: informer.Bookmark, Revision: line.Rev})
				return nil
			}
			for _, ch := range line.Changes {
				o, err := f.Decode(ch.Row)
				if err != nil {
					f.Skip(string(ch.Row), err)
					continue
				}
				typ := informer.Modified
				if ch.Del {
					typ = informer.Deleted
				}
				f.Add(informer.Event[*wiretest.Obj]{Type: typ, Object: o, Revision: line.Rev})
			}
			return nil
		},
		Classify: func(se *StatusError) error {
			var body struct {
				Code int `json:"code"`
			}
			if json.Unmarshal(se.Body, &body) == nil && body.Code == 11 || se.Code == 11 {
				return informer.ErrExpired
			}
			return nil
		},
		OnDecodeError: errs.Report,
	}
}

// ListRequest and WatchRequest shape the requests (method, path, body); DecodeList gets
// the options of its request, so the pinned revision travels in the continue token even
// while several lists run at once.
func TestClientRequestHooksAndListOptions(t *testing.T) {
	store := &fakeStore{current: 9, rows: []string{`a:"1"`, `b:"2"`, `c:"3"`, `d:"4"`, `e:"5"`}}
	ts := wiretest.ServeFunc(t, store.ServeHTTP)
	var errs testkit.Errors
	c := newTestClient(t, ts.URL+"/ignored?x=1", storeOptions(&errs))

	// Lists pinned at different revisions run at once; each page reports its own.
	var wg sync.WaitGroup
	results := make([]string, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := ""
			if i%2 == 1 {
				tok = storeToken(strconv.Itoa(100+i), "")
			}
			var pages []string
			for range 10 {
				l, err := c.List(context.Background(), informer.ListOptions{Limit: 2, Continue: tok})
				if err != nil {
					pages = append(pages, err.Error())
					break
				}
				pages = append(pages, wiretest.State(l.Items)+"@"+l.Revision)
				if tok = l.Continue; tok == "" {
					break
				}
			}
			results[i] = strings.Join(pages, " | ")
		}()
	}
	wg.Wait()
	for i, got := range results {
		rev := "9"
		if i%2 == 1 {
			rev = strconv.Itoa(100 + i)
		}
		if want := fmt.Sprintf("a=1 b=2@%[1]s | c=3 d=4@%[1]s | e=5@%[1]s", rev); got != want {
			t.Errorf("list %d: %s, want %s", i, got, want)
		}
	}
	reqs := store.requests()
	if !slices.Contains(reqs, `POST /range {"limit":2}`) || !slices.Contains(reqs, `POST /range {"after":"b","limit":2,"rev":101}`) {
		t.Errorf("requests %q", reqs)
	}

	// A hook's error aborts the call and keeps its class.
	_, err := c.List(context.Background(), informer.ListOptions{Continue: "junk"})
	wantError(t, err, `httpsource: ListRequest: bad input from source: malformed continue token "junk"`, informer.ErrBadInput)

	// The watch request.
	store.setLines(`{"progress":true,"rev":"10"}`)
	w, err := c.Watch(context.Background(), informer.WatchOptions{Revision: "9"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if e, err := w.Next(); err != nil || e.Type != informer.Bookmark || e.Revision != "10" {
		t.Fatalf("%+v %v", e, err)
	}
	if reqs := store.requests(); reqs[len(reqs)-1] != `POST /watch {"from":"9"}` {
		t.Errorf("last request %q", reqs[len(reqs)-1])
	}
}

// DecodeFrame turns a frame into zero or more events, a bookmark, skipped objects
// (reported once the frame is accepted) or a classified error; the events of a frame
// that fails are not delivered. The events of one frame at one revision (a transaction)
// are one batch: the watch reports more to come at the revision until the last, so the
// informer does not count the revision reached halfway through it.
func TestClientDecodeFrame(t *testing.T) {
	row := func(k, v string) string { return fmt.Sprintf(`{"k":%q,"v":%q}`, k, v) }
	store := &fakeStore{lines: []string{
		`{"rev":"11","changes":[{"row":` + row("a", "1") + `},{"row":` + row("b", "1") + `},{"del":true,"row":` + row("c", "") + `}]}`,
		`{"rev":"12","changes":[]}`,
		`{"rev":"13","changes":[{"row":{"k":"d","v":7}},{"row":` + row("e", "1") + `}]}`,
		`{"progress":true,"rev":"14"}`,
		`{"rev":"15","changes":[{"row":` + row("f", "1") + `}]}`,
		`{"err":{"code":11,"msg":"compacted"}}`,
	}}
	ts := wiretest.ServeFunc(t, store.ServeHTTP)
	var errs testkit.Errors
	c := newTestClient(t, ts.URL, storeOptions(&errs))
	w, err := c.Watch(context.Background(), informer.WatchOptions{Revision: "10"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []string
	for {
		e, err := w.Next()
		if err != nil {
			got = append(got, "error: "+err.Error())
			if !errors.Is(err, informer.ErrExpired) {
				t.Errorf("%v: want ErrExpired through Classify", err)
			}
			break
		}
		name := ""
		if e.Object != nil {
			name = e.Object.Name + "=" + e.Object.Val
		}
		more := ""
		if w.(informer.BatchedWatch).MoreAtRevision() {
			more = " (more)"
		}
		got = append(got, fmt.Sprintf("%v %s @%s%s", e.Type, name, e.Revision, more))
	}
	want := []string{
		"Modified a=1 @11 (more)", "Modified b=1 @11 (more)", "Deleted c= @11",
		"Modified e=1 @13",
		"Bookmark  @14",
		"Modified f=1 @15",
		"error: httpsource POST " + ts.URL + "/watch: server said 11: compacted",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	reported := errs.All()
	if len(reported) != 1 || c.DecodeErrors() != 1 || !errors.Is(reported[0], informer.ErrDecode) ||
		!strings.HasPrefix(reported[0].Error(), `httpsource POST `+ts.URL+`/watch: cannot decode {"k":"d","v":7}: json: cannot unmarshal number`) {
		t.Errorf("reported %v (counted %d)", reported, c.DecodeErrors())
	}

	// A frame that fails delivers none of its events; a plain error is bad input.
	store.setLines(`{"rev":"11","changes":[{"row":` + row("a", "1") + `}]}x`)
	w2, err := c.Watch(context.Background(), informer.WatchOptions{Revision: "10"})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	_, err = w2.Next()
	wantError(t, err, "watch frame", informer.ErrBadInput)
}

// Classify sorts a non-200 answer: the fake store's 400 {"code":11} is an expired
// revision, so the informer relists at once (a consistent list) instead of backing off.
func TestClientClassify(t *testing.T) {
	store := &fakeStore{current: 9, rows: []string{`a:"1"`}, fail: 50}
	ts := wiretest.ServeFunc(t, store.ServeHTTP)
	var errs testkit.Errors
	c := newTestClient(t, ts.URL, storeOptions(&errs))
	_, err := c.List(context.Background(), informer.ListOptions{Limit: 1, Continue: storeToken("40", "a")})
	wantError(t, err, "httpsource POST "+ts.URL+"/range: server said 400 BadRequest: required revision has been compacted", informer.ErrExpired)
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 400 || string(se.Body) != `{"code":11,"message":"required revision has been compacted"}` {
		t.Errorf("%#v", se)
	}
	// Without the hook the same answer has no class.
	plain := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{ListRequest: storeOptions(nil).ListRequest})
	_, err = plain.List(context.Background(), informer.ListOptions{Limit: 1, Continue: storeToken("40", "a")})
	if err == nil || errors.Is(err, informer.ErrExpired) || errors.Is(err, informer.ErrRetryable) {
		t.Errorf("without Classify: %v", err)
	}
}

// A list the transport leaves compressed (a hook asked for gzip itself, so Go's transport
// does not decompress it) is decompressed by the Client, and MaxListBytes bounds what is
// decompressed, not what came over the wire: a small gzip body that expands past it is
// refused before it is split; List.Bytes of a list read is its decompressed size. An
// encoding the Client cannot decode is refused by name.
func TestClientListBoundCountsDecompressedBytes(t *testing.T) {
	const limit = 64 << 10
	body := func(n int) string { // a valid list of n bytes
		return listBody("1", o("a", strings.Repeat("x", n-len(listBody("1", o("a", ""))))))
	}
	askGzip := func(r *http.Request) error { r.Header.Set("Accept-Encoding", "gzip"); return nil }
	for _, tc := range []struct {
		name     string
		size     int
		encoding string
		want     string // "": the list is read
	}{
		{"at the limit", limit, "gzip", ""},
		{"over the limit", 100 * limit, "gzip", "longer than 65536 bytes (ClientOptions.MaxListBytes)"},
		{"unknown encoding", limit, "br", `Content-Encoding "br"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var gz bytes.Buffer
			zw := gzip.NewWriter(&gz)
			_, _ = io.WriteString(zw, body(tc.size))
			_ = zw.Close()
			if tc.size > limit && gz.Len() > limit/4 {
				t.Fatalf("the compressed body is %d bytes, want far under the limit", gz.Len())
			}
			ts := wiretest.ServeFunc(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Encoding", tc.encoding)
				_, _ = w.Write(gz.Bytes())
			})
			c := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{MaxListBytes: limit, PrepareRequest: askGzip})
			l, err := c.List(context.Background(), informer.ListOptions{})
			if tc.want == "" {
				if err != nil || len(l.Items) != 1 || l.Bytes != int64(tc.size) {
					t.Fatalf("%d items of %d bytes, %v; want the one item of %d", len(l.Items), l.Bytes, err, tc.size)
				}
				return
			}
			wantError(t, err, tc.want, informer.ErrBadInput)
		})
	}
}
