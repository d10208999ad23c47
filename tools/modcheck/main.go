// Command modcheck checks every module of the repository as a user gets it: with
// no go.work and no replace directive, each module's requirements on the
// repository's other modules resolved through a module proxy.
//
// The repository's modules require one another at one pseudo-version (the pin,
// v0.0.0-<commit time>-<12 hex digits of the commit>), as a published module
// must; go.work wires them together for local work. Those versions are not on
// the public proxy until the commit is pushed, so modcheck builds a file-based
// proxy from the working tree: each module's files (tracked and untracked but
// not ignored, as `git ls-files` lists them) zipped under the pinned version, and
// points GOPROXY at it first, then at the usual proxy for everything else.
//
// Usage, from the repository root (the Makefile's `modules`, `pin` and `tidy`):
//
//	cd tools && GOWORK=off go run ./modcheck check [dir…]  # every module's user graph (or those; "examples": the copied-out examples)
//	cd tools && GOWORK=off go run ./modcheck pin     # pin the repository's modules to HEAD
//	cd tools && GOWORK=off go run ./modcheck tidy    # go mod tidy in every module
//
// check runs, in a copy of each module outside the repository, with
//
//	GOWORK=off GOPROXY=file://<proxy>,<go env GOPROXY> GONOSUMDB=github.com/informer-go
//	GOFLAGS=-mod=mod GOTOOLCHAIN=local
//
// the commands go mod tidy -diff, go build ./... and go vet ./... (with make test's
// -race -trimpath, to share its build cache: see buildFlags), runs every
// module even when one fails, prints a summary and exits 1 naming the failing
// modules. It also fails on a replace directive to a local directory, on
// requirements of the repository's modules at anything but the one pin, on a go.work
// that does not wire them together, and on a go directive above what the module
// needs (see goDirective). Then it copies each example of the root module
// (examples/<name> without a go.mod of its own) out into a module of its own, as a
// user would start from it, and builds it there (see copiedOut).
//
// go.sum files hold no lines for the repository's own modules: their content
// is the working tree, so their hashes change with every edit. tidy -diff
// ignores those lines, and tidy removes them.
//
// Nothing outside the checkout changes. modcheck works under <repo>/.cache/modcheck:
// the copies of the modules, the proxy, and a module cache of its own (GOMODCACHE),
// kept from one run to the next. The user's module cache is only read, as a proxy
// (file://<GOMODCACHE>/cache/download) before the network one, so that what the user
// has downloaded is not downloaded again. Because the working tree is served under a
// fixed version, modcheck removes the repository's modules (and nothing else) from its
// own module cache before it serves them, so a later run never builds against an
// earlier run's files.
//
// Every command is timed, and a command that runs long says so every 30 seconds.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	gover "go/version"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// ownPrefix is the module path prefix of the repository's modules.
const ownPrefix = "github.com/informer-go/informer"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: modcheck check|pin [commit]|tidy")
		os.Exit(2)
	}
	root, err := repoRoot()
	if err != nil {
		fatal(err)
	}
	if os.Args[1] != "pin" {
		// Runs of one checkout share its module cache, where the repository's modules
		// are purged and served afresh: one run at a time per checkout.
		if err := os.MkdirAll(buildDir(root), 0o755); err != nil {
			fatal(err)
		}
		unlock, err := lock(filepath.Join(buildDir(root), "lock"))
		if err != nil {
			fatal(err)
		}
		defer unlock()
	}
	switch os.Args[1] {
	case "check":
		err = check(root, os.Args[2:])
	case "pin":
		rev := "HEAD"
		if len(os.Args) > 2 {
			rev = os.Args[2]
		}
		err = pin(root, rev)
	case "tidy":
		err = tidy(root)
	default:
		err = fmt.Errorf("unknown command %q: want check, pin or tidy", os.Args[1])
	}
	if err != nil {
		fatal(err)
	}
}

// buildDir is modcheck's directory in the checkout (ignored by git): the copies of the
// modules, the proxy and modcheck's own module cache.
func buildDir(root string) string { return filepath.Join(root, ".cache", "modcheck") }

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "modcheck:", err)
	os.Exit(1)
}

// repoRoot is the top of the git work tree (the directory holding go.work).
func repoRoot() (string, error) {
	if out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output(); err == nil {
		return strings.TrimSpace(string(out)), nil
	}
	// No git (a source archive): the directory above the one holding go.work.
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no git work tree and no go.work above %s: run modcheck inside the repository", dir)
		}
	}
}

// listFiles lists the repository's files, relative to root, with slashes: those git
// tracks or would track (untracked files that .gitignore does not exclude), or, without
// git, every file outside directories whose name starts with "." (.git, .cache).
func listFiles(root string) ([]string, error) {
	if out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output(); err == nil {
		var files []string
		for f := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
			if f == "" {
				continue
			}
			if _, err := os.Lstat(filepath.Join(root, f)); err != nil {
				continue // deleted in the working tree
			}
			files = append(files, f)
		}
		return files, nil
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	return files, err
}

// mod is one module of the repository.
type mod struct {
	dir   string // relative to the repository root, "." for the root module
	path  string // module path
	file  *modfile.File
	files []string // the module's files, relative to the repository root
}

// modules lists the repository's modules with their files: each file belongs to
// the module of its nearest enclosing directory that holds a go.mod.
func modules(root string) ([]*mod, error) {
	files, err := listFiles(root)
	if err != nil {
		return nil, err
	}
	byDir := map[string]*mod{}
	for _, f := range files {
		if path.Base(f) != "go.mod" {
			continue
		}
		dir := path.Dir(f)
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		mf, err := modfile.Parse(f, data, nil)
		if err != nil {
			return nil, err
		}
		if mf.Module == nil {
			return nil, fmt.Errorf("%s: no module line", f)
		}
		byDir[dir] = &mod{dir: dir, path: mf.Module.Mod.Path, file: mf}
	}
	for _, f := range files {
		for dir := path.Dir(f); ; dir = path.Dir(dir) {
			if m, ok := byDir[dir]; ok {
				m.files = append(m.files, f)
				break
			}
			if dir == "." {
				break
			}
		}
	}
	var mods []*mod
	for _, m := range byDir {
		mods = append(mods, m)
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].dir < mods[j].dir })
	return mods, nil
}

// own reports whether a module path is one of the repository's.
func own(p string) bool { return p == ownPrefix || strings.HasPrefix(p, ownPrefix+"/") }

// pinOf is the one version at which the repository's modules require one
// another; it fails if they disagree or use a version a proxy cannot serve.
func pinOf(mods []*mod) (string, error) {
	versions := map[string][]string{}
	for _, m := range mods {
		for _, r := range m.file.Require {
			if own(r.Mod.Path) {
				versions[r.Mod.Version] = append(versions[r.Mod.Version], m.dir+" requires "+r.Mod.Path)
			}
		}
	}
	if len(versions) == 0 {
		return "", nil
	}
	if len(versions) > 1 {
		var b strings.Builder
		for v, who := range versions {
			fmt.Fprintf(&b, "\n  %s: %s", v, strings.Join(who, ", "))
		}
		return "", fmt.Errorf("the repository's modules require one another at different versions (run `make pin`):%s", b.String())
	}
	for v := range versions {
		if !module.IsPseudoVersion(v) {
			return "", fmt.Errorf("the repository's modules require one another at %s, which is not a pseudo-version of a commit (run `make pin`)", v)
		}
		return v, nil
	}
	panic("unreachable")
}

// pin rewrites every requirement on the repository's own modules to the
// pseudo-version of rev.
func pin(root, rev string) error {
	out, err := exec.Command("git", "-C", root, "show", "-s", "--format=%H %ct", rev).Output()
	if err != nil {
		return fmt.Errorf("git show %s: %w", rev, err)
	}
	var hash string
	var unix int64
	if _, err := fmt.Sscanf(string(out), "%s %d", &hash, &unix); err != nil {
		return fmt.Errorf("git show %s: %q: %w", rev, out, err)
	}
	v := module.PseudoVersion("v0", "", time.Unix(unix, 0).UTC(), hash[:12])
	mods, err := modules(root)
	if err != nil {
		return err
	}
	for _, m := range mods {
		var args []string
		for _, r := range m.file.Require {
			if own(r.Mod.Path) && r.Mod.Version != v {
				args = append(args, "-require="+r.Mod.Path+"@"+v)
			}
		}
		if len(args) == 0 {
			continue
		}
		cmd := exec.Command("go", append([]string{"mod", "edit"}, args...)...)
		cmd.Dir = filepath.Join(root, m.dir)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: go mod edit: %w", m.dir, err)
		}
		fmt.Printf("%s: pinned %d requirement(s) to %s\n", m.dir, len(args), v)
	}
	return pinWork(root, v, mods)
}

// readWork reads and parses root's go.work.
func readWork(root string) (*modfile.WorkFile, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	return modfile.ParseWork("go.work", data, nil)
}

// pinWork points go.work's replacements of the pinned version of each required
// module at its directory: in workspace mode the go command still reads the
// go.mod of every required version, even of a workspace module, so without
// them it would ask the proxy for a version that is not published yet.
func pinWork(root, v string, mods []*mod) error {
	wf, err := readWork(root)
	if err != nil {
		return err
	}
	args := []string{"work", "edit"}
	for _, r := range wf.Replace {
		if own(r.Old.Path) && r.Old.Version != "" && r.Old.Version != v {
			args = append(args, "-dropreplace="+r.Old.Path+"@"+r.Old.Version)
		}
	}
	for _, m := range requiredMods(mods) {
		args = append(args, "-replace="+m.path+"@"+v+"=./"+strings.TrimPrefix(m.dir, "."))
	}
	// The file named: make runs the tool with GOWORK=off, under which go work edit finds
	// no go.work by itself.
	cmd := exec.Command("go", append(args, "go.work")...)
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go work edit: %w", err)
	}
	fmt.Printf("go.work: %s of the pinned modules replaced by their directories\n", v)
	return nil
}

// requiredMods are the repository's modules that another one requires.
func requiredMods(mods []*mod) []*mod {
	required := map[string]bool{}
	for _, m := range mods {
		for _, r := range m.file.Require {
			if own(r.Mod.Path) {
				required[r.Mod.Path] = true
			}
		}
	}
	var out []*mod
	for _, m := range mods {
		if required[m.path] {
			out = append(out, m)
		}
	}
	return out
}

// proxy writes a file-based module proxy serving each module of the repository
// that another requires, built from the working tree, under version v.
func proxy(root, dir, v string, mods []*mod, when time.Time) error {
	for _, m := range requiredMods(mods) {
		esc, err := module.EscapePath(m.path)
		if err != nil {
			return err
		}
		vdir := filepath.Join(dir, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(vdir, "list"), []byte(v+"\n"), 0o644); err != nil {
			return err
		}
		info, _ := json.Marshal(struct {
			Version string
			Time    time.Time
		}{v, when})
		if err := os.WriteFile(filepath.Join(vdir, v+".info"), info, 0o644); err != nil {
			return err
		}
		gomod, err := os.ReadFile(filepath.Join(root, m.dir, "go.mod"))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(vdir, v+".mod"), gomod, 0o644); err != nil {
			return err
		}
		var zfiles []zip.File
		for _, f := range m.files {
			rel := f
			if m.dir != "." {
				rel = strings.TrimPrefix(f, m.dir+"/")
			}
			zfiles = append(zfiles, zipFile{rel: rel, abs: filepath.Join(root, f)})
		}
		var buf bytes.Buffer
		if err := zip.Create(&buf, module.Version{Path: m.path, Version: v}, zfiles); err != nil {
			return fmt.Errorf("%s: module zip: %w", m.dir, err)
		}
		if err := os.WriteFile(filepath.Join(vdir, v+".zip"), buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

type zipFile struct{ rel, abs string }

func (f zipFile) Path() string                 { return f.rel }
func (f zipFile) Lstat() (fs.FileInfo, error)  { return os.Lstat(f.abs) }
func (f zipFile) Open() (io.ReadCloser, error) { return os.Open(f.abs) }

// purgeCache removes the repository's own modules from modcheck's module cache (they
// are served from the working tree under a fixed version, so a cached copy may be
// stale). Nothing else in the cache is touched.
func purgeCache(cache string) error {
	owner := path.Dir(ownPrefix) // github.com/informer-go
	for _, d := range []string{
		filepath.Join(cache, filepath.FromSlash(owner)),
		filepath.Join(cache, "cache", "download", filepath.FromSlash(owner)),
	} {
		// The module cache is read-only; make it writable before removing.
		filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("removing the repository's modules from the module cache: %w", err)
		}
	}
	return nil
}

// copyModule copies a module's files into dst.
func copyModule(root, dst string, m *mod) error {
	for _, f := range m.files {
		rel := f
		if m.dir != "." {
			rel = strings.TrimPrefix(f, m.dir+"/")
		}
		fi, err := os.Lstat(filepath.Join(root, f))
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return err
		}
		to := filepath.Join(dst, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(to, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// env is the environment of a user's build: no workspace, modcheck's own module cache,
// the repository's modules from the local proxy, everything else from the user's module
// cache (read only) or else the usual proxy.
func env(proxyDir, modCache string) ([]string, error) {
	out, err := exec.Command("go", "env", "GOPROXY", "GOFLAGS", "GOMODCACHE").Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	for len(lines) < 3 {
		lines = append(lines, "")
	}
	upstream, flags, userCache := lines[0], lines[1], lines[2]
	if upstream == "" || upstream == "off" {
		upstream = "https://proxy.golang.org,direct"
	}
	proxies := "file://" + filepath.ToSlash(proxyDir)
	if userCache != "" {
		if _, err := os.Stat(filepath.Join(userCache, "cache", "download")); err == nil {
			proxies += ",file://" + filepath.ToSlash(filepath.Join(userCache, "cache", "download"))
		}
	}
	return append(os.Environ(),
		"GOWORK=off",
		"GOMODCACHE="+modCache,
		"GOPROXY="+proxies+","+upstream,
		"GONOSUMDB="+path.Dir(ownPrefix),
		// -modcacherw: modcheck's module cache can be removed with rm -rf.
		"GOFLAGS="+strings.TrimSpace(flags+" -mod=mod -modcacherw"),
		"GOTOOLCHAIN=local",
	), nil
}

// setup checks the go.mod files, builds the proxy and returns the environment
// and a cleanup function.
func setup(root string) (mods []*mod, environ []string, tmp string, err error) {
	mods, err = modules(root)
	if err != nil {
		return nil, nil, "", err
	}
	var problems []string
	for _, m := range mods {
		for _, r := range m.file.Replace {
			if r.New.Version == "" {
				problems = append(problems, fmt.Sprintf("%s/go.mod: replace %s => %s: a replace to a local directory is ignored for the module's users; go.work wires the repository's modules together", m.dir, r.Old.Path, r.New.Path))
			}
		}
	}
	if len(problems) > 0 {
		return nil, nil, "", errors.New(strings.Join(problems, "\n"))
	}
	v, err := pinOf(mods)
	if err != nil {
		return nil, nil, "", err
	}
	if err := checkWork(root, v, mods); err != nil {
		return nil, nil, "", err
	}
	// One fixed directory per checkout: the build cache keys packages by their
	// directory, so the copies of the modules build from the cache when unchanged.
	tmp = filepath.Join(buildDir(root), "work")
	modCache := filepath.Join(buildDir(root), "gomodcache")
	if err := os.RemoveAll(tmp); err != nil {
		return nil, nil, "", err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, nil, "", err
	}
	proxyDir := filepath.Join(tmp, "proxy")
	if v != "" {
		when, _ := module.PseudoVersionTime(v)
		if err := proxy(root, proxyDir, v, mods, when); err != nil {
			os.RemoveAll(tmp)
			return nil, nil, "", err
		}
		if err := purgeCache(modCache); err != nil {
			os.RemoveAll(tmp)
			return nil, nil, "", err
		}
	}
	environ, err = env(proxyDir, modCache)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, nil, "", err
	}
	return mods, environ, tmp, nil
}

// heartbeat is how often a command that runs long says it still runs.
const heartbeat = 30 * time.Second

// timed runs cmd, printing a line every heartbeat while it runs (what runs, where, for
// how long), and returns its combined output and how long it took.
func timed(cmd *exec.Cmd, where string) ([]byte, time.Duration, error) {
	start := time.Now()
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(heartbeat)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Printf("     … %s in %s: still running, %.0fs\n", strings.Join(cmd.Args, " "), where, time.Since(start).Seconds())
			}
		}
	}()
	out, err := cmd.CombinedOutput()
	return out, time.Since(start), err
}

// buildFlags are those of every build and vet: make test's (go test -race -trimpath), so
// that the packages compiled here are in the build cache for the tests, and the other
// way round. Without -trimpath the build cache keys a package by its directory, which
// differs between modcheck's module cache and the user's.
var buildFlags = []string{"-race", "-trimpath"}

// elsewhere are the modules that check leaves to another target, and why.
var elsewhere = map[string]string{
	"source/kubernetes/e2e/tools": "it only builds the e2e servers; `make e2e` builds it with -mod=readonly, which fails on a go.mod or go.sum out of date",
}

// step is one command of a module's check.
type step struct {
	args []string
	// filter, if set, decides whether the command's failure counts, given its output.
	filter func(out []byte) (fail bool, shown []byte)
}

// check checks every module, or only those whose directories are listed in only
// (relative to the repository root, as the summary prints them).
func check(root string, only []string) error {
	start := time.Now()
	mods, environ, tmp, err := setup(root)
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	pin0, _ := pinOf(mods)
	all := mods
	if len(only) > 0 {
		mods = slices.DeleteFunc(slices.Clone(mods), func(m *mod) bool { return !slices.Contains(only, m.dir) })
		if len(mods) == 0 && !slices.Contains(only, "examples") {
			return fmt.Errorf("no module in %v (and no \"examples\", for the root module's examples copied out)", only)
		}
	}
	steps := []step{
		{args: []string{"mod", "tidy", "-diff"}, filter: tidyDiff},
		{args: append(append([]string{"build"}, buildFlags...), "-o", os.DevNull, "./...")},
		{args: append(append([]string{"vet"}, buildFlags...), "./...")},
	}
	type result struct {
		dir    string
		failed []string
		took   time.Duration
	}
	var results []result
	for _, m := range mods {
		t0 := time.Now()
		fmt.Printf("== %s (%s)\n", m.dir, m.path)
		if why, ok := elsewhere[m.dir]; ok {
			fmt.Printf("skip: %s\n", why)
			continue
		}
		work := filepath.Join(tmp, "mods", filepath.FromSlash(m.path))
		if err := copyModule(root, work, m); err != nil {
			return err
		}
		r := result{dir: m.dir}
		list := exec.Command("go", "list", "./...")
		list.Dir = work
		list.Env = environ
		pkgs, _ := list.Output()
		for i, s := range steps {
			if i > 0 && len(bytes.TrimSpace(pkgs)) == 0 {
				fmt.Printf("skip go %s: the module has no packages\n", strings.Join(s.args, " "))
				continue
			}
			cmd := exec.Command("go", s.args...)
			cmd.Dir = work
			cmd.Env = environ
			out, took, err := timed(cmd, m.dir)
			failed, shown := err != nil, out
			if err != nil && s.filter != nil {
				failed, shown = s.filter(out)
			}
			if failed {
				fmt.Printf("FAIL go %s (%.1fs)\n%s", strings.Join(s.args, " "), took.Seconds(), indent(shown))
				r.failed = append(r.failed, "go "+strings.Join(s.args, " "))
			} else {
				fmt.Printf("ok   go %s (%.1fs)\n", strings.Join(s.args, " "), took.Seconds())
			}
		}
		if len(bytes.TrimSpace(pkgs)) > 0 {
			t1 := time.Now()
			if msg := goDirective(work, environ, m); msg != "" {
				fmt.Printf("FAIL go directive (%.1fs)\n%s", time.Since(t1).Seconds(), indent([]byte(msg)))
				r.failed = append(r.failed, "go directive")
			} else {
				fmt.Printf("ok   go directive %s (%.1fs)\n", m.file.Go.Version, time.Since(t1).Seconds())
			}
		}
		r.took = time.Since(t0)
		results = append(results, r)
	}
	if pinned := pin0; pinned != "" && (len(only) == 0 || slices.Contains(only, "examples")) {
		for _, dir := range exampleDirs(all) {
			t0 := time.Now()
			name := dir + " (copied out)"
			fmt.Printf("== %s\n", name)
			r := result{dir: name}
			if failed := copiedOut(root, tmp, dir, pinned, environ); failed != "" {
				r.failed = append(r.failed, failed)
			}
			r.took = time.Since(t0)
			results = append(results, r)
		}
	}
	fmt.Println("\nmodules (GOWORK=off, the repository's modules from a proxy built from the working tree):")
	var failing []string
	for _, r := range results {
		status := "ok  "
		if len(r.failed) > 0 {
			status = "FAIL"
			failing = append(failing, r.dir)
		}
		fmt.Printf("  %s %-40s %6.1fs %s\n", status, r.dir, r.took.Seconds(), strings.Join(r.failed, ", "))
	}
	fmt.Printf("modcheck: %d module(s) ok, %d failing, in %.0fs\n", len(results)-len(failing), len(failing), time.Since(start).Seconds())
	if len(failing) > 0 {
		return fmt.Errorf("modules failing: %s", strings.Join(failing, " "))
	}
	return nil
}

// tidyDiff ignores, in the output of go mod tidy -diff, the go.sum lines of
// the repository's own modules (never committed: see the package comment).
func tidyDiff(out []byte) (bool, []byte) {
	var kept bytes.Buffer
	changed := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if (strings.HasPrefix(line, "+") || strings.HasPrefix(line, "-")) &&
			!strings.HasPrefix(line, "+++") && !strings.HasPrefix(line, "---") {
			if f := strings.Fields(line[1:]); len(f) == 3 && own(f[0]) && strings.HasPrefix(f[2], "h1:") {
				continue
			}
			changed = true
		}
		if strings.HasPrefix(line, "go: ") && !strings.HasPrefix(line, "go: downloading ") {
			changed = true // an error, not a diff
		}
		kept.WriteString(line + "\n")
	}
	if !changed {
		return false, nil
	}
	return true, kept.Bytes()
}

// tidy runs go mod tidy in every module against the local proxy, then drops
// the repository's own modules from each go.sum. A module's requirements
// reach the modules that require it through the proxy, so tidy goes round
// again (the proxy rebuilt) until no go.mod or go.sum changes, at most 4 times.
func tidy(root string) error {
	for round := 1; round <= 4; round++ {
		before, err := modFiles(root)
		if err != nil {
			return err
		}
		if err := tidyOnce(root); err != nil {
			return err
		}
		after, err := modFiles(root)
		if err != nil {
			return err
		}
		if before == after {
			return nil
		}
		fmt.Printf("round %d changed go.mod or go.sum files; again\n", round)
	}
	return errors.New("go mod tidy did not settle in 4 rounds")
}

// modFiles is the content of every go.mod and go.sum of the repository.
func modFiles(root string) (string, error) {
	mods, err := modules(root)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, m := range mods {
		for _, f := range []string{"go.mod", "go.sum"} {
			data, _ := os.ReadFile(filepath.Join(root, m.dir, f))
			b.Write(data)
		}
	}
	return b.String(), nil
}

func tidyOnce(root string) error {
	mods, environ, tmp, err := setup(root)
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var failing []string
	for _, m := range mods {
		dir := filepath.Join(root, m.dir)
		cmd := exec.Command("go", "mod", "tidy")
		cmd.Dir = dir
		cmd.Env = environ
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Printf("FAIL %s: go mod tidy\n%s", m.dir, indent(out))
			failing = append(failing, m.dir)
			continue
		}
		if err := dropOwnSums(filepath.Join(dir, "go.sum")); err != nil {
			return err
		}
		fmt.Printf("ok   %s\n", m.dir)
	}
	if len(failing) > 0 {
		return fmt.Errorf("go mod tidy failed in: %s", strings.Join(failing, " "))
	}
	return nil
}

func dropOwnSums(file string) error {
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	lines := strings.SplitAfter(string(data), "\n")
	lines = slices.DeleteFunc(lines, func(l string) bool {
		f := strings.Fields(l)
		return len(f) == 3 && own(f[0])
	})
	return os.WriteFile(file, []byte(strings.Join(lines, "")), 0o644)
}

func indent(b []byte) string {
	var s strings.Builder
	for l := range strings.Lines(string(b)) {
		s.WriteString("    " + l)
	}
	if s.Len() > 0 && !strings.HasSuffix(s.String(), "\n") {
		s.WriteString("\n")
	}
	return s.String()
}

// checkWork fails unless go.work uses every module that requires or is
// required by another one and replaces the pinned version of each required
// module by its directory (see pinWork).
func checkWork(root, v string, mods []*mod) error {
	wf, err := readWork(root)
	if err != nil {
		return err
	}
	used := map[string]bool{}
	for _, u := range wf.Use {
		used[path.Clean(u.Path)] = true
	}
	replaced := map[module.Version]string{}
	for _, r := range wf.Replace {
		replaced[r.Old] = path.Clean(r.New.Path)
	}
	var problems []string
	required := requiredMods(mods)
	for _, m := range mods {
		requires := slices.ContainsFunc(m.file.Require, func(r *modfile.Require) bool { return own(r.Mod.Path) })
		if (requires || slices.Contains(required, m)) && !used[m.dir] {
			problems = append(problems, fmt.Sprintf("go.work does not use ./%s (go work use ./%s)", m.dir, m.dir))
		}
	}
	for _, m := range required {
		if replaced[module.Version{Path: m.path, Version: v}] != m.dir {
			problems = append(problems, fmt.Sprintf("go.work does not replace %s %s by ./%s (run `make pin`)", m.path, v, strings.TrimPrefix(m.dir, ".")))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// goDirective checks that a module's go directive is what the module needs: if it
// is above the highest go directive of its dependencies (the floor) and the module
// builds and vets with the floor (vet reports uses of the standard library newer than
// the go directive), it is too high and users of older Go are refused for nothing.
// It returns "" when the directive is right. It edits the copy in work.
func goDirective(work string, environ []string, m *mod) string {
	if m.file.Go == nil {
		return "go.mod has no go directive"
	}
	declared := m.file.Go.Version
	list := exec.Command("go", "list", "-m", "-f", "{{if not .Main}}{{.GoVersion}}{{end}}", "all")
	list.Dir = work
	list.Env = environ
	out, err := list.Output()
	if err != nil {
		return fmt.Sprintf("go list -m all: %v", err)
	}
	floor := "1.0"
	for _, v := range strings.Fields(string(out)) {
		if gover.Compare("go"+v, "go"+floor) > 0 {
			floor = v
		}
	}
	if gover.Compare("go"+declared, "go"+floor) <= 0 {
		return ""
	}
	for _, args := range [][]string{{"mod", "edit", "-go=" + floor}, append(append([]string{"build"}, buildFlags...), "-o", os.DevNull, "./..."), append(append([]string{"vet"}, buildFlags...), "./...")} {
		cmd := exec.Command("go", args...)
		cmd.Dir = work
		cmd.Env = environ
		if err := cmd.Run(); err != nil {
			return "" // the module needs more than its dependencies do
		}
	}
	return fmt.Sprintf("go %s is more than the module needs: its dependencies need go %s, and it builds and vets with that", declared, floor)
}

// exampleDirs are the directories under examples/ that belong to the root module
// (the examples that have no go.mod of their own).
func exampleDirs(mods []*mod) []string {
	var dirs []string
	for _, m := range mods {
		if m.path != ownPrefix {
			continue
		}
		for _, f := range m.files {
			if strings.HasPrefix(f, "examples/") && strings.HasSuffix(f, ".go") && !slices.Contains(dirs, path.Dir(f)) {
				dirs = append(dirs, path.Dir(f))
			}
		}
	}
	sort.Strings(dirs)
	return dirs
}

// copiedOut checks that an example of the root module compiles when its directory is
// copied out of the repository into a module of its own, as a user would start from
// it: go mod init, go get the root module at the pin, go mod tidy, go build, go vet.
// It returns the failing command, "" if none failed.
func copiedOut(root, tmp, dir, pinned string, environ []string) string {
	work := filepath.Join(tmp, "copied", filepath.FromSlash(dir))
	entries, err := os.ReadDir(filepath.Join(root, dir))
	if err != nil {
		fmt.Printf("FAIL %v\n", err)
		return "read"
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		fmt.Printf("FAIL %v\n", err)
		return "copy"
	}
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".go") {
			data, err := os.ReadFile(filepath.Join(root, dir, e.Name()))
			if err == nil {
				err = os.WriteFile(filepath.Join(work, e.Name()), data, 0o644)
			}
			if err != nil {
				fmt.Printf("FAIL %v\n", err)
				return "copy"
			}
		}
	}
	for _, args := range [][]string{
		{"mod", "init", "example.com/" + path.Base(dir)},
		{"get", ownPrefix + "@" + pinned},
		{"mod", "tidy"},
		append(append([]string{"build"}, buildFlags...), "-o", os.DevNull, "./..."),
		append(append([]string{"vet"}, buildFlags...), "./..."),
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir = work
		cmd.Env = environ
		out, took, err := timed(cmd, dir)
		if err != nil {
			fmt.Printf("FAIL go %s (%.1fs)\n%s", strings.Join(args, " "), took.Seconds(), indent(out))
			return "go " + strings.Join(args, " ")
		}
		fmt.Printf("ok   go %s (%.1fs)\n", strings.Join(args, " "), took.Seconds())
	}
	return ""
}
