package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/intern"
	"github.com/informer-go/informer/source/kubernetes"
)

// W6 sides: the two of W1–W5 plus ours with other transforms.
const (
	// OursStrip is ours with kubernetes.StripManagedFields only (what client-go's side
	// does), to show what interning adds.
	OursStrip Side = "ours-strip"
	// OursGeneric is ours with StripManagedFields followed by intern.Strings on the whole
	// Pod (every string interned, the unique ones too).
	OursGeneric Side = "ours-generic"
)

// W6Pods is the size of W6: 50,000 pods, from about 400 Deployments.
const W6Pods = 50_000

// W6Sides are the sides W6 runs: Ours uses kubernetes.StripAndIntern; ClientGo strips
// managedFields with SetTransform, as controllers usually do.
var W6Sides = []Side{Ours, ClientGo, OursStrip, OursGeneric}

// PodList is a Kubernetes PodList encoded as JSON once, as an API server's list response
// is: every side decodes it for itself, so no side shares a string with the generator or
// with another side.
type PodList struct {
	JSON        []byte // the encoded PodList
	Pods        int    // pods in it
	Deployments int    // Deployments they come from
}

// deployment is what the pods of one Deployment (through its current ReplicaSet) share.
type deployment struct {
	namespace, name, hash, rsUID string
	sa, configSum, restartedAt   string
	labels                       map[string]string
	containers                   []corev1.Container
	imageIDs                     []string
	qos                          corev1.PodQOSClass
	replicas                     int
}

// NewPodList builds pods Pods from about pods/125 Deployments in 40 namespaces, spread
// over 500 nodes, and encodes them as one JSON PodList. Each Pod is what a real cluster
// holds for a Deployment's pod: labels (app, pod-template-hash and others), annotations, an
// owner reference to its ReplicaSet, managedFields from the controller manager and the
// kubelet, 1–3 containers with images, ports, environment, resources, probes and the
// service-account volume, tolerations, and a Running status with 5 conditions, IPs and
// container statuses. Values that repeat across a Deployment's pods (and across
// Deployments: nodes, namespaces, condition types) repeat in the list.
func NewPodList(pods int, seed uint64) (*PodList, error) {
	rng := rand.New(rand.NewPCG(seed, 6))
	hex := func(n int) string {
		const digits = "0123456789abcdef"
		b := make([]byte, n)
		for i := range b {
			b[i] = digits[rng.IntN(16)]
		}
		return string(b)
	}
	alnum := func(n int) string {
		const chars = "bcdfghjklmnpqrstvwxz2456789" // the pod-name suffix alphabet
		b := make([]byte, n)
		for i := range b {
			b[i] = chars[rng.IntN(len(chars))]
		}
		return string(b)
	}
	const namespaces, nodes = 40, 500
	teams := []string{"payments", "search", "checkout", "identity", "platform", "data", "ml", "edge"}
	services := []string{"api", "worker", "frontend", "cache", "gateway", "scheduler", "indexer", "auth", "billing", "notifier"}
	var deps []*deployment
	for total := 0; total < pods; {
		i := len(deps)
		team, svc := teams[i%len(teams)], services[(i/len(teams))%len(services)]
		name := fmt.Sprintf("%s-%s-%d", team, svc, i)
		d := &deployment{
			namespace: fmt.Sprintf("%s-%02d", team, i%namespaces), name: name, hash: alnum(10),
			rsUID: uuid(hex), sa: team + "-" + svc, configSum: hex(64),
			restartedAt: time.Date(2026, 11, 1+i%20, i%24, 0, 0, 0, time.UTC).Format(time.RFC3339),
			replicas:    min(1+rng.IntN(249), pods-total),
		}
		d.labels = map[string]string{
			"app": name, "app.kubernetes.io/name": svc, "app.kubernetes.io/part-of": team,
			"app.kubernetes.io/version": fmt.Sprintf("1.%d.%d", i%7, i%13), "team": team, "pod-template-hash": d.hash,
		}
		for c := range 1 + rng.IntN(3) {
			cname := svc
			if c > 0 {
				cname = []string{"sidecar-proxy", "log-shipper"}[c-1]
			}
			image := fmt.Sprintf("registry.example.com/%s/%s:v1.%d.%d", team, cname, i%9, rng.IntN(20))
			cpu := resource.MustParse(fmt.Sprintf("%dm", 100*(1+rng.IntN(8))))
			mem := resource.MustParse(fmt.Sprintf("%dMi", 128*(1+rng.IntN(8))))
			ct := corev1.Container{
				Name: cname, Image: image,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080 + int32(c), Protocol: corev1.ProtocolTCP}},
				Env: []corev1.EnvVar{
					{Name: "LOG_LEVEL", Value: "info"},
					{Name: "SERVICE_NAME", Value: svc},
					{Name: "CONFIG_CHECKSUM", Value: d.configSum[:16]},
					{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
				},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: mem},
				},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/healthz", Port: intstr.FromString("http"), Scheme: corev1.URISchemeHTTP,
				}}, PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3},
				TerminationMessagePath:   corev1.TerminationMessagePathDefault,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				ImagePullPolicy:          corev1.PullIfNotPresent,
			}
			d.containers = append(d.containers, ct)
			d.imageIDs = append(d.imageIDs, fmt.Sprintf("registry.example.com/%s/%s@sha256:%s", team, cname, hex(64)))
		}
		d.qos = corev1.PodQOSBurstable
		deps = append(deps, d)
		total += d.replicas
	}

	items := make([]corev1.Pod, 0, pods)
	rv := 1_000_000
	for _, d := range deps {
		for range d.replicas {
			rv += 1 + rng.IntN(50)
			node := rng.IntN(nodes)
			items = append(items, newPod(d, rv, node, hex, alnum))
		}
	}
	list := &corev1.PodList{
		TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
		ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(rv + 1)},
		Items:    items,
	}
	b, err := k8sruntime.Encode(scheme.Codecs.LegacyCodec(corev1.SchemeGroupVersion), list)
	if err != nil {
		return nil, fmt.Errorf("workload: encode the W6 pod list: %w", err)
	}
	return &PodList{JSON: b, Pods: len(items), Deployments: len(deps)}, nil
}

func uuid(hex func(int) string) string {
	return hex(8) + "-" + hex(4) + "-" + hex(4) + "-" + hex(4) + "-" + hex(12)
}

// newPod is one running pod of d on node node at resourceVersion rv.
func newPod(d *deployment, rv, node int, hex func(int) string, alnum func(int) string) corev1.Pod {
	yes, grace, prio := true, int64(30), int32(0)
	toleration := int64(300)
	rs := d.name + "-" + d.hash
	created := metav1.NewTime(time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC).Add(time.Duration(rv) * time.Millisecond))
	started := metav1.NewTime(created.Add(3 * time.Second))
	podIP := fmt.Sprintf("10.%d.%d.%d", 64+node/64, (node%64)*4+(rv/250)%4, rv%250+2)
	hostIP := fmt.Sprintf("192.168.%d.%d", node/250, node%250+10)
	tokenVolume := "kube-api-access-" + alnum(5)
	expiry := int64(3607)

	containers := make([]corev1.Container, len(d.containers))
	statuses := make([]corev1.ContainerStatus, len(d.containers))
	for i, c := range d.containers {
		c.VolumeMounts = []corev1.VolumeMount{{Name: tokenVolume, ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}
		containers[i] = c
		statuses[i] = corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: d.imageIDs[i], ContainerID: "containerd://" + hex(64),
			Ready: true, Started: &yes, RestartCount: 0,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
		}
	}
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: started}
	}
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: rs + "-" + alnum(5), GenerateName: rs + "-", Namespace: d.namespace,
			UID: types.UID(uuid(hex)), ResourceVersion: strconv.Itoa(rv), CreationTimestamp: created,
			Labels: d.labels,
			Annotations: map[string]string{
				"kubectl.kubernetes.io/restartedAt": d.restartedAt,
				"prometheus.io/scrape":              "true",
				"prometheus.io/port":                "9090",
				"checksum/config":                   d.configSum,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: types.UID(d.rsUID),
				Controller: &yes, BlockOwnerDeletion: &yes,
			}},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &created,
					FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(controllerFields(d))},
				{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &started,
					FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(kubeletFields(podIP)), Subresource: "status"},
			},
		},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{{Name: tokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &expiry}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
						Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
						FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
				},
			}}}},
			Containers:                    containers,
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: &grace,
			DNSPolicy:                     corev1.DNSClusterFirst,
			ServiceAccountName:            d.sa,
			DeprecatedServiceAccount:      d.sa,
			NodeName:                      fmt.Sprintf("node-%03d.eu-west-1.compute.internal", node),
			SecurityContext:               &corev1.PodSecurityContext{},
			SchedulerName:                 corev1.DefaultSchedulerName,
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &toleration},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &toleration},
			},
			Priority:           &prio,
			EnableServiceLinks: &yes,
			PreemptionPolicy:   ptr(corev1.PreemptLowerPriority),
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{
				cond("PodReadyToStartContainers"), cond(corev1.PodInitialized), cond(corev1.PodReady),
				cond(corev1.ContainersReady), cond(corev1.PodScheduled),
			},
			HostIP: hostIP, HostIPs: []corev1.HostIP{{IP: hostIP}},
			PodIP: podIP, PodIPs: []corev1.PodIP{{IP: podIP}},
			StartTime:         &started,
			ContainerStatuses: statuses,
			QOSClass:          d.qos,
		},
	}
}

func ptr[T any](v T) *T { return &v }

// controllerFields is the kube-controller-manager's managedFields entry of a pod of d, in
// the shape the API server records.
func controllerFields(d *deployment) string {
	s := `{"f:metadata":{"f:annotations":{".":{},"f:checksum/config":{},"f:kubectl.kubernetes.io/restartedAt":{},"f:prometheus.io/port":{},"f:prometheus.io/scrape":{}},"f:generateName":{},"f:labels":{".":{}`
	for k := range d.labels {
		s += `,"f:` + k + `":{}`
	}
	s += `},"f:ownerReferences":{".":{},"k:{\"uid\":\"` + d.rsUID + `\"}":{}}},"f:spec":{"f:containers":{`
	for i, c := range d.containers {
		if i > 0 {
			s += ","
		}
		s += `"k:{\"name\":\"` + c.Name + `\"}":{".":{},"f:env":{".":{},"k:{\"name\":\"LOG_LEVEL\"}":{".":{},"f:name":{},"f:value":{}}},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:ports":{".":{},"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{},"f:name":{},"f:protocol":{}}},"f:readinessProbe":{".":{},"f:failureThreshold":{},"f:httpGet":{".":{},"f:path":{},"f:port":{},"f:scheme":{}}},"f:resources":{".":{},"f:limits":{".":{},"f:memory":{}},"f:requests":{".":{},"f:cpu":{},"f:memory":{}}},"f:terminationMessagePath":{},"f:terminationMessagePolicy":{}}`
	}
	return s + `},"f:dnsPolicy":{},"f:enableServiceLinks":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:serviceAccount":{},"f:serviceAccountName":{},"f:terminationGracePeriodSeconds":{}}}`
}

// kubeletFields is the kubelet's managedFields entry (subresource status) of a pod.
func kubeletFields(podIP string) string {
	return `{"f:status":{"f:conditions":{"k:{\"type\":\"ContainersReady\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Initialized\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"PodReadyToStartContainers\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Ready\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}}},"f:containerStatuses":{},"f:hostIP":{},"f:hostIPs":{},"f:phase":{},"f:podIP":{},"f:podIPs":{".":{},"k:{\"ip\":\"` + podIP + `\"}":{".":{},"f:ip":{}}},"f:startTime":{}}}`
}

// decode decodes the list as a client's REST call does (client-go's scheme codecs).
func (l *PodList) decode() (*corev1.PodList, error) {
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(l.JSON, nil, &corev1.PodList{})
	if err != nil {
		return nil, fmt.Errorf("workload: decode the W6 pod list: %w", err)
	}
	pl, ok := obj.(*corev1.PodList)
	if !ok {
		return nil, fmt.Errorf("workload: decoded a %T, want *v1.PodList", obj)
	}
	return pl, nil
}

// W6 lists the pods of l (decoded from its JSON inside the List call, as a real list
// response is) into an informer with a namespace index and one handler, waits until the
// handler has seen every pod, and reports the live heap after GC per pod ("B/pod"): all
// the informer holds, the pods included, minus the heap before the informer was built (the
// JSON, shared by every side, is in both). The sides differ in their transform: client-go
// strips managedFields (SetTransform); ours uses kubernetes.StripAndIntern; OursStrip uses
// kubernetes.StripManagedFields; OursGeneric StripManagedFields then intern.Strings on the
// whole Pod. Also "transform-ns/pod": the time spent in the transform.
func W6(side Side, l *PodList) (Figures, error) {
	if err := checkGates(); err != nil {
		return nil, err
	}
	runtime.GC()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)

	var transformNs int64 // written by the informer's one transform goroutine, read after the wait
	seen := make(chan struct{})
	var once sync.Once
	n := 0
	onAdd := func() {
		if n++; n == l.Pods {
			once.Do(func() { close(seen) })
		}
	}
	var stop func()
	var keep any
	switch side {
	case ClientGo:
		inf, err := w6ClientGo(l, onAdd, &transformNs)
		if err != nil {
			return nil, err
		}
		stop, keep = runClientGo(inf), inf
	case Ours, OursStrip, OursGeneric:
		var tf func(*corev1.Pod) (*corev1.Pod, error)
		switch side {
		case Ours:
			tf = kubernetes.StripAndIntern[*corev1.Pod]
		case OursStrip:
			tf = kubernetes.StripManagedFields[*corev1.Pod]
		default:
			all := intern.Strings[*corev1.Pod]()
			tf = func(p *corev1.Pod) (*corev1.Pod, error) {
				p, _ = kubernetes.StripManagedFields(p)
				return all(p)
			}
		}
		inf, err := w6Ours(l, onAdd, timed(tf, &transformNs))
		if err != nil {
			return nil, err
		}
		stop, keep = runOurs(inf), inf
	default:
		return nil, fmt.Errorf("workload: W6 has no side %q", side)
	}
	defer stop()
	select {
	case <-seen:
	case <-time.After(timeout):
		return nil, fmt.Errorf("workload: W6 %s: timed out waiting for %d pods", side, l.Pods)
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return Figures{
		"B/pod":            (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(l.Pods),
		"transform-ns/pod": float64(transformNs) / float64(l.Pods),
	}, nil
}

// timed wraps a transform to add its running time to *ns.
func timed[V any](tf func(V) (V, error), ns *int64) func(V) (V, error) {
	return func(v V) (V, error) {
		t0 := time.Now()
		v, err := tf(v)
		*ns += int64(time.Since(t0))
		return v, err
	}
}

// w6Source serves l once, decoded on each List call; its watches stay open, empty.
type w6Source struct {
	l     *PodList
	calls int
}

func (s *w6Source) List(context.Context, informer.ListOptions) (informer.List[*corev1.Pod], error) {
	if s.calls++; s.calls > 1 {
		return informer.List[*corev1.Pod]{}, errors.New("workload: W6 serves one list")
	}
	pl, err := s.l.decode()
	if err != nil {
		return informer.List[*corev1.Pod]{}, err
	}
	// One allocation per pod, as the kubernetes adapter does, so that the list's array is
	// garbage once the list is served.
	items := make([]*corev1.Pod, len(pl.Items))
	for i := range pl.Items {
		p := new(corev1.Pod)
		*p = pl.Items[i]
		items[i] = p
	}
	return informer.List[*corev1.Pod]{Items: items, Revision: pl.ResourceVersion}, nil
}

func (s *w6Source) Watch(ctx context.Context, _ informer.WatchOptions) (informer.Watch[*corev1.Pod], error) {
	return &ourWatch6{ctx: ctx}, nil
}

// ourWatch6 is a watch with no events: Next returns when the informer stops.
type ourWatch6 struct{ ctx context.Context }

func (w *ourWatch6) Next() (informer.Event[*corev1.Pod], error) {
	<-w.ctx.Done()
	return informer.Event[*corev1.Pod]{}, w.ctx.Err()
}

func (w *ourWatch6) Stop() {}

type podHandler struct{ onAdd func() }

func (h podHandler) OnAdd(*corev1.Pod, bool)    { h.onAdd() }
func (h podHandler) OnUpdate(_, _ *corev1.Pod)  {}
func (h podHandler) OnDelete(*corev1.Pod, bool) {}

func w6Ours(l *PodList, onAdd func(), tf func(*corev1.Pod) (*corev1.Pod, error)) (*informer.Informer[string, *corev1.Pod], error) {
	inf, err := informer.New[string, *corev1.Pod](&w6Source{l: l}, informer.Options[string, *corev1.Pod]{
		Key:       kubernetes.Key[*corev1.Pod],
		Transform: tf,
		Revision:  kubernetes.ResourceVersion[*corev1.Pod],
		Indexers: informer.Indexers[*corev1.Pod]{
			kubernetes.NamespaceIndexName: kubernetes.NamespaceIndex[*corev1.Pod](),
		},
		PageSize:     -1,
		ErrorHandler: func(err error) { fmt.Println("ours: W6 informer error:", err) },
	})
	if err != nil {
		return nil, err
	}
	if _, err := inf.AddHandler(podHandler{onAdd}, informer.HandlerOptions{}); err != nil {
		return nil, err
	}
	return inf, nil
}

func runOurs(inf *informer.Informer[string, *corev1.Pod]) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inf.Run(ctx); close(done) }()
	return func() { cancel(); <-done }
}

func w6ClientGo(l *PodList, onAdd func(), ns *int64) (cache.SharedIndexInformer, error) {
	calls := 0
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (k8sruntime.Object, error) {
			if calls++; calls > 1 {
				return nil, errors.New("workload: W6 serves one list")
			}
			return l.decode()
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			return watch.NewFake(), nil
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	strip := func(obj any) (any, error) {
		t0 := time.Now()
		if p, ok := obj.(*corev1.Pod); ok {
			p.ManagedFields = nil
		}
		*ns += int64(time.Since(t0))
		return obj, nil
	}
	if err := inf.SetTransform(strip); err != nil {
		return nil, err
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { onAdd() }}); err != nil {
		return nil, err
	}
	return inf, nil
}

func runClientGo(inf cache.SharedIndexInformer) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(done) }()
	return func() { cancel(); <-done }
}
