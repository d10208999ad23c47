package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTidyDiff checks which outputs of go mod tidy -diff count as a failure: only the
// go.sum lines of the repository's own modules are ignored.
func TestTidyDiff(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  string
		fail bool
	}{
		{"own go.sum lines only", `go: downloading github.com/informer-go/informer v0.0.0-20261123050157-6123558f0c70
diff current/go.sum tidy/go.sum
--- current/go.sum
+++ tidy/go.sum
@@ -1,2 +1,4 @@
 github.com/google/btree v1.1.3 h1:CVpQ=
+github.com/informer-go/informer v0.0.0-20261123050157-6123558f0c70 h1:abc=
+github.com/informer-go/informer v0.0.0-20261123050157-6123558f0c70/go.mod h1:def=
`, false},
		{"another module's go.sum line", `diff current/go.sum tidy/go.sum
--- current/go.sum
+++ tidy/go.sum
@@ -1,2 +1,3 @@
+gopkg.in/yaml.v3 v3.0.1 h1:fxVm=
`, true},
		{"a go.mod requirement of an own module", `diff current/go.mod tidy/go.mod
--- current/go.mod
+++ tidy/go.mod
@@ -3,1 +3,2 @@
+	github.com/informer-go/informer/source/etcd v0.0.0-20261123050157-6123558f0c70
`, true},
		{"an error", "go: github.com/x/y@v1.0.0: reading https://proxy.golang.org/...: 404 Not Found\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if fail, _ := tidyDiff([]byte(tc.out)); fail != tc.fail {
				t.Fatalf("tidyDiff failed = %v, want %v", fail, tc.fail)
			}
		})
	}
}

// TestUserModuleCacheUntouched checks that modcheck leaves the user's module cache alone:
// a copy of the repository's own modules there (fetched for another project) is still
// there after the setup that serves the working tree in their place, and the checks run
// with a module cache of their own inside the checkout, reading the user's only as a proxy.
func TestUserModuleCacheUntouched(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	user := t.TempDir()
	t.Setenv("GOMODCACHE", user)
	kept := []string{
		filepath.Join(user, "github.com", "informer-go", "informer@v0.0.0-20260101000000-000000000000", "go.mod"),
		filepath.Join(user, "cache", "download", "github.com", "informer-go", "informer", "@v", "list"),
	}
	for _, f := range kept {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("the user's\n"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	_, environ, tmp, err := setup(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	for _, f := range kept {
		if data, err := os.ReadFile(f); err != nil || string(data) != "the user's\n" {
			t.Errorf("%s: %q, %v: modcheck changed the user's module cache", f, data, err)
		}
	}
	want := map[string]string{
		"GOMODCACHE": filepath.Join(buildDir(root), "gomodcache"),
		"GOPROXY":    "file://" + filepath.ToSlash(filepath.Join(buildDir(root), "work", "proxy")) + ",file://" + filepath.ToSlash(filepath.Join(user, "cache", "download")) + ",",
	}
	got := map[string]string{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v // the last one wins, as for exec
	}
	if got["GOMODCACHE"] != want["GOMODCACHE"] {
		t.Errorf("GOMODCACHE=%s, want modcheck's own %s", got["GOMODCACHE"], want["GOMODCACHE"])
	}
	if !strings.HasPrefix(got["GOPROXY"], want["GOPROXY"]) {
		t.Errorf("GOPROXY=%s, want it to start with %s (the working tree, then the user's cache read as a proxy)", got["GOPROXY"], want["GOPROXY"])
	}
}
