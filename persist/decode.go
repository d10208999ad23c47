package persist

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
)

// chunkRecords and chunkBytes bound a chunk of records decoded by one worker.
const (
	chunkRecords = 512
	chunkBytes   = 1 << 20
)

// chunk is a run of records read from the file, decoded by one worker.
type chunk[V any] struct {
	first int    // the number of its first record in the file
	data  []byte // the records' bytes, one after the other
	ends  []int  // the end of each record in data
	objs  []V    // decoded
	err   error  // the first record that failed to decode
	done  chan struct{}
}

// decoder decodes records on GOMAXPROCS workers while the file is read, and hands the
// objects to add in file order on the reading goroutine: decoding, not reading, is most of
// a load's cost.
type decoder[V any] struct {
	codec   Codec[V]
	add     func(V)
	work    chan *chunk[V]
	pending []*chunk[V] // sent to the workers, in file order
	cur     *chunk[V]
	free    []*chunk[V]
	records int
	failed  error
	wg      sync.WaitGroup
}

func newDecoder[V any](codec Codec[V], add func(V)) *decoder[V] {
	workers := runtime.GOMAXPROCS(0)
	d := &decoder[V]{codec: codec, add: add, work: make(chan *chunk[V], workers)}
	d.wg.Add(workers)
	for range workers {
		go func() {
			defer d.wg.Done()
			for c := range d.work {
				c.decode(codec)
				close(c.done)
			}
		}()
	}
	return d
}

func (c *chunk[V]) decode(codec Codec[V]) {
	start := 0
	for i, end := range c.ends {
		obj, err := safeDecode(codec, c.data[start:end])
		if err != nil {
			c.err = fmt.Errorf("record %d: %s cannot decode it: %v", c.first+i, codec.Name(), err)
			return
		}
		c.objs = append(c.objs, obj)
		start = end
	}
}

// safeDecode decodes data, turning a panic of the codec into an error.
func safeDecode[V any](c Codec[V], data []byte) (v V, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("codec %s panicked: %v", c.Name(), r)
		}
	}()
	return c.Decode(data)
}

// next returns a buffer of n bytes for the next record, to be filled by the caller.
func (d *decoder[V]) next(n int) []byte {
	c := d.cur
	if c != nil && (len(c.ends) == chunkRecords || len(c.data)+n > chunkBytes && len(c.ends) > 0) {
		d.send()
		c = nil
	}
	if c == nil {
		if k := len(d.free); k > 0 {
			c, d.free = d.free[k-1], d.free[:k-1]
		} else {
			c = &chunk[V]{}
		}
		c.first, c.err, c.done = d.records, nil, make(chan struct{})
		c.data, c.ends, c.objs = c.data[:0], c.ends[:0], c.objs[:0]
		d.cur = c
	}
	start := len(c.data)
	c.data = slices.Grow(c.data, n)[:start+n]
	c.ends = append(c.ends, len(c.data))
	d.records++
	return c.data[start:]
}

// send queues the current chunk to the workers, first taking the results of the oldest
// chunks while too many are pending.
func (d *decoder[V]) send() {
	for len(d.pending) >= 2*cap(d.work) {
		d.take()
	}
	d.pending = append(d.pending, d.cur)
	d.work <- d.cur
	d.cur = nil
}

// take waits for the oldest pending chunk and hands its objects to add.
func (d *decoder[V]) take() {
	c := d.pending[0]
	d.pending = d.pending[1:]
	<-c.done
	if c.err != nil && d.failed == nil {
		d.failed = c.err
	}
	if d.failed == nil {
		for _, obj := range c.objs {
			d.add(obj)
		}
	}
	clear(c.objs)
	d.free = append(d.free, c)
}

// err returns the first decoding error found so far.
func (d *decoder[V]) err() error { return d.failed }

// flush decodes what is left and returns the first decoding error.
func (d *decoder[V]) flush() error {
	if d.cur != nil {
		d.send()
	}
	for len(d.pending) > 0 {
		d.take()
	}
	return d.failed
}

// close stops the workers after the chunks in progress.
func (d *decoder[V]) close() {
	close(d.work)
	d.wg.Wait()
}
