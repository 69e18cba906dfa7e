package gitsync

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRenderPlainDirectory(t *testing.T) {
	root := t.TempDir()
	write(t, root, "apps/a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n")
	write(t, root, "apps/local.yml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: local\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\n")
	write(t, root, "apps/README.md", "not yaml")
	objs, err := Render(context.Background(), root, "apps", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.File+":"+o.Obj.GetName())
		if _, ok := o.Obj.GetAnnotations()["config.kubernetes.io/origin"]; ok {
			t.Errorf("%s keeps the origin annotation", o.Obj.GetName())
		}
	}
	if strings.Join(got, ",") != "apps/a.yaml:a,apps/a.yaml:b" {
		t.Fatalf("rendered %v", got)
	}
}

func TestRenderRefusesOutsideAndRemote(t *testing.T) {
	outside := t.TempDir()
	write(t, outside, "secret.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stolen\n")
	root := t.TempDir()
	write(t, root, "k/kustomization.yaml", "resources:\n- ../../"+filepath.Base(outside)+"/secret.yaml\n")
	if _, err := Render(context.Background(), root, "k", Limits{}); err == nil || !strings.Contains(err.Error(), "not a file or directory in the repository") {
		t.Fatalf("outside path: err = %v", err)
	}
	write(t, root, "r/kustomization.yaml", "resources:\n- https://github.com/kubernetes-sigs/kustomize//examples/helloWorld?ref=v1.0.6\n")
	if _, err := Render(context.Background(), root, "r", Limits{}); err == nil || !strings.Contains(err.Error(), "remote bases are not allowed") {
		t.Fatalf("remote base: err = %v", err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret.yaml"), filepath.Join(root, "s", "link.yaml")); err == nil {
		t.Fatal("expected no dir")
	}
	write(t, root, "s/ok.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ok\n")
	if err := os.Symlink(filepath.Join(outside, "secret.yaml"), filepath.Join(root, "s", "link.yaml")); err != nil {
		t.Fatal(err)
	}
	objs, err := Render(context.Background(), root, "s", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].Obj.GetName() != "ok" {
		t.Fatalf("symlink out of the repository was read: %v", objs)
	}
}

func TestRenderKustomizationWithBase(t *testing.T) {
	root := t.TempDir()
	write(t, root, "base/kustomization.yaml", "resources:\n- cm.yaml\n")
	write(t, root, "base/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n")
	write(t, root, "prod/kustomization.yaml", "namespace: prod\nresources:\n- ../base\n")
	objs, err := Render(context.Background(), root, "prod", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].Obj.GetNamespace() != "prod" || !strings.HasSuffix(objs[0].File, "cm.yaml") {
		t.Fatalf("objs = %+v (file %q)", objs, objs[0].File)
	}
}
