module github.com/informer-go/informer/examples/leaderelection

go 1.26.0

require (
	github.com/informer-go/informer v0.0.0-20261124160439-97e86846a3cf
	github.com/informer-go/informer/source/etcd v0.0.0-20261124160439-97e86846a3cf
)
