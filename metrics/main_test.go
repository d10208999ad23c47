package metrics_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// expectSeries compares the named families gathered from reg with want, in the text
// exposition format.
func expectSeries(t *testing.T, reg prometheus.Gatherer, want string, names ...string) {
	t.Helper()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// exposition returns the text exposition of samples (lines "name{labels} value"), each
// family's HELP and TYPE lines, from families, before its first sample. The samples of a
// family must be adjacent.
func exposition(samples ...string) string {
	var b strings.Builder
	b.WriteString("\n")
	last := ""
	for _, s := range samples {
		name := s[:strings.IndexAny(s, "{ ")]
		fam := name
		if _, ok := families[fam]; !ok {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if f, ok := families[strings.TrimSuffix(name, suffix)]; ok && f.typ == "histogram" {
					fam = strings.TrimSuffix(name, suffix)
				}
			}
		}
		f, ok := families[fam]
		if !ok {
			panic("exposition: no HELP and TYPE for " + name + " in families")
		}
		if fam != last {
			fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", fam, f.help, fam, f.typ)
			last = fam
		}
		b.WriteString(s + "\n")
	}
	return b.String()
}

// histogramSamples returns a histogram's samples as they are exported, for exposition: for
// each upper bound les[i] a _bucket sample holding cum[i] (the cumulative count), the
// +Inf bucket and _count holding count, and _sum holding sum. labels (`k="v",…`) come
// before le.
func histogramSamples(name, labels string, les []string, cum []int, count int, sum string) []string {
	var out []string
	for i, le := range append(les, "+Inf") {
		n := count
		if i < len(les) {
			n = cum[i]
		}
		out = append(out, fmt.Sprintf("%s_bucket{%s,le=%q} %d", name, labels, le, n))
	}
	return append(out,
		fmt.Sprintf("%s_sum{%s} %s", name, labels, sum),
		fmt.Sprintf("%s_count{%s} %d", name, labels, count))
}

// families holds the HELP and TYPE of each family the tests expect, so that an expected
// exposition (see exposition) lists only its samples.
var families = map[string]struct{ help, typ string }{
	"controller_runtime_max_concurrent_reconciles":       {"Maximum number of concurrent reconciles per controller.", "gauge"},
	"controller_runtime_reconcile_total":                 {"Total number of reconciliations per controller, by result: success, error, requeue, requeue_after, terminal.", "counter"},
	"controller_runtime_reconcile_errors_total":          {"Total number of reconciliation errors per controller (terminal errors and panics included).", "counter"},
	"controller_runtime_terminal_reconcile_errors_total": {"Total number of terminal reconciliation errors per controller.", "counter"},
	"controller_runtime_reconcile_panics_total":          {"Total number of reconciliation panics per controller.", "counter"},
	"controller_runtime_active_workers":                  {"Number of currently used workers per controller.", "gauge"},
	"workqueue_depth":                                    {"Current depth of the work queue: items waiting for Get.", "gauge"},
	"workqueue_adds_total":                               {"Total number of adds handled by the work queue (adds merged into an item already queued are not counted).", "counter"},
	"workqueue_retries_total":                            {"Total number of retries (rate-limited adds) handled by the work queue.", "counter"},
	"workqueue_unfinished_work_seconds":                  {"How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.", "gauge"},
	"workqueue_longest_running_processor_seconds":        {"How many seconds has the longest running processor for the work queue been running.", "gauge"},
	"informer_store_objects":                             {"Objects in the informer's cache.", "gauge"},
	"informer_lists_total":                               {"Lists started by the informer, streaming lists included.", "counter"},
	"informer_synced":                                    {"1 once the informer's initial list is in its cache, else 0.", "gauge"},
	"informer_handler_synced":                            {"1 once the handler has been given the initial state, else 0.", "gauge"},
	"informer_list_errors_total":                         {"Lists that failed.", "counter"},
	"informer_relists_total":                             {"Lists, the initial one included, whose result replaced the content of the informer's cache.", "counter"},
	"informer_watches_total":                             {"Watches opened by the informer.", "counter"},
	"informer_watch_errors_total":                        {"Watches that failed.", "counter"},
	"informer_expirations_total":                         {"Times the informer found its revision expired.", "counter"},
	"informer_watch_events_total":                        {"Watch events received, by type.", "counter"},
	"informer_errors_total":                              {"Errors the informer reported, by kind: key, index or transform function failures, objects the source could not decode, other bad input from the source, handler panics, other.", "counter"},
	"informer_last_sync_revision":                        {"Revision of the last list or watch event the informer received (its 15 least significant digits); absent until then, or when the revision is not a decimal integer.", "gauge"},
	"informer_handler_queue_depth":                       {"Notifications waiting for the handler, the one being delivered included.", "gauge"},
	"informer_handler_delivered_total":                   {"Calls made to the handler.", "counter"},
	"informer_handler_coalesced_total":                   {"Notifications merged into a newer one because the handler's queue was full.", "counter"},
	"informer_handler_blocked_total":                     {"Times the informer waited for room in the handler's queue.", "counter"},
	"informer_handler_panics_total":                      {"Handler calls that panicked.", "counter"},
	"informer_applied_total":                             {"Changes applied to the informer's cache, listed objects and resyncs included.", "counter"},
	"informer_duplicates_total":                          {"Objects the source sent for a key the informer already had: a key twice in one list, or an ADDED event for a cached key.", "counter"},
	"informer_list_items":                                {"Objects per successful list.", "histogram"},
	"informer_handler_delivery_latency_seconds":          {"Time notifications waited in the handler's queue; kept for handlers added with HandlerOptions.MeasureLatency.", "histogram"},
	"workqueue_queue_duration_seconds":                   {"How long in seconds an item stays in the work queue before being requested.", "histogram"},
}

// expectNoSeries checks that reg exports nothing at all.
func expectNoSeries(t *testing.T, reg prometheus.Gatherer) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		t.Errorf("series left: %s (%d)", mf.GetName(), len(mf.GetMetric()))
	}
}

// histogram returns the sample count and sum of the one series of the histogram family
// name gathered from reg.
func histogram(t *testing.T, reg prometheus.Gatherer, name string) (count uint64, sum float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		if len(mf.GetMetric()) != 1 {
			t.Fatalf("%s: %d series, want 1", name, len(mf.GetMetric()))
		}
		h := mf.GetMetric()[0].GetHistogram()
		return h.GetSampleCount(), h.GetSampleSum()
	}
	t.Fatalf("%s: not gathered", name)
	return 0, 0
}

// lint checks every gathered family against Prometheus' naming conventions.
func lint(t *testing.T, reg prometheus.Gatherer) {
	t.Helper()
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// alreadyRegistered reports whether err is, or wraps, a prometheus.AlreadyRegisteredError.
func alreadyRegistered(err error) bool {
	var are prometheus.AlreadyRegisteredError
	return errors.As(err, &are)
}

// expectNames checks the name rules every Register function keeps, on reg, which holds no
// series: once name is registered, a second registration under name is refused with an
// AlreadyRegisteredError; another name is taken beside it (with family set, each has its
// series of family, at 0); once both are unregistered nothing is left and name is free
// again; a nil registerer is refused. register registers on reg under a name.
func expectNames[M interface{ Unregister() bool }](t *testing.T, reg *prometheus.Registry, register func(prometheus.Registerer, string) (M, error), name, other, family string) {
	t.Helper()
	first, err := register(reg, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := register(reg, name); !alreadyRegistered(err) {
		t.Errorf("second registration of %q: %v, want an AlreadyRegisteredError", name, err)
	}
	o, err := register(reg, other)
	if err != nil {
		t.Fatal(err)
	}
	if family != "" {
		expectSeries(t, reg, exposition(
			fmt.Sprintf("%s{name=%q} 0", family, name),
			fmt.Sprintf("%s{name=%q} 0", family, other),
		), family)
	}
	first.Unregister()
	o.Unregister()
	expectNoSeries(t, reg)
	again, err := register(reg, name)
	if err != nil {
		t.Fatalf("registration of %q after Unregister: %v", name, err)
	}
	again.Unregister()
	expectNoSeries(t, reg)
	if _, err := register(nil, name); err == nil {
		t.Errorf("registration of %q on a nil registerer: no error", name)
	}
}
