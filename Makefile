# Every module of the workspace: the root and each adapter module with its own go.mod.
MODULES := $(shell go list -m -f '{{.Dir}}' 2>/dev/null)
GO ?= go
STATICCHECK_VERSION ?= v0.8.2

.PHONY: test bench lint soak fuzz example compare

## test: every module's tests with the race detector.
test:
	@set -e; for m in $(MODULES); do \
		echo "== $$m"; \
		(cd $$m && $(GO) test -race -count=1 -timeout 20m ./...); \
	done

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
## source/memory, hundreds over source/http, dozens over a real etcd.
soak:
	$(GO) test -race -count=1 -timeout 60m -run TestModel -model.seeds=5000 -model.ops=300 .
	cd source/http && $(GO) test -race -count=1 -timeout 30m -run TestModelHTTP -model.seeds=300 .
	cd source/etcd && $(GO) test -race -count=1 -timeout 30m -run TestEtcdModel -model.seeds=30 .

## fuzz: long fuzz runs (the seed corpora also run in make test). FUZZTIME=10m by default.
FUZZTIME ?= 10m
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDeltaFIFO$$' -fuzztime=$(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzListPages$$' -fuzztime=$(FUZZTIME) .
	cd source/http && $(GO) test -run '^$$' -fuzz '^FuzzFrameDecoder$$' -fuzztime=$(FUZZTIME) .

## compare: W1–W5 against client-go's SharedIndexInformer (bench module), 3 interleaved rounds (about 4 minutes); prints the table with ratios and writes bench/compare.png.
compare:
	cd bench && $(GO) run ./cmd/compare -rounds 3 -png compare.png

## adversarial: source/http's Server under attack over loopback (about a minute): per-client fairness, heap held by 50 stalled list readers, the slowest steady reader kept, and the cost of a watcher.
.PHONY: adversarial
adversarial:
	cd source/http && $(GO) test -run '^$$' -bench 'Adversarial|WatcherCost' -benchtime=1x -count=1 -timeout 10m . -args -adversarial

## example: the quickstart.
example:
	$(GO) run ./examples/quickstart

## e2e-servers: build the etcd and kube-apiserver that source/kubernetes's end-to-end tests start (about 7 minutes cold, then a no-op); test builds them first, outside the tests' timeout.
.PHONY: e2e-servers
e2e-servers:
	source/kubernetes/e2e/servers.sh build
test: e2e-servers
