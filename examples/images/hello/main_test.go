package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(handler("web-1", "host-2", "v7"))
	defer srv.Close()
	for _, tc := range []struct {
		path, body string
		code       int
	}{
		{"/", "hello from web-1 on host-2 version v7\n", 200},
		{"/healthz", "ok\n", 200},
		{"/nope", "404 page not found\n", 404},
	} {
		resp, err := http.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || string(b) != tc.body {
			t.Errorf("GET %s = %d %q, want %d %q", tc.path, resp.StatusCode, b, tc.code, tc.body)
		}
	}
}
