module github.com/informer-go/informer

go 1.26.0

require (
	github.com/google/btree v1.1.3 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)
