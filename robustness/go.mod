module github.com/informer-go/informer/robustness

go 1.26.0

require (
	github.com/informer-go/informer v0.0.0-20261126032445-d5a1900eb4c5
	github.com/informer-go/informer/source/etcd v0.0.0-20261126032445-d5a1900eb4c5
)

require (
	go.etcd.io/etcd/client/v3 v3.7.3
	go.etcd.io/etcd/etcdutl/v3 v3.7.3
	go.etcd.io/etcd/server/v3 v3.7.3
	go.uber.org/goleak v1.3.0
	go.uber.org/zap v1.28.0
	google.golang.org/grpc v1.83.2
)
