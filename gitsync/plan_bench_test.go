package gitsync

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/policies"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver"
)

// benchDeployment passes every policy of the restricted set (labelled, tagged image of the
// local name space, requests and limits); privileged adds what no-privileged denies.
func benchDeployment(i int, privileged bool) string {
	sc := ""
	if privileged {
		sc = "\n        securityContext: {privileged: true}"
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-%[1]d
  namespace: bench
  labels: {app.kubernetes.io/name: app-%[1]d}
spec:
  replicas: 2
  selector:
    matchLabels: {app: app-%[1]d}
  template:
    metadata:
      labels: {app: app-%[1]d}
    spec:
      containers:
      - name: c
        image: flotilla.local/app:v%[1]d
        resources:
          requests: {cpu: 10m, memory: 16Mi}
          limits: {cpu: 100m, memory: 64Mi}%[2]s
`, i, sc)
}

// BenchmarkPlanOfflinePolicies plans, offline, a revision of 2,001 objects (a Namespace,
// 1,000 Deployments, 1,000 ConfigMaps; 10 of the Deployments privileged) without policies
// and with the restricted set, and prints the time of one plan of each; with the set, the
// privileged Deployments, and only those, must be invalid. `make bench-policies` runs it.
func BenchmarkPlanOfflinePolicies(b *testing.B) {
	dir := b.TempDir()
	var docs []string
	docs = append(docs, "apiVersion: v1\nkind: Namespace\nmetadata: {name: bench}\n")
	for i := range 1000 {
		docs = append(docs, benchDeployment(i, i%100 == 0))
		docs = append(docs, fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%d, namespace: bench}\ndata: {i: \"%d\"}\n", i, i))
	}
	if err := os.WriteFile(filepath.Join(dir, "all.yaml"), []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Run("evaluation-only", func(b *testing.B) {
		objs, err := Render(context.Background(), dir, "", Limits{})
		if err != nil {
			b.Fatal(err)
		}
		objs, fails := (&Applier{Mapper: apiserver.OfflineRESTMapper()}).Prepare(objs, "kube-system.root")
		if len(fails) > 0 {
			b.Fatal(fails)
		}
		b.ResetTimer()
		var took time.Duration
		for range b.N {
			start := time.Now()
			lines, _, err := planPolicies(context.Background(), objs, policies.SetRestricted)
			took += time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			if n := len(slices.DeleteFunc(lines, func(l string) bool { return l == "" })); n != 10 {
				b.Fatalf("%d objects denied, want the 10 privileged Deployments", n)
			}
		}
		per := took / time.Duration(b.N)
		b.Logf("restricted policy set evaluated on 2,001 objects (engine start included): %s, %s per object",
			per.Round(time.Millisecond), (per / 2001).Round(time.Microsecond))
		b.ReportMetric(per.Seconds(), "s/evaluation")
	})
	for _, set := range []string{policies.SetNone, policies.SetRestricted} {
		b.Run(set, func(b *testing.B) {
			var took time.Duration
			for range b.N {
				start := time.Now()
				p, err := PlanOffline(dir, "", Limits{}, set)
				took += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				// Without policies the privileged Deployments are valid objects.
				wantInvalid := 0
				if set != policies.SetNone {
					wantInvalid = 10
				}
				if c := p.Counts(); c.Invalid != wantInvalid || c.Rendered != 2001-wantInvalid {
					b.Fatalf("plan counts %+v: want %d invalid (the privileged Deployments), %d valid", c, wantInvalid, 2001-wantInvalid)
				}
			}
			per := took / time.Duration(b.N)
			b.Logf("offline plan of 2,001 objects, policy set %s: %s per plan", set, per.Round(time.Millisecond))
			b.ReportMetric(per.Seconds(), "s/plan")
		})
	}
}
