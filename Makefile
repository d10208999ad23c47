# Every module of the workspace: the root and each adapter module with its own go.mod.
MODULES := $(shell go list -m -f '{{.Dir}}' 2>/dev/null)
GO ?= go
STATICCHECK_VERSION ?= v0.8.2

.PHONY: test modules pin tidy bench lint soak fuzz example compare

## test: the module check (`make modules`), then every module's tests with the race detector,
## each long step saying every 30 s that it still runs. The real kube-apiserver tests of
## source/kubernetes/e2e are left to `make e2e`. The modules of BESIDE, whose tests mostly
## wait on real servers, run in the background beside the others; their output follows.
## 18 minutes measured on a fresh 2-core machine (empty module and build caches), less
## once the caches are warm.
## Every module runs even when one fails; the summary names the failing ones and the exit
## status is 1 if any failed. -trimpath: the build cache entries are modcheck's too.
BESIDE ?= source/etcd
TEST_FLAGS := -race -trimpath -count=1 -timeout 20m
E2E_SKIP_WHY := make test leaves the real kube-apiserver tests to make e2e
test:
	@failed=""; passed=0; start=$$(date +%s); logs=$(CURDIR)/.cache/test; mkdir -p $$logs; \
	echo "== modules (each module's user graph: make modules)"; \
	if $(MAKE) --no-print-directory modules; then passed=$$((passed+1)); else failed="$$failed modules"; fi; \
	beside=""; for rel in $(BESIDE); do \
		log=$$logs/$$(echo $$rel | tr / _).log; \
		echo "== $$rel: in the background, beside the modules below; its output follows them"; \
		(cd $(CURDIR)/$$rel && E2E_SKIP="$(E2E_SKIP_WHY)" $(GO) test $(TEST_FLAGS) ./... >$$log 2>&1) & \
		beside="$$beside $$rel:$$!:$$(date +%s):$$log"; \
	done; \
	for m in $(MODULES); do \
		rel=$${m#$(CURDIR)}; rel=$${rel#/}; rel=$${rel:-.}; \
		case " $(BESIDE) " in *" $$rel "*) continue;; esac; \
		echo "== $$rel"; t0=$$(date +%s); \
		if (cd $$m && E2E_SKIP="$(E2E_SKIP_WHY)" \
			$(CURDIR)/tools/heartbeat "go test $$rel" $(GO) test $(TEST_FLAGS) ./...); then passed=$$((passed+1)); \
		else failed="$$failed $$rel"; fi; \
		echo "-- $$rel: $$(( $$(date +%s) - t0 ))s"; \
	done; \
	for b in $$beside; do \
		set -- $$(echo $$b | tr : ' '); rel=$$1; pid=$$2; t0=$$3; log=$$4; \
		echo "== $$rel (ran in the background)"; \
		(while kill -0 $$pid 2>/dev/null; do sleep 30; echo "   … go test $$rel: still running, $$(( $$(date +%s) - t0 ))s"; done) & beat=$$!; \
		if wait $$pid; then passed=$$((passed+1)); else failed="$$failed $$rel"; fi; \
		kill $$beat 2>/dev/null; cat $$log; \
		echo "-- $$rel: $$(( $$(date +%s) - t0 ))s, in the background"; \
	done; \
	echo; echo "make test: $$passed step(s) ok in $$(( $$(date +%s) - start ))s; failing:$${failed:- none}"; \
	echo "(source/kubernetes/e2e skipped: make e2e builds the real etcd and kube-apiserver and runs it)"; \
	test -z "$$failed"

## e2e: build the real etcd and kube-apiserver from source (about 35 minutes on a fresh
## 2-core machine, seconds once built: the binaries are kept in .cache/e2e/bin), then run
## source/kubernetes's end-to-end tests against them (about 5 minutes). CI runs it after
## `make test`.
.PHONY: e2e
e2e: e2e-servers
	cd source/kubernetes && $(CURDIR)/tools/heartbeat "go test source/kubernetes/e2e" $(GO) test -race -count=1 -timeout 30m ./e2e

## modules: build every module as its users get it (no go.work, no replace): go mod tidy -diff,
## go build ./... and go vet ./... per module with GOWORK=off, the repository's own modules
## served from a file-based module proxy built from the working tree (tools/modcheck).
modules:
	cd tools && GOWORK=off $(GO) test -race -trimpath -count=1 ./... && GOWORK=off GODEBUG=goindex=0 $(GO) run -race -trimpath ./modcheck check

## pin: require the repository's modules from one another at the pseudo-version of HEAD
## (v0.0.0-<commit time>-<12 hex>) in every go.mod, and point go.work's replacements at it.
## Run it after a commit whose root API the other modules need, and commit the result.
pin:
	cd tools && GOWORK=off GODEBUG=goindex=0 $(GO) run ./modcheck pin

## tidy: go mod tidy in every module, the repository's own modules from the local proxy.
tidy:
	cd tools && GOWORK=off GODEBUG=goindex=0 $(GO) run ./modcheck tidy

## bench: the pipeline benchmarks of every module.
bench:
	@set -e; for m in $(MODULES); do \
		(cd $$m && $(GO) test -run '^$$' -bench . -benchmem ./...); \
	done

## lint: gofmt, go vet and staticcheck (installed from the module proxy).
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) vet ./...); done
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...); done

## soak: the model-based random tests at length, with -race: thousands of seeded runs over
## source/memory, hundreds over the fan-out Server (fanout), dozens over a real etcd.
soak:
	$(GO) test -race -count=1 -timeout 60m -run TestModel -model.seeds=5000 -model.ops=300 .
	$(GO) test -race -count=1 -timeout 30m -run TestModelHTTP -model.seeds=300 ./fanout
	cd source/etcd && $(GO) test -race -count=1 -timeout 30m -run TestEtcdModel -model.seeds=30 .

## fuzz: long fuzz runs (the seed corpora also run in make test). FUZZTIME=10m by default.
FUZZTIME ?= 10m
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDeltaFIFO$$' -fuzztime=$(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzListPages$$' -fuzztime=$(FUZZTIME) .
	cd source/http && $(GO) test -run '^$$' -fuzz '^FuzzFrameDecoder$$' -fuzztime=$(FUZZTIME) .

## compare: W1–W5 against client-go's SharedIndexInformer (bench module), 3 interleaved rounds (about 4 minutes); prints the table with ratios and the machine's load, and writes bench/compare.png. COMPARE_FLAGS adds flags: -busy (a CPU burner per core beside both sides), -only W1,W2.
COMPARE_FLAGS ?=
compare:
	cd bench && $(GO) run ./cmd/compare -rounds 3 -png compare.png $(COMPARE_FLAGS)

## robustness: the robustness suite (module robustness/) for ROBUSTNESS_TIME (default 10m): a real 3-member etcd behind proxies, random traffic, random failures (kill -9 of members, the leader and the controller's leader, partitions, compaction, defragmentation, restores, warm restarts, a fan-out replica killed, a slow and a full disk under an informer process), every participant's history validated; prints the table, writes a report per failing run.
ROBUSTNESS_TIME ?= 10m
ROBUSTNESS_FLAGS ?=
.PHONY: robustness
robustness:
	cd robustness && $(GO) test -v -count=1 -timeout 0 -run '^TestRobustness$$' . -args -robustness -robustness.total=$(ROBUSTNESS_TIME) $(ROBUSTNESS_FLAGS)

## adversarial: the fan-out Server (fanout) and the Client (source/http) under attack over loopback (two to three minutes): per-client fairness, heap held by 50 stalled list readers, the slowest steady reader kept, GET bodies that never end, a batch that never ends, slow list readers under churn, a silent server, stale watchers after bursts, and the cost of a watcher.
.PHONY: adversarial
adversarial:
	$(GO) test -run '^$$' -bench 'Adversarial|WatcherCost' -benchtime=1x -count=1 -timeout 10m ./fanout ./source/http -args -adversarial

## example: the quickstart.
example:
	$(GO) run ./examples/quickstart

## e2e-servers: build the etcd and kube-apiserver that source/kubernetes's end-to-end tests start (about 35 minutes on a fresh 2-core machine, then seconds); e2e builds them first, outside the tests' timeout.
.PHONY: e2e-servers
e2e-servers:
	source/kubernetes/e2e/servers.sh build
