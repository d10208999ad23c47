package httpsource_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"

	"github.com/informer-go/informer"
	httpsource "github.com/informer-go/informer/source/http"
)

type Config struct {
	Name  string `json:"name"`
	Value int    `json:"value"`
}

// A Client of an API that is not Kubernetes-shaped, through the extension points: pages
// are POST /page {"after":K}, answered {"rev":N,"items":[…],"next":K} with the store's
// current revision; changes are POST /changes {"after":N}, answered with lines
// {"rev":N,"changes":[{"op":…,"item":…},…]} or {"error":…}. examples/etcdgateway does
// the same for etcd's JSON gateway.
func ExampleClientOptions() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var q struct {
			After string `json:"after"`
		}
		_ = json.NewDecoder(r.Body).Decode(&q)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/page" && q.After == "":
			_, _ = io.WriteString(w, `{"rev":7,"items":[{"name":"a","value":1},{"name":"b","value":2}],"next":"b"}`)
		case r.URL.Path == "/page": // the store has moved on: the list's revision is in the token
			_, _ = io.WriteString(w, `{"rev":9,"items":[{"name":"c","value":3},{"name":"d","value":"x"}]}`)
		case r.URL.Path == "/changes":
			_, _ = io.WriteString(w, `{"rev":10,"changes":[{"op":"put","item":{"name":"a","value":10}},{"op":"delete","item":{"name":"b"}}]}`+"\n")
			_, _ = io.WriteString(w, `{"error":"history compacted"}`+"\n")
		}
	}))
	defer api.Close()

	post := func(req *httpsource.OutgoingRequest, path string, body any) error {
		req.Method, req.URL.Path, req.URL.RawQuery = http.MethodPost, path, ""
		var err error
		req.Body, err = json.Marshal(body)
		return err
	}
	client, err := httpsource.NewClient(api.URL, httpsource.ClientOptions[*Config]{
		// 1. The requests.
		ListRequest: func(req *httpsource.OutgoingRequest, opts informer.ListOptions) error {
			_, after, _ := strings.Cut(opts.Continue, "/") // the token is "<rev>/<last key>"
			return post(req, "/page", map[string]string{"after": after})
		},
		WatchRequest: func(req *httpsource.OutgoingRequest, opts informer.WatchOptions) error {
			return post(req, "/changes", map[string]string{"after": opts.Revision})
		},
		// 2. A page, with the options of its request.
		DecodeList: func(body []byte, opts informer.ListOptions) (httpsource.RawList, error) {
			var page struct {
				Rev   int64             `json:"rev"`
				Items []json.RawMessage `json:"items"`
				Next  string            `json:"next"`
			}
			if err := json.Unmarshal(body, &page); err != nil {
				return httpsource.RawList{}, err
			}
			rev := strconv.FormatInt(page.Rev, 10)
			if opts.Continue != "" {
				rev, _, _ = strings.Cut(opts.Continue, "/") // the revision the list is pinned to
			}
			l := httpsource.RawList{Revision: rev, Items: page.Items}
			if page.Next != "" {
				l.Continue = rev + "/" + page.Next
			}
			return l, nil
		},
		// 3. A line of changes: several events, parsed once.
		DecodeFrame: func(f *httpsource.Frame[*Config]) error {
			var line struct {
				Rev     int64 `json:"rev"`
				Changes []struct {
					Op   string          `json:"op"`
					Item json.RawMessage `json:"item"`
				} `json:"changes"`
				Error string `json:"error"`
			}
			if err := json.Unmarshal(f.Data, &line); err != nil {
				return err
			}
			if line.Error != "" {
				return &httpsource.StatusError{Message: line.Error}
			}
			for _, ch := range line.Changes {
				c, err := f.Decode(ch.Item)
				if err != nil {
					f.Skip(string(ch.Item), err)
					continue
				}
				typ := informer.Modified
				if ch.Op == "delete" {
					typ = informer.Deleted
				}
				f.Add(informer.Event[*Config]{Type: typ, Object: c, Revision: strconv.FormatInt(line.Rev, 10)})
			}
			return nil
		},
		// 4. The API's own failures, sorted into the informer's classes.
		Classify: func(se *httpsource.StatusError) error {
			if strings.Contains(se.Message, "compacted") {
				return informer.ErrExpired
			}
			return nil
		},
		// 5. Objects that do not decode: skipped and reported.
		OnDecodeError: func(err error) { fmt.Println("skipped an item; ErrDecode:", errors.Is(err, informer.ErrDecode)) },
	})
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	opts := informer.ListOptions{Limit: 2}
	for {
		page, err := client.List(ctx, opts)
		if err != nil {
			panic(err)
		}
		for _, c := range page.Items {
			fmt.Printf("listed %s=%d at revision %s\n", c.Name, c.Value, page.Revision)
		}
		if opts.Continue = page.Continue; opts.Continue == "" {
			break
		}
	}
	w, err := client.Watch(ctx, informer.WatchOptions{Revision: "7"})
	if err != nil {
		panic(err)
	}
	defer w.Stop()
	for {
		ev, err := w.Next()
		if err != nil {
			fmt.Println("watch ended; list again:", errors.Is(err, informer.ErrExpired))
			break
		}
		fmt.Printf("%v %s at revision %s\n", ev.Type, ev.Object.Name, ev.Revision)
	}
	// Output:
	// listed a=1 at revision 7
	// listed b=2 at revision 7
	// skipped an item; ErrDecode: true
	// listed c=3 at revision 7
	// Modified a at revision 10
	// Deleted b at revision 10
	// watch ended; list again: true
}

// A client of a Kubernetes API server's REST endpoint, without client-go: a bearer token
// on every request, the cluster's CA in the http.Client, a label selector in the URL.
// Resource versions are read from each object's metadata.resourceVersion.
func ExampleNewClient() {
	type Pod struct {
		Metadata struct {
			Name, Namespace, ResourceVersion string
		} `json:"metadata"`
		Status struct {
			Phase string `json:"phase"`
		} `json:"status"`
	}
	token, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/token")
	if err != nil {
		fmt.Println("not in a cluster")
		return
	}
	client, err := httpsource.NewClient("https://kubernetes.default.svc/api/v1/namespaces/default/pods?labelSelector=app%3Dweb",
		httpsource.ClientOptions[*Pod]{
			HTTPClient: http.DefaultClient, // with the cluster CA in its TLS config
			PrepareRequest: func(r *http.Request) error {
				r.Header.Set("Authorization", "Bearer "+string(token))
				return nil
			},
		})
	if err != nil {
		panic(err)
	}
	pods, err := informer.New(client.Ordered(), informer.Options[string, *Pod]{
		Key: func(p *Pod) (string, error) { return p.Metadata.Namespace + "/" + p.Metadata.Name, nil },
	})
	if err != nil {
		panic(err)
	}
	_ = pods // Run it, add handlers, read its cache.
}
