package idrange

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Size is the number of ids of one sandbox's range: uid_t's 16-bit span,
// so nobody (65534) exists inside.
const Size = 65536

// Range is Size host ids from Base (a sandbox's range, or a pool of them).
type Range struct {
	Base uint32 `json:"base"`
	Size uint32 `json:"size"`
}

// maxID bounds every pool: ids at or above 2^31 break code that treats
// uid_t as signed (systemd's UIDS-GIDS.md: devpts, setfsuid).
const maxID = 1 << 31

// DefaultPool is 1879048192-2147352575 (0x70000000-0x7FFDFFFF): see the
// package comment for why.
func DefaultPool() Range { return Range{Base: 0x70000000, Size: 0x7FFE0000 - 0x70000000} }

// Legacy is the range every sandbox of earlier versions ran as (Debian's
// first /etc/subuid range): workspaces of those records are shifted out
// of it.
func Legacy() Range { return Range{Base: 100000, Size: Size} }

// Last is the range's last id.
func (r Range) Last() uint32 { return r.Base + r.Size - 1 }

func (r Range) end() uint64 { return uint64(r.Base) + uint64(r.Size) }

// String is "FIRST-LAST" (both inclusive).
func (r Range) String() string {
	if r.Size == 0 {
		return fmt.Sprintf("%d-(empty)", r.Base)
	}
	return fmt.Sprintf("%d-%d", r.Base, r.Last())
}

// Contains reports whether id is in r.
func (r Range) Contains(id uint32) bool { return id >= r.Base && uint64(id) < r.end() }

// Overlaps reports whether r and o share an id.
func (r Range) Overlaps(o Range) bool {
	return r.Size > 0 && o.Size > 0 && uint64(r.Base) < o.end() && uint64(o.Base) < r.end()
}

// Parse reads "FIRST-LAST" (inclusive, decimal).
func Parse(s string) (Range, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	first, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	last, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	if !ok || err1 != nil || err2 != nil || last < first {
		return Range{}, fmt.Errorf("id range %q: want FIRST-LAST, two decimal ids with FIRST <= LAST (e.g. %s)", s, DefaultPool())
	}
	if last-first+1 > 1<<32-1 {
		return Range{}, fmt.Errorf("id range %q: too large", s)
	}
	return Range{Base: uint32(first), Size: uint32(last - first + 1)}, nil
}

// CheckPool validates a pool: both ends on 65,536 boundaries (each range's
// upper 16 bits name its sandbox), at least one range, clear of the 16-bit
// ids (root, system and regular users, nobody) and below 2^31.
func CheckPool(p Range) error {
	var why []string
	if p.Base%Size != 0 || p.Size%Size != 0 {
		why = append(why, fmt.Sprintf("both ends must lie on %d boundaries (FIRST a multiple of %d, LAST one less than a multiple)", Size, Size))
	}
	if p.Size < Size {
		why = append(why, fmt.Sprintf("it must hold at least one range of %d ids", Size))
	}
	if p.Base < Size {
		why = append(why, fmt.Sprintf("it must start at %d or above (the 16-bit ids are the host's users)", Size))
	}
	if p.end() > maxID {
		why = append(why, fmt.Sprintf("it must end below %d (ids from 2^31 break code that takes uid_t as signed)", uint64(maxID)))
	}
	if len(why) > 0 {
		return fmt.Errorf("uid pool %s: %s; e.g. --uid-pool %s", p, strings.Join(why, "; "), DefaultPool())
	}
	return nil
}

// slots is how many ranges the pool p holds.
func (p Range) slots() int { return int(p.Size / Size) }

// slot is the pool's i-th range.
func (p Range) slot(i int) Range { return Range{Base: p.Base + uint32(i)*Size, Size: Size} }

// Holds reports whether r is one of the pool p's ranges.
func (p Range) Holds(r Range) bool {
	return r.Size == Size && r.Base >= p.Base && r.end() <= p.end() && (r.Base-p.Base)%Size == 0
}

// RangeOf returns the range a host id belongs to when it is a sandbox's:
// the Legacy range, or the 65,536-aligned range of the pool p that holds
// it. It is what a workspace's files may be shifted from.
func (p Range) RangeOf(id uint32) (Range, bool) {
	if l := Legacy(); l.Contains(id) {
		return l, true
	}
	if !p.Contains(id) {
		return Range{}, false
	}
	return p.slot(int((id - p.Base) / Size)), true
}

// ErrNotARange: a range read from a record is not one stockade could have
// given a sandbox.
var ErrNotARange = errors.New("not a sandbox's host id range")

// CheckShiftSource validates a range a workspace's files are to be moved
// from (read from a record: untrusted): Legacy, or Size ids on a 65,536
// boundary above the 16-bit ids and below 2^31, and not to itself.
func CheckShiftSource(from, to Range) error {
	switch {
	case from == Legacy():
	case from.Size != Size || from.Base%Size != 0 || from.Base < Size || from.end() > maxID:
		return fmt.Errorf("%s: %w", from, ErrNotARange)
	}
	if from.Overlaps(to) {
		return fmt.Errorf("%s overlaps the new range %s: %w", from, to, ErrNotARange)
	}
	return nil
}
