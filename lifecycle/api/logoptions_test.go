package api_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/nodeguard/nodeguard/lifecycle/api"
)

// TestLogOptionsReachTheService: what the client asks for is what the
// service is asked, and malformed query parameters are 400s naming them.
func TestLogOptionsReachTheService(t *testing.T) {
	f := newFake()
	got := make(chan api.LogOptions, 1)
	f.LogsFunc = func(_ context.Context, _, _ string, opts api.LogOptions, w io.Writer) error {
		got <- opts
		_, err := io.WriteString(w, "x\n")
		return err
	}
	_, c, path := start(t, f, api.Options{})
	if _, err := c.Apply(t.Context(), []byte(webYAML), "web.yaml"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []api.LogOptions{
		{Container: "sidecar", Tail: -1},
		{Container: "sidecar", Tail: 10, Follow: true, Timestamps: true, SinceSeconds: 60},
		{Container: "sidecar", Tail: 0, Previous: true},
	} {
		if err := c.Logs(t.Context(), "default", "web", want, io.Discard); err != nil {
			t.Fatal(err)
		}
		if o := <-got; o != want {
			t.Errorf("the service was asked %+v, want %+v", o, want)
		}
	}
	for _, tt := range []struct{ name, query, want string }{
		{"a tail that is not a number", "tail=x", `tail \"x\"`},
		{"a follow that is not a bool", "follow=maybe", `follow \"maybe\"`},
		{"a sinceSeconds that is not positive", "sinceSeconds=-1", `sinceSeconds \"-1\"`},
		{"follow with previous", "follow=true&previous=true", "follow and previous"},
	} {
		t.Run(tt.name+" is a 400 naming it", func(t *testing.T) {
			code, _, body := raw(t, path, http.MethodGet, "/v1/pods/default/web/log?"+tt.query, nil)
			if code != http.StatusBadRequest || !strings.Contains(string(body), tt.want) {
				t.Errorf("%d %s, want 400 naming %s", code, body, tt.want)
			}
		})
	}
}
