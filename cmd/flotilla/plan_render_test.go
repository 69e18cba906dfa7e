package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/flotilla-dev/flotilla/gitsync"
)

// TestPlanOfflineRefusesRemoteFields: `flotilla plan` without a cluster renders as gitsync
// does, so each repository of gitsync's remote-field cases (a URL, a remote base, a helm
// chart or a non-builtin plugin in a field kustomize reads) fails, naming the kustomization
// file and the field, and the server named is never requested.
func TestPlanOfflineRefusesRemoteFields(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		_, _ = w.Write([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: remote\n"))
	}))
	t.Cleanup(srv.Close)
	b, err := os.ReadFile("../../gitsync/testdata/render_remote_fields.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Cases []struct {
			Name, File, Field string
			Value             *string
			Files             map[string]string
		}
	}
	if err := json.Unmarshal([]byte(strings.ReplaceAll(string(b), "{{URL}}", srv.URL)), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Cases) < 30 {
		t.Fatalf("%d cases", len(d.Cases))
	}
	for _, c := range d.Cases {
		t.Run(c.Name, func(t *testing.T) {
			repo := planTestRepo(t, c.Files)
			want := c.File + ": " + c.Field
			if c.Value != nil {
				want += " " + strconv.Quote(*c.Value)
			}
			var out bytes.Buffer
			code, err := runPlan(context.Background(), planOptions{path: "app", output: "text", limits: gitsync.DefaultLimits()}, repo, &out)
			if code != 1 || err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("code %d, err %v\nwant %s", code, err, want)
			}
			if n := requests.Load(); n != 0 {
				t.Fatalf("the server saw %d request(s)", n)
			}
		})
	}
}

// TestPlanGitLimitFlags: plan's --git-max-objects, --git-max-object-size and
// --git-render-timeout bound the render as they bound the agent's; each failure is a
// LimitError naming its flag.
func TestPlanGitLimitFlags(t *testing.T) {
	repo := planTestRepo(t, map[string]string{
		"app/kustomization.yaml": "resources: [a.yaml, b.yaml, c.yaml]\n",
		"app/a.yaml":             "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
		"app/b.yaml":             "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n",
		"app/c.yaml":             "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, annotations: {pad: " + strings.Repeat("x", 2000) + "}}\n",
	})
	plan := func(args ...string) (string, error) {
		t.Helper()
		cmd := newPlanCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append(append([]string{"--path", "app"}, args...), repo))
		err := cmd.Execute()
		return out.String(), err
	}
	if out, err := plan(); err != nil || !strings.Contains(out, "Rendered 3 object(s)") {
		t.Fatalf("defaults: err %v\n%s", err, out)
	}
	for flag, value := range map[string]string{
		"--git-max-objects":     "2",
		"--git-max-object-size": "1Ki",
		"--git-render-timeout":  "1ns",
	} {
		_, err := plan(flag, value)
		var le *gitsync.LimitError
		if !errors.As(err, &le) || le.Flag != flag {
			t.Errorf("%s %s: err = %v, want a limit of %s", flag, value, err, flag)
		}
	}
}
