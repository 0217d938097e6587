package eviction

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// render shows thresholds as "memory.available<100Mi", with " grace=30s"
// for soft ones and " min=500Mi" for a minimum reclaim.
func render(ts []Threshold) []string {
	var out []string
	for _, t := range ts {
		s := t.String()
		if !t.Hard() {
			s += " grace=" + t.GracePeriod.String()
		}
		if t.MinReclaim != nil {
			s += " min=" + t.MinReclaim.String()
		}
		out = append(out, s)
	}
	return out
}

func TestParseThresholds(t *testing.T) {
	for _, tt := range []struct {
		name    string
		cfg     ThresholdConfig
		want    []string
		wantErr string
		is      error
	}{
		{
			name: "the kubelet's defaults parse, in signal order",
			cfg:  ThresholdConfig{EvictionHard: DefaultEvictionHard()},
			want: []string{"memory.available<100Mi", "nodefs.available<10%", "nodefs.inodesFree<5%", "imagefs.available<15%"},
		},
		{
			name: "hard then soft, with grace periods and minimum reclaims",
			cfg: ThresholdConfig{
				EvictionHard:            map[string]string{"memory.available": "100Mi", "pid.available": "1k"},
				EvictionSoft:            map[string]string{"memory.available": "1.5Gi", "nodefs.available": "15%"},
				EvictionSoftGracePeriod: map[string]string{"memory.available": "1m30s", "nodefs.available": "2m", "imagefs.available": "1m"},
				EvictionMinimumReclaim:  map[string]string{"memory.available": "0.5Gi", "nodefs.available": "5%"},
			},
			want: []string{
				"memory.available<100Mi min=512Mi", "pid.available<1k",
				"memory.available<1536Mi grace=1m30s min=512Mi", "nodefs.available<15% grace=2m0s min=5%",
			},
		},
		{
			name: "0% and 100% leave a threshold out",
			cfg:  ThresholdConfig{EvictionHard: map[string]string{"memory.available": "0%", "nodefs.available": "100%", "pid.available": "10%"}},
			want: []string{"pid.available<10%"},
		},
		{
			name: "a soft threshold with a zero grace period is hard",
			cfg: ThresholdConfig{
				EvictionSoft:            map[string]string{"memory.available": "200Mi"},
				EvictionSoftGracePeriod: map[string]string{"memory.available": "0s"},
			},
			want: []string{"memory.available<200Mi"},
		},
		{
			name: "node allocatable enforcement copies hard memory thresholds",
			cfg: ThresholdConfig{
				EvictionHard:            map[string]string{"memory.available": "100Mi"},
				EvictionSoft:            map[string]string{"memory.available": "300Mi"},
				EvictionSoftGracePeriod: map[string]string{"memory.available": "10s"},
				EnforceNodeAllocatable:  []string{"pods", "system-reserved"},
			},
			want: []string{"memory.available<100Mi", "memory.available<300Mi grace=10s", "allocatableMemory.available<100Mi"},
		},
		{
			name:    "an unparsable quantity names field, key and value",
			cfg:     ThresholdConfig{EvictionHard: map[string]string{"memory.available": "12Zi"}},
			wantErr: `evictionHard[memory.available]: "12Zi": invalid: quantities must match`,
			is:      ErrInvalid,
		},
		{
			name:    "an unknown signal is unsupported, not malformed",
			cfg:     ThresholdConfig{EvictionSoft: map[string]string{"containerfs.available": "10%"}},
			wantErr: `evictionSoft[containerfs.available]: "10%": unsupported eviction signal "containerfs.available"`,
			is:      ErrUnsupportedSignal,
		},
		{
			name: "a soft threshold without a grace period is refused",
			cfg: ThresholdConfig{
				EvictionSoft:            map[string]string{"memory.available": "300Mi"},
				EvictionSoftGracePeriod: map[string]string{"nodefs.available": "1m"},
			},
			wantErr: `evictionSoft[memory.available]: "300Mi": invalid: a soft threshold needs a grace period: evictionSoftGracePeriod[memory.available] is not set`,
			is:      ErrInvalid,
		},
		{
			name:    "a percentage above 100 is refused",
			cfg:     ThresholdConfig{EvictionHard: map[string]string{"nodefs.available": "101%"}},
			wantErr: `evictionHard[nodefs.available]: "101%": invalid: a percentage must be from 0% to 100%`,
			is:      ErrInvalid,
		},
		{
			name:    "a negative percentage is refused",
			cfg:     ThresholdConfig{EvictionHard: map[string]string{"nodefs.available": "-5%"}},
			wantErr: `evictionHard[nodefs.available]: "-5%"`,
			is:      ErrInvalid,
		},
		{
			name:    "NaN is not a percentage",
			cfg:     ThresholdConfig{EvictionHard: map[string]string{"nodefs.available": "NaN%"}},
			wantErr: `evictionHard[nodefs.available]: "NaN%"`,
			is:      ErrInvalid,
		},
		{
			name:    "a zero quantity is refused",
			cfg:     ThresholdConfig{EvictionHard: map[string]string{"memory.available": "0"}},
			wantErr: `evictionHard[memory.available]: "0": invalid: a threshold must be positive`,
			is:      ErrInvalid,
		},
		{
			name:    "a quantity beyond int64 is refused",
			cfg:     ThresholdConfig{EvictionHard: map[string]string{"memory.available": "100E"}},
			wantErr: `out of range`,
			is:      ErrInvalid,
		},
		{
			name: "a negative grace period is refused",
			cfg: ThresholdConfig{
				EvictionSoft:            map[string]string{"memory.available": "300Mi"},
				EvictionSoftGracePeriod: map[string]string{"memory.available": "-1s"},
			},
			wantErr: `evictionSoftGracePeriod[memory.available]: "-1s": invalid: a grace period must not be negative`,
			is:      ErrInvalid,
		},
		{
			name: "a grace period that is not a duration is refused",
			cfg: ThresholdConfig{
				EvictionSoft:            map[string]string{"memory.available": "300Mi"},
				EvictionSoftGracePeriod: map[string]string{"memory.available": "90"},
			},
			wantErr: `evictionSoftGracePeriod[memory.available]: "90": invalid`,
			is:      ErrInvalid,
		},
		{
			name:    "a zero minimum reclaim percentage is refused",
			cfg:     ThresholdConfig{EvictionMinimumReclaim: map[string]string{"memory.available": "0%"}},
			wantErr: `evictionMinimumReclaim[memory.available]: "0%": invalid: a minimum reclaim percentage must be positive`,
			is:      ErrInvalid,
		},
		{
			name:    "a negative minimum reclaim is refused",
			cfg:     ThresholdConfig{EvictionMinimumReclaim: map[string]string{"memory.available": "-1Mi"}},
			wantErr: `evictionMinimumReclaim[memory.available]: "-1Mi": invalid: a minimum reclaim must not be negative`,
			is:      ErrInvalid,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ts, err := ParseThresholds(tt.cfg)
			if tt.wantErr != "" {
				var ce *ConfigError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, tt.is) || !errors.As(err, &ce) {
					t.Fatalf("err = %v, want one containing %q matching %v", err, tt.wantErr, tt.is)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := render(ts); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestThresholdValueAmount(t *testing.T) {
	ts := mustThresholds(t, ThresholdConfig{EvictionHard: map[string]string{"nodefs.available": "10%", "memory.available": "100Mi"}})
	if got := ts[0].Value.Amount(8 * Gi); got != 100*Mi {
		t.Errorf("100Mi resolves to %d", got)
	}
	if got := ts[1].Value.Amount(100 * Gi); got != 10*Gi {
		t.Errorf("10%% of 100Gi resolves to %d", got)
	}
}

func TestParseThresholdList(t *testing.T) {
	for _, tt := range []struct {
		name    string
		in      string
		want    map[string]string
		wantErr string
		is      error
	}{
		{"the kubelet's flag form", "memory.available<100Mi,nodefs.available<10%",
			map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"}, "", nil},
		{"blanks and empty entries are ignored", " memory.available < 100Mi ,, pid.available<1k ,",
			map[string]string{"memory.available": "100Mi", "pid.available": "1k"}, "", nil},
		{"the empty list is empty", "", map[string]string{}, "", nil},
		{"an entry without < is malformed", "memory.available=100Mi", nil, `entry 1: "memory.available=100Mi": invalid: want signal<value`, ErrInvalid},
		{"a signal twice is refused", "memory.available<1Gi,memory.available<2Gi", nil, `entry 2[memory.available]: "2Gi": invalid: signal given twice`, ErrInvalid},
		{"an unknown signal is unsupported", "swap.available<1Gi", nil, `entry 1[swap.available]`, ErrUnsupportedSignal},
		{"a bad value names its entry", "memory.available<100Mi,nodefs.available<10x%", nil, `entry 2[nodefs.available]: "10x%"`, ErrInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseThresholdList(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, tt.is) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !mapsEqual(got, tt.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestParseSignalMap(t *testing.T) {
	got, err := ParseSignalMap("memory.available=1m30s, nodefs.available=500Mi")
	if err != nil || !mapsEqual(got, map[string]string{"memory.available": "1m30s", "nodefs.available": "500Mi"}) {
		t.Fatalf("got %v, %v", got, err)
	}
	if _, err := ParseSignalMap("memory.available<1m"); !errors.Is(err, ErrInvalid) {
		t.Errorf("err = %v, want ErrInvalid", err)
	}
}

func TestParsePSIRule(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    string // canonical String
		pod     bool
		window  time.Duration
		forDur  time.Duration
		wantErr string
	}{
		{in: "memory.full.avg10>40 for 10s", want: "memory.full.avg10>40 for 10s", window: 10 * time.Second, forDur: 10 * time.Second},
		{in: "pod:memory.some.avg10 > 60% for 5s", want: "pod:memory.some.avg10>60 for 5s", pod: true, window: 10 * time.Second, forDur: 5 * time.Second},
		{in: "io.some.avg60>80", want: "io.some.avg60>80", window: 60 * time.Second},
		{in: "cpu.some.avg300>12.5 for 0s", want: "cpu.some.avg300>12.5", window: 300 * time.Second},
		{in: "pod:cpu.full.avg10>30", want: "pod:cpu.full.avg10>30", pod: true, window: 10 * time.Second},
		{in: "memory.full.avg10>=40", wantErr: "not a number"},
		{in: "memory.full.avg10", wantErr: "want <resource>"},
		{in: "irq.full.avg10>1", wantErr: `resource "irq"`},
		{in: "memory.half.avg10>1", wantErr: `kind "half"`},
		{in: "memory.some.avg5>1", wantErr: `window "avg5"`},
		{in: "memory.some>1", wantErr: "want <resource>.<some|full>"},
		{in: "cpu.full.avg10>1", wantErr: "cpu.full is undefined for the whole node"},
		{in: "memory.some.avg10>100", wantErr: "below 100"},
		{in: "memory.some.avg10>-1", wantErr: "at least 0"},
		{in: "memory.some.avg10>5 during 5s", wantErr: `want "for"`},
		{in: "memory.some.avg10>5 for -5s", wantErr: "must not be negative"},
		{in: "memory.some.avg10>5 for ever", wantErr: `duration "ever"`},
		{in: "memory.some.avg10>5 for", wantErr: "want a percentage"},
	} {
		t.Run(tt.in, func(t *testing.T) {
			r, err := ParsePSIRule(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.in) {
					t.Errorf("err %q does not quote the rule", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.String() != tt.want || r.Pod != tt.pod || r.Window != tt.window || r.For != tt.forDur {
				t.Errorf("got %+v (%s)", r, r)
			}
			again, err := ParsePSIRule(r.String())
			if err != nil || again != r {
				t.Errorf("canonical form %q does not parse back: %+v, %v", r, again, err)
			}
		})
	}
}
