package informer

import (
	"cmp"
	"fmt"
	"reflect"
	"strings"
	"unsafe"

	"github.com/informer-go/informer/internal/btree"
)

// This file is the cache's key order: K's natural order, compared in place where it can be.

// defaultCompare returns the natural order of K when K's underlying type is a string,
// integer or floating-point type (any cmp.Ordered type, named ones such as
// `type ID int64` included), or a struct of such fields (compared field by field in
// declaration order, as a tuple), and false otherwise: the user must then give
// Options.CompareKeys.
func defaultCompare[K comparable]() (func(a, b K) int, bool) {
	switch reflect.TypeFor[K]().Kind() {
	case reflect.Struct:
		return structCompare[K]()
	case reflect.String:
		return func(a, b K) int { return strings.Compare(asString(&a), asString(&b)) }, true
	case reflect.Int:
		return orderedAs[K, int](), true
	case reflect.Int8:
		return orderedAs[K, int8](), true
	case reflect.Int16:
		return orderedAs[K, int16](), true
	case reflect.Int32:
		return orderedAs[K, int32](), true
	case reflect.Int64:
		return orderedAs[K, int64](), true
	case reflect.Uint:
		return orderedAs[K, uint](), true
	case reflect.Uint8:
		return orderedAs[K, uint8](), true
	case reflect.Uint16:
		return orderedAs[K, uint16](), true
	case reflect.Uint32:
		return orderedAs[K, uint32](), true
	case reflect.Uint64:
		return orderedAs[K, uint64](), true
	case reflect.Uintptr:
		return orderedAs[K, uintptr](), true
	case reflect.Float32:
		return orderedAs[K, float32](), true
	case reflect.Float64:
		return orderedAs[K, float64](), true
	}
	return nil, false
}

// structCompare orders a struct K whose fields are all of ordered kinds, field by field.
// A struct of strings only (such as struct{ Namespace, Name string }) compares them with no
// call per field.
func structCompare[K comparable]() (func(a, b K) int, bool) {
	if offs, ok := stringFields[K](); ok {
		return func(a, b K) int {
			pa, pb := unsafe.Pointer(&a), unsafe.Pointer(&b)
			for _, off := range offs {
				if c := strings.Compare(*(*string)(unsafe.Add(pa, off)), *(*string)(unsafe.Add(pb, off))); c != 0 {
					return c
				}
			}
			return 0
		}, true
	}
	t := reflect.TypeFor[K]()
	type field struct {
		off uintptr
		cmp func(a, b unsafe.Pointer) int
	}
	fields := make([]field, t.NumField())
	for i := range fields {
		f := t.Field(i)
		if fields[i] = (field{f.Offset, fieldCompare(f.Type.Kind())}); fields[i].cmp == nil {
			return nil, false
		}
	}
	return func(a, b K) int {
		pa, pb := unsafe.Pointer(&a), unsafe.Pointer(&b)
		for _, f := range fields {
			if c := f.cmp(unsafe.Add(pa, f.off), unsafe.Add(pb, f.off)); c != 0 {
				return c
			}
		}
		return 0
	}, true
}

// stringFields returns the offsets of K's fields when K is a struct of strings only.
func stringFields[K comparable]() ([]uintptr, bool) {
	t := reflect.TypeFor[K]()
	if t.Kind() != reflect.Struct {
		return nil, false
	}
	offs := make([]uintptr, t.NumField())
	for i := range offs {
		f := t.Field(i)
		if f.Type.Kind() != reflect.String {
			return nil, false
		}
		offs[i] = f.Offset
	}
	return offs, true
}

// fieldCompare compares two values of an ordered kind through pointers; nil for any other
// kind.
func fieldCompare(k reflect.Kind) func(a, b unsafe.Pointer) int {
	switch k {
	case reflect.String:
		return pointedCompare[string]
	case reflect.Int:
		return pointedCompare[int]
	case reflect.Int8:
		return pointedCompare[int8]
	case reflect.Int16:
		return pointedCompare[int16]
	case reflect.Int32:
		return pointedCompare[int32]
	case reflect.Int64:
		return pointedCompare[int64]
	case reflect.Uint:
		return pointedCompare[uint]
	case reflect.Uint8:
		return pointedCompare[uint8]
	case reflect.Uint16:
		return pointedCompare[uint16]
	case reflect.Uint32:
		return pointedCompare[uint32]
	case reflect.Uint64:
		return pointedCompare[uint64]
	case reflect.Uintptr:
		return pointedCompare[uintptr]
	case reflect.Float32:
		return pointedCompare[float32]
	case reflect.Float64:
		return pointedCompare[float64]
	}
	return nil
}

func pointedCompare[T cmp.Ordered](a, b unsafe.Pointer) int { return cmp.Compare(*(*T)(a), *(*T)(b)) }

// isString reports whether K's underlying type is string.
func isString[K comparable]() bool { return reflect.TypeFor[K]().Kind() == reflect.String }

// asString reads a K whose underlying type is string, without boxing.
func asString[K comparable](k *K) string { return *(*string)(unsafe.Pointer(k)) }

// orderedAs compares two Ks whose underlying type is T, without boxing.
func orderedAs[K comparable, T cmp.Ordered]() func(a, b K) int {
	return func(a, b K) int {
		return cmp.Compare(*(*T)(unsafe.Pointer(&a)), *(*T)(unsafe.Pointer(&b)))
	}
}

// treeKit is what every tree of the cache shares: the key order, the free list of nodes,
// and the epoch of the newest snapshot (a tree made in the current epoch is no snapshot's
// and may be changed in place).
type treeKit[K comparable, V any] struct {
	compare func(a, b K) int
	order   btree.Order[K] // compare, for the trees
	nodes   *btree.FreeList[K, V]
	epoch   uint64
}

// newTreeKit returns the kit of trees ordered by compare; a nil compare is K's natural
// order (see Options.CompareKeys), which K's that are strings or structs of two strings
// are compared in without an indirect call.
func newTreeKit[K comparable, V any](compare func(a, b K) int) (*treeKit[K, V], error) {
	natural := compare == nil
	if natural {
		var ok bool
		if compare, ok = defaultCompare[K](); !ok {
			var k K
			return nil, fmt.Errorf("informer: New: key type %T has no natural order; set Options.CompareKeys", k)
		}
	}
	t := &treeKit[K, V]{compare: compare, nodes: &btree.FreeList[K, V]{}}
	offs, strs := stringFields[K]()
	switch {
	case natural && isString[K]():
		// The common case, compared in place without an indirect call.
		t.order = btree.ByString[K]()
	case natural && strs && len(offs) == 2:
		// A struct of two strings (namespace and name), likewise.
		t.order = btree.ByStringFields[K](offs[0], offs[1])
	default: // the user's order, or a natural order of another shape
		t.order = btree.ByCompare(compare)
	}
	return t, nil
}

// Compare orders two keys.
func (t *treeKit[K, V]) Compare(a, b K) int { return t.compare(a, b) }

// NewTree returns an empty tree of the given degree.
func (t *treeKit[K, V]) NewTree(degree int) *btree.Tree[K, V] {
	return btree.New(degree, t.order, t.nodes)
}

// Epoch returns the current epoch; NewEpoch starts the next, as a snapshot is made.
func (t *treeKit[K, V]) Epoch() uint64 { return t.epoch }

// NewEpoch starts a new epoch: every tree made before may be a snapshot's.
func (t *treeKit[K, V]) NewEpoch() { t.epoch++ }

// scatterAbove is the batch size from which Apply scatters its writes.
const scatterAbove = 64

// ScatterStride returns the step with which a batch of n keys is written: 0 below
// scatterAbove (written in the queue's order), else a step that visits every index of
// [0, n) once when repeated.
func (t *treeKit[K, V]) ScatterStride(n int) int {
	if n < scatterAbove {
		return 0
	}
	for _, p := range [...]int{7919, 7927, 7933, 7937, 7949} {
		if n%p != 0 {
			return p % n
		}
	}
	return 1
}
