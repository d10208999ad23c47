module github.com/informer-go/informer

go 1.24
