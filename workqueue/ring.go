package workqueue

// ring is the FIFO behind Queue: a growable circular buffer whose length is a power of two.
// It grows by doubling when full. It halves after as many pops at under 1/8 full as it
// has slots, provided it was not a quarter full meanwhile, so a queue that fills and
// drains in bursts keeps its buffer while one that has settled below its peak gives
// memory back. It is not safe for concurrent use.
type ring[T any] struct {
	buf   []T
	head  int // index of the oldest element
	n     int // number of elements
	quiet int // pops in a row at under 1/8 full
}

const ringMinSize = 16

func (r *ring[T]) len() int { return r.n }

func (r *ring[T]) push(x T) {
	if r.n == len(r.buf) {
		r.resize(max(ringMinSize, 2*len(r.buf)))
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = x
	r.n++
	if 4*r.n >= len(r.buf) {
		r.quiet = 0
	}
}

// pop removes and returns the oldest element. The ring must not be empty.
func (r *ring[T]) pop() T {
	x := r.buf[r.head]
	var zero T
	r.buf[r.head] = zero // let the element be collected
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	if len(r.buf) > ringMinSize && 8*r.n < len(r.buf) {
		if r.quiet++; r.quiet >= len(r.buf) {
			r.quiet = 0
			r.resize(len(r.buf) / 2)
		}
	}
	return x
}

// resize moves the elements, oldest first, into a new buffer of size elements.
func (r *ring[T]) resize(size int) {
	buf := make([]T, size)
	if r.n > 0 {
		k := copy(buf, r.buf[r.head:min(r.head+r.n, len(r.buf))])
		copy(buf[k:], r.buf[:r.n-k])
	}
	r.buf = buf
	r.head = 0
}
