package verify_test

import (
	"bytes"
	"testing"
)

// BenchmarkVerify measures one verification of a 1 KiB body per scheme,
// with two secrets configured and the request signed by the second (the
// worst case during a rotation: two HMACs).
func BenchmarkVerify(b *testing.B) {
	body := bytes.Repeat([]byte("a"), 1024)
	for _, s := range schemes {
		b.Run(s.name, func(b *testing.B) {
			v := mustNew(b, s.config(s.secrets[0], s.secrets[1]))
			h := signedHeader(b, s.config(s.secrets[1]), body, t0)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := v.Verify(h, body, t0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
