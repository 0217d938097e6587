package lifecycle

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nodeguard/nodeguard/lifecycle/api"
)

func TestAPIErrorsKeepTheirTextAndGainTheAPIsKind(t *testing.T) {
	tests := []struct {
		err  error
		kind error
	}{
		{fmt.Errorf("%w: default/x", ErrNotFound), api.ErrNotFound},
		{fmt.Errorf("%w: container c of default/x", ErrContainerNotFound), api.ErrNotFound},
		{fmt.Errorf("%w: spec.containers: Required value", ErrInvalid), api.ErrInvalid},
		{fmt.Errorf("%w: node under memory pressure", ErrRejected), api.ErrBusy},
	}
	for _, tt := range tests {
		got := mapErr(tt.err)
		if !errors.Is(got, tt.kind) || !errors.Is(got, tt.err) || got.Error() != tt.err.Error() {
			t.Errorf("mapErr(%q) = %q: want the text unchanged, matching both %v and the cause", tt.err, got, tt.kind)
		}
	}
	other := errors.New("runtime down")
	if got := mapErr(other); got != other {
		t.Errorf("mapErr(%v) = %v, want it unchanged", other, got)
	}
}
