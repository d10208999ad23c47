package persist

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad: any file is loaded whole or refused with ErrCorrupt or ErrIncompatible; it
// never panics, and never yields an object without an error or a whole snapshot.
func FuzzLoad(f *testing.F) {
	dir := f.TempDir()
	for i, n := range []int{0, 1, 5} {
		path := filepath.Join(dir, "seed"+string(rune('0'+i)))
		write(f, path, makeState("9", n))
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "s.snapshot")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := read(path)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrIncompatible) {
				t.Fatalf("error of no class: %v", err)
			}
			return
		}
		// Loaded: writing it again gives the same bytes.
		again := filepath.Join(t.TempDir(), "again.snapshot")
		write(t, again, s)
		b, err := os.ReadFile(again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, data) {
			t.Fatalf("a loaded file does not round-trip")
		}
	})
}
