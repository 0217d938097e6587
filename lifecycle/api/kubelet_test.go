package api_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
)

// The kubelet routes serve the pod service with the kubelet's paths and
// parameter names, as the API server sends them.
func TestKubeletRoutes(t *testing.T) {
	f := newFake()
	pods, err := podspec.Parse(strings.NewReader(webYAML), "web.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Apply(t.Context(), pods, "web.yaml"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []api.LogOptions
	f.LogsFunc = func(_ context.Context, _, _ string, o api.LogOptions, w io.Writer) error {
		mu.Lock()
		got = append(got, o)
		mu.Unlock()
		for range 3 {
			if _, err := io.WriteString(w, "0123456789\n"); err != nil {
				return err
			}
		}
		return nil
	}
	var streams []api.StreamRequest
	f.StreamFunc = func(_ context.Context, _, _ string, req api.StreamRequest) (api.StreamTarget, error) {
		mu.Lock()
		streams = append(streams, req)
		mu.Unlock()
		return api.StreamTarget{}, errors.New("no streaming server here")
	}
	srv := api.NewServer(f, nil, api.Options{})
	ts := httptest.NewServer(srv.KubeletHandler())
	defer ts.Close()
	get := func(method, path string, hdr map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	if code, body := get("GET", "/healthz", nil); code != 200 || body != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	since := time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)
	code, body := get("GET", "/containerLogs/default/web/nginx?follow=true&timestamps=true&tailLines=5&sinceTime="+url.QueryEscape(since.Format(time.RFC3339))+"&limitBytes=15", nil)
	if code != 200 || body != "0123456789\n0123" {
		t.Errorf("containerLogs with limitBytes=15: %d %q, want the first 15 bytes", code, body)
	}
	if len(got) != 1 {
		t.Fatalf("Logs called %d times", len(got))
	}
	if o := got[0]; o.Container != "nginx" || !o.Follow || !o.Timestamps || o.Tail != 5 || !o.SinceTime.Equal(since) || o.LimitBytes != 15 {
		t.Errorf("log options %+v", o)
	}
	for _, c := range []struct{ query, want string }{
		{"tailLines=x", "tailLines"},
		{"limitBytes=0", "limitBytes"},
		{"sinceSeconds=5&sinceTime=2026-03-01T11:00:00Z", "at most one"},
		{"sinceTime=yesterday", "sinceTime"},
		{"previous=perhaps", "previous"},
	} {
		if code, body := get("GET", "/containerLogs/default/web/nginx?"+c.query, nil); code != 400 || !strings.Contains(body, c.want) {
			t.Errorf("containerLogs?%s: %d %q, want 400 naming %s", c.query, code, body, c.want)
		}
	}
	if code, _ := get("GET", "/containerLogs/default/gone/nginx", nil); code != 404 {
		t.Errorf("logs of a pod that is not here: %d, want 404", code)
	}

	// Sessions: the kubelet's input/output/error/tty=1, the container from
	// the path; a path UID that is not the pod's is 404.
	upgrade := map[string]string{"Connection": "Upgrade", "Upgrade": "SPDY/3.1"}
	if code, _ := get("POST", "/exec/default/web/nginx?command=sh&command=-c&command=true&input=1&output=1&tty=1", upgrade); code != 500 {
		t.Errorf("exec: %d, want the fake's 500", code)
	}
	if code, body := get("POST", "/exec/default/web/nginx", upgrade); code != 400 || !strings.Contains(body, "input, output, error") {
		t.Errorf("exec without streams: %d %q", code, body)
	}
	web, _ := f.Get("default", "web")
	if code, _ := get("POST", "/attach/default/web/"+string(web.UID)+"/nginx?output=1", upgrade); code != 500 {
		t.Errorf("attach with the pod's UID: %d, want the fake's 500", code)
	}
	if code, _ := get("POST", "/attach/default/web/not-its-uid/nginx?output=1", upgrade); code != 404 {
		t.Errorf("attach with another UID: %d, want 404", code)
	}
	if code, _ := get("POST", "/portForward/default/web?port=80,443", upgrade); code != 500 {
		t.Errorf("portForward: %d, want the fake's 500", code)
	}
	if code, body := get("POST", "/portForward/default/web?port=0", upgrade); code != 400 || !strings.Contains(body, "port") {
		t.Errorf("portForward port=0: %d %q", code, body)
	}
	if code, _ := get("GET", "/exec/default/web/nginx?command=true&output=1", nil); code != 400 {
		t.Errorf("exec that is not an upgrade: %d, want 400", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(streams) != 3 {
		t.Fatalf("%d sessions reached the service, want 3: %+v", len(streams), streams)
	}
	if s := streams[0]; s.Kind != api.StreamExec || s.Container != "nginx" || strings.Join(s.Command, " ") != "sh -c true" || !s.Stdin || !s.Stdout || s.Stderr || !s.TTY {
		t.Errorf("exec request %+v", s)
	}
	if s := streams[1]; s.Kind != api.StreamAttach || !s.Stdout || s.Stdin || s.Stderr {
		t.Errorf("attach request %+v", s)
	}
	if s := streams[2]; s.Kind != api.StreamPortForward || len(s.Ports) != 2 || s.Ports[0] != 80 || s.Ports[1] != 443 {
		t.Errorf("portForward request %+v", s)
	}
	if code, _ := get("GET", "/stats/summary", nil); code != 404 {
		t.Errorf("a route not served: %d, want 404", code)
	}
}
