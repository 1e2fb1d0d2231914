package editdist

import "testing"

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"ls", "", 2}, {"", "list", 4}, {"lss", "ls", 1}, {"chek", "check", 1}, {"kitten", "sitting", 3}, {"list", "list", 0}, {"flaw", "lawn", 2}} {
		if got := Distance(c.a, c.b); got != c.want || Distance(c.b, c.a) != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d (both ways)", c.a, c.b, got, c.want)
		}
	}
}
