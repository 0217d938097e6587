package event

import "testing"

// BenchmarkDecode decodes one golden record of each kind; the reclaim path
// (header and a body without strings) is the hot one and should stay well
// under 100 ns and at one allocation.
func BenchmarkDecode(b *testing.B) {
	for _, tc := range goldenCases(b) {
		rec := tc.build.bytes()
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(rec)))
			for b.Loop() {
				if _, err := Decode(rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecodeHeader(b *testing.B) {
	rec := goldenCases(b)[1].build.bytes()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeHeader(rec); err != nil {
			b.Fatal(err)
		}
	}
}
