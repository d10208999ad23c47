package robustness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/v3"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/fanout"
	"github.com/informer-go/informer/persist"
	"github.com/informer-go/informer/source/etcd"
	httpsource "github.com/informer-go/informer/source/http"
)

// indexName is the suite's one index (see IndexOf).
const indexName = "last"

// quiet discards the participants' logs; what matters is recorded.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func decodeItem(key, value []byte) (*Item, error) {
	return &Item{Key: string(key), Value: string(value)}, nil
}

func itemKey(it *Item) (string, error) { return it.Key, nil }

// savingFile is a persist.File that records every step of its file: each save begun,
// done or failed, with every state it saved read back from the file; what a warm start
// loaded; and what the file holds after a save failed.
type savingFile struct {
	*persist.File[string, *Item]
	who      string
	rec      *Recording
	restores *atomic.Int64

	mu     sync.Mutex
	loaded int64 // the revision Load gave the informer, 0 if none
}

// Save saves, then reads the file back and records what is on disk; after a failed
// save it records what the file holds.
func (f *savingFile) Save(ctx context.Context, desc informer.PersistedCache, state *informer.Snapshot[string, *Item]) error {
	label, err := revisionLabel(state.Revision())
	if err != nil {
		return err
	}
	f.rec.AddFile(FileEvent{Who: f.who, Kind: "save", Label: label})
	if err := f.File.Save(ctx, desc, state); err != nil {
		f.rec.AddFile(FileEvent{Who: f.who, Kind: "failed", Label: label})
		rev, lerr := f.File.Load(context.WithoutCancel(ctx), desc, func(*Item) {})
		f.rec.AddFile(f.found("failed save", rev, lerr))
		return err
	}
	f.rec.AddFile(FileEvent{Who: f.who, Kind: "saved", Label: label})
	got := make(map[string]string)
	rev, err := f.File.Load(ctx, desc, func(it *Item) { got[it.Key] = it.Value })
	if err != nil {
		return fmt.Errorf("robustness: reading back the snapshot just saved: %w", err)
	}
	if label, err = revisionLabel(rev); err != nil {
		return err
	}
	f.rec.AddRead(Read{Who: f.who, At: time.Now(), Restores: int(f.restores.Load()), Label: label, State: got, Exact: true, Kind: "saved"})
	return nil
}

// Load loads, records what it found and remembers the revision the informer was given.
func (f *savingFile) Load(ctx context.Context, desc informer.PersistedCache, add func(*Item)) (string, error) {
	rev, err := f.File.Load(ctx, desc, add)
	f.rec.AddFile(f.found("warm start", rev, err))
	if err == nil {
		n, _ := revisionLabel(rev)
		f.mu.Lock()
		f.loaded = n
		f.mu.Unlock()
	}
	return rev, err
}

// found describes what a load of the file found.
func (f *savingFile) found(after, rev string, err error) FileEvent {
	ev := FileEvent{Who: f.who, Kind: "loaded", After: after, Found: "whole"}
	switch {
	case err == nil:
		ev.Label, _ = revisionLabel(rev)
		return ev
	case errors.Is(err, informer.ErrNoPersistedState):
		ev.Found = "none"
	case errors.Is(err, persist.ErrCorrupt):
		ev.Found = "corrupt"
	default:
		ev.Found = "refused"
	}
	ev.Err = err.Error()
	return ev
}

// InformerSpec describes one informer of a run.
type InformerSpec struct {
	// Name is the informer's name, the Who of its reads and errors.
	Name string
	// SlowTransform is how long Transform takes per object (0: no Transform).
	SlowTransform time.Duration
	// PersistDir, when set, makes the informer save its cache there every 20 ms.
	PersistDir string
	// WrapWriter, when set, is the snapshot file's persist.Options.WrapWriter: a slow or
	// full disk.
	WrapWriter func(io.Writer) io.Writer
	// Source, when set, is the informer's source (a fan-out client); nil means etcd
	// through the proxies.
	Source func() (informer.ListerWatcher[*Item], error)
	// Filter is the filter value of a filtered client (see Read.Filter); such a client
	// has no handlers.
	Filter string
	// Serve, when set, makes the informer a fan-out replica: a fanout.Server of it on this
	// loopback address, which a restart takes again.
	Serve string
}

// participant is one informer of a run, with its handlers and a reader that records
// every state it publishes.
type participant struct {
	spec     InformerSpec
	cli      *clientv3.Client
	rec      *Recording
	restores *atomic.Int64
	handlers []*Handler   // the current incarnation's
	past     []HandlerRun // the handlers of incarnations stopped before

	inf    *informer.Informer[string, *Item]
	srv    *fanout.Server[string, *Item]
	ln     net.Listener // a replica's listener for its first start
	hs     *http.Server
	file   *savingFile
	cancel context.CancelFunc
	done   chan struct{}
	warm   uint64 // 1 if this incarnation started from a restored state
	lists  uint64 // lists applied by the incarnations stopped before
	starts int
}

func newParticipant(spec InformerSpec, cli *clientv3.Client, rec *Recording, restores *atomic.Int64) *participant {
	return &participant{spec: spec, cli: cli, rec: rec, restores: restores}
}

// newHandlers gives an incarnation its handlers: a restarted process has new ones, told
// the whole cache again.
func (p *participant) newHandlers() {
	suffix := ""
	if p.starts > 0 {
		suffix = fmt.Sprintf("#%d", p.starts+1)
	}
	p.handlers = []*Handler{
		NewHandler(p.spec.Name+"/block"+suffix, PolicyBlock, 0),
		NewHandler(p.spec.Name+"/coalesce"+suffix, PolicyCoalesce, 0),
		NewHandler(p.spec.Name+"/slow"+suffix, PolicyCoalesce, time.Millisecond),
	}
}

// handlerRuns returns every handler of every incarnation, for CheckHandlers.
func (p *participant) handlerRuns() []HandlerRun {
	runs := slices.Clone(p.past)
	if p.cancel != nil {
		runs = append(runs, p.currentRuns()...)
	}
	return runs
}

func (p *participant) currentRuns() []HandlerRun {
	one := p.listedOnce()
	var runs []HandlerRun
	for _, h := range p.handlers {
		runs = append(runs, HandlerRun{Name: h.Name, Policy: h.Policy, Notes: h.Notes(), ListedOne: one})
	}
	return runs
}

// start builds the informer (again, on a restart: same handlers, same snapshot file),
// runs it and its reader, and waits until it has synced.
func (p *participant) start(prefix string) error {
	var src informer.ListerWatcher[*Item]
	var err error
	if p.spec.Source != nil {
		src, err = p.spec.Source()
	} else {
		src, err = etcd.New(p.cli, prefix, decodeItem, etcd.Options{RequestTimeout: 5 * time.Second})
	}
	if err != nil {
		return err
	}
	opts := informer.Options[string, *Item]{
		Key:      itemKey,
		Name:     p.spec.Name,
		Logger:   quiet,
		Indexers: informer.Indexers[*Item]{indexName: informer.IndexBy(func(it *Item) (string, error) { return IndexOf(it.Value), nil })},
		ErrorHandler: func(err error) {
			p.rec.AddError(p.spec.Name, err)
		},
		Backoff: informer.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
	}
	if d := p.spec.SlowTransform; d > 0 {
		opts.Transform = func(it *Item) (*Item, error) {
			time.Sleep(d) // the work of a slow transform
			return it, nil
		}
	}
	if p.spec.PersistDir != "" {
		f, err := persist.New[string, *Item](p.spec.PersistDir, persist.Options[*Item]{Interval: 20 * time.Millisecond, WrapWriter: p.spec.WrapWriter})
		if err != nil {
			return err
		}
		p.file = &savingFile{File: f, who: p.spec.Name, rec: p.rec, restores: p.restores}
		opts.Persist = p.file
	}
	inf, err := informer.New(src, opts)
	if err != nil {
		return err
	}
	p.newHandlers()
	p.warm = 0
	if p.spec.Filter != "" {
		p.handlers = nil
	}
	for i, h := range p.handlers {
		ho := informer.HandlerOptions{Name: h.Name}
		switch i {
		case 0:
			ho.Policy = informer.Block
		default:
			ho.Policy, ho.QueueLength = informer.Coalesce, 8
		}
		if _, err := inf.AddHandler(h, ho); err != nil {
			return err
		}
	}
	p.inf = inf
	if err := p.serve(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = inf.Run(ctx)
	}()
	go func() {
		defer wg.Done()
		p.read(ctx)
	}()
	go func() {
		wg.Wait()
		close(p.done)
	}()
	p.starts++
	sctx, scancel := context.WithTimeout(ctx, 2*time.Minute)
	defer scancel()
	select {
	case <-inf.Synced():
	case <-sctx.Done():
		return fmt.Errorf("informer %s did not sync in 2 minutes: %v", p.spec.Name, inf.Stats().LastError)
	}
	p.recordRestored()
	return nil
}

// listedOnce reports whether every state since this incarnation's one list (or
// restored state) reached it: it applied no other list, and it is not a fan-out client (a
// fan-out Server coalesces a key's changes when its handler's queue is full, see
// fanout.ServerOptions.QueueLength, so its clients may skip states).
func (p *participant) listedOnce() bool {
	return p.spec.Source == nil && p.inf.Stats().Relists+p.warm == 1
}

// describe says what the participant went through, for the report.
func (p *participant) describe() string {
	st := p.inf.Stats()
	return fmt.Sprintf("%s: %d start(s), %d list(s) before the last start, this one %d list(s) (restored %v), %d watch(es), %d watch error(s), last error %v",
		p.spec.Name, p.starts, p.lists, st.Relists, p.warm == 1, st.Watches, st.WatchErrors, st.LastError)
}

// serve starts the fan-out Server of a replica: before the informer runs, so that it
// mirrors every change.
func (p *participant) serve() error {
	if p.spec.Serve == "" {
		return nil
	}
	srv, err := fanout.NewServer(p.inf, fanout.ServerOptions[*Item]{
		Filters: []string{indexName}, // the informer's own index
	})
	if err != nil {
		return err
	}
	ln := p.ln // the first start's, taken when the run began
	p.ln = nil
	if ln == nil {
		if ln, err = net.Listen("tcp", p.spec.Serve); err != nil {
			return fmt.Errorf("replica %s: %w", p.spec.Name, err)
		}
	}
	p.srv, p.hs = srv, &http.Server{Handler: srv}
	go func(hs *http.Server) { _ = hs.Serve(ln) }(p.hs)
	return nil
}

// recordRestored records the state a warm start restored, if the informer is serving it.
func (p *participant) recordRestored() {
	if p.file == nil {
		return
	}
	p.file.mu.Lock()
	loaded := p.file.loaded
	p.file.mu.Unlock()
	sn := p.inf.Snapshot()
	label, err := revisionLabel(sn.Revision())
	if loaded == 0 || err != nil || label != loaded || !p.inf.Stats().Restored {
		return
	}
	p.warm = 1
	p.rec.AddRead(Read{Who: p.spec.Name, At: time.Now(), Restores: int(p.restores.Load()), Label: label, State: stateOf(sn), Exact: true, Kind: "restored"})
}

// read records each new state the informer publishes, until ctx ends or the recording
// is full.
func (p *participant) read(ctx context.Context) {
	var prev *informer.Snapshot[string, *Item]
	for ctx.Err() == nil && !p.rec.Full() {
		sn := p.inf.Snapshot()
		if sn != prev {
			prev = sn
			if label, err := revisionLabel(sn.Revision()); err == nil {
				p.rec.AddRead(Read{Who: p.spec.Name, At: time.Now(), Restores: int(p.restores.Load()), Label: label,
					State: stateOf(sn), Index: indexOf(sn), Kind: "snapshot", Filter: p.spec.Filter})
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Microsecond): // a reader's pace
		}
	}
}

func stateOf(r informer.Reader[string, *Item]) map[string]string {
	m := make(map[string]string, r.Len())
	for k, v := range r.All() {
		m[k] = v.Value
	}
	return m
}

func indexOf(r informer.Reader[string, *Item]) map[string][]string {
	vals, err := r.IndexValues(indexName)
	if err != nil {
		return nil
	}
	out := make(map[string][]string)
	for v := range vals {
		keys, _ := r.ByIndex(indexName, v)
		for k := range keys {
			out[v] = append(out[v], k)
		}
		slices.Sort(out[v])
	}
	return out
}

// stop stops the informer and its reader and waits for them; the informer saves once
// more as it stops.
func (p *participant) stop() {
	if p.cancel == nil {
		return
	}
	if p.hs != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = p.hs.Close() // cuts every connection, as a crash would
		_ = p.srv.Shutdown(ctx)
		cancel()
		p.hs, p.srv = nil, nil
	}
	p.cancel()
	<-p.done
	p.past = append(p.past, p.currentRuns()...)
	p.lists += p.inf.Stats().Relists + p.warm
	p.cancel = nil
}

// waitFor waits until the informer has reached rev, at most limit.
func (p *participant) waitFor(rev int64, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	err := p.inf.WaitForRevision(ctx, etcd.FormatRevision(rev))
	if err == nil {
		label, _ := revisionLabel(p.inf.Snapshot().Revision())
		p.rec.AddWait(Wait{Who: p.spec.Name, Rev: rev, Label: label})
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("informer %s did not reach revision %d in %v (at %s)", p.spec.Name, rev, limit, p.inf.Snapshot().Revision())
	}
	return err
}

// waitHandlers waits, until deadline at most, until what each handler's notifications add
// up to is etcd's state at last: a handler converges only after the run quiesces.
func (p *participant) waitHandlers(last int64, hist *recorder, deadline time.Time) {
	want := filtered(hist.StateAt(last), p.spec.Filter)
	for _, h := range p.handlers {
		for !maps.Equal(h.State(), want) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // polling a handler's queue with a deadline
		}
	}
}

// revisionLabel returns the etcd revision a revision of an informer names: its own, or a
// fan-out client's without the tag of its history (httpsource.PlainRevision).
func revisionLabel(rev string) (int64, error) {
	return strconv.ParseInt(httpsource.PlainRevision(rev), 10, 64)
}
