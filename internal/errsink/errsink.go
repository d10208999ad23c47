// Package errsink holds the error handlers a source reports to, and the Warner that logs
// errors when no handler is set. A source that can fail on one object (a value it cannot
// decode) implements informer.ErrorReporting: every informer built over it hands it a
// report function, and each such error reaches them all.
package errsink

import "sync/atomic"

// List is a copy-on-write list of report functions. The zero value is an empty list; Add
// and Report are safe for concurrent use. Report costs one atomic load and a call per
// function; Add copies the list (informers are added rarely, errors reported often).
type List struct {
	funcs atomic.Pointer[[]func(error)]
}

// Add appends report to the list: Report calls it from then on.
func (l *List) Add(report func(error)) {
	for {
		old := l.funcs.Load()
		var next []func(error)
		if old != nil {
			next = append(next, *old...)
		}
		next = append(next, report)
		if l.funcs.CompareAndSwap(old, &next) {
			return
		}
	}
}

// Report calls every function added so far with err, in the order they were added.
func (l *List) Report(err error) {
	if funcs := l.funcs.Load(); funcs != nil {
		for _, report := range *funcs {
			report(err)
		}
	}
}
