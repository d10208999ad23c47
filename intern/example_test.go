package intern_test

import (
	"encoding/json"
	"fmt"
	"unsafe"

	"github.com/informer-go/informer/intern"
)

type Service struct {
	Name      string
	Namespace string
	Labels    map[string]string
	Ports     []struct{ Name, Protocol string }
}

// Strings as an informer's transform: objects decoded apart end up holding one copy of
// each repeated string.
func ExampleStrings() {
	tf := intern.Strings[*Service]() // informer.Options[string, *Service]{Transform: tf}

	var a, b *Service
	json.Unmarshal([]byte(`{"Name":"web","Namespace":"shop","Labels":{"team":"payments"},"Ports":[{"Name":"http","Protocol":"TCP"}]}`), &a)
	json.Unmarshal([]byte(`{"Name":"api","Namespace":"shop","Labels":{"team":"payments"},"Ports":[{"Name":"http","Protocol":"TCP"}]}`), &b)
	a, _ = tf(a)
	b, _ = tf(b)

	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	fmt.Println(same(a.Namespace, b.Namespace), same(a.Labels["team"], b.Labels["team"]), same(a.Ports[0].Protocol, b.Ports[0].Protocol))
	fmt.Println(a.Name, b.Name)
	// Output:
	// true true true
	// web api
}

// StringMap shares whole maps: the pods of a ReplicaSet carry equal labels.
func ExampleStringMap() {
	var a, b map[string]string
	json.Unmarshal([]byte(`{"app":"web","pod-template-hash":"5d8f9c"}`), &a)
	json.Unmarshal([]byte(`{"pod-template-hash":"5d8f9c","app":"web"}`), &b)
	a, b = intern.StringMap(a), intern.StringMap(b)
	fmt.Println(fmt.Sprintf("%p", a) == fmt.Sprintf("%p", b), b["app"])
	// Output: true web
}
