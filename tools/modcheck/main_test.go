package main

import "testing"

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
