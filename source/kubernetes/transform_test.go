package kubernetes_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/intern"
	"github.com/informer-go/informer/source/kubernetes"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestStripManagedFields(t *testing.T) {
	c := cm("ns", "a", nil)
	c.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	c.ResourceVersion = "12"
	got, err := kubernetes.StripManagedFields(c)
	if err != nil || got != c || got.ManagedFields != nil {
		t.Errorf("StripManagedFields = %+v, %v", got.ObjectMeta, err)
	}
	if kubernetes.ResourceVersion(got) != "12" {
		t.Errorf("ResourceVersion = %q", kubernetes.ResourceVersion(got))
	}

	u := &unstructured.Unstructured{}
	u.SetName("x")
	u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl"}})
	if got, _ := kubernetes.StripManagedFields(u); got.GetManagedFields() != nil {
		t.Errorf("unstructured: managedFields = %v", got.GetManagedFields())
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, "metadata", "managedFields"); found {
		t.Error("unstructured: metadata.managedFields still present")
	}
}

// testPod is pod i of a Deployment "web" in namespace "shop": what a real cluster holds,
// managedFields included, with the per-pod values (name, uid, IP, container IDs) varying.
func testPod(i int) *corev1.Pod {
	yes := true
	grace := int64(30)
	started := metav1.NewTime(time.Date(2026, 11, 20, 8, 0, i%60, 0, time.UTC))
	mem := resource.MustParse("256Mi")
	ctr := func(name string) corev1.Container {
		return corev1.Container{
			Name: name, Image: "registry.example.com/shop/" + name + ":v1.4.2",
			Args:  []string{"--listen=:8080", "--log-level=info"},
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			Env: []corev1.EnvVar{{Name: "MODE", Value: "production"}, {Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: mem},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: mem},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: fmt.Sprintf("kube-api-access-%05d", i), MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/healthz", Port: intstr.FromString("http"), Scheme: corev1.URISchemeHTTP}}},
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			ImagePullPolicy: corev1.PullIfNotPresent,
		}
	}
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: started}
	}
	podIP := fmt.Sprintf("10.1.%d.%d", i/250, i%250)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("web-7d9f8c6b5-%05d", i), GenerateName: "web-7d9f8c6b5-", Namespace: "shop",
			UID: types.UID("uid-" + podIP), ResourceVersion: fmt.Sprint(1000 + i),
			Labels:          map[string]string{"app": "web", "pod-template-hash": "7d9f8c6b5", "team": "payments"},
			Annotations:     map[string]string{"prometheus.io/scrape": "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9f8c6b5", UID: "rs-uid-1", Controller: &yes}},
			Finalizers:      []string{"example.com/drain"},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{}}`)},
				{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", Subresource: "status", FieldsV1: metav1.NewFieldsV1(`{"f:status":{}}`)},
			},
		},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{{Name: fmt.Sprintf("kube-api-access-%05d", i), VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}}}}}}},
			Containers:    []corev1.Container{ctr("web"), ctr("proxy"), ctr("logs")},
			RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: &grace, DNSPolicy: corev1.DNSClusterFirst,
			ServiceAccountName: "web", NodeName: fmt.Sprintf("node-%d", i%7), SchedulerName: corev1.DefaultSchedulerName,
			NodeSelector: map[string]string{"disktype": "ssd"},
			Tolerations:  []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{cond("PodReadyToStartContainers"), cond(corev1.PodInitialized), cond(corev1.PodReady), cond(corev1.ContainersReady), cond(corev1.PodScheduled)},
			HostIP:     fmt.Sprintf("192.168.0.%d", i%7), PodIP: podIP, PodIPs: []corev1.PodIP{{IP: podIP}},
			QOSClass: corev1.PodQOSBurstable,
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "web", Image: "registry.example.com/shop/web:v1.4.2", ImageID: "registry.example.com/shop/web@sha256:0123",
				ContainerID: fmt.Sprintf("containerd://%064d", i), Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
			}},
		},
	}
}

// decoded returns pod i as a client decodes it: from JSON, every string its own copy.
func decoded[V any](t testing.TB, v any) V {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out V
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func sameData(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func mapID[M any](m M) uintptr { return reflect.ValueOf(m).Pointer() }

// Two pods decoded apart share their repeated strings and maps after StripAndIntern, keep
// their own names, IPs and container IDs, and are otherwise as decoded (managedFields
// dropped); the slices the decoder grew are trimmed.
func TestStripAndIntern_Pod(t *testing.T) {
	a, b := decoded[*corev1.Pod](t, testPod(1)), decoded[*corev1.Pod](t, testPod(8))
	if sameData(a.Spec.Containers[0].Image, b.Spec.Containers[0].Image) || mapID(a.Labels) == mapID(b.Labels) {
		t.Fatal("the decoded pods already share")
	}
	if cap(a.Status.Conditions) == len(a.Status.Conditions) {
		t.Fatalf("the decoder left conditions at capacity %d: the trim is not exercised", cap(a.Status.Conditions))
	}
	wantA := decoded[*corev1.Pod](t, testPod(1))
	wantA.ManagedFields = nil

	got, err := kubernetes.StripAndIntern(a)
	if err != nil || got != a {
		t.Fatalf("StripAndIntern(a) = %p, %v; want a, nil", got, err)
	}
	runtime.GC() // sharing survives a collection between two objects
	kubernetes.StripAndIntern(b)
	if !reflect.DeepEqual(a, wantA) {
		t.Fatalf("StripAndIntern changed the pod beyond managedFields:\n got %+v\nwant %+v", a, wantA)
	}
	if b.ManagedFields != nil {
		t.Error("managedFields kept")
	}
	shared := map[string][2]string{
		"namespace":     {a.Namespace, b.Namespace},
		"generateName":  {a.GenerateName, b.GenerateName},
		"owner name":    {a.OwnerReferences[0].Name, b.OwnerReferences[0].Name},
		"owner uid":     {string(a.OwnerReferences[0].UID), string(b.OwnerReferences[0].UID)},
		"finalizer":     {a.Finalizers[0], b.Finalizers[0]},
		"image":         {a.Spec.Containers[2].Image, b.Spec.Containers[2].Image},
		"container":     {a.Spec.Containers[1].Name, b.Spec.Containers[1].Name},
		"arg":           {a.Spec.Containers[0].Args[1], b.Spec.Containers[0].Args[1]},
		"env value":     {a.Spec.Containers[0].Env[0].Value, b.Spec.Containers[0].Env[0].Value},
		"env fieldPath": {a.Spec.Containers[0].Env[1].ValueFrom.FieldRef.FieldPath, b.Spec.Containers[0].Env[1].ValueFrom.FieldRef.FieldPath},
		"probe path":    {a.Spec.Containers[0].ReadinessProbe.HTTPGet.Path, b.Spec.Containers[0].ReadinessProbe.HTTPGet.Path},
		"mount path":    {a.Spec.Containers[0].VolumeMounts[0].MountPath, b.Spec.Containers[0].VolumeMounts[0].MountPath},
		"volume source": {a.Spec.Volumes[0].Projected.Sources[0].ConfigMap.Name, b.Spec.Volumes[0].Projected.Sources[0].ConfigMap.Name},
		"node":          {a.Spec.NodeName, b.Spec.NodeName},
		"toleration":    {a.Spec.Tolerations[0].Key, b.Spec.Tolerations[0].Key},
		"scheduler":     {a.Spec.SchedulerName, b.Spec.SchedulerName},
		"service acct":  {a.Spec.ServiceAccountName, b.Spec.ServiceAccountName},
		"restart":       {string(a.Spec.RestartPolicy), string(b.Spec.RestartPolicy)},
		"phase":         {string(a.Status.Phase), string(b.Status.Phase)},
		"condition":     {string(a.Status.Conditions[3].Type), string(b.Status.Conditions[3].Type)},
		"cond status":   {string(a.Status.Conditions[3].Status), string(b.Status.Conditions[3].Status)},
		"host IP":       {a.Status.HostIP, b.Status.HostIP},
		"qos":           {string(a.Status.QOSClass), string(b.Status.QOSClass)},
		"image ID":      {a.Status.ContainerStatuses[0].ImageID, b.Status.ContainerStatuses[0].ImageID},
	}
	for what, s := range shared {
		if !sameData(s[0], s[1]) {
			t.Errorf("%s %q: not shared", what, s[0])
		}
	}
	for what, m := range map[string][2]uintptr{
		"labels":        {mapID(a.Labels), mapID(b.Labels)},
		"annotations":   {mapID(a.Annotations), mapID(b.Annotations)},
		"node selector": {mapID(a.Spec.NodeSelector), mapID(b.Spec.NodeSelector)},
		"requests":      {mapID(a.Spec.Containers[0].Resources.Requests), mapID(b.Spec.Containers[2].Resources.Requests)},
		"limits":        {mapID(a.Spec.Containers[1].Resources.Limits), mapID(b.Spec.Containers[0].Resources.Limits)},
	} {
		if m[0] != m[1] {
			t.Errorf("%s: not one shared map", what)
		}
	}
	for what, s := range map[string][2]string{
		"name": {a.Name, b.Name}, "pod IP": {a.Status.PodIP, b.Status.PodIP},
		"container ID": {a.Status.ContainerStatuses[0].ContainerID, b.Status.ContainerStatuses[0].ContainerID},
	} {
		if s[0] == s[1] {
			t.Errorf("%s: the test pods should differ, both %q", what, s[0])
		}
	}
	if c := a.Status.Conditions; cap(c) != len(c) {
		t.Errorf("conditions: cap %d, len %d after the trim", cap(c), len(c))
	}
	if c := a.Spec.Containers; cap(c) != len(c) {
		t.Errorf("containers: cap %d, len %d after the trim", cap(c), len(c))
	}
}

// Pods whose maps differ do not share them, and a nil pod passes through.
func TestStripAndIntern_DifferentMapsStayApart(t *testing.T) {
	a, b := decoded[*corev1.Pod](t, testPod(1)), decoded[*corev1.Pod](t, testPod(2))
	b.Labels["team"] = "search"
	b.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("300m")
	b.Spec.Containers[1].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("268435456") // 256Mi, in another format
	kubernetes.StripAndIntern(a)
	kubernetes.StripAndIntern(b)
	if mapID(a.Labels) == mapID(b.Labels) || b.Labels["team"] != "search" || a.Labels["team"] != "payments" {
		t.Errorf("labels: a %v, b %v", a.Labels, b.Labels)
	}
	if q := b.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; q.String() != "300m" {
		t.Errorf("b's cpu request = %s", q.String())
	}
	if q := a.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; q.String() != "250m" {
		t.Errorf("a's cpu request = %s", q.String())
	}
	if mapID(a.Spec.Containers[1].Resources.Limits) == mapID(b.Spec.Containers[1].Resources.Limits) {
		t.Error("limits of 256Mi and 268435456 share one map")
	}
	if q := b.Spec.Containers[1].Resources.Limits[corev1.ResourceMemory]; q.String() != "268435456" {
		t.Errorf("b's memory limit = %s", q.String())
	}
}

// A nil object is bad input, not a panic.
func TestStripManagedFields_NilObject(t *testing.T) {
	for name, tf := range map[string]func(*corev1.Pod) (*corev1.Pod, error){
		"StripManagedFields": kubernetes.StripManagedFields[*corev1.Pod],
		"StripAndIntern":     kubernetes.StripAndIntern[*corev1.Pod],
	} {
		if got, err := tf(nil); got != nil || !errors.Is(err, informer.ErrBadInput) {
			t.Errorf("%s(nil) = %v, %v; want nil, an error matching ErrBadInput", name, got, err)
		}
	}
	if _, err := kubernetes.StripAndIntern[*unstructured.Unstructured](nil); !errors.Is(err, informer.ErrBadInput) {
		t.Errorf("StripAndIntern(nil unstructured): %v", err)
	}
}

// Other kinds: a typed object gets its metadata shared; an unstructured one every string.
func TestStripAndIntern_OtherKinds(t *testing.T) {
	c1, c2 := cm("shop", "a", map[string]string{"app": "web"}), cm("shop", "b", map[string]string{"app": "web"})
	c1 = decoded[*corev1.ConfigMap](t, c1)
	c2 = decoded[*corev1.ConfigMap](t, c2)
	kubernetes.StripAndIntern(c1)
	kubernetes.StripAndIntern(c2)
	if !sameData(c1.Namespace, c2.Namespace) || mapID(c1.Labels) != mapID(c2.Labels) {
		t.Error("config maps: namespace or labels not shared")
	}

	u := func(name string) *unstructured.Unstructured {
		obj := decoded[map[string]any](t, map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": name, "namespace": "shop", "managedFields": []any{map[string]any{"manager": "kubectl"}}},
			"spec":     map[string]any{"color": "blue", "sizes": []any{"s", "m"}}})
		return &unstructured.Unstructured{Object: obj}
	}
	u1, u2 := u("one"), u("two")
	kubernetes.StripAndIntern(u1)
	kubernetes.StripAndIntern(u2)
	if u1.GetManagedFields() != nil {
		t.Error("unstructured: managedFields kept")
	}
	col := func(u *unstructured.Unstructured) string { return u.Object["spec"].(map[string]any)["color"].(string) }
	size := func(u *unstructured.Unstructured) string {
		return u.Object["spec"].(map[string]any)["sizes"].([]any)[1].(string)
	}
	if !sameData(u1.GetNamespace(), u2.GetNamespace()) || !sameData(col(u1), col(u2)) || !sameData(size(u1), size(u2)) {
		t.Error("unstructured: strings not shared")
	}
	if u1.GetName() != "one" || col(u2) != "blue" {
		t.Errorf("unstructured changed: %v", u1.Object)
	}
}

// Many informers' transforms at once (run with -race).
func TestStripAndIntern_Concurrent(t *testing.T) {
	const goroutines, each = 4, 30
	in := make([][]*corev1.Pod, goroutines)
	for g := range in {
		for i := range each {
			in[g] = append(in[g], decoded[*corev1.Pod](t, testPod(i)))
		}
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for _, p := range in[g] {
				kubernetes.StripAndIntern(p)
			}
		})
	}
	wg.Wait()
	for g := range goroutines {
		for i, p := range in[g] {
			want := decoded[*corev1.Pod](t, testPod(i))
			want.ManagedFields = nil
			if !reflect.DeepEqual(p, want) {
				t.Fatalf("goroutine %d pod %d changed", g, i)
			}
			if mapID(p.Labels) != mapID(in[0][0].Labels) {
				t.Fatalf("goroutine %d pod %d: labels not shared", g, i)
			}
		}
	}
}

// BenchmarkStripAndIntern is the transform's cost per Pod (the 3-container test pod, each
// freshly decoded), against stripping alone and against stripping then intern.Strings on
// the whole Pod.
func BenchmarkStripAndIntern(b *testing.B) {
	generic := intern.Strings[*corev1.Pod]()
	for _, tc := range []struct {
		name string
		tf   func(*corev1.Pod) (*corev1.Pod, error)
	}{
		{"StripManagedFields", kubernetes.StripManagedFields[*corev1.Pod]},
		{"StripAndIntern", kubernetes.StripAndIntern[*corev1.Pod]},
		{"Strip+intern.Strings", func(p *corev1.Pod) (*corev1.Pod, error) {
			p, _ = kubernetes.StripManagedFields(p)
			return generic(p)
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			const batch = 1000
			pods := make([]*corev1.Pod, batch)
			b.ReportAllocs()
			i := batch
			for b.Loop() {
				if i == batch {
					b.StopTimer()
					for j := range pods {
						pods[j] = decoded[*corev1.Pod](b, testPod(j))
					}
					i = 0
					b.StartTimer()
				}
				tc.tf(pods[i])
				i++
			}
		})
	}
}

// StripAndIntern as an informer's Transform: two pods of one ReplicaSet, decoded apart,
// end up sharing their labels map and their image string.
func ExampleStripAndIntern() {
	tf := kubernetes.StripAndIntern[*corev1.Pod] // informer.Options[string, *corev1.Pod]{Transform: tf}

	var a, b *corev1.Pod
	json.Unmarshal([]byte(`{"metadata":{"name":"web-1","namespace":"shop","labels":{"app":"web"}},"spec":{"containers":[{"name":"web","image":"example.com/web:1.0"}]}}`), &a)
	json.Unmarshal([]byte(`{"metadata":{"name":"web-2","namespace":"shop","labels":{"app":"web"}},"spec":{"containers":[{"name":"web","image":"example.com/web:1.0"}]}}`), &b)
	a, _ = tf(a)
	b, _ = tf(b)

	fmt.Println(fmt.Sprintf("%p", a.Labels) == fmt.Sprintf("%p", b.Labels))
	fmt.Println(unsafe.StringData(a.Spec.Containers[0].Image) == unsafe.StringData(b.Spec.Containers[0].Image))
	fmt.Println(a.Name, b.Name)
	// Output:
	// true
	// true
	// web-1 web-2
}

// intern.Strings on a whole Pod: unexported fields (resource.Quantity's) are left alone,
// the pod is as decoded, and its strings are shared with another pod's.
func TestInternStrings_Pod(t *testing.T) {
	tf := intern.Strings[*corev1.Pod]()
	a, b := decoded[*corev1.Pod](t, testPod(1)), decoded[*corev1.Pod](t, testPod(8))
	want := decoded[*corev1.Pod](t, testPod(1))
	tf(a)
	tf(b)
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("intern.Strings changed the pod:\n got %+v\nwant %+v", a, want)
	}
	if q := a.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; q.String() != "250m" {
		t.Errorf("cpu request = %s", q.String())
	}
	if !sameData(a.Status.ContainerStatuses[0].ImageID, b.Status.ContainerStatuses[0].ImageID) ||
		!sameData(a.Spec.Containers[1].Env[1].ValueFrom.FieldRef.FieldPath, b.Spec.Containers[1].Env[1].ValueFrom.FieldRef.FieldPath) {
		t.Error("strings not shared")
	}
}
