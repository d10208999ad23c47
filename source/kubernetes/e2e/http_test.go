package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"testing"

	"github.com/informer-go/informer"
	httpsource "github.com/informer-go/informer/source/http"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// plainConfigMap is a ConfigMap as this test reads it: plain JSON, no Kubernetes types.
type plainConfigMap struct {
	Metadata struct {
		Namespace       string `json:"namespace"`
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
}

func plainKey(cm *plainConfigMap) string { return cm.Metadata.Namespace + "/" + cm.Metadata.Name }

// TestHTTPSource points source/http's client, not client-go, straight at the apiserver's
// REST list and watch URL for ConfigMaps, with the bearer token and the apiserver's CA,
// and mirrors a namespace: a streaming list (the apiserver's WatchList) and list+watch.
// client-go only makes the changes.
func TestHTTPSource(t *testing.T) {
	for _, streaming := range []bool{true, false} {
		name := "list and watch"
		if streaming {
			name = "streaming list"
		}
		t.Run(name, func(t *testing.T) {
			checkLeaks(t)
			c := newClients(t, envURL)
			ctx := testContext(t)
			ns := namespace(t, c)
			cms := c.kube.CoreV1().ConfigMaps(ns)
			pre, err := cms.Create(ctx, configMap(ns, "pre", nil, "0"), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cachedAt(t, pre.ResourceVersion, cms.List)

			pem, err := os.ReadFile(os.Getenv(envCA))
			if err != nil {
				t.Fatal(err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				t.Fatal("no certificate in the CA file")
			}
			conns := &connTracker{}
			transport := &http.Transport{
				TLSClientConfig:   &tls.Config{RootCAs: pool},
				DialContext:       conns.DialContext,
				ForceAttemptHTTP2: true,
			}
			t.Cleanup(conns.closeAll)
			token := os.Getenv(envToken)
			client, err := httpsource.NewClient(os.Getenv(envURL)+"/api/v1/namespaces/"+ns+"/configmaps", httpsource.ClientOptions[*plainConfigMap]{
				HTTPClient: &http.Client{Transport: transport},
				PrepareRequest: func(r *http.Request) error {
					r.Header.Set("Authorization", "Bearer "+token)
					return nil
				},
				StreamingList: streaming,
			})
			if err != nil {
				t.Fatal(err)
			}
			inf, err := informer.New(client.Ordered(), informer.Options[string, *plainConfigMap]{
				Name:         t.Name(),
				Key:          func(cm *plainConfigMap) (string, error) { return plainKey(cm), nil },
				Revision:     func(cm *plainConfigMap) string { return cm.Metadata.ResourceVersion },
				ErrorHandler: errorLog(t),
				Logger:       testLogger(t),
			})
			if err != nil {
				t.Fatal(err)
			}
			rec := record(t, inf, func(cm *plainConfigMap) (string, string) { return plainKey(cm), cm.Data["v"] })
			rec.ExpectNext(t, "add*"+ns+"/pre=0")

			lifeOfA(t, ctx, cms, ns, rec, func(rv string) {
				if err := inf.WaitForRevision(ctx, rv); err != nil {
					t.Fatal(err)
				}
				if a, _ := inf.Get(ns + "/a"); a == nil || a.Data["v"] != "2" {
					t.Errorf("Get(a) = %+v, want data v=2", a)
				}
			})
		})
	}
}
