package connmap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/stockade-dev/stockade/boundary/identity"
	"github.com/stockade-dev/stockade/internal/testenv"
)

// BenchmarkRecordedLookup is a sandbox's boundary per connection of a
// warm client with connect records (bounded candidates: this process):
// connect, accept, the lookup from the record, then with the recheck at
// the request's end and the tamper check (the mappings' verdict kept),
// close. The connect and accept are the same in both: the difference is
// the recheck's and the tamper check's.
func BenchmarkRecordedLookup(b *testing.B) {
	m, err := Open()
	if err != nil {
		testenv.Unavailable(b, "connmap: %v", err)
	}
	defer m.Close()
	if err := errors.Join(m.InodeErr(), m.ImageErr()); err != nil {
		testenv.Unavailable(b, "%v", err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	self := os.Getpid()
	for _, checks := range []bool{false, true} {
		b.Run(fmt.Sprintf("checks=%v", checks), func(b *testing.B) {
			r, err := identity.NewNetlink(identity.WithConnectRecords(m), identity.WithPids(func() ([]int, error) { return []int{self}, nil }),
				identity.WithTamperCheck(identity.TamperPolicy{ReadOnly: []string{"/usr", "/bin", "/lib", "/lib64", "/etc"}}))
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				c, err := net.Dial("tcp4", ln.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				s, err := ln.Accept()
				if err != nil {
					b.Fatal(err)
				}
				client, server := ends(s)
				id, err := r.Resolve(ctx, server, client)
				if err == nil && checks {
					if err = r.Recheck(ctx, id); err == nil {
						var t *identity.Tampering
						if t, err = r.Tampered(id); t != nil {
							err = fmt.Errorf("tampered: %s", t.Why)
						}
					}
				}
				_ = c.Close()
				_ = s.Close()
				if err != nil {
					b.Fatal(err)
				}
			}
			if src := r.Sources(); src.SockDiag != 0 {
				b.Fatalf("%d connections identified through sock_diag, want every one from its record", src.SockDiag)
			}
		})
	}
}
