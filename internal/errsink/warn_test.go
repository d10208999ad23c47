package errsink

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/informer-go/informer/clock"
)

// A Warner logs the first error of a kind, counts the ones within the interval, and
// logs the next one after it with that count; kinds are limited apart.
func TestWarnerOneLinePerKindPerInterval(t *testing.T) {
	var buf bytes.Buffer
	clk := clock.NewFake(time.Unix(1000, 0))
	w := NewWarner(slog.New(slog.NewTextHandler(&buf, nil)), clk, 10*time.Second, "an error (set a handler)")
	for i := range 5 {
		w.Warn("encode", errors.New("e"+string(rune('0'+i))))
	}
	w.Warn("too_large", errors.New("big"))
	clk.Step(9 * time.Second)
	w.Warn("encode", errors.New("e5"))
	clk.Step(time.Second)
	w.Warn("encode", errors.New("e6"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		`level=WARN msg="an error (set a handler)" kind=encode err=e0 suppressed=0`,
		`level=WARN msg="an error (set a handler)" kind=too_large err=big suppressed=0`,
		`level=WARN msg="an error (set a handler)" kind=encode err=e6 suppressed=5`,
	}
	if len(lines) != len(want) {
		t.Fatalf("logged %d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, l := range lines {
		if _, rest, _ := strings.Cut(l, " "); rest != want[i] { // after time=…
			t.Errorf("line %d: %s\nwant: %s", i, rest, want[i])
		}
	}
}
