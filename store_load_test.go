package informer

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// The bulk load of a restored state: unsorted keys, a duplicate (the last wins, its
// index entries only), an object an index function rejects (reported, left out); the
// notifications are initial adds in key order and the state is exact at the revision.
func TestStoreLoad(t *testing.T) {
	c, _ := defaultCompare[string]()
	s, err := newStore[string, *pod](c, Indexers[*pod]{
		"byUser": IndexByValues(byUser),
		"ns": IndexBy(func(p *pod) (string, error) {
			if p.ns == "bad" {
				return "", errors.New("bad namespace")
			}
			return p.ns, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	objs := []*pod{
		{name: "c", users: "ernie", ns: "a"},
		{name: "a", users: "bert,ernie", ns: "a"},
		{name: "x", ns: "bad"},
		{name: "b", users: "bert", ns: "b"},
		{name: "a", users: "elmo", ns: "b"}, // a duplicate of a: the last wins
	}
	keys := []string{"c", "a", "x", "b", "a"}
	var reported []error
	notes := s.load(keys, objs, "42", func(err error) { reported = append(reported, err) }, nil)
	var got []string
	for _, n := range notes {
		if n.kind != notifyAdd || !n.initial {
			t.Fatalf("notification %+v, want an initial add", n)
		}
		got = append(got, n.key+"="+n.new.users)
	}
	if want := []string{"a=elmo", "b=bert", "c=ernie"}; !slices.Equal(got, want) {
		t.Fatalf("notifications %v, want %v", got, want)
	}
	var oe *ObjectError
	if len(reported) != 1 || !errors.As(reported[0], &oe) || oe.Key != "x" {
		t.Fatalf("reported %v, want one ObjectError for x", reported)
	}
	sn := s.snapshot()
	if sn.Revision() != "42" || !sn.exact || sn.Len() != 3 {
		t.Fatalf("snapshot at %q (exact %v) with %d objects", sn.Revision(), sn.exact, sn.Len())
	}
	for _, q := range []struct{ index, value, want string }{
		{"byUser", "ernie", "c"}, {"byUser", "bert", "b"}, {"byUser", "elmo", "a"},
		{"ns", "a", "c"}, {"ns", "b", "a,b"},
	} {
		ks, err := sn.IndexKeys(q.index, q.value)
		if err != nil || !slices.Equal(ks, strings.Split(q.want, ",")) {
			t.Errorf("%s=%s: %v %v, want %s", q.index, q.value, ks, err, q.want)
		}
	}
}
